//! What the tests holding a Rust mapping to its Lua file share: the Lua file run in a state
//! as the built-in was, and event ids made comparable.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value as Json;

use super::state::Host;
use crate::plugins::builtin;
use crate::plugins::contract::{Hooks, Input, Limits};

/// The built-in Lua file `file`, loaded with `config` (as `[plugins.lua.<name>]` gives it).
pub(super) fn lua_builtin(file: &str, config: &Json) -> Host {
    let text = builtin::FILES.iter().find(|(f, _)| *f == file).unwrap().1;
    let limits = Limits {
        call_timeout: Duration::from_secs(5),
        instructions: 100_000_000,
        memory_bytes: 64 << 20,
        output_bytes: 16 << 20,
    };
    Host::load(&format!("@{file}"), text, config, limits).unwrap()
}

/// One map call of the Lua file: its events, or its error's text.
pub(super) fn lua_map(lua: &Host, raw: &Json, source: &str) -> Result<Vec<Json>, String> {
    let input = Input::Map {
        raw: Arc::new(raw.clone()),
        source: source.into(),
        session_id: None,
    };
    lua.run(Hooks::MAP, input).map_err(|e| e.to_string())
}

/// Replaces the ids a mapping makes (`host.ulid()`, fresh on every run) by their order of
/// first appearance, so that two runs compare equal when their events point at each other
/// the same way: `id` and `causation_id` values that are ULIDs become `ulid#<n>`.
#[derive(Default)]
pub(super) struct Ids {
    seen: HashMap<String, usize>,
}

impl Ids {
    pub fn normalize(&mut self, mut events: Vec<Json>) -> Vec<Json> {
        for e in &mut events {
            for field in ["id", "causation_id"] {
                let Some(Json::String(s)) = e.get_mut(field) else {
                    continue;
                };
                if s.len() != 26 || ulid::Ulid::from_string(s).is_err() {
                    continue;
                }
                let next = self.seen.len();
                let n = *self.seen.entry(s.clone()).or_insert(next);
                *s = format!("ulid#{n}");
            }
        }
        events
    }
}
