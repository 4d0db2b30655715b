//! Reading a plugin's declaration from the table its script returns: name, API version,
//! sources, priority, the hooks it defines, and the `process_if_contains` prefilter.

use mlua::{Table, Value};

use crate::plugins::contract::{Hooks, PluginError, PluginMeta};

/// The plugin table's declared name, API version, sources, priority and hooks.
pub(super) fn read_meta(module: &Table) -> Result<PluginMeta, PluginError> {
    let bad = |m: String| PluginError::Load(m);
    let name: String = match module.get::<Value>("name") {
        Ok(Value::String(s)) => s.to_str().map_err(|e| bad(e.to_string()))?.to_string(),
        _ => return Err(bad("the plugin table needs a string `name`".into())),
    };
    match module.get::<Value>("api") {
        Ok(Value::Integer(1)) => {}
        Ok(Value::Nil) => return Err(bad("the plugin table needs `api = 1`".into())),
        Ok(other) => {
            return Err(bad(format!(
                "unsupported plugin api {other:?}; this daemon speaks api 1"
            )));
        }
        Err(e) => return Err(bad(e.to_string())),
    }
    let mut sources = Vec::new();
    match module.get::<Value>("sources") {
        Ok(Value::Table(t)) => {
            for s in t.sequence_values::<String>() {
                sources.push(s.map_err(|e| bad(format!("`sources` must list strings: {e}")))?);
            }
        }
        Ok(Value::Nil) => {}
        _ => return Err(bad("`sources` must be a list of source names".into())),
    }
    let priority = match module.get::<Value>("priority") {
        Ok(Value::Integer(p)) => p,
        Ok(Value::Nil) => 100,
        _ => return Err(bad("`priority` must be an integer".into())),
    };
    let mut hooks = Hooks::empty();
    for hook in Hooks::ALL {
        match module.get::<Value>(hook.name()) {
            Ok(Value::Function(_)) => hooks |= hook,
            Ok(Value::Nil) => {}
            _ => return Err(bad(format!("`{}` must be a function", hook.name()))),
        }
    }
    if hooks.contains(Hooks::MAP) && sources.is_empty() {
        return Err(bad(
            "a plugin with `map` must list the `sources` it maps".into()
        ));
    }
    if hooks.is_empty() {
        return Err(bad(
            "the plugin defines none of map, process, decide, on_event".into(),
        ));
    }
    Ok(PluginMeta {
        name,
        sources,
        priority,
        hooks,
        process_if_contains: None,
    })
}

pub(super) fn read_needles(module: &Table) -> Result<Option<Vec<String>>, PluginError> {
    let bad = || PluginError::Load("`process_if_contains` must be a list of strings".into());
    match module.get::<Value>("process_if_contains") {
        Ok(Value::Nil) => Ok(None),
        Ok(Value::Table(t)) => {
            let mut out = Vec::new();
            for s in t.sequence_values::<mlua::LuaString>() {
                let s = s.map_err(|_| bad())?;
                let s = s.to_str().map_err(|_| bad())?.to_ascii_lowercase();
                if s.is_empty() {
                    return Ok(None); // "" is in every text
                }
                out.push(s);
            }
            Ok(Some(out))
        }
        _ => Err(bad()),
    }
}
