//! The `host` table a plugin sees: logging (throttled, and `print` sent there too), the time,
//! ULIDs, its config, JSON null and arrays, and JSON encoding and decoding bounded by the
//! call's allowance. Everything a plugin may ask of the daemon is here.

use std::sync::{Arc, Mutex};

use mlua::{Lua, LuaSerdeExt, Table, Value};
use serde_json::Value as Json;

use super::output::Output;
use crate::plugins::{log_line, luajson};

/// Fills the global `host` table of `lua` for the plugin loaded as `chunk_name`.
pub(super) fn install_host_table(
    lua: &Lua,
    chunk_name: &str,
    config: &Json,
    output: &Arc<Mutex<Output>>,
) -> mlua::Result<()> {
    let host = lua.create_table()?;
    let plugin = chunk_name.trim_start_matches('@').to_string();
    let log_name = plugin.clone();
    let throttle = log_line::Throttle::default();
    host.set(
        "log",
        lua.create_function(move |_, (a, b): (String, Option<String>)| {
            let (level, msg) = match b {
                Some(msg) => (a, msg),
                None => ("info".to_string(), a),
            };
            match throttle.check() {
                log_line::Verdict::Drop => return Ok(()),
                log_line::Verdict::Log { dropped_before } if dropped_before > 0 => {
                    tracing::warn!(plugin = %log_name, dropped = dropped_before, "plugin log lines dropped (more than 20 a second)");
                }
                log_line::Verdict::Log { .. } => {}
            }
            let msg = log_line::clean(&msg);
            match level.as_str() {
                "error" => tracing::error!(plugin = %log_name, "{msg}"),
                "warn" => tracing::warn!(plugin = %log_name, "{msg}"),
                "debug" => tracing::debug!(plugin = %log_name, "{msg}"),
                _ => tracing::info!(plugin = %log_name, "{msg}"),
            }
            Ok(())
        })?,
    )?;
    host.set(
        "now_ms",
        lua.create_function(|_, ()| {
            Ok(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64))
        })?,
    )?;
    host.set(
        "ulid",
        lua.create_function(|_, ()| Ok(ulid::Ulid::new().to_string()))?,
    )?;
    host.set("config", lua.to_value(config)?)?;
    host.set("null", lua.null())?;
    // Marks a table as a JSON array, so that an empty one is stored as [] rather than {}.
    host.set(
        "array",
        lua.create_function(|lua, t: Option<Table>| {
            let t = match t {
                Some(t) => t,
                None => lua.create_table()?,
            };
            let _ = t.set_metatable(Some(lua.array_metatable()));
            Ok(t)
        })?,
    )?;
    // The JSON of both is built on the Rust side, outside the state's memory limit, and freed
    // when they return: each may build as much as the call's whole allowance, without
    // spending it (a filter that encodes a field, edits and decodes it, as redact.lua does,
    // must still be able to emit the result).
    let encode_output = output.clone();
    host.set(
        "json_encode",
        lua.create_function(move |lua, v: Value| {
            let limit = encode_output.lock().unwrap().allowance.limit();
            let json = luajson::from_lua(lua, v, &mut luajson::Allowance::new(limit))?;
            serde_json::to_string(&json).map_err(mlua::Error::external)
        })?,
    )?;
    let decode_output = output.clone();
    host.set(
        "json_decode",
        lua.create_function(move |lua, text: mlua::LuaString| {
            let text = text.as_bytes();
            let limit = decode_output.lock().unwrap().allowance.limit();
            if text.len() > limit {
                return Err(mlua::Error::runtime(format!(
                    "json_decode: {} bytes of text; at most {limit} in one call",
                    text.len()
                )));
            }
            let json: Json = serde_json::from_slice(&text).map_err(mlua::Error::external)?;
            lua.to_value(&json)
        })?,
    )?;
    lua.globals().set("host", host)?;
    // `print` goes to the daemon's log rather than its stdout.
    lua.load(r#"print = function(...) local t = table.pack(...) for i = 1, t.n do t[i] = tostring(t[i]) end host.log("info", table.concat(t, "\t", 1, t.n)) end"#)
        .set_name("=sandbox")
        .exec()?;
    let _ = plugin;
    Ok(())
}
