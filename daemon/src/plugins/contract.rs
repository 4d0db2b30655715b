//! The contract between the plugin set and each plugin's thread, whatever runs the plugin (a
//! Lua state, a library, a child process): which functions it has, what a call carries and
//! answers, its limits, and the counters and health both sides keep.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value as Json;

/// Which plugin functions: a small bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hooks(u8);

impl Hooks {
    pub const MAP: Hooks = Hooks(1);
    pub const PROCESS: Hooks = Hooks(2);
    pub const DECIDE: Hooks = Hooks(4);
    pub const ON_EVENT: Hooks = Hooks(8);
    /// What leaves the machine through the relay (Lua plugins).
    pub const RELAY: Hooks = Hooks(16);

    pub const fn empty() -> Hooks {
        Hooks(0)
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn contains(self, other: Hooks) -> bool {
        self.0 & other.0 == other.0
    }
    /// The Lua function name of a single hook.
    pub fn name(self) -> &'static str {
        match self {
            Hooks::MAP => "map",
            Hooks::PROCESS => "process",
            Hooks::DECIDE => "decide",
            Hooks::ON_EVENT => "on_event",
            Hooks::RELAY => "relay",
            _ => "?",
        }
    }
    /// Every single hook, in the order they run.
    pub const ALL: [Hooks; 5] = [
        Hooks::MAP,
        Hooks::PROCESS,
        Hooks::DECIDE,
        Hooks::ON_EVENT,
        Hooks::RELAY,
    ];
    /// The hook a Lua function name (or the plugin host's wire name) stands for.
    pub fn from_name(name: &str) -> Option<Hooks> {
        Hooks::ALL.into_iter().find(|h| h.name() == name)
    }
    pub fn names(self) -> Vec<String> {
        Hooks::ALL
            .into_iter()
            .filter(|h| self.contains(*h))
            .map(|h| h.name().to_string())
            .collect()
    }
}

impl std::ops::BitOr for Hooks {
    type Output = Hooks;
    fn bitor(self, rhs: Hooks) -> Hooks {
        Hooks(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for Hooks {
    fn bitor_assign(&mut self, rhs: Hooks) {
        self.0 |= rhs.0;
    }
}

/// What one call of a plugin may spend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub call_timeout: Duration,
    pub instructions: u64,
    pub memory_bytes: usize,
    /// Bytes of JSON one call may produce beyond twice its input (`daemon.max_frame_bytes`).
    pub output_bytes: usize,
}

/// How the pipeline's plugins are found and run; from `[plugins]` in the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginSettings {
    pub dir: PathBuf,
    /// File stems not to load, built-ins included.
    pub disabled: Vec<String>,
    /// `[plugins.lua.<name>]`: passed to the plugin as `host.config`.
    pub config: BTreeMap<String, Json>,
    /// `[plugins.native.<name>]`: passed to a native plugin's `init` as JSON.
    pub native_config: BTreeMap<String, Json>,
    /// Where native libraries are copied to be loaded (see [`native`]).
    pub cache_dir: PathBuf,
    pub limits: Limits,
    pub max_consecutive_errors: u32,
}

impl PluginSettings {
    /// What the plugin host needs from `[plugins]` (and the frame limit, the folders).
    pub fn from_config(config: &crate::config::Config) -> PluginSettings {
        let p = &config.plugins;
        let as_json = |t: &BTreeMap<String, toml::Value>| -> BTreeMap<String, Json> {
            t.iter()
                .map(|(k, v)| (k.clone(), serde_json::to_value(v).unwrap_or_default()))
                .collect()
        };
        PluginSettings {
            dir: config.plugin_dir(),
            disabled: p.disabled.clone(),
            config: as_json(&p.lua),
            native_config: as_json(&p.native),
            cache_dir: config.data_dir().join("plugin-cache"),
            limits: Limits {
                call_timeout: Duration::from_millis(p.call_timeout_ms),
                instructions: p.instruction_budget,
                memory_bytes: p.memory_bytes,
                output_bytes: config.daemon.max_frame_bytes,
            },
            max_consecutive_errors: p.max_consecutive_errors,
        }
    }
}

/// What a plugin declares about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginMeta {
    pub name: String,
    pub sources: Vec<String>,
    pub priority: i64,
    pub hooks: Hooks,
    /// `process_if_contains`: `process` is called only for events whose JSON text contains
    /// one of these (lowercase, matched ASCII case-insensitively); the others pass through
    /// unchanged without a call. Read after `init`, so a plugin can drop it when its
    /// configuration makes it unsound (custom patterns).
    pub process_if_contains: Option<Vec<String>>,
}

pub enum Input {
    Map {
        raw: Arc<Json>,
        source: String,
        session_id: Option<String>,
    },
    Event(Arc<Json>),
}

/// Calls a plugin's queue holds: the `on_event` backlog (bounded on its own, see `handle`) and
/// the calls whose callers wait for the reply, one per calling thread. A full queue makes a
/// caller wait. The queue's slots are allocated up front, per plugin, so it is kept small.
pub const CALL_QUEUE: usize = 128;

pub struct Call {
    pub hook: Hooks,
    pub input: Input,
    /// Where the result goes; `None` for `on_event`, which the plugin's thread records itself.
    pub reply: Option<mpsc::Sender<Reply>>,
    /// Bytes charged to the plugin's queue for an `on_event` call.
    pub bytes: usize,
}

