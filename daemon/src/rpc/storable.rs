//! Whatever a writer stores every reader must be able to read: client JSON that is valid but
//! that standard parsers refuse (numbers beyond an f64, lone UTF-16 surrogate escapes) is
//! refused before it is stored, naming where it is. And an ingest, whose event is parsed into
//! values (and Lua tables) far bigger than its text, is charged for that before it is parsed.

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{Method, codes};
use serde_json::value::RawValue;
use tokio::sync::OwnedSemaphorePermit;

use crate::jsonscan::{Shape, check_storable};
use crate::state::DaemonState;

/// Memory one JSON value takes once parsed (serde_json values, map entries, and the plugins'
/// copies), as measured on an event of tiny objects: the parse of an ingest is charged this
/// per value to the memory budget for clients.
pub const PARSED_VALUE_BYTES: usize = 512;

/// Checks the params of a method that stores client JSON; the shape of what it stores.
pub fn check(method: Method, raw: Option<&RawValue>) -> Result<Shape, RpcError> {
    let stores = matches!(
        method,
        Method::Append | Method::Ingest | Method::CheckpointRequest | Method::CheckpointResolve
    );
    let Some(raw) = raw.filter(|_| stores) else {
        return Ok(Shape::default());
    };
    check_storable(raw.get().as_bytes()).map_err(|u| {
        let at = if u.path.is_empty() {
            "params".into()
        } else {
            u.path
        };
        RpcError::new(
            codes::INVALID_PARAMS,
            format!(
                "{at} holds {}, which readers could not parse; it was not stored",
                u.what
            ),
        )
    })
}

/// Adds the cost of parsing `shape` to an ingest's charge.
pub fn charge_parse(
    state: &DaemonState,
    shape: Shape,
    mut charge: OwnedSemaphorePermit,
) -> Result<OwnedSemaphorePermit, RpcError> {
    let bytes = shape.values.saturating_mul(PARSED_VALUE_BYTES);
    if bytes > state.memory.cap() {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            format!(
                "event holds {} JSON values; parsing it would take about {bytes} bytes, more than \
                 the daemon holds for requests (half of daemon.max_client_memory_bytes = {})",
                shape.values,
                state.config().daemon.max_client_memory_bytes
            ),
        ));
    }
    let Some(more) = state.memory.try_charge(bytes) else {
        state
            .stats
            .overloaded
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Err(RpcError::new(
            codes::OVERLOADED,
            format!(
                "the daemon holds its limit of memory for clients (daemon.max_client_memory_bytes = \
                 {}); this event ({} values to parse) was not carried out, try again shortly",
                state.config().daemon.max_client_memory_bytes,
                shape.values
            ),
        ));
    };
    charge.merge(more);
    Ok(charge)
}
