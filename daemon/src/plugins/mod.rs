//! Plugins: the set the pipeline runs, loaded from the built-in Lua files and the plugin
//! folder, with the error policy and counters every plugin shares.
//!
//! A plugin file in the folder whose name is that of a built-in (`claude-code.lua`) replaces
//! the built-in. A set is built whole, then swapped in by the pipeline: a plugin whose new
//! version fails to load keeps its last good version running, with the error shown beside it.
//! A plugin that fails `max_consecutive_errors` calls in a row, or does not return by its
//! deadline, is disabled until the next reload, and says why.

pub mod builtin;
mod contract;
pub mod isolated;
mod log_line;
pub mod lua;
mod lua_patterns;
mod luajson;
pub mod native;

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use dstream_sdk::protocol::{PluginInfo, PluginLoadError};
use serde_json::Value as Json;

pub use contract::{
    Call, Hooks, Input, Limits, PluginError, PluginMeta, PluginSettings, Reply, Shared,
};

/// Largest plugin file read.
const MAX_PLUGIN_FILE: u64 = 1 << 20;
/// `on_event` calls, and their bytes, one plugin may have queued; past either, committed events
/// skip that plugin (counted and logged) rather than delaying the pipeline's calls behind them
/// or holding memory for a slow sink.
const MAX_QUEUED_EVENTS: usize = 64;
const MAX_QUEUED_BYTES: usize = 8 << 20;

/// One loaded plugin: its description, the queue to its thread, its counters and health.
pub struct Plugin {
    pub meta: PluginMeta,
    /// `lua` or `native`.
    pub kind: &'static str,
    /// File name, e.g. `claude-code.lua`: what a folder file overrides.
    pub file: String,
    /// `builtin`, or the path it was loaded from.
    pub origin: String,
    fingerprint: u64,
    tx: SyncSender<Call>,
    limits: Limits,
    shared: Arc<Shared>,
    /// Why a newer version of this plugin's file failed to load (this one keeps running).
    newer_failed: Mutex<Option<String>>,
}

/// What a failed call did to the plugin, for the caller to record.
pub struct Failure {
    pub error: PluginError,
    /// Set when this failure disabled the plugin: the reason.
    pub disabled_now: Option<String>,
}

impl Plugin {
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    pub fn has(&self, hook: Hooks) -> bool {
        self.meta.hooks.contains(hook)
    }

    /// Whether `process` wants an event, given its JSON text in ASCII lowercase.
    pub fn wants(&self, lowercase_json: &[u8]) -> bool {
        match &self.meta.process_if_contains {
            None => true,
            Some(needles) => needles
                .iter()
                .any(|n| memchr::memmem::find(lowercase_json, n.as_bytes()).is_some()),
        }
    }

    pub fn disabled(&self) -> Option<String> {
        self.shared.disabled()
    }

    /// Runs one hook and waits for it, at most until its deadline (plus a short grace).
    pub fn call(&self, hook: Hooks, input: Input) -> Result<Vec<Json>, Failure> {
        if let Some(reason) = self.disabled() {
            return Err(Failure {
                error: PluginError::Disabled(reason),
                disabled_now: None,
            });
        }
        let (reply_tx, reply_rx) = mpsc::channel();
        let sent = self.tx.send(Call {
            hook,
            input,
            reply: Some(reply_tx),
            bytes: 0,
        });
        let reply = match sent {
            Ok(()) => lua::wait(&reply_rx, &self.limits),
            Err(_) => None,
        };
        match reply {
            Some(Reply { result, micros }) => {
                let disabled_now = self.shared.record(result.as_ref().err(), micros, false);
                result.map_err(|error| Failure {
                    error,
                    disabled_now,
                })
            }
            None => {
                let error = PluginError::Timeout(self.limits.call_timeout.as_millis());
                let micros = self.limits.call_timeout.as_micros() as u64;
                let disabled_now = self.shared.record(Some(&error), micros, true);
                Err(Failure {
                    error,
                    disabled_now,
                })
            }
        }
    }

