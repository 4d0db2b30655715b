//! The Lua plugin host: one sandboxed Lua 5.4 state per plugin, on a thread of its own.
//!
//! Why a thread per plugin: plugins must never run on the async workers, a plugin's state
//! (per-session buffers, join tables) must see its calls in order, and a script inside a long
//! C library call (`table.insert` into a huge table, say) cannot be interrupted by a hook.
//! With its own thread, the pipeline waits for a reply only until the call's deadline, then
//! disables the plugin and goes on without it; the stuck thread is abandoned, nothing else.
//!
//! The sandbox: only the `coroutine`, `table`, `string`, `utf8` and `math` libraries; no `io`,
//! `os`, `package`/`require` or `debug`; `load` takes text only (no bytecode); `dofile`,
//! `loadfile`, `string.dump` and `collectgarbage` are gone. Limits per call: an instruction
//! budget and a wall-clock deadline, enforced by a count hook set for every coroutine of the
//! state; once either is spent the hook raises at every later check, and `pcall`, `xpcall`,
//! `load` and `coroutine.resume`/`close` raise again instead of returning, so a script cannot
//! swallow the error and go on. A memory limit covers the whole state; the JSON read back
//! from it (emitted events, returned values) is charged to a per-call allowance (see
//! [`crate::plugins::luajson::Allowance`]). `__gc` metamethods are refused: Lua runs
//! finalizers with hooks off, so one that loops could never be stopped. `string.rep` and
//! `table.move`, whose C loops can run long without allocating, are bounded.
//! `string.find`/`match`/`gmatch`/`gsub` are replaced by [`crate::plugins::lua_patterns`],
//! whose matcher counts its steps against the call's budget (Lua's backtracks inside one C
//! call that no hook can stop).
//!
//! The parts: [`budget`] (the limits and the count hook), [`sandbox`] (what is removed and
//! wrapped), [`host_table`] (what a plugin may ask of the daemon), [`output`] (`emit` and the
//! allowance), [`state`] (building a plugin's state), [`meta`] (reading its declaration),
//! [`call`] (calling its functions); this file starts its thread and shares its state.

#[cfg(test)]
mod agent_sdk_twin;
mod budget;
mod call;
#[cfg(test)]
mod claude_code_twin;
mod error;
mod host_table;
mod meta;
#[cfg(test)]
mod opencode_twin;
#[cfg(test)]
mod opencode_twin_bounds;
mod output;
mod sandbox;
mod state;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod twin;

use std::sync::mpsc;
use std::sync::{Arc, Mutex, TryLockError};

use serde_json::Value as Json;

use super::contract::{
    CALL_QUEUE, Call, Hooks, Input, Limits, PluginError, RunInline, Shared, Started,
};
use state::Host;

/// A loaded state, shared by the plugin's thread (its queued calls, `on_event`) and the
/// callers that run a call inline while it is free: the budget bounds a call wherever it
/// runs.
struct SharedHost(Mutex<Host>);

// A call that panicked left nothing half-done that the next call relies on (each starts its
// own budget and output), so a poisoned lock is taken as it is.
impl SharedHost {
    /// Runs a call, waiting for the state (the plugin's own thread).
    fn run(&self, hook: Hooks, input: Input) -> Result<Vec<Json>, PluginError> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .run(hook, input)
    }
}

impl RunInline for SharedHost {
    fn try_run(&self, hook: Hooks, input: Input) -> Result<Result<Vec<Json>, PluginError>, Input> {
        match self.0.try_lock() {
            Ok(host) => Ok(host.run(hook, input)),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner().run(hook, input)),
            Err(TryLockError::WouldBlock) => Err(input),
        }
    }
}

/// Starts a plugin's thread, loads `source` in a fresh sandbox there and calls its `init`.
/// Returns the plugin's description, the queue of its calls and the state for inline calls,
/// or why it could not load.
pub fn spawn(
    file_name: &str,
    source: String,
    config: Json,
    limits: Limits,
    shared: Arc<Shared>,
) -> Result<Started, PluginError> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (tx, rx) = mpsc::sync_channel::<Call>(CALL_QUEUE);
    let chunk_name = format!("@{file_name}");
    let thread_name = format!("dstream-lua-{}", file_name.trim_end_matches(".lua"));
    let load_timeout = limits.call_timeout * 4;
    std::thread::Builder::new()
        .name(thread_name)
        .stack_size(super::handle::PLUGIN_STACK_BYTES)
        .spawn(move || {
            let host = match Host::load(&chunk_name, &source, &config, limits) {
                Ok(host) => host,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let meta = host.meta.clone();
            let name = meta.name.clone();
            let host = Arc::new(SharedHost(Mutex::new(host)));
            if ready_tx.send(Ok((meta, host.clone()))).is_err() {
                return;
            }
            super::contract::serve_calls(&rx, &shared, &name, |hook, input| host.run(hook, input));
        })
        .map_err(|e| PluginError::Load(format!("cannot start its thread: {e}")))?;
    match ready_rx.recv_timeout(load_timeout) {
        Ok(Ok((meta, host))) => Ok(Started {
            meta,
            tx,
            inline: Some(host),
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(PluginError::Load(format!(
            "loading did not finish within {} ms",
            load_timeout.as_millis()
        ))),
    }
}
