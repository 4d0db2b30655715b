//! The Lua plugin host: one sandboxed Lua 5.4 state per plugin, on a thread of its own.
//!
//! Why a thread per plugin: plugins must never run on the async workers, a plugin's state
//! (per-session buffers, join tables) must see its calls in order, and a script stuck inside
//! a C function (a pathological `string.find`, say) cannot be interrupted by a hook. With its
//! own thread, the pipeline waits for a reply only until the call's deadline, then disables
//! the plugin and goes on without it; the stuck thread is abandoned, and nothing else is.
//!
//! The sandbox: only the `coroutine`, `table`, `string`, `utf8` and `math` libraries; no `io`,
//! `os`, `package`/`require` or `debug`; `load` takes text only (no bytecode); `dofile`,
//! `loadfile`, `string.dump` and `collectgarbage` are gone. Limits per call: an instruction
//! budget and a wall-clock deadline, enforced by a count hook that, once either is spent,
//! raises an error at every later check until the call returns, so a script that swallows
//! the first error with `pcall` gets it again; and a memory limit for the whole state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::time::{Duration, Instant};

use mlua::chunk::ChunkMode;
use mlua::{Function, HookTriggers, Lua, LuaOptions, LuaSerdeExt, StdLib, Table, Value, VmState};
use serde_json::Value as Json;

use super::luajson;
use super::{Call, Hooks, Limits, PluginError, PluginMeta, Reply, Shared};

/// Instructions between two checks of the budget and the deadline.
const CHECK_EVERY: u32 = 1000;
/// Events one call may emit.
pub const MAX_EMITS: usize = 256;

/// What a running call may still spend; shared with the count hook.
struct Budget {
    /// The call's deadline, in nanoseconds after `base`; 0 when no call runs.
    deadline_ns: AtomicU64,
    instructions_left: AtomicU64,
    /// Set once the call overspent: every later check fails too, until the call ends.
    spent: AtomicBool,
    base: Instant,
}

impl Budget {
    fn start(&self, limits: &Limits) {
        let deadline = self.base.elapsed() + limits.call_timeout;
        self.deadline_ns
            .store(deadline.as_nanos() as u64, Ordering::Relaxed);
        self.instructions_left
            .store(limits.instructions, Ordering::Relaxed);
        self.spent.store(false, Ordering::Relaxed);
    }

    fn end(&self) {
        self.deadline_ns.store(0, Ordering::Relaxed);
    }

    /// Called every [`CHECK_EVERY`] instructions.
    fn check(&self) -> Result<(), String> {
        let deadline = self.deadline_ns.load(Ordering::Relaxed);
        if deadline == 0 {
            return Ok(()); // loading the script: limited by the load deadline below
        }
        if self.spent.load(Ordering::Relaxed) {
            return Err("plugin call over its budget (still)".into());
        }
        let left = self.instructions_left.load(Ordering::Relaxed);
        if left < CHECK_EVERY as u64 {
            self.spent.store(true, Ordering::Relaxed);
            return Err("plugin call exceeded its instruction budget".into());
        }
        self.instructions_left
            .store(left - CHECK_EVERY as u64, Ordering::Relaxed);
        if self.base.elapsed().as_nanos() as u64 > deadline {
            self.spent.store(true, Ordering::Relaxed);
            return Err("plugin call exceeded its deadline".into());
        }
        Ok(())
    }
}

