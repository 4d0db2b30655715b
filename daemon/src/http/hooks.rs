//! `POST /hooks/claude-code`: Claude Code's `http` hooks. The body is the hook input Claude Code
//! would give `dstream hook claude-code` on stdin; it takes the same way (the `claude-code`
//! mapping, policy, checkpoints, remote stop), and the answer is what that command would print:
//! the response waits for a person's decision on a held call. No process starts per event.
//!
//! An `http` hook fails open when the daemon is down (Claude Code treats a failed request as a
//! non-blocking error) and cannot start one, which is why the command hook stays the default.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use dstream_sdk::protocol::{Action, IngestResult};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::claude_reply::{Verdict, decision_of, reply, stop_reason};
use crate::http::app::App;
use crate::http::peer::PeerAddr;
use crate::pipeline::{Ingest, IngestError, check_ingest};

/// The mapping the events go through, as for `dstream hook claude-code`.
const SOURCE: &str = "claude-code";
/// Who a held call's decision was delivered to, in its `checkpoint.delivered` event.
const DELIVERED_TO: &str = "claude-code http hook";

/// Each request is its own client of the pipeline's fair queue, as each socket connection
/// is; numbered far from the connections'.
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1 << 62);

/// Connections remembered as looked up (a hook sender keeps its connection alive).
const NOTED_PEERS: usize = 256;

/// Notes the process that sent a hook, Claude Code itself, as an agent (once per connection),
/// so a decision from under it is refused as when its command hook ran: Claude Code's Bash
/// tool could otherwise approve its own call with `dstream approve`. Done before the event is
/// taken, so the agent is known before its call can be held; it costs the first request of a
/// connection a read of every process's descriptors (off the async workers).
async fn note_sender(app: &Arc<App>, peer: std::net::SocketAddr) {
    {
        let mut noted = app.noted_peers.lock().unwrap();
        if noted.contains(&peer) {
            return;
        }
        if noted.len() >= NOTED_PEERS {
            noted.pop_front();
        }
        noted.push_back(peer);
    }
    let (agents, local) = (app.agents.clone(), app.bound);
    let _ = tokio::task::spawn_blocking(move || {
        if let Some(pid) = crate::http::peer::pid_of(peer, local) {
            agents.note_client(Some(pid));
        }
    })
    .await;
}

/// The fields of the hook input read here; the rest goes to the mapping as it came.
#[derive(Deserialize)]
struct HookInput {
    #[serde(default)]
    hook_event_name: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
}

pub async fn claude_code(
    State(app): State<Arc<App>>,
    ConnectInfo(PeerAddr(peer)): ConnectInfo<PeerAddr>,
    body: Bytes,
) -> Response {
    note_sender(&app, peer).await;
    let raw: Box<RawValue> = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return (StatusCode::BAD_REQUEST, format!("not a hook input: {e}")).into_response();
        }
    };
    let input: HookInput = serde_json::from_str(raw.get()).unwrap_or(HookInput {
        hook_event_name: None,
        session_id: None,
    });
    // As the command hook does: an id that is not a valid session id is left to the mapping.
    let session_id = input
        .session_id
        .filter(|s| dstream_sdk::validate_session_id(s).is_ok());
    if let Err(e) = check_ingest(SOURCE, session_id.as_deref(), &raw) {
        return (StatusCode::BAD_REQUEST, e.message).into_response();
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    app.pipeline
        .ingest(Ingest {
            client: NEXT_CLIENT.fetch_add(1, Ordering::Relaxed),
            source: SOURCE.to_string(),
            raw,
            session_id,
            reply_by_ms: None,
            gone: None,
            done: Box::new(move |r| {
                let _ = tx.send(r);
            }),
            spooled: None,
        })
        .await;
    let result: IngestResult = match rx.await {
        Ok(Ok(r)) => r,
        Ok(Err(IngestError::Store(e))) => {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("not stored: {e}")).into_response();
        }
        Ok(Err(IngestError::Stopped)) | Err(_) => {
            return (StatusCode::SERVICE_UNAVAILABLE, "the daemon is stopping").into_response();
        }
    };
    let mut decision = result.decision;
    // A held call: the answer waits for the person (the request ends if Claude Code gives up).
    if let Some(d) = &decision
        && d.action == Action::Ask
        && let Some(c) = d.checkpoint.clone()
        && c.decision.is_none()
    {
        match app.checkpoints.wait(&c.id, Some(&c.session_id), None).await {
            Ok(info) => {
                app.checkpoints.delivered(&info.id, DELIVERED_TO).await;
                decision = Some(decision_of(info));
            }
            Err(e) => {
                return (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response();
            }
        }
    }
    let verdict = match &decision {
        Some(d) => Verdict::of(d, false),
        None => Verdict::Pass,
    };
    let stop = stop_reason(decision.as_ref());
    match reply(input.hook_event_name.as_deref(), verdict, stop) {
        Some(out) => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(&out).unwrap_or_else(|_| b"{}".to_vec()),
        )
            .into_response(),
        // Nothing to say: an empty 200 is "no decision" to Claude Code.
        None => StatusCode::OK.into_response(),
    }
}
