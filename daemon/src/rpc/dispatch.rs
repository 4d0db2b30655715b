//! Method dispatch: each request to its handler, after the JSON it would store was checked.

use std::sync::Arc;

use dstream_sdk::RpcError;
use dstream_sdk::protocol::codes;
use serde_json::value::RawValue;
use tokio::sync::OwnedSemaphorePermit;

use super::caller::Caller;
use super::wire::{Reply, RpcResult};
use super::{admin, append, checkpoints, sessions, storable};
use crate::state::DaemonState;

/// Carries out one request. `charge` is the request's share of the memory budget for
/// clients: an append holds it until the event is committed, other methods until they return.
pub async fn dispatch(
    state: &Arc<DaemonState>,
    caller: &mut Caller,
    method: &str,
    raw: Option<&RawValue>,
    id: Option<&RawValue>,
    charge: OwnedSemaphorePermit,
) -> Reply {
    let now = |r: RpcResult| Reply::Now(r);
    let repaired: Option<Box<RawValue>>;
    let (raw, shape) = match storable::check(method, raw) {
        Ok(shape) => (raw, shape),
        // An agent's event is what the agent sent: what readers could not parse (a lone
        // surrogate, 1e999) is repaired rather than refused, so a tool call in it is still
        // decided instead of failing open.
        Err(e) if method == "ingest" => {
            repaired = raw
                .and_then(|r| crate::lossy_json::parse(r.get()))
                .and_then(|(v, _)| serde_json::value::to_raw_value(&v).ok());
            match storable::check(method, repaired.as_deref()) {
                Ok(shape) if repaired.is_some() => (repaired.as_deref(), shape),
                _ => return now(Err(e)),
            }
        }
        Err(e) => return now(Err(e)),
    };
    match method {
        "append" => match append::append(state, caller, raw, id, charge).await {
            Ok(reply) => reply,
            Err(e) => now(Err(e)),
        },
        "hello" => now(admin::hello(state, caller)),
        "read" => now(sessions::read(state, raw).await),
        "subscribe" => match sessions::subscribe(state, caller, raw) {
            Ok(sub) => Reply::Subscribed(sub),
            Err(e) => now(Err(e)),
        },
        "unsubscribe" => now(sessions::unsubscribe(caller, raw)),
        "sessions.list" => now(sessions::sessions_list(state)),
        "sessions.get" => now(sessions::sessions_get(state, raw)),
        "query" => now(sessions::query(state, raw).await),
        "stats" => now(admin::stats(state)),
        "repair" => now(admin::repair(state, raw).await),
        "ingest" => match storable::charge_parse(state, shape, charge) {
            Ok(charge) => match append::ingest(state, caller, raw, id, charge).await {
                Ok(reply) => reply,
                Err(e) => now(Err(e)),
            },
            Err(e) => now(Err(e)),
        },
        "relay.status" => now(admin::relay_status(state).await),
        "relay.retry" => now(admin::relay_retry(state)),
        "plugins.list" => now(admin::plugins(state)),
        "checkpoint.request" => now(checkpoints::request(state, raw).await),
        "checkpoint.resolve" => now(checkpoints::resolve(state, caller, raw).await),
        "checkpoint.list" => now(checkpoints::list(state, raw).await),
        "checkpoint.await" => match checkpoints::wait(state, caller, raw, id) {
            Ok(reply) => reply,
            Err(e) => now(Err(e)),
        },
        "plugins.reload" => now(admin::plugins_reload(state).await),
        other => now(Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("unknown method {other:?}"),
        ))),
    }
}
