//! The `checkpoint.*` methods: open (for SDK and FFI callers), await, resolve, list. Who
//! decides is taken from the OS credentials of the connection, never from the request.

use std::sync::Arc;
use std::time::Duration;

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{
    CheckpointAwaitParams, CheckpointListParams, CheckpointListResult, CheckpointRequestParams,
    CheckpointResolveParams, codes,
};
use serde_json::value::RawValue;

use super::caller::Caller;
use super::wire::{Reply, RpcResult, check_session_id, params, reply_frame, store_error, to_json};
use crate::checkpoint::{self, CheckpointError, NewRequest, Prepared, Resolution, policy};
use crate::state::DaemonState;
use dstream_sdk::protocol::{Action, CheckpointState, OnTimeout};

/// The longest a checkpoint may wait: a week.
const MAX_TIMEOUT_MS: u64 = 7 * 24 * 3600 * 1000;

fn rpc_error(e: CheckpointError) -> RpcError {
    let code = match &e {
        CheckpointError::NotFound(_) => codes::CHECKPOINT_NOT_FOUND,
        CheckpointError::AlreadyDecided { .. } => codes::CHECKPOINT_DECIDED,
        CheckpointError::NotReady(_) => codes::CHECKPOINT_NOT_READY,
        CheckpointError::Invalid(_) => codes::INVALID_PARAMS,
        CheckpointError::Store(_) | CheckpointError::Io { .. } => codes::STORAGE_FAILED,
    };
    match e {
        CheckpointError::Store(s) => store_error(s),
        e => RpcError::new(code, e.to_string()),
    }
}

fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::new(codes::INTERNAL_ERROR, e.to_string())
}

pub async fn request(state: &Arc<DaemonState>, raw: Option<&RawValue>) -> RpcResult {
    let p: CheckpointRequestParams = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    let on_timeout = match p.on_timeout.as_deref() {
        None => None,
        Some("allow" | "approve") => Some(OnTimeout::Allow),
        Some("deny" | "reject") => Some(OnTimeout::Deny),
        Some(other) => {
            return Err(RpcError::new(
                codes::INVALID_PARAMS,
                format!("on_timeout must be \"allow\" or \"deny\", not {other:?}"),
            ));
        }
    };
    let timeout_ms = p
        .timeout_ms
        .unwrap_or(state.config().checkpoints.default_timeout_ms);
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            format!("timeout_ms must be between 1 and {MAX_TIMEOUT_MS}"),
        ));
    }
    let options = match p.options {
        Some(o) if o.is_empty() => {
            return Err(RpcError::new(
                codes::INVALID_PARAMS,
                "options must not be empty",
            ));
        }
        Some(o) => o,
        None => checkpoint::default_options(false)
            .into_iter()
            .filter(|o| o.scope.is_none())
            .collect(),
    };
    if let Some(bad) = options
        .iter()
        .find(|o| o.id.is_empty() || !matches!(o.action.parse(), Ok(Action::Allow | Action::Deny)))
    {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            format!(
                "option {:?}: needs an id and an action of \"allow\" or \"deny\"",
                bad.id
            ),
        ));
    }
    let summary = p
        .summary
        .unwrap_or_else(|| policy::summary(p.tool.as_deref(), p.input.as_ref()));
    let request = NewRequest {
        session_id: p.session_id,
        key: p.key,
        summary,
        options,
        timeout_ms,
        on_timeout: Some(on_timeout.unwrap_or(state.config().checkpoints.default_on_timeout)),
        source: Some("sdk".into()),
        tool: p.tool,
        input: p.input,
        ..Default::default()
    };
    let (checkpoints, pipeline) = (state.checkpoints.clone(), state.pipeline.clone());
    let prepared =
        tokio::task::spawn_blocking(move || checkpoints.prepare(filtered(&pipeline, request)))
            .await
            .map_err(internal)?
            .map_err(rpc_error)?;
    let info = match prepared {
        Prepared::Existing(info) => info,
        Prepared::New {
            info,
            event_id,
            event,
        } => state
            .checkpoints
            .record(info, event_id, event)
            .await
            .map_err(rpc_error)?,
    };
    to_json(&info)
}

/// The request's input and summary as the filters leave them (the redaction filter removes
/// secrets), as for everything else that is stored. Blocking.
fn filtered(pipeline: &crate::pipeline::Pipeline, mut request: NewRequest) -> NewRequest {
    let event = serde_json::json!({
        "type": "checkpoint.requested",
        "actor": "sdk",
        "payload": {"tool": request.tool, "input": request.input, "summary": request.summary},
    });
    match pipeline.filter(&request.session_id, "sdk", event) {
        Some(kept) => {
            let payload = &kept["payload"];
            request.input = payload.get("input").cloned().filter(|v| !v.is_null());
            request.summary = payload["summary"].as_str().unwrap_or_default().to_string();
        }
        None => {
            request.input = None;
            request.summary = "(withheld by a filter)".into();
        }
    }
    request
}