/// Starts a plugin's thread, loads `source` in a fresh sandbox there and calls its `init`.
/// Returns the plugin's description and the queue of its calls, or why it could not load.
pub fn spawn(
    file_name: &str,
    source: String,
    config: Json,
    limits: Limits,
    shared: Arc<Shared>,
) -> Result<(PluginMeta, SyncSender<Call>), PluginError> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (tx, rx) = mpsc::sync_channel::<Call>(1024);
    let chunk_name = format!("@{file_name}");
    let thread_name = format!("dstream-lua-{}", file_name.trim_end_matches(".lua"));
    let load_timeout = limits.call_timeout * 4;
    std::thread::Builder::new()
        .name(thread_name)
        .stack_size(4 << 20)
        .spawn(move || {
            let host = match Host::load(&chunk_name, &source, &config, limits) {
                Ok(host) => host,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            if ready_tx.send(Ok(host.meta.clone())).is_err() {
                return;
            }
            host.serve(rx, &shared);
        })
        .map_err(|e| PluginError::Load(format!("cannot start its thread: {e}")))?;
    match ready_rx.recv_timeout(load_timeout) {
        Ok(Ok(meta)) => Ok((meta, tx)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(PluginError::Load(format!(
            "loading did not finish within {} ms",
            load_timeout.as_millis()
        ))),
    }
}

struct Host {
    lua: Lua,
    module: Table,
    budget: Arc<Budget>,
    limits: Limits,
    meta: PluginMeta,
    /// Events `emit` collected during the current call.
    emitted: Arc<std::sync::Mutex<Vec<Json>>>,
    emit: Function,
}

impl Host {
    fn load(
        chunk_name: &str,
        source: &str,
        config: &Json,
        limits: Limits,
    ) -> Result<Host, PluginError> {
        let lua_err = |e: mlua::Error| PluginError::Load(clean_error(&e));
        let libs = StdLib::COROUTINE | StdLib::TABLE | StdLib::STRING | StdLib::UTF8 | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::default()).map_err(lua_err)?;
        lua.set_memory_limit(limits.memory_bytes).map_err(lua_err)?;
        let budget = Arc::new(Budget {
            deadline_ns: AtomicU64::new(0),
            instructions_left: AtomicU64::new(0),
            spent: AtomicBool::new(false),
            base: Instant::now(),
        });
        {
            let budget = budget.clone();
            lua.set_hook(
                HookTriggers::new().every_nth_instruction(CHECK_EVERY),
                move |_, _| match budget.check() {
                    Ok(()) => Ok(VmState::Continue),
                    Err(m) => Err(mlua::Error::runtime(m)),
                },
            )
            .map_err(lua_err)?;
        }
        sandbox(&lua).map_err(lua_err)?;
        install_host_table(&lua, chunk_name, config).map_err(lua_err)?;
        let emitted = Arc::new(std::sync::Mutex::new(Vec::new()));
        let emit = {
            let emitted = emitted.clone();
            lua.create_function(move |lua, event: Value| {
                let mut out = emitted.lock().unwrap();
                if out.len() >= MAX_EMITS {
                    return Err(mlua::Error::runtime(format!(
                        "emit called more than {MAX_EMITS} times in one call"
                    )));
                }
                if !matches!(event, Value::Table(_)) {
                    return Err(mlua::Error::runtime(format!(
                        "emit expects an event table, got a {}",
                        event.type_name()
                    )));
                }
                out.push(luajson::from_lua(lua, event)?);
                Ok(())
            })
            .map_err(lua_err)?
        };
        // Loading runs the script's top level: give it a budget too.
        budget.start(&Limits {
            call_timeout: limits.call_timeout * 2,
            ..limits
        });
        let loaded: Result<Value, _> = lua
            .load(source)
            .set_name(chunk_name)
            .set_mode(ChunkMode::Text)
            .eval();
        budget.end();
        let module = match loaded.map_err(lua_err)? {
            Value::Table(t) => t,
            other => {
                return Err(PluginError::Load(format!(
                    "the script must return a plugin table, not a {}",
                    other.type_name()
                )));
            }
        };
        let meta = read_meta(&module)?;
        let host = Host {
            lua,
            module,
            budget,
            limits,
            meta,
            emitted,
            emit,
        };
        if let Ok(Value::Function(init)) = host.module.get::<Value>("init") {
            let cfg = host
                .lua
                .globals()
                .get::<Table>("host")
                .and_then(|h| h.get::<Value>("config"));
            host.budget.start(&host.limits);
            let r = cfg.and_then(|c| init.call::<()>(c));
            host.budget.end();
            r.map_err(|e| PluginError::Load(format!("init failed: {}", clean_error(&e))))?;
        }
        let mut host = host;
        host.meta.process_if_contains = read_needles(&host.module)?;
        Ok(host)
    }

    fn serve(self, rx: Receiver<Call>, shared: &Shared) {
        let name = self.meta.name.clone();
        super::serve_calls(&rx, shared, &name, |hook, input| self.run(hook, input));
    }

    fn run(&self, hook: Hooks, input: super::Input) -> Result<Vec<Json>, PluginError> {
        self.emitted.lock().unwrap().clear();
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

    fn call(&self, hook: Hooks, f: &Function, input: super::Input) -> mlua::Result<Vec<Json>> {
        let to_lua = |v: &Json| luajson::to_lua(&self.lua, v);
        match (hook, input) {
            (
                Hooks::MAP,
                super::Input::Map {
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
            (Hooks::PROCESS, super::Input::Event(event)) => {
                f.call::<()>((to_lua(&event)?, self.emit.clone()))?;
            }
            (Hooks::DECIDE, super::Input::Event(event)) => {
                let verdict: Value = f.call(to_lua(&event)?)?;
                let verdict = match verdict {
                    Value::Nil => Json::Null,
                    Value::String(s) => Json::String(s.to_str()?.to_string()),
                    Value::Table(t) => luajson::from_lua(&self.lua, Value::Table(t))?,
                    other => {
                        return Err(mlua::Error::runtime(format!(
                            "decide must return \"allow\", \"deny\", \"ask\", a table or nil, not a {}",
                            other.type_name()
                        )));
                    }
                };
                return Ok(vec![verdict]);
            }
            (Hooks::ON_EVENT, super::Input::Event(event)) => {
                f.call::<()>(to_lua(&event)?)?;
            }
            // `relay(event)`: the event to send (changed or not), or nil to keep it local.
            (Hooks::RELAY, super::Input::Event(event)) => {
                return match f.call::<Value>(to_lua(&event)?)? {
                    Value::Nil => Ok(Vec::new()),
                    Value::Table(t) => Ok(vec![luajson::from_lua(&self.lua, Value::Table(t))?]),
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
        Ok(std::mem::take(&mut *self.emitted.lock().unwrap()))
    }
}

/// Removes what a plugin must not reach: files, processes, bytecode, the collector.
fn sandbox(lua: &Lua) -> mlua::Result<()> {
    let g = lua.globals();
    for name in ["dofile", "loadfile", "collectgarbage", "require", "module"] {
        g.set(name, Value::Nil)?;
    }
    if let Ok(string) = g.get::<Table>("string") {
        string.set("dump", Value::Nil)?;
    }
    // `load` of text only; bytecode can break the VM's invariants. The environment is passed
    // on only when given, so `load(text)` keeps the global one.
    lua.load(
        r#"local raw_load = load
        load = function(chunk, name, _mode, ...) return raw_load(chunk, name, "t", ...) end"#,
    )
    .set_name("=sandbox")
    .exec()
}

fn install_host_table(lua: &Lua, chunk_name: &str, config: &Json) -> mlua::Result<()> {
    let host = lua.create_table()?;
    let plugin = chunk_name.trim_start_matches('@').to_string();
    let log_name = plugin.clone();
    host.set(
        "log",
        lua.create_function(move |_, (a, b): (String, Option<String>)| {
            let (level, msg) = match b {
                Some(msg) => (a, msg),
                None => ("info".to_string(), a),
            };
            match level.as_str() {
                "error" => tracing::error!(plugin = %log_name, "{msg}"),
                "warn" => tracing::warn!(plugin = %log_name, "{msg}"),
                "debug" => tracing::debug!(plugin = %log_name, "{msg}"),
                _ => tracing::info!(plugin = %log_name, "{msg}"),
            }
            Ok(())
        })?,
    )?;
    host.set(
        "now_ms",
        lua.create_function(|_, ()| {
            Ok(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64))
        })?,
    )?;
    host.set(
        "ulid",
        lua.create_function(|_, ()| Ok(ulid::Ulid::new().to_string()))?,
    )?;
    host.set("config", lua.to_value(config)?)?;
    host.set("null", lua.null())?;
    // Marks a table as a JSON array, so that an empty one is stored as [] rather than {}.
    host.set(
        "array",
        lua.create_function(|lua, t: Option<Table>| {
            let t = match t {
                Some(t) => t,
                None => lua.create_table()?,
            };
            let _ = t.set_metatable(Some(lua.array_metatable()));
            Ok(t)
        })?,
    )?;
    host.set(
        "json_encode",
        lua.create_function(move |lua, v: Value| {
            let json = luajson::from_lua(lua, v)?;
            serde_json::to_string(&json).map_err(mlua::Error::external)
        })?,
    )?;
    host.set(
        "json_decode",
        lua.create_function(|lua, text: mlua::LuaString| {
            let json: Json =
                serde_json::from_slice(&text.as_bytes()).map_err(mlua::Error::external)?;
            lua.to_value(&json)
        })?,
    )?;
    lua.globals().set("host", host)?;
    // `print` goes to the daemon's log rather than its stdout.
    lua.load(r#"print = function(...) local t = table.pack(...) for i = 1, t.n do t[i] = tostring(t[i]) end host.log("info", table.concat(t, "\t", 1, t.n)) end"#)
        .set_name("=sandbox")
        .exec()?;
    let _ = plugin;
    Ok(())
}

/// The plugin table's declared name, API version, sources, priority and hooks.
fn read_meta(module: &Table) -> Result<PluginMeta, PluginError> {
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

fn read_needles(module: &Table) -> Result<Option<Vec<String>>, PluginError> {
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

/// An mlua error as one readable line: the script's message and position, without the
/// Rust-side wrapping and the traceback.
pub fn clean_error(e: &mlua::Error) -> String {
    let text = match e {
        mlua::Error::CallbackError { cause, .. } => return clean_error(cause),
        mlua::Error::MemoryError(m) => format!("out of memory: {m}"),
        other => other.to_string(),
    };
    let first = text.lines().next().unwrap_or("").trim();
    let first = first.strip_prefix("runtime error: ").unwrap_or(first);
    first.chars().take(500).collect()
}

/// Waits for a reply until the call's deadline plus a grace period for the hand-off.
pub fn wait(rx: &Receiver<Reply>, limits: &Limits) -> Option<Reply> {
    rx.recv_timeout(limits.call_timeout + Duration::from_millis(200))
        .ok()
}
