//! Reading sessions: `read`, `query`, `subscribe`/`unsubscribe` and `sessions.*`.

use std::sync::Arc;
use std::time::Duration;

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{
    self, QueryParams, ReadParams, SessionInfo, SubscribeParams, UnsubscribeParams, codes,
};
use serde_json::value::RawValue;

use super::caller::Caller;
use super::wire::{RpcResult, check_session_id, params, store_error, to_json};
use crate::follower::Follower;
use crate::state::DaemonState;
use crate::store::{EventJson, QueryFilter, Session};
use crate::subscription::Subscription;

fn event_array(events: &[EventJson], out: &mut Vec<u8>) {
    out.push(b'[');
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let start = out.len();
        e.write_to(out);
        crate::jsonscan::readable_tail(out, start); // an event stored before the check
    }
    out.push(b']');
}

fn clamp_limit(state: &DaemonState, limit: Option<usize>) -> Result<usize, RpcError> {
    match limit {
        None => Ok(state.config().read.default_limit),
        Some(0) => Err(RpcError::new(
            codes::INVALID_PARAMS,
            "limit must be at least 1",
        )),
        Some(n) => Ok(n.min(state.config().read.max_limit)),
    }
}

pub(super) async fn read(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: ReadParams = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    let limit = clamp_limit(state, p.limit)?;
    let page = state
        .store
        .read(&p.session_id, p.from_lsn.unwrap_or(1), limit)
        .await
        .map_err(store_error)?;
    let mut out = Vec::with_capacity(page.events.len() * 300 + 64);
    out.extend_from_slice(b"{\"events\":");
    event_array(&page.events, &mut out);
    out.extend_from_slice(
        format!(
            ",\"next_lsn\":{},\"up_to_date\":{}",
            page.next_lsn, page.up_to_date
        )
        .as_bytes(),
    );
    if let Some(q) = &page.quarantined {
        out.extend_from_slice(b",\"quarantined\":");
        out.extend_from_slice(&to_json(&quarantine_info(q))?);
    }
    out.push(b'}');
    Ok(out)
}

pub(super) fn subscribe(
    state: &Arc<DaemonState>,
    caller: &mut Caller,
    raw: Option<&RawValue>,
) -> Result<Subscription, RpcError> {
    let p: SubscribeParams = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    let most = state.config().daemon.max_subscriptions_per_connection;
    caller.subscriptions.retain(|_, t| !t.is_finished());
    if caller.subscriptions.len() >= most {
        return Err(RpcError::new(
            codes::CONNECTION_LIMIT,
            format!(
                "this connection already holds {most} subscriptions \
                 (daemon.max_subscriptions_per_connection); unsubscribe first"
            ),
        ));
    }
    if let Some(t) = state.store.gone(&p.session_id) {
        return Err(store_error(t.error()));
    }
    let session = state.store.session(&p.session_id);
    if session.quarantine_reason().is_some() {
        return Err(store_error(state.store.missing(&p.session_id)));
    }
    // The follower registers on the live stream before it reads the log: see `follower`.
    let from = p.from_lsn.unwrap_or(1);
    Ok(Subscription {
        id: caller.new_subscription_id(),
        follower: Follower::new(state.store.clone(), &state.hub, &p.session_id, from),
        out: caller.out.clone(),
        heartbeat: Duration::from_millis(state.config().subscriptions.heartbeat_ms),
        state: state.clone(),
    })
}

/// The result of a successful `subscribe`.
pub fn subscribed(id: &str) -> RpcResult {
    Ok(format!("{{\"subscription\":\"{id}\"}}").into_bytes())
}

pub(super) fn unsubscribe(caller: &mut Caller, raw: Option<&RawValue>) -> RpcResult {
    let p: UnsubscribeParams = params(raw)?;
    match caller.subscriptions.remove(&p.subscription) {
        Some(task) => {
            task.abort();
            Ok(b"{\"unsubscribed\":true}".to_vec())
        }
        None => Err(RpcError::new(
            codes::UNKNOWN_SUBSCRIPTION,
            format!("no subscription {:?} on this connection", p.subscription),
        )),
    }
}

fn session_info(s: &Session) -> SessionInfo {
    let meta = s.meta();
    SessionInfo {
        session_id: s.id.clone(),
        stream_id: meta.stream_id.unwrap_or_else(|| s.id.clone()),
        first_ts: meta.first_ts,
        last_ts: meta.last_ts,
        last_lsn: s.committed_lsn(),
        durable_lsn: s.durable_lsn(),
        bytes: meta.bytes,
        quarantined: s.quarantine().map(quarantine_info),
        forked_from: s.fork().map(|f| f.forked_from.clone()),
        fork_lsn: s.fork().map(|f| f.fork_lsn),
    }
}