/// A plugin whose calls its own limits bound (Lua: the budget's deadline and instruction
/// count, checked inside the call), so that a caller may run one on its own thread rather
/// than hand it to the plugin's thread and wait: two thread hand-offs fewer on every event.
pub trait RunInline: Send + Sync {
    /// Runs the call now, or gives the input back when the plugin is busy (its thread is
    /// running another call): then the caller queues it.
    fn try_run(&self, hook: Hooks, input: Input) -> Result<Result<Vec<Json>, PluginError>, Input>;

    /// Whether any thread may run its calls (it needs no large stack and cannot hang), not
    /// only those that [`super::allow_inline_calls`].
    fn anywhere(&self) -> bool {
        false
    }
}

/// A started plugin: what it declares, the queue of its calls (served by its thread), and
/// for a kind that can, a way to run calls on the caller's thread.
pub struct Started {
    pub meta: PluginMeta,
    pub tx: mpsc::SyncSender<Call>,
    pub inline: Option<Arc<dyn RunInline>>,
}

impl Started {
    /// A plugin whose calls all go through its thread.
    pub fn queued((meta, tx): (PluginMeta, mpsc::SyncSender<Call>)) -> Started {
        Started {
            meta,
            tx,
            inline: None,
        }
    }
}

pub struct Reply {
    pub result: Result<Vec<Json>, PluginError>,
    pub micros: u64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PluginError {
    #[error("cannot load: {0}")]
    Load(String),
    #[error("{0}")]
    Call(String),
    #[error("did not return within {0} ms")]
    Timeout(u128),
    #[error("disabled: {0}")]
    Disabled(String),
}

#[derive(Default)]
pub(super) struct Health {
    pub(super) consecutive_errors: u32,
    pub(super) disabled: Option<String>,
}

/// Counters and health of one plugin, shared with its thread (which records the calls that
/// nobody waits for: `on_event`).
#[derive(Default)]
pub struct Shared {
    pub(super) name: Mutex<String>,
    pub(super) max_consecutive_errors: u32,
    pub(super) calls: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) micros: AtomicU64,
    pub(super) queued_events: AtomicUsize,
    pub(super) queued_bytes: AtomicUsize,
    pub(super) skipped_events: AtomicU64,
    pub(super) health: Mutex<Health>,
}

impl Shared {
    pub fn new(max_consecutive_errors: u32) -> Arc<Shared> {
        Arc::new(Shared {
            max_consecutive_errors: max_consecutive_errors.max(1),
            ..Default::default()
        })
    }

    pub fn disabled(&self) -> Option<String> {
        self.health.lock().unwrap().disabled.clone()
    }

    /// Counts a finished call; a failure may disable the plugin (returned: the reason).
    pub fn record(&self, error: Option<&PluginError>, micros: u64, stuck: bool) -> Option<String> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.micros.fetch_add(micros, Ordering::Relaxed);
        let mut health = self.health.lock().unwrap();
        let Some(error) = error else {
            health.consecutive_errors = 0;
            return None;
        };
        self.errors.fetch_add(1, Ordering::Relaxed);
        health.consecutive_errors += 1;
        if health.disabled.is_some()
            || !(stuck || health.consecutive_errors >= self.max_consecutive_errors)
        {
            return None;
        }
        let reason = if stuck {
            format!("{error}; disabled until reloaded (its call was abandoned)")
        } else {
            format!(
                "failed {} calls in a row (last: {error}); disabled until reloaded",
                health.consecutive_errors
            )
        };
        let name = self.name.lock().unwrap().clone();
        tracing::error!(plugin = %name, %reason, "plugin disabled");
        health.disabled = Some(reason.clone());
        Some(reason)
    }

    pub fn event_done(&self, bytes: usize) {
        self.queued_events.fetch_sub(1, Ordering::AcqRel);
        self.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    pub(super) fn skipped(&self) {
        let n = self.skipped_events.fetch_add(1, Ordering::Relaxed);
        if n.is_multiple_of(1000) {
            let name = self.name.lock().unwrap().clone();
            tracing::warn!(plugin = %name, skipped = n + 1, "on_event is too far behind; committed events skipped for it");
        }
    }
}

/// A plugin thread's loop, whatever runs the plugin (Lua, a library, a child process):
/// answers each call with `run` until the queue closes. Replies go back to the waiting
/// caller; an `on_event` call (nobody waits for it) is counted and logged here.
pub(crate) fn serve_calls(
    rx: &mpsc::Receiver<Call>,
    shared: &Shared,
    name: &str,
    mut run: impl FnMut(Hooks, Input) -> Result<Vec<Json>, PluginError>,
) {
    while let Ok(call) = rx.recv() {
        let started = std::time::Instant::now();
        let result = run(call.hook, call.input);
        let micros = started.elapsed().as_micros() as u64;
        match call.reply {
            Some(reply) => {
                let _ = reply.send(Reply { result, micros });
            }
            None => {
                shared.event_done(call.bytes);
                if let Err(e) = &result {
                    tracing::warn!(plugin = %name, error = %e, "on_event failed");
                }
                shared.record(result.as_ref().err(), micros, false);
            }
        }
    }
}
