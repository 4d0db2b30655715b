//! Method dispatch: each request to its handler, after the JSON it would store was checked.

use std::sync::Arc;

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{Method, codes};
use serde_json::value::RawValue;
use tokio::sync::OwnedSemaphorePermit;

use super::caller::Caller;
use super::wire::{Reply, RpcResult};
use super::{admin, append, checkpoints, lifecycle, retention, sessions, storable, usage};
use crate::state::DaemonState;

/// Carries out one request. `charge` is the request's share of the memory budget for
/// clients: an append holds it until the event is committed, other methods until they return.
///
/// That every method's name reaches its handler is tested in `server`, which assembles a
/// whole daemon (rpc does not reach up to it).
pub async fn dispatch(
    state: &Arc<DaemonState>,
    caller: &mut Caller,
    method: &str,
    raw: Option<&RawValue>,
    id: Option<&RawValue>,
    charge: OwnedSemaphorePermit,
) -> Reply {
    let now = |r: RpcResult| Reply::Now(r);
    let Ok(method) = method.parse::<Method>() else {
        return now(Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("unknown method {method:?}"),
        )));
    };
    let repaired: Option<Box<RawValue>>;
    let (raw, shape) = match storable::check(method, raw) {
        Ok(shape) => (raw, shape),
        // An agent's event is what the agent sent: what readers could not parse (a lone
        // surrogate, 1e999) is repaired rather than refused, so a tool call in it is still
        // decided instead of failing open.
        Err(e) if method == Method::Ingest => {
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
        Method::Append => match append::append(state, caller, raw, id, charge).await {
            Ok(reply) => reply,
            Err(e) => now(Err(e)),
        },
        Method::Hello => now(admin::hello(state, caller)),
        Method::Read => now(sessions::read(state, raw).await),
        Method::Subscribe => match sessions::subscribe(state, caller, raw) {
            Ok(sub) => Reply::Subscribed(sub),
            Err(e) => now(Err(e)),
        },
        Method::Unsubscribe => now(sessions::unsubscribe(caller, raw)),
        Method::SessionsList => now(sessions::sessions_list(state, raw)),
        Method::SessionsGet => now(sessions::sessions_get(state, raw)),
        Method::Query => now(sessions::query(state, raw).await),
        Method::Stats => now(admin::stats(state)),
        Method::Usage => now(usage::usage(state, raw).await),
        Method::Budgets => now(usage::budgets(state)),
        Method::Repair => now(admin::repair(state, raw).await),
        Method::Compress => now(admin::compress(state, raw).await),
        Method::Fork => now(lifecycle::fork(state, raw).await),
        Method::Gc => now(retention::gc(state, raw).await),
        Method::Ingest => match storable::charge_parse(state, shape, charge) {
            Ok(charge) => match append::ingest(state, caller, raw, id, charge).await {
                Ok(reply) => reply,
                Err(e) => now(Err(e)),
            },
            Err(e) => now(Err(e)),
        },
        Method::RelayStatus => now(admin::relay_status(state).await),
        Method::RelayRetry => now(admin::relay_retry(state)),
        Method::PluginsList => now(admin::plugins(state)),
        Method::CheckpointRequest => now(checkpoints::request(state, raw).await),
        Method::CheckpointResolve => now(checkpoints::resolve(state, caller, raw).await),
        Method::CheckpointList => now(checkpoints::list(state, raw).await),
        Method::CheckpointAwait => match checkpoints::wait(state, caller, raw, id) {
            Ok(reply) => reply,
            Err(e) => now(Err(e)),
        },
        Method::PluginsReload => now(admin::plugins_reload(state).await),
        Method::Search => now(crate::rpc::search::search(state, raw).await),
        Method::Reindex => now(crate::rpc::search::reindex(state).await),
    }
}
