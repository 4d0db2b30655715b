//! Plugins: the set the pipeline runs, loaded from the built-in Lua files and the plugin
//! folder, with the error policy and counters every plugin shares.
//!
//! A plugin file in the folder whose name is that of a built-in (`claude-code.lua`) replaces
//! the built-in. A set is built whole, then swapped in by the pipeline: a plugin whose new
//! version fails to load keeps its last good version running, with the error shown beside it.
//! A plugin that fails `max_consecutive_errors` calls in a row, or does not return by its
//! deadline, is disabled until the next reload, and says why.

mod agent_sdk_map;
pub mod builtin;
mod claude_code_map;
mod contract;
mod handle;
pub mod isolated;
mod kinds;
mod loader;
mod log_line;
pub mod lua;
mod lua_patterns;
mod luajson;
pub mod native;
mod native_builtin;
mod opencode_map;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dstream_sdk::protocol::{PluginInfo, PluginLoadError};

pub use contract::{Hooks, Input, PluginSettings, Shared};
pub use handle::{Failure, PLUGIN_STACK_BYTES, Plugin, allow_inline_calls};
use kinds::LuaFile;
use loader::{Loading, PluginFile};

/// The plugins in force, in the order `process` runs them (priority, then name).
#[derive(Default)]
pub struct PluginSet {
    pub plugins: Vec<Arc<Plugin>>,
    pub errors: Vec<PluginLoadError>,
    pub dir: PathBuf,
    /// Every `process` and `decide` plugin runs on any thread (see [`PluginSet::runs_anywhere`]):
    /// found once at load, not at every ingest.
    filters_anywhere: bool,
}

impl PluginSet {
    /// The plugin that maps `source`: the first, in order, that claims it.
    pub fn mapper(&self, source: &str) -> Option<&Arc<Plugin>> {
        self.plugins
            .iter()
            .find(|p| p.has(Hooks::MAP) && p.meta.sources.iter().any(|s| s == source))
    }

    /// Whether every plugin an ingest from `source` can meet (its mapping, every `process`
    /// and `decide`) runs on any thread: the built-in Rust ones. Then the ingest may be
    /// handled on an async worker, which a Lua state or a native call could hold up.
    pub fn runs_anywhere(&self, source: &str) -> bool {
        self.filters_anywhere && self.mapper(source).is_none_or(|m| m.runs_anywhere())
    }

    pub fn with(&self, hook: Hooks) -> impl Iterator<Item = &Arc<Plugin>> {
        self.plugins.iter().filter(move |p| p.has(hook))
    }

    pub fn infos(&self) -> Vec<PluginInfo> {
        self.plugins.iter().map(|p| p.info()).collect()
    }

    /// Builds the set for `settings`: the built-ins, replaced or joined by the folder's
    /// `*.lua` files, then the folder's native libraries. Plugins unchanged since `previous`
    /// (same text, same config, not disabled) keep running as they are, with their state; a
    /// file that fails to load keeps its previous version, if there was one.
    pub fn load(settings: &PluginSettings, previous: Option<&PluginSet>) -> PluginSet {
        let previous = previous.map_or(&[][..], |p| &p.plugins[..]);
        let mut loading = Loading::new(
            previous,
            &settings.disabled,
            settings.limits,
            settings.max_consecutive_errors,
        );
        for file in kinds::lua_files(settings, &mut loading.errors) {
            // A built-in Lua file the folder does not replace gives way to its Rust twin.
            match native_builtin::NATIVE_BUILTINS
                .iter()
                .find(|n| file.origin == "builtin" && n.file == file.file)
            {
                Some(native) => loading.add(native.with_config(file.config)),
                None => loading.add(file),
            }
        }
        for file in kinds::native_files(settings) {
            loading.add(file);
        }
        let mut plugins = loading.plugins;
        plugins
            .sort_by(|a, b| (a.meta.priority, &a.meta.name).cmp(&(b.meta.priority, &b.meta.name)));
        let filters_anywhere = plugins
            .iter()
            .filter(|p| p.has(Hooks::PROCESS) || p.has(Hooks::DECIDE))
            .all(|p| p.runs_anywhere());
        PluginSet {
            plugins,
            errors: loading.errors,
            dir: settings.dir.clone(),
            filters_anywhere,
        }
    }

