//! Built-in plugins written in Rust: a mapping whose Lua file is the reference (see
//! [`super::claude_code_map`]), run on whatever thread calls it. It needs no state, no large
//! stack and cannot hang, so it has no thread of its own. A Lua file of the same name in the
//! plugin folder replaces it, as it would the Lua built-in.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::mpsc;

use serde_json::Value as Json;

use super::claude_code_map;
use super::contract::{Hooks, Input, PluginError, PluginMeta, RunInline, Shared, Started};
use super::loader::PluginFile;

/// A mapping: the raw event and the ingest's source, to the events it makes.
type MapFn = fn(&Json, &str) -> Result<Vec<Json>, String>;

/// One built-in written in Rust, standing in for the built-in Lua file `file`.
#[derive(Clone, Copy)]
pub(super) struct NativeBuiltin {
    pub file: &'static str,
    name: &'static str,
    sources: &'static [&'static str],
    map: MapFn,
}

/// Every built-in written in Rust.
pub(super) const NATIVE_BUILTINS: &[NativeBuiltin] = &[NativeBuiltin {
    file: "claude-code.lua",
    name: "claude-code",
    sources: &["claude-code"],
    map: claude_code_map::map,
}];

impl PluginFile for NativeBuiltin {
    const KIND: &'static str = "native";

    fn file(&self) -> &str {
        self.file
    }

    fn stem(&self) -> &str {
        self.name
    }

    fn origin(&self) -> String {
        "builtin".into()
    }

    fn fingerprint(&self) -> Result<u64, String> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        ("native-builtin", self.file).hash(&mut h);
        Ok(h.finish())
    }

    fn start(self, _: Arc<Shared>) -> Result<Started, PluginError> {
        // Every call runs on the caller's thread (`anywhere`): nothing is ever queued.
        let (tx, _) = mpsc::sync_channel(1);
        Ok(Started {
            meta: PluginMeta {
                name: self.name.into(),
                sources: self.sources.iter().map(|s| s.to_string()).collect(),
                priority: 100,
                hooks: Hooks::MAP,
                process_if_contains: None,
            },
            tx,
            inline: Some(Arc::new(self)),
        })
    }
}

impl RunInline for NativeBuiltin {
    fn try_run(&self, hook: Hooks, input: Input) -> Result<Result<Vec<Json>, PluginError>, Input> {
        Ok(match (hook, input) {
            (Hooks::MAP, Input::Map { raw, source, .. }) => {
                (self.map)(&raw, &source).map_err(PluginError::Call)
            }
            _ => Err(PluginError::Call(
                "internal: a built-in mapping was called with another hook".into(),
            )),
        })
    }

    fn anywhere(&self) -> bool {
        true
    }
}
