//! The web view's API answered by the daemon's own methods ([`WebBackend`]): the same
//! checkpoint list and first-decision-wins resolve as `dstream approve` (recorded as
//! `web:<user>`, refused from under an agent), the same `usage` and `search`, and a session
//! list with what the page shows of each (see `web_sessions`).

use std::sync::{Arc, Weak};

use dstream_sdk::RpcError;
use dstream_sdk::protocol::codes;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::http::web::{Answer, WebBackend, WebCall};
use crate::rpc::checkpoints::{Decider, resolve_as};
use crate::rpc::web_sessions::SessionFacts;
use crate::rpc::wire::RpcResult;
use crate::state::DaemonState;

/// Holds the daemon weakly: the listener it serves is part of the daemon.
pub struct WebRpc {
    state: Weak<DaemonState>,
    facts: SessionFacts,
}

impl WebRpc {
    pub fn new(state: &Arc<DaemonState>) -> WebRpc {
        WebRpc {
            state: Arc::downgrade(state),
            facts: SessionFacts::default(),
        }
    }
}

fn raw(params: &impl Serialize) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(params)
        .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))
}

impl WebBackend for WebRpc {
    fn call(&self, call: WebCall) -> Answer<'_> {
        Box::pin(async move {
            let Some(state) = self.state.upgrade() else {
                return Err(RpcError::new(
                    codes::SHUTTING_DOWN,
                    "the daemon is stopping",
                ));
            };
            answer(&state, &self.facts, call).await
        })
    }
}

async fn answer(state: &Arc<DaemonState>, facts: &SessionFacts, call: WebCall) -> RpcResult {
    match call {
        WebCall::Sessions { limit, ids } => facts.list(state, limit, ids).await,
        WebCall::Checkpoints { state: wanted } => {
            let params = dstream_sdk::protocol::CheckpointListParams {
                state: wanted,
                ..Default::default()
            };
            crate::rpc::checkpoints::list(state, Some(&*raw(&params)?)).await
        }
        WebCall::Decide { params, pid } => {
            let uid = crate::util::user::me();
            let by = Decider {
                pid,
                uid,
                name: crate::util::user::decider("web", uid),
            };
            resolve_as(state, by, params).await
        }
        WebCall::Usage(params) => crate::rpc::usage::usage(state, Some(&*raw(&params)?)).await,
        WebCall::Search(params) => crate::rpc::search::search(state, Some(&*raw(&params)?)).await,
    }
}