    /// Loads one file on its own, for `plugins check`: what it declares, or why it fails.
    pub fn check(path: &Path, settings: &PluginSettings) -> Result<PluginInfo, String> {
        let name = path.file_name().map(|n| n.to_string_lossy().to_string());
        let origin = path.display().to_string();
        let (kind, meta) = if let Some(file) = name.filter(|n| native::is_native_file(n)) {
            let config = kinds::native_config(settings, native::stem(&file));
            let started = native::spawn(
                path,
                &settings.cache_dir,
                config,
                settings.limits,
                Shared::new(1),
            );
            ("native", started.map_err(|e| e.to_string())?.0)
        } else {
            let text = kinds::read_plugin_file(path)?;
            let file = path
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_else(|| "plugin.lua".into());
            let started = LuaFile::new(file, origin.clone(), text, settings).start(Shared::new(1));
            ("lua", started.map_err(|e| e.to_string())?.meta)
        };
        Ok(PluginInfo {
            name: meta.name,
            kind: kind.into(),
            origin,
            sources: meta.sources,
            hooks: meta.hooks.names(),
            state: "active".into(),
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use contract::Limits;
    use serde_json::Value as Json;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn settings() -> PluginSettings {
        PluginSettings {
            dir: PathBuf::from("/nonexistent"),
            disabled: vec![],
            config: BTreeMap::new(),
            native_config: BTreeMap::new(),
            cache_dir: std::env::temp_dir(),
            limits: Limits {
                call_timeout: Duration::from_millis(500),
                instructions: 10_000_000,
                memory_bytes: 64 << 20,
                output_bytes: 16 << 20,
            },
            max_consecutive_errors: 5,
        }
    }

    #[test]
    fn only_ingests_that_meet_no_lua_or_native_plugin_may_be_handled_anywhere() {
        let set = PluginSet::load(&settings(), None);
        // The built-in Rust mappings, no filter: anywhere.
        for source in [
            "claude-code",
            "opencode",
            "claude-agent-sdk",
            "unknown-source",
        ] {
            assert!(set.runs_anywhere(source), "{source}");
        }
        // A built-in Lua mapping: on the pipeline's thread.
        assert!(!set.runs_anywhere("claude-code-transcript"));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("keep.lua"),
            "local M = { name = \"keep\", api = 1 }\n\
             function M.process(event, emit) emit(event) end\n\
             return M\n",
        )
        .unwrap();
        let with_filter = PluginSet::load(
            &PluginSettings {
                dir: dir.path().to_path_buf(),
                ..settings()
            },
            None,
        );
        assert!(with_filter.errors.is_empty(), "{:?}", with_filter.errors);
        // A Lua filter every event passes through: none is handled anywhere.
        assert!(!with_filter.runs_anywhere("claude-code"));
    }

    /// What each mapping costs back to back (warm caches; the bench measures them one ingest
    /// at a time through a daemon, cold): every captured payload of each source, 20 times.
    /// `cargo test --release -p dstream-daemon -- --ignored --nocapture plugin_cost`
    #[test]
    #[ignore]
    fn plugin_cost() {
        let set = PluginSet::load(&settings(), None);
        let mut events = Vec::new();
        let mut raws = Vec::new();
        for source in ["claude-code", "opencode", "claude-agent-sdk"] {
            let dir = format!("{}/../tests/fixtures/{source}", env!("CARGO_MANIFEST_DIR"));
            let mut these = Vec::new();
            for f in std::fs::read_dir(dir).unwrap() {
                for l in std::fs::read_to_string(f.unwrap().path()).unwrap().lines() {
                    these.push(Arc::new(serde_json::from_str::<Json>(l).unwrap()));
                }
            }
            let mapper = set.mapper(source).unwrap();
            let (calls, micros) = (mapper.info().calls, mapper.info().micros);
            let t = std::time::Instant::now();
            for _ in 0..20 {
                for raw in &these {
                    let input = Input::Map {
                        raw: raw.clone(),
                        source: source.into(),
                        session_id: None,
                    };
                    events.extend(mapper.call(Hooks::MAP, input).ok().unwrap_or_default());
                }
            }
            let n = 20 * these.len();
            let info = mapper.info();
            println!(
                "map {source} ({}): {n} calls, wall {:.1} µs/call, in plugin {:.1} µs/call",
                info.kind,
                t.elapsed().as_micros() as f64 / n as f64,
                (info.micros - micros) as f64 / (info.calls - calls) as f64
            );
            raws.extend(these);
        }
        // The native redactor, as the store runs it on every event.
        let redactor = crate::redact::Redactor::new(&Default::default()).unwrap();
        let stored: Vec<crate::store::NewEventRaw> = events
            .iter()
            .map(|e| {
                let mut e = e.clone();
                e["raw"] = (*raws[0]).clone();
                serde_json::from_value(e).unwrap()
            })
            .collect();
        let t = std::time::Instant::now();
        for e in &stored {
            std::hint::black_box(redactor.guard(e.clone()));
        }
        println!(
            "redact (native): {} events, {:.1} µs/event",
            stored.len(),
            t.elapsed().as_micros() as f64 / stored.len() as f64
        );
        // The worst case the Lua filter could not meet: 2 MB of tool output with secrets.
        let mut big = String::new();
        while big.len() < 2 << 20 {
            big.push_str("ordinary output line, status ok, x=1 DB_PASSWORD=FAKEpw\n");
        }
        let event: crate::store::NewEventRaw =
            serde_json::from_value(serde_json::json!({"type": "x", "payload": {"out": big}}))
                .unwrap();
        let t = std::time::Instant::now();
        let g = redactor.guard(event);
        println!(
            "redact (native): 2 MB output, {} secrets, {:.1} ms",
            g.redactions,
            t.elapsed().as_secs_f64() * 1000.0
        );
    }

    /// A plugin folder holding `t.lua`, whose `map` emits one event per call (or loops when
    /// the raw event says so) and whose `on_event` keeps its thread busy until its budget ends.
    fn busy_plugin() -> (tempfile::TempDir, PluginSet) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("t.lua"),
            "local M = { name = 't', api = 1, sources = { 't' } }\n\
             function M.map(raw, emit, ctx)\n\
               if raw.loop then while true do end end\n\
               emit({ type = 'test.mapped', session_id = 's', payload = { n = raw.n } })\n\
             end\n\
             function M.on_event(e) while true do end end\n\
             return M\n",
        )
        .unwrap();
        let settings = PluginSettings {
            dir: dir.path().to_path_buf(),
            ..settings()
        };
        let set = PluginSet::load(&settings, None);
        assert!(set.errors.is_empty(), "{:?}", set.errors);
        (dir, set)
    }