    /// Hands a committed event to `on_event` without waiting; false when it had to skip it
    /// (the plugin is that far behind).
    /// `bytes`: the event's size, charged to the plugin's queue until it is handled.
    pub fn notify(&self, event: Arc<Json>, bytes: usize) -> bool {
        if self.disabled().is_some() {
            return true;
        }
        let shared = &self.shared;
        let count = shared.queued_events.fetch_add(1, Ordering::AcqRel);
        let held = shared.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
        // One event always fits, however large, so a big one is not skipped for its size alone.
        if count >= MAX_QUEUED_EVENTS || (count > 0 && held + bytes > MAX_QUEUED_BYTES) {
            shared.event_done(bytes);
            shared.skipped();
            return false;
        }
        let call = Call {
            hook: Hooks::ON_EVENT,
            input: Input::Event(event),
            reply: None,
            bytes,
        };
        match self.tx.try_send(call) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                shared.event_done(bytes);
                shared.skipped();
                false
            }
        }
    }

    pub fn info(&self) -> PluginInfo {
        let disabled = self.disabled();
        let newer = self.newer_failed.lock().unwrap().clone();
        PluginInfo {
            name: self.meta.name.clone(),
            kind: self.kind.into(),
            origin: self.origin.clone(),
            sources: self.meta.sources.clone(),
            hooks: self.meta.hooks.names(),
            state: if disabled.is_some() {
                "disabled".into()
            } else {
                "active".into()
            },
            error: disabled.or(newer.map(|e| format!("a newer version failed to load: {e}"))),
            calls: self.shared.calls.load(Ordering::Relaxed),
            errors: self.shared.errors.load(Ordering::Relaxed),
            micros: self.shared.micros.load(Ordering::Relaxed),
        }
    }
}

/// The plugins in force, in the order `process` runs them (priority, then name).
#[derive(Default)]
pub struct PluginSet {
    pub plugins: Vec<Arc<Plugin>>,
    pub errors: Vec<PluginLoadError>,
    pub dir: PathBuf,
}

impl PluginSet {
    /// The plugin that maps `source`: the first, in order, that claims it.
    pub fn mapper(&self, source: &str) -> Option<&Arc<Plugin>> {
        self.plugins
            .iter()
            .find(|p| p.has(Hooks::MAP) && p.meta.sources.iter().any(|s| s == source))
    }

    pub fn with(&self, hook: Hooks) -> impl Iterator<Item = &Arc<Plugin>> {
        self.plugins.iter().filter(move |p| p.has(hook))
    }

    pub fn infos(&self) -> Vec<PluginInfo> {
        self.plugins.iter().map(|p| p.info()).collect()
    }

