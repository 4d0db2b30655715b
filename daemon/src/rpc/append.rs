//! Storing events: `append` (an event as the client made it) and `ingest` (an agent's raw
//! event, through the plugin pipeline). Both answer once the event is durable, out of turn.

use std::sync::Arc;

use dstream_sdk::RpcError;
use dstream_sdk::event::MAX_NESTING_DEPTH;
use dstream_sdk::protocol::{AppendParams, IngestParams, codes};
use serde_json::value::RawValue;
use tokio::sync::OwnedSemaphorePermit;

use super::caller::Caller;
use super::wire::{Reply, check_session_id, params, reply_frame, store_error, to_json};
use crate::jsonscan::nesting_depth;
use crate::pipeline::{Ingest, IngestError, check_ingest};
use crate::state::DaemonState;
use crate::store::Ack;

pub(super) async fn append(
    state: &Arc<DaemonState>,
    caller: &Caller,
    raw: Option<&RawValue>,
    id: Option<&RawValue>,
    charge: OwnedSemaphorePermit,
) -> Result<Reply, RpcError> {
    let p: AppendParams<Box<RawValue>> = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    if let Some(s) = &p.event.stream_id {
        check_session_id(s, "event.stream_id")?;
    }
    crate::store::validate_event(&p.event).map_err(|m| RpcError::new(codes::INVALID_PARAMS, m))?;
    if crate::event_types::daemon_only(&p.event.event_type) {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            crate::event_types::refusal(&p.event.event_type),
        ));
    }
    // Every reader must be able to parse what is stored, inside its own frame.
    for (name, value) in [
        ("event.payload", &p.event.payload),
        ("event.metadata", &p.event.metadata),
        ("event.raw", &p.event.raw),
    ] {
        let depth = value
            .as_ref()
            .map_or(0, |v| nesting_depth(v.get().as_bytes()));
        if depth > MAX_NESTING_DEPTH {
            return Err(RpcError::new(
                codes::INVALID_PARAMS,
                format!(
                    "{name} nests {depth} levels of arrays and objects; the limit is \
                     {MAX_NESTING_DEPTH}"
                ),
            ));
        }
    }
    // Waits only when this connection already has its fill of appends in flight.
    let permit = caller
        .in_flight
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| RpcError::new(codes::SHUTTING_DOWN, "the connection is closing"))?;
    let out = caller.out.clone();
    let id = id.map(|i| i.to_owned());
    let ack = Ack::new(move |result| {
        drop(charge); // the event's bytes are in the log now, or refused
        let Some(id) = id else { return };
        let result =
            result.map(|a| format!("{{\"lsn\":{},\"id\":\"{}\"}}", a.lsn, a.id).into_bytes());
        let frame = reply_frame(Some(&id), result.map_err(store_error));
        let _ = out.send_now(frame, permit);
    });
    // Checkpoint events must be on disk before anyone acts on them, whatever the policy.
    let must_sync = p.event.event_type.starts_with("checkpoint.");
    if caller.alone {
        state
            .store
            .append_direct(&p.session_id, p.event, must_sync, ack);
    } else {
        state.store.append(&p.session_id, p.event, must_sync, ack);
    }
    Ok(Reply::Submitted)
}

pub(super) async fn ingest(
    state: &Arc<DaemonState>,
    caller: &Caller,
    raw: Option<&RawValue>,
    id: Option<&RawValue>,
    charge: OwnedSemaphorePermit,
) -> Result<Reply, RpcError> {
    let p: IngestParams<Box<RawValue>> = params(raw)?;
    caller.note_agent(state);
    check_ingest(&p.source, p.session_id.as_deref(), &p.event)?;
    let permit = caller
        .in_flight
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| RpcError::new(codes::SHUTTING_DOWN, "the connection is closing"))?;
    let out = caller.out.clone();
    let id = id.map(|i| i.to_owned());
    let done: crate::pipeline::Done = Box::new(move |result| {
        drop(charge);
        let Some(id) = id else { return };
        let result = match result {
            Ok(r) => to_json(&r),
            Err(IngestError::Store(e)) => Err(store_error(e)),
            Err(IngestError::Stopped) => Err(RpcError::new(
                codes::SHUTTING_DOWN,
                "the daemon is shutting down",
            )),
        };
        let _ = out.send_now(reply_frame(Some(&id), result), permit);
    });
    let watch = caller.out.clone();
    state
        .pipeline
        .ingest(Ingest {
            client: caller.id,
            source: p.source,
            raw: p.event,
            session_id: p.session_id,
            reply_by_ms: p.reply_by_ms,
            gone: Some(Box::new(move || watch.is_closed())),
            done,
            spooled: None,
        })
        .await;
    Ok(Reply::Submitted)
}