    fn map_n(plugin: &Plugin, raw: Json) -> Result<Vec<Json>, String> {
        let input = Input::Map {
            raw: Arc::new(raw),
            source: "t".into(),
            session_id: None,
        };
        plugin
            .call(Hooks::MAP, input)
            .map_err(|f| f.error.to_string())
    }

    #[test]
    fn calls_run_inline_are_bounded_and_fall_back_to_the_queue_when_the_plugin_is_busy() {
        let (_dir, set) = busy_plugin();
        let plugin = set.mapper("t").unwrap().clone();
        std::thread::Builder::new()
            .stack_size(PLUGIN_STACK_BYTES)
            .spawn(move || {
                allow_inline_calls();
                // Run here: the same events as through the plugin's thread.
                let out = map_n(&plugin, serde_json::json!({"n": 1})).unwrap();
                assert_eq!(out[0]["payload"]["n"], 1, "{out:?}");
                // A runaway call on this thread is still stopped by the budget's deadline.
                let started = std::time::Instant::now();
                let e = map_n(&plugin, serde_json::json!({"loop": true})).unwrap_err();
                assert!(e.contains("time") || e.contains("budget"), "{e}");
                assert!(started.elapsed() < Duration::from_secs(5));
                // While the plugin's thread runs `on_event` (until its deadline), a call
                // cannot take the state: it waits in the queue and is answered after.
                let event = Arc::new(serde_json::json!({"type": "x"}));
                assert!(plugin.notify(event, 16));
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                assert!(plugin.inline.is_some());
                while plugin
                    .shared
                    .queued_events
                    .load(std::sync::atomic::Ordering::Acquire)
                    > 0
                    && std::time::Instant::now() < deadline
                {
                    let out = map_n(&plugin, serde_json::json!({"n": 2})).unwrap();
                    assert_eq!(out[0]["payload"]["n"], 2, "{out:?}");
                }
                let info = plugin.info();
                assert!(info.errors >= 1, "the runaway call: {info:?}");
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