    /// Builds the set for `settings`: the built-ins, replaced or joined by the folder's
    /// `*.lua` files. Plugins unchanged since `previous` (same text, same config, not
    /// disabled) keep running as they are, with their state; a file that fails to load keeps
    /// its previous version, if there was one.
    pub fn load(settings: &PluginSettings, previous: Option<&PluginSet>) -> PluginSet {
        let mut set = PluginSet {
            dir: settings.dir.clone(),
            ..Default::default()
        };
        let mut files: BTreeMap<String, (String, String)> = builtin::FILES
            .iter()
            .map(|(name, text)| (name.to_string(), ("builtin".to_string(), text.to_string())))
            .collect();
        match read_dir(&settings.dir) {
            Ok(found) => {
                for (name, path) in found {
                    match read_plugin_file(&path) {
                        Ok(text) => {
                            files.insert(name, (path.display().to_string(), text));
                        }
                        Err(error) => {
                            files.remove(&name);
                            set.errors.push(PluginLoadError {
                                file: path.display().to_string(),
                                error,
                            });
                        }
                    }
                }
            }
            Err(e) => set.errors.push(PluginLoadError {
                file: settings.dir.display().to_string(),
                error: e,
            }),
        }
        let prev =
            |file: &str| previous.and_then(|p| p.plugins.iter().find(|x| x.file == file).cloned());
        for (file, (origin, text)) in files {
            let stem = file.trim_end_matches(".lua").to_string();
            if settings.disabled.contains(&stem) {
                continue;
            }
            let config = settings.config.get(&stem).cloned().unwrap_or(Json::Null);
            let fingerprint = fingerprint(&text, &config, &settings.limits);
            if let Some(old) = prev(&file)
                && old.fingerprint == fingerprint
                && old.disabled().is_none()
                && old.shared.max_consecutive_errors == settings.max_consecutive_errors.max(1)
            {
                *old.newer_failed.lock().unwrap() = None;
                set.plugins.push(old);
                continue;
            }
            let lua_config = match &config {
                Json::Null => Json::Object(Default::default()),
                other => other.clone(),
            };
            let shared = Shared::new(settings.max_consecutive_errors);
            match lua::spawn(&file, text, lua_config, settings.limits, shared.clone()) {
                Ok((meta, tx)) => {
                    *shared.name.lock().unwrap() = meta.name.clone();
                    set.plugins.push(Arc::new(Plugin {
                        meta,
                        kind: "lua",
                        file,
                        origin,
                        fingerprint,
                        tx,
                        limits: settings.limits,
                        shared,
                        newer_failed: Mutex::new(None),
                    }))
                }
                Err(e) => {
                    tracing::error!(file = %origin, error = %e, "plugin failed to load");
                    set.errors.push(PluginLoadError {
                        file: origin.clone(),
                        error: e.to_string(),
                    });
                    if let Some(old) = prev(&file) {
                        *old.newer_failed.lock().unwrap() = Some(e.to_string());
                        set.plugins.push(old);
                    }
                }
            }
        }
        set.load_native(settings, previous);
        set.plugins
            .sort_by(|a, b| (a.meta.priority, &a.meta.name).cmp(&(b.meta.priority, &b.meta.name)));
        set
    }

    /// The folder's native libraries, each loaded from a fresh copy when it changed.
    fn load_native(&mut self, settings: &PluginSettings, previous: Option<&PluginSet>) {
        let Ok(found) = read_dir_matching(&settings.dir, native::is_native_file) else {
            return; // already reported with the Lua files
        };
        for (file, path) in found {
            let stem = native::stem(&file).to_string();
            if settings.disabled.contains(&stem) {
                continue;
            }
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) => {
                    self.errors.push(PluginLoadError {
                        file: path.display().to_string(),
                        error: format!("cannot read: {e}"),
                    });
                    continue;
                }
            };
            let config = settings
                .native_config
                .get(&stem)
                .cloned()
                .unwrap_or_else(|| Json::Object(Default::default()));
            let fingerprint = {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut h);
                fingerprint(&config.to_string(), &config, &settings.limits).hash(&mut h);
                h.finish()
            };
            let prev = previous.and_then(|p| p.plugins.iter().find(|x| x.file == file).cloned());
            if let Some(old) = &prev
                && old.fingerprint == fingerprint
                && old.disabled().is_none()
                && old.shared.max_consecutive_errors == settings.max_consecutive_errors.max(1)
            {
                *old.newer_failed.lock().unwrap() = None;
                self.plugins.push(old.clone());
                continue;
            }
            let shared = Shared::new(settings.max_consecutive_errors);
            // `isolation = "process"`: in a child process, where a crash costs one call.
            let spawn = if config.get("isolation").and_then(Json::as_str) == Some("process") {
                isolated::spawn
            } else {
                native::spawn
            };
            match spawn(
                &path,
                &settings.cache_dir,
                config,
                settings.limits,
                shared.clone(),
            ) {
                Ok((meta, tx)) => {
                    *shared.name.lock().unwrap() = meta.name.clone();
                    self.plugins.push(Arc::new(Plugin {
                        meta,
                        kind: "native",
                        file,
                        origin: path.display().to_string(),
                        fingerprint,
                        tx,
                        limits: settings.limits,
                        shared,
                        newer_failed: Mutex::new(None),
                    }));
                }
                Err(e) => {
                    tracing::error!(file = %path.display(), error = %e, "native plugin failed to load");
                    self.errors.push(PluginLoadError {
                        file: path.display().to_string(),
                        error: e.to_string(),
                    });
                    if let Some(old) = prev {
                        *old.newer_failed.lock().unwrap() = Some(e.to_string());
                        self.plugins.push(old);
                    }
                }
            }
        }
    }

    /// Loads one file on its own, for `plugins check`: what it declares, or why it fails.
    pub fn check(path: &Path, settings: &PluginSettings) -> Result<PluginInfo, String> {
        let name = path.file_name().map(|n| n.to_string_lossy().to_string());
        if let Some(file) = name.filter(|n| native::is_native_file(n)) {
            let config = settings
                .native_config
                .get(native::stem(&file))
                .cloned()
                .unwrap_or_else(|| Json::Object(Default::default()));
            let (meta, _tx) = native::spawn(
                path,
                &settings.cache_dir,
                config,
                settings.limits,
                Shared::new(1),
            )
            .map_err(|e| e.to_string())?;
            return Ok(PluginInfo {
                name: meta.name,
                kind: "native".into(),
                origin: path.display().to_string(),
                sources: meta.sources,
                hooks: meta.hooks.names(),
                state: "active".into(),
                ..Default::default()
            });
        }
        let text = read_plugin_file(path)?;
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| "plugin.lua".into());
        let stem = file.trim_end_matches(".lua");
        let config = settings
            .config
            .get(stem)
            .cloned()
            .unwrap_or(Json::Object(Default::default()));
        let (meta, _tx) = lua::spawn(&file, text, config, settings.limits, Shared::new(1))
            .map_err(|e| e.to_string())?;
        Ok(PluginInfo {
            name: meta.name,
            kind: "lua".into(),
            origin: path.display().to_string(),
            sources: meta.sources,
            hooks: meta.hooks.names(),
            state: "active".into(),
            ..Default::default()
        })
    }
}