fn quarantine_info(q: &crate::store::Quarantine) -> protocol::QuarantineInfo {
    protocol::QuarantineInfo {
        reason: q.reason.clone(),
        offset: q.offset,
        last_good_lsn: q.last_good_lsn,
    }
}

pub(super) fn sessions_list(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: protocol::SessionsListParams = params(raw.filter(|r| r.get() != "null"))?;
    let sessions: Vec<SessionInfo> = state
        .store
        .sessions()
        .iter()
        .map(|s| session_info(s))
        .collect();
    let gone = match p.all {
        false => Vec::new(),
        true => (state.store.tombstones().into_iter())
            .map(|t| protocol::GoneInfo {
                session_id: t.session_id,
                deleted_at_ms: t.deleted_at_ms,
                reason: t.reason,
                last_lsn: t.last_lsn,
                last_ts: t.last_ts,
                bytes_freed: t.bytes_freed,
            })
            .collect(),
    };
    to_json(&protocol::SessionsListResult { sessions, gone })
}

pub(super) fn sessions_get(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: protocol::SessionsGetParams = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    match state.store.get(&p.session_id) {
        Some(s) if s.committed_lsn() > 0 || s.quarantine().is_some() => to_json(&session_info(&s)),
        _ => Err(store_error(state.store.missing(&p.session_id))),
    }
}

/// Matches the search index finds for `text` (at most this many) are filtered by the rest.
const TEXT_MATCHES: usize = 1000;

/// `query` with `text`: the search index finds the events, the other filters then apply to
/// each, read back from its log; in session then LSN order, as `query` answers.
async fn query_text(state: &DaemonState, p: QueryParams, text: String, limit: usize) -> RpcResult {
    let filter = crate::search::index::Filter {
        session: p.session_id.clone(),
        type_prefix: p.type_prefix.clone().filter(|t| !t.is_empty()),
        since_ms: p.since_ms,
    };
    let search = std::sync::Arc::clone(&state.search);
    let hits =
        tokio::task::spawn_blocking(move || search.search_blocking(&text, &filter, TEXT_MATCHES))
            .await
            .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))?
            .map_err(|e| RpcError::new(codes::INVALID_PARAMS, e.to_string()))?;
    let capped = hits.len() >= TEXT_MATCHES;
    let mut found: Vec<(String, u64)> = hits.into_iter().map(|h| (h.session_id, h.lsn)).collect();
    found.sort();
    let check = QueryFilter {
        session_id: None,
        stream_id: p.stream_id,
        type_prefix: None,
        actor: p.actor,
        since_ms: None,
        until_ms: p.until_ms,
    };
    let mut events = Vec::new();
    let mut truncated = capped;
    for (session, lsn) in found {
        let Ok(page) = state.store.read(&session, lsn, 1).await else {
            continue;
        };
        let Some(e) = page.events.into_iter().find(|e| e.lsn == lsn) else {
            continue;
        };
        if !check.matches_json(&e) {
            continue;
        }
        if events.len() == limit {
            truncated = true;
            break;
        }
        events.push(e);
    }
    let mut out = Vec::with_capacity(events.len() * 300 + 64);
    out.extend_from_slice(b"{\"events\":");
    event_array(&events, &mut out);
    out.extend_from_slice(format!(",\"truncated\":{truncated}}}").as_bytes());
    Ok(out)
}

pub(super) async fn query(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: QueryParams = params(raw)?;
    if let Some(s) = &p.session_id {
        check_session_id(s, "session_id")?;
    }
    if let Some(s) = &p.stream_id {
        check_session_id(s, "stream_id")?;
    }
    let limit = clamp_limit(state, p.limit)?;
    if let Some(text) = p.text.clone() {
        return query_text(state, p, text, limit).await;
    }
    let filter = QueryFilter {
        session_id: p.session_id,
        stream_id: p.stream_id,
        type_prefix: p.type_prefix,
        actor: p.actor,
        since_ms: p.since_ms,
        until_ms: p.until_ms,
    };
    let (events, truncated) = state
        .store
        .query(filter, limit)
        .await
        .map_err(store_error)?;
    let mut out = Vec::with_capacity(events.len() * 300 + 64);
    out.extend_from_slice(b"{\"events\":");
    event_array(&events, &mut out);
    out.extend_from_slice(format!(",\"truncated\":{truncated}}}").as_bytes());
    Ok(out)
}
