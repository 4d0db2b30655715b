//! One call's output: the events `emit` collects and the JSON allowance they, and anything
//! else the call reads back from the state, are charged to. Shared by the `emit` function, the
//! `host` table's JSON functions and the call that resets and takes it.

use std::sync::{Arc, Mutex};

use mlua::{Function, Lua, Value};
use serde_json::Value as Json;

use crate::plugins::luajson;

/// Events one call may emit.
pub(super) const MAX_EMITS: usize = 256;

/// One call's output so far.
pub(super) struct Output {
    pub(super) events: Vec<Json>,
    pub(super) allowance: luajson::Allowance,
}

impl Output {
    /// Nothing emitted yet, and `limit` bytes of JSON to read back.
    pub(super) fn new(limit: usize) -> Output {
        Output {
            events: Vec::new(),
            allowance: luajson::Allowance::new(limit),
        }
    }
}

/// The `emit(event)` function handed to `map` and `process`: adds an event table to `output`.
pub(super) fn emit_function(lua: &Lua, output: &Arc<Mutex<Output>>) -> mlua::Result<Function> {
    let output = output.clone();
    lua.create_function(move |lua, event: Value| {
        let mut guard = output.lock().unwrap();
        let out = &mut *guard;
        if out.events.len() >= MAX_EMITS {
            return Err(mlua::Error::runtime(format!(
                "emit called more than {MAX_EMITS} times in one call"
            )));
        }
        if !matches!(event, Value::Table(_)) {
            return Err(mlua::Error::runtime(format!(
                "emit expects an event table, got a {}",
                event.type_name()
            )));
        }
        let event = luajson::from_lua(lua, event, &mut out.allowance)?;
        out.events.push(event);
        Ok(())
    })
}