fn fingerprint(text: &str, config: &Json, limits: &Limits) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    config.to_string().hash(&mut h);
    format!("{limits:?}").hash(&mut h);
    h.finish()
}

/// The `*.lua` files of the plugin folder (a missing folder has none), by file name.
fn read_dir(dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    read_dir_matching(dir, |name| name.ends_with(".lua"))
}

/// The plugin folder's files whose names `wanted` accepts (a missing folder has none).
fn read_dir_matching(
    dir: &Path,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<(String, PathBuf)>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read the plugin folder: {e}")),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        // Editors' temporary and backup files are not plugins.
        if !wanted(&name) || name.starts_with('.') || name.starts_with('#') {
            continue;
        }
        found.push((name, entry.path()));
    }
    found.sort();
    Ok(found)
}

fn read_plugin_file(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if meta.len() > MAX_PLUGIN_FILE {
        return Err(format!(
            "{} bytes; a plugin file may have at most {MAX_PLUGIN_FILE}",
            meta.len()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
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

    /// `cargo test --release -p dstream-daemon -- --ignored --nocapture plugin_cost`
    #[test]
    #[ignore]
    fn plugin_cost() {
        let set = PluginSet::load(&settings(), None);
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/claude-code");
        let mut raws = Vec::new();
        for f in std::fs::read_dir(fixtures).unwrap() {
            for l in std::fs::read_to_string(f.unwrap().path()).unwrap().lines() {
                raws.push(Arc::new(serde_json::from_str::<Json>(l).unwrap()));
            }
        }
        let mapper = set.mapper("claude-code").unwrap();
        let t = std::time::Instant::now();
        let mut events = Vec::new();
        for _ in 0..20 {
            for raw in &raws {
                let input = Input::Map {
                    raw: raw.clone(),
                    source: "claude-code".into(),
                    session_id: None,
                };
                events.extend(mapper.call(Hooks::MAP, input).ok().unwrap());
            }
        }
        let n = 20 * raws.len();
        let info = mapper.info();
        println!(
            "map: {n} calls, wall {:.1} µs/call, in plugin {:.1} µs/call",
            t.elapsed().as_micros() as f64 / n as f64,
            info.micros as f64 / info.calls as f64
        );
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
}
