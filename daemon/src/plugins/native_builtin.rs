//! Built-in plugins written in Rust: mappings whose Lua file is the reference (see
//! [`super::claude_code_map`]), run on whatever thread calls it. They need no large stack and
//! cannot hang, so they have no thread of their own. A Lua file of the same name in the plugin
//! folder replaces one, as it would the Lua built-in.

use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use serde_json::Value as Json;

use super::contract::{Hooks, Input, PluginError, PluginMeta, RunInline, Shared, Started};
use super::loader::PluginFile;
use super::{agent_sdk_map, claude_code_map, opencode_map};

/// A mapping written in Rust: the raw event and the ingest's source, to the events it makes.
/// It may keep state between calls (a session's open parts, its tool calls), as its Lua
/// file does between calls in its state.
pub(super) trait Mapping: Send {
    fn map(&mut self, raw: &Json, source: &str) -> Result<Vec<Json>, String>;
}

/// A mapping that keeps nothing between calls.
struct Stateless(fn(&Json, &str) -> Result<Vec<Json>, String>);

impl Mapping for Stateless {
    fn map(&mut self, raw: &Json, source: &str) -> Result<Vec<Json>, String> {
        (self.0)(raw, source)
    }
}

/// One built-in written in Rust, standing in for the built-in Lua file `file`.
#[derive(Clone, Copy)]
pub(super) struct NativeBuiltin {
    pub file: &'static str,
    name: &'static str,
    sources: &'static [&'static str],
    /// Builds the mapping from the Lua file's config (`[plugins.lua.<name>]`, or null).
    new: fn(&Json) -> Box<dyn Mapping>,
}

/// Every built-in written in Rust.
pub(super) const NATIVE_BUILTINS: &[NativeBuiltin] = &[
    NativeBuiltin {
        file: "claude-code.lua",
        name: "claude-code",
        sources: &["claude-code"],
        new: |_| Box::new(Stateless(claude_code_map::map)),
    },
    NativeBuiltin {
        file: "opencode.lua",
        name: "opencode",
        sources: &["opencode"],
        new: opencode_map::new,
    },
    NativeBuiltin {
        file: "claude-agent-sdk.lua",
        name: "claude-agent-sdk",
        sources: &["claude-agent-sdk"],
        new: agent_sdk_map::new,
    },
];

impl NativeBuiltin {
    /// This built-in, configured as its Lua file would be.
    pub fn with_config(self, config: Json) -> ConfiguredBuiltin {
        ConfiguredBuiltin {
            builtin: self,
            config,
        }
    }
}

/// A built-in and the config it starts with.
pub(super) struct ConfiguredBuiltin {
    builtin: NativeBuiltin,
    config: Json,
}

impl PluginFile for ConfiguredBuiltin {
    const KIND: &'static str = "native";

    fn file(&self) -> &str {
        self.builtin.file
    }

    fn stem(&self) -> &str {
        self.builtin.name
    }

    fn origin(&self) -> String {
        "builtin".into()
    }

    fn fingerprint(&self) -> Result<u64, String> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        ("native-builtin", self.builtin.file, self.config.to_string()).hash(&mut h);
        Ok(h.finish())
    }

    fn start(self, _: Arc<Shared>) -> Result<Started, PluginError> {
        // Every call runs on the caller's thread (`anywhere`): nothing is ever queued.
        let (tx, _) = mpsc::sync_channel(1);
        let b = self.builtin;
        Ok(Started {
            meta: PluginMeta {
                name: b.name.into(),
                sources: b.sources.iter().map(|s| s.to_string()).collect(),
                priority: 100,
                hooks: Hooks::MAP,
                process_if_contains: None,
            },
            tx,
            inline: Some(Arc::new(Running {
                builtin: b,
                mapping: Mutex::new((b.new)(&self.config)),
                config: self.config,
            })),
        })
    }
}

/// A started built-in: its mapping and the state the mapping keeps.
struct Running {
    builtin: NativeBuiltin,
    config: Json,
    mapping: Mutex<Box<dyn Mapping>>,
}

impl RunInline for Running {
    fn try_run(&self, hook: Hooks, input: Input) -> Result<Result<Vec<Json>, PluginError>, Input> {
        let (Hooks::MAP, Input::Map { raw, source, .. }) = (hook, input) else {
            return Ok(Err(PluginError::Call(
                "internal: a built-in mapping was called with another hook".into(),
            )));
        };
        let mut mapping = self.mapping.lock().unwrap_or_else(|p| p.into_inner());
        // A bug in a mapping fails that one call, as a Lua error would; its state, which the
        // panic may have left half-changed, starts over.
        Ok(
            match catch_unwind(AssertUnwindSafe(|| mapping.map(&raw, &source))) {
                Ok(result) => result.map_err(PluginError::Call),
                Err(_) => {
                    *mapping = (self.builtin.new)(&self.config);
                    Err(PluginError::Call(format!(
                        "internal: the built-in {} mapping failed on this event",
                        self.builtin.name
                    )))
                }
            },
        )
    }

    fn anywhere(&self) -> bool {
        true
    }
}