pub async fn resolve(
    state: &Arc<DaemonState>,
    caller: &Caller,
    raw: Option<&RawValue>,
) -> RpcResult {
    let p: CheckpointResolveParams = params(raw)?;
    let by = Decider {
        pid: caller.peer.pid,
        uid: caller.peer.uid,
        name: decider(caller),
    };
    resolve_as(state, by, p).await
}

/// Who decides: the process (its agent ancestry is checked), its uid and the name recorded.
pub struct Decider {
    pub pid: Option<i32>,
    pub uid: Option<u32>,
    /// `user:<name>`, `web:<name>`.
    pub name: String,
}

/// Decides a checkpoint for `by`, unless `by` runs under an agent (an agent cannot approve
/// its own tool calls). Shared by the socket's `checkpoint.resolve` and the web view.
pub async fn resolve_as(
    state: &Arc<DaemonState>,
    by: Decider,
    p: CheckpointResolveParams,
) -> RpcResult {
    if let Some(agent) = state.agents.agent_above(by.pid) {
        return Err(RpcError::new(
            codes::DECISION_FROM_AGENT,
            format!(
                "refused: this decision comes from the agent's own process tree (agent pid \
                 {agent}); an agent cannot approve its own tool calls. Decide from another \
                 terminal: `dstream inbox`, `dstream approve`"
            ),
        ));
    }
    let resolution = Resolution {
        decision: p.decision,
        note: p.note,
        input: p.input,
        decided_by: by.name,
        uid: by.uid,
    };
    let info = state
        .checkpoints
        .resolve(&p.id, resolution)
        .await
        .map_err(rpc_error)?;
    to_json(&info)
}

pub async fn list(state: &Arc<DaemonState>, raw: Option<&RawValue>) -> RpcResult {
    let p: CheckpointListParams = params(raw)?;
    let wanted = match p.state.as_deref() {
        None => None,
        Some(s) => Some(s.parse::<CheckpointState>().map_err(|_| {
            RpcError::new(
                codes::INVALID_PARAMS,
                format!("state must be pending, approved, rejected or expired, not {s:?}"),
            )
        })?),
    };
    let checkpoints = state.checkpoints.clone();
    let (list, total) = tokio::task::spawn_blocking(move || {
        checkpoints.list(
            wanted,
            p.session_id.as_deref(),
            p.tool.as_deref(),
            p.newest_first,
            p.limit,
        )
    })
    .await
    .map_err(internal)?;
    to_json(&CheckpointListResult {
        checkpoints: list,
        total,
    })
}

/// Answers when the checkpoint is decided (or the caller's timeout passes); other requests on
/// the connection go on meanwhile. The first client handed a decision is recorded as its
/// delivery.
pub fn wait(
    state: &Arc<DaemonState>,
    caller: &mut Caller,
    raw: Option<&RawValue>,
    id: Option<&RawValue>,
) -> Result<Reply, RpcError> {
    let p: CheckpointAwaitParams = params(raw)?;
    // A waiting hook that reconnected after a restart stands for its agent too.
    caller.note_agent(state);
    if let Some(s) = &p.session_id {
        check_session_id(s, "session_id")?;
    }
    caller.may_wait()?;
    let state = state.clone();
    let out = caller.out.clone();
    let id = id.map(|i| i.to_owned());
    let to = decider(caller);
    let count = caller.count_task();
    let task = tokio::spawn(async move {
        let _count = count;
        let result = state
            .checkpoints
            .wait(
                &p.id,
                p.session_id.as_deref(),
                p.timeout_ms.map(Duration::from_millis),
            )
            .await;
        let decided = matches!(&result, Ok(info) if info.decision.is_some());
        let Some(request_id) = id else { return };
        let frame = reply_frame(
            Some(&request_id),
            result.map_err(rpc_error).and_then(|i| to_json(&i)),
        );
        if out.send(frame).await.is_ok() && decided {
            state.checkpoints.delivered(&p.id, &to).await;
        }
    });
    caller.keep_waiting(task);
    Ok(Reply::Submitted)
}

/// `user:<name>` of the connection's peer, from the credentials the OS reported.
fn decider(caller: &Caller) -> String {
    crate::util::user::decider("user", caller.peer.uid)
}
