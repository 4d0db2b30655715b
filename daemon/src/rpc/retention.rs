//! `gc`: retention now, or what it would do.

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{GcParams, codes};
use serde_json::value::RawValue;

use super::wire::{RpcResult, params, to_json};
use crate::state::DaemonState;

pub(super) async fn gc(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: GcParams = params(raw.filter(|r| r.get() != "null"))?;
    let r = state
        .retention
        .run(p.dry_run)
        .await
        .map_err(|e| RpcError::new(codes::INVALID_PARAMS, e))?;
    to_json(&r)
}
