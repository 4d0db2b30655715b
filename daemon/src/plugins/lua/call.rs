//! Calling one of a plugin's functions in its state: the hook's input handed over as Lua
//! values, the call run within its budget, and what it emitted or returned read back as JSON,
//! charged to the call's allowance.

use mlua::{Function, Value};
use serde_json::Value as Json;

use super::error::clean_error;
use super::output::Output;
use super::state::Host;
use crate::plugins::contract::{Hooks, Input, PluginError};
use crate::plugins::luajson;

impl Host {
    pub(super) fn run(&self, hook: Hooks, input: Input) -> Result<Vec<Json>, PluginError> {
        let given = match &input {
            Input::Map { raw, .. } => luajson::cost(raw),
            Input::Event(event) => luajson::cost(event),
        };
        // One frame's worth, plus room for a filter that returns what it was given, grown.
        *self.output.lock().unwrap() = Output::new(
            self.limits
                .output_bytes
                .saturating_add(given.saturating_mul(2)),
        );
        let name = hook.name();
        let f: Function = match self.module.get::<Value>(name) {
            Ok(Value::Function(f)) => f,
            _ => {
                return Err(PluginError::Call(format!(
                    "plugin has no `{name}` function"
                )));
            }
        };
        self.budget.start(&self.limits);
        let result = self.call(hook, &f, input);
        self.budget.end();
        result.map_err(|e| PluginError::Call(clean_error(&e)))
    }

    fn call(&self, hook: Hooks, f: &Function, input: Input) -> mlua::Result<Vec<Json>> {
        let to_lua = |v: &Json| luajson::to_lua(&self.lua, v);
        match (hook, input) {
            (
                Hooks::MAP,
                Input::Map {
                    raw,
                    source,
                    session_id,
                },
            ) => {
                let ctx = self.lua.create_table()?;
                ctx.set("source", source)?;
                ctx.set("session_id", session_id)?;
                f.call::<()>((to_lua(&raw)?, self.emit.clone(), ctx))?;
            }
            (Hooks::PROCESS, Input::Event(event)) => {
                f.call::<()>((to_lua(&event)?, self.emit.clone()))?;
            }
            (Hooks::DECIDE, Input::Event(event)) => {
                let verdict: Value = f.call(to_lua(&event)?)?;
                let verdict = match verdict {
                    Value::Nil => Json::Null,
                    Value::String(s) => Json::String(s.to_str()?.to_string()),
                    Value::Table(t) => self.read_back(Value::Table(t))?,
                    other => {
                        return Err(mlua::Error::runtime(format!(
                            "decide must return \"allow\", \"deny\", \"ask\", a table or nil, not a {}",
                            other.type_name()
                        )));
                    }
                };
                return Ok(vec![verdict]);
            }
            (Hooks::ON_EVENT, Input::Event(event)) => {
                f.call::<()>(to_lua(&event)?)?;
            }
            // `relay(event)`: the event to send (changed or not), or nil to keep it local.
            (Hooks::RELAY, Input::Event(event)) => {
                return match f.call::<Value>(to_lua(&event)?)? {
                    Value::Nil => Ok(Vec::new()),
                    Value::Table(t) => Ok(vec![self.read_back(Value::Table(t))?]),
                    other => Err(mlua::Error::runtime(format!(
                        "relay must return the event (a table) or nil, not a {}",
                        other.type_name()
                    ))),
                };
            }
            _ => {
                return Err(mlua::Error::runtime(
                    "internal: hook and input do not match",
                ));
            }
        }
        Ok(std::mem::take(&mut self.output.lock().unwrap().events))
    }

    /// A value the hook returned, charged to the call's allowance.
    fn read_back(&self, value: Value) -> mlua::Result<Json> {
        let mut out = self.output.lock().unwrap();
        luajson::from_lua(&self.lua, value, &mut out.allowance)
    }
}
