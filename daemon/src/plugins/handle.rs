//! One loaded plugin, as the pipeline holds it: the queue to its thread, its deadline and
//! error policy on every call, its bounded `on_event` backlog, and its status for `plugins`.
//!
//! Whatever runs the plugin (a Lua state, a library, a child process), the pipeline talks to
//! this handle only; how the handle is built and kept across reloads is the loader's job.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dstream_sdk::protocol::PluginInfo;
use serde_json::Value as Json;

use super::contract::{
    CALL_QUEUE, Call, Hooks, Input, Limits, PluginError, PluginMeta, Reply, RunInline, Shared,
};

/// `on_event` calls, and their bytes, one plugin may have queued; past either, committed events
/// skip that plugin (counted and logged) rather than delaying the pipeline's calls behind them
/// or holding memory for a slow sink.
const MAX_QUEUED_EVENTS: usize = 64;
const MAX_QUEUED_BYTES: usize = 8 << 20;
// The backlog leaves room in the call queue for the calls the pipeline waits on.
const _: () = assert!(MAX_QUEUED_EVENTS * 2 <= CALL_QUEUE);

/// The stack a thread needs to run plugin calls itself: a plugin's own thread has as much.
pub const PLUGIN_STACK_BYTES: usize = 4 << 20;

thread_local! {
    /// Whether this thread runs plugin calls itself when it can (see [`allow_inline_calls`]).
    static INLINE_CALLS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Lets this thread run a plugin's calls itself, when the plugin can and is free, rather than
/// hand them to the plugin's thread and wait. Only for a thread started with
/// [`PLUGIN_STACK_BYTES`] of stack, which only waits on its calls (the pipeline's).
pub fn allow_inline_calls() {
    INLINE_CALLS.set(true);
}

/// One loaded plugin: its description, the queue to its thread, its counters and health.
pub struct Plugin {
    pub meta: PluginMeta,
    /// `lua` or `native`.
    pub kind: &'static str,
    /// File name, e.g. `claude-code.lua`: what a folder file overrides.
    pub file: String,
    /// `builtin`, or the path it was loaded from.
    pub origin: String,
    pub(super) fingerprint: u64,
    pub(super) tx: SyncSender<Call>,
    /// Runs calls on the caller's thread when the plugin is free (Lua), else `None`.
    pub(super) inline: Option<Arc<dyn RunInline>>,
    pub(super) limits: Limits,
    pub(super) shared: Arc<Shared>,
    /// Why a newer version of this plugin's file failed to load (this one keeps running).
    pub(super) newer_failed: Mutex<Option<String>>,
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

    /// Whether any thread may run its calls (see [`super::contract`]'s `anywhere`).
    pub fn runs_anywhere(&self) -> bool {
        self.inline.as_ref().is_some_and(|i| i.anywhere())
    }

    /// Runs one hook and waits for it, at most until its deadline (plus a short grace).
    pub fn call(&self, hook: Hooks, input: Input) -> Result<Vec<Json>, Failure> {
        if let Some(reason) = self.disabled() {
            return Err(Failure {
                error: PluginError::Disabled(reason),
                disabled_now: None,
            });
        }
        let input = match &self.inline {
            Some(inline) if inline.anywhere() || INLINE_CALLS.get() => {
                let started = Instant::now();
                match inline.try_run(hook, input) {
                    Ok(result) => {
                        let micros = started.elapsed().as_micros() as u64;
                        return self.finished(Reply { result, micros });
                    }
                    Err(input) => input,
                }
            }
            _ => input,
        };
        let (reply_tx, reply_rx) = mpsc::channel();
        let sent = self.tx.send(Call {
            hook,
            input,
            reply: Some(reply_tx),
            bytes: 0,
        });
        let reply = match sent {
            Ok(()) => wait(&reply_rx, &self.limits),
            Err(_) => None,
        };
        match reply {
            Some(reply) => self.finished(reply),
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

    /// Counts a call that returned, and passes on its result.
    fn finished(&self, Reply { result, micros }: Reply) -> Result<Vec<Json>, Failure> {
        let disabled_now = self.shared.record(result.as_ref().err(), micros, false);
        result.map_err(|error| Failure {
            error,
            disabled_now,
        })
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

/// Waits for a reply until the call's deadline plus a grace period for the hand-off.
fn wait(rx: &Receiver<Reply>, limits: &Limits) -> Option<Reply> {
    rx.recv_timeout(limits.call_timeout + Duration::from_millis(200))
        .ok()
}
