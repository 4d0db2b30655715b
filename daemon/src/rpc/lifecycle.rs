//! Making and ending sessions other than by appending: `fork`.

use dstream_sdk::protocol::{ForkParams, ForkResult};
use serde_json::value::RawValue;

use super::wire::{RpcResult, check_session_id, params, store_error, to_json};
use crate::state::DaemonState;
use crate::store::default_fork_id;

pub(super) async fn fork(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: ForkParams = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    let new = match p.new_session_id {
        Some(id) => {
            check_session_id(&id, "new_session_id")?;
            id
        }
        None => default_fork_id(&p.session_id),
    };
    let r = state
        .store
        .fork(&p.session_id, p.at_lsn, &new)
        .await
        .map_err(store_error)?;
    state.relay.session_added(&r.session_id, r.last_lsn);
    let stream_id = state
        .store
        .get(&r.session_id)
        .and_then(|s| s.meta().stream_id)
        .unwrap_or_else(|| p.session_id.clone());
    to_json(&ForkResult {
        session_id: r.session_id,
        forked_from: r.origin.forked_from,
        fork_lsn: r.origin.fork_lsn,
        stream_id,
        bytes: r.bytes,
    })
}
