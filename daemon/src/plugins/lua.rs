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
//! [`luajson::Allowance`]). `__gc` metamethods are refused: Lua runs finalizers with hooks
//! off, so one that loops could never be stopped. `string.rep` and `table.move`, whose C loops
//! can run long without allocating, are bounded. `string.find`/`match`/`gmatch`/`gsub` are
//! replaced by [`lua_patterns`], whose matcher counts its steps against the call's budget
//! (Lua's backtracks inside one C call that no hook can stop).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::time::Instant;

use mlua::chunk::ChunkMode;
use mlua::{Function, HookTriggers, Lua, LuaOptions, LuaSerdeExt, StdLib, Table, Value, VmState};
use serde_json::Value as Json;

use super::contract::{Call, Hooks, Limits, PluginError, PluginMeta, Shared};
use super::lua_patterns;
use super::luajson;

/// Instructions between two checks of the budget and the deadline.
const CHECK_EVERY: u32 = 1000;
/// Events one call may emit.
pub const MAX_EMITS: usize = 256;
/// Most elements one `table.move` may copy: its C loop allocates nothing for absent elements,
/// so the memory limit would not stop `table.move(t, 1, 1e15, 2)`.
const MAX_MOVE: i64 = 1 << 22;
const INSTRUCTIONS: u8 = 1;
const DEADLINE: u8 = 2;

/// What a running call may still spend; shared with the count hook.
struct Budget {
    /// The call's deadline, in nanoseconds after `base`; 0 when no call runs.
    deadline_ns: AtomicU64,
    instructions_left: AtomicU64,
    /// Set once the call overspent: every later check fails too, until the call ends.
    spent: AtomicBool,
    /// Which limit it overspent: [`INSTRUCTIONS`] or [`DEADLINE`].
    overspent: AtomicU8,
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

    /// Spent for good: nothing runs in the state any more (it is being closed).
    fn close(&self) {
        self.deadline_ns.store(1, Ordering::Relaxed);
        self.spent.store(true, Ordering::Relaxed);
    }

    /// Why the running call may not go on, once it overspent.
    fn spent(&self) -> Option<&'static str> {
        let running = self.deadline_ns.load(Ordering::Relaxed) != 0;
        (running && self.spent.load(Ordering::Relaxed))
            .then(|| Self::reason(self.overspent.load(Ordering::Relaxed)))
    }

    /// Called every [`CHECK_EVERY`] instructions.
    fn check(&self) -> Result<(), String> {
        let deadline = self.deadline_ns.load(Ordering::Relaxed);
        if deadline == 0 {
            return Ok(()); // loading the script: limited by the load deadline below
        }
        if let Some(why) = self.spent() {
            return Err(why.into());
        }
        let left = self.instructions_left.load(Ordering::Relaxed);
        if left < CHECK_EVERY as u64 {
            return Err(self.overspend(INSTRUCTIONS).into());
        }
        self.instructions_left
            .store(left - CHECK_EVERY as u64, Ordering::Relaxed);
        if self.base.elapsed().as_nanos() as u64 > deadline {
            return Err(self.overspend(DEADLINE).into());
        }
        Ok(())
    }

    fn overspend(&self, which: u8) -> &'static str {
        self.overspent.store(which, Ordering::Relaxed);
        self.spent.store(true, Ordering::Relaxed);
        Self::reason(which)
    }

    fn reason(which: u8) -> &'static str {
        if which == INSTRUCTIONS {
            "plugin call exceeded its instruction budget"
        } else {
            "plugin call exceeded its deadline"
        }
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
    /// What `emit` collected during the current call, and what it may still add.
    output: Arc<std::sync::Mutex<Output>>,
    emit: Function,
}

/// One call's output so far.
struct Output {
    events: Vec<Json>,
    allowance: luajson::Allowance,
}

impl Drop for Host {
    fn drop(&mut self) {
        // Closing the state runs no script code (no finalizers), but should anything run, it
        // meets a spent budget.
        self.budget.close();
    }
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
            overspent: AtomicU8::new(DEADLINE),
            base: Instant::now(),
        });
        {
            // Global, not per thread: a coroutine the script creates inherits the C hook, and
            // mlua's per-thread hook removes itself from threads it was not set for.
            let budget = budget.clone();
            lua.set_global_hook(
                HookTriggers::new().every_nth_instruction(CHECK_EVERY),
                move |_, _| match budget.check() {
                    Ok(()) => Ok(VmState::Continue),
                    Err(m) => Err(mlua::Error::runtime(m)),
                },
            )
            .map_err(lua_err)?;
        }
        sandbox(&lua, &budget, limits.memory_bytes).map_err(lua_err)?;
        let output = Arc::new(std::sync::Mutex::new(Output {
            events: Vec::new(),
            allowance: luajson::Allowance::new(limits.output_bytes),
        }));
        install_host_table(&lua, chunk_name, config, &output).map_err(lua_err)?;
        let emit = {
            let output = output.clone();
            lua.create_function(move |lua, event: Value| {
                let mut guard = output.lock().unwrap();
                let out = &mut *guard;
                if out.events.len() >= MAX_EMITS {
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
                let event = luajson::from_lua(lua, event, &mut out.allowance)?;
                out.events.push(event);
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
            output,
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
        super::contract::serve_calls(&rx, shared, &name, |hook, input| self.run(hook, input));
    }

    fn run(&self, hook: Hooks, input: super::contract::Input) -> Result<Vec<Json>, PluginError> {
        let given = match &input {
            super::contract::Input::Map { raw, .. } => luajson::cost(raw),
            super::contract::Input::Event(event) => luajson::cost(event),
        };
        // One frame's worth, plus room for a filter that returns what it was given, grown.
        *self.output.lock().unwrap() = Output {
            events: Vec::new(),
            allowance: luajson::Allowance::new(
                self.limits
                    .output_bytes
                    .saturating_add(given.saturating_mul(2)),
            ),
        };
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

    fn call(
        &self,
        hook: Hooks,
        f: &Function,
        input: super::contract::Input,
    ) -> mlua::Result<Vec<Json>> {
        let to_lua = |v: &Json| luajson::to_lua(&self.lua, v);
        match (hook, input) {
            (
                Hooks::MAP,
                super::contract::Input::Map {
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
            (Hooks::PROCESS, super::contract::Input::Event(event)) => {
                f.call::<()>((to_lua(&event)?, self.emit.clone()))?;
            }
            (Hooks::DECIDE, super::contract::Input::Event(event)) => {
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
            (Hooks::ON_EVENT, super::contract::Input::Event(event)) => {
                f.call::<()>(to_lua(&event)?)?;
            }
            // `relay(event)`: the event to send (changed or not), or nil to keep it local.
            (Hooks::RELAY, super::contract::Input::Event(event)) => {
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

/// Removes what a plugin must not reach: files, processes, bytecode, the collector; and wraps
/// what could otherwise outlast the call's budget (see the module comment).
fn sandbox(lua: &Lua, budget: &Arc<Budget>, memory_bytes: usize) -> mlua::Result<()> {
    let g = lua.globals();
    for name in ["dofile", "loadfile", "collectgarbage", "require", "module"] {
        g.set(name, Value::Nil)?;
    }
    let string: Table = g.get("string")?;
    let raw_find: Function = string.get("find")?;
    {
        string.set("dump", Value::Nil)?;
        // Lua's own matcher backtracks inside one C call no hook can stop; ours counts its
        // steps against the same budget as the instruction hook.
        let budget = budget.clone();
        let tick: lua_patterns::Tick = Arc::new(move || budget.check());
        lua_patterns::install(lua, &string, tick, memory_bytes)?;
    }
    // Scripts reach the array metatable through getmetatable(host.array()); a `__gc` put there
    // would mark every array built later for finalization.
    lua.array_metatable().raw_set("__metatable", "array")?;
    let spent = {
        let budget = budget.clone();
        lua.create_function(move |_, ()| Ok(budget.spent()))?
    };
    // `load` of text only; bytecode can break the VM's invariants. The environment is passed
    // on only when given, so `load(text)` keeps the global one.
    lua.load(
        r#"local spent, max_bytes, max_move, raw_find = ...
        local error, type, tonumber, tostring, rawget = error, type, tonumber, tostring, rawget
        local raw_pcall, raw_xpcall, raw_load = pcall, xpcall, load
        local raw_resume, raw_close = coroutine.resume, coroutine.close
        local raw_setmetatable, raw_rep, raw_move = setmetatable, string.rep, table.move
        -- Past the budget, catching an error must not let the script go on.
        local function after(...)
          local why = spent()
          if why then error(why, 0) end
          return ...
        end
        pcall = function(...) return after(raw_pcall(...)) end
        xpcall = function(...) return after(raw_xpcall(...)) end
        coroutine.resume = function(...) return after(raw_resume(...)) end
        coroutine.close = function(...) return after(raw_close(...)) end
        load = function(chunk, name, _mode, ...) return after(raw_load(chunk, name, "t", ...)) end
        setmetatable = function(t, mt)
          if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
            error("__gc metamethods are not allowed in plugins", 2)
          end
          return raw_setmetatable(t, mt)
        end
        string.rep = function(s, n, sep)
          local count = tonumber(n)
          if type(s) == "string" and count and count > 1 then
            local unit = #s + (sep == nil and 0 or #tostring(sep))
            if unit == 0 then
              return "" -- the C loop would spin n times to build it
            elseif unit * count > max_bytes then
              error("string.rep: the result would exceed the plugin's memory limit", 2)
            end
          end
          return raw_rep(s, n, sep)
        end
        -- A plain search for a short needle is linear in Lua's C code too (memchr, then a
        -- compare of at most 16 bytes), and calls into Rust cost more than such a search.
        local find = string.find
        string.find = function(s, p, init, plain)
          if type(s) == "string" and type(p) == "string" and #p <= 16
            and (plain or not raw_find(p, "[%^%$%*%+%?%.%(%[%%%-]")) then
            return raw_find(s, p, init, true)
          end
          return find(s, p, init, plain)
        end
        table.move = function(a1, f, e, t, a2)
          local first, last = tonumber(f), tonumber(e)
          if first and last and last - first >= max_move then
            error("table.move: more than " .. max_move .. " elements", 2)
          end
          return raw_move(a1, f, e, t, a2)
        end"#,
    )
    .set_name("=sandbox")
    .call::<()>((spent, memory_bytes, MAX_MOVE, raw_find))
}

fn install_host_table(
    lua: &Lua,
    chunk_name: &str,
    config: &Json,
    output: &Arc<std::sync::Mutex<Output>>,
) -> mlua::Result<()> {
    let host = lua.create_table()?;
    let plugin = chunk_name.trim_start_matches('@').to_string();
    let log_name = plugin.clone();
    let throttle = super::log_line::Throttle::default();
    host.set(
        "log",
        lua.create_function(move |_, (a, b): (String, Option<String>)| {
            let (level, msg) = match b {
                Some(msg) => (a, msg),
                None => ("info".to_string(), a),
            };
            match throttle.check() {
                super::log_line::Verdict::Drop => return Ok(()),
                super::log_line::Verdict::Log { dropped_before } if dropped_before > 0 => {
                    tracing::warn!(plugin = %log_name, dropped = dropped_before, "plugin log lines dropped (more than 20 a second)");
                }
                super::log_line::Verdict::Log { .. } => {}
            }
            let msg = super::log_line::clean(&msg);
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
    // The JSON of both is built on the Rust side, outside the state's memory limit, and freed
    // when they return: each may build as much as the call's whole allowance, without
    // spending it (a filter that encodes a field, edits and decodes it, as redact.lua does,
    // must still be able to emit the result).
    let encode_output = output.clone();
    host.set(
        "json_encode",
        lua.create_function(move |lua, v: Value| {
            let limit = encode_output.lock().unwrap().allowance.limit();
            let json = luajson::from_lua(lua, v, &mut luajson::Allowance::new(limit))?;
            serde_json::to_string(&json).map_err(mlua::Error::external)
        })?,
    )?;
    let decode_output = output.clone();
    host.set(
        "json_decode",
        lua.create_function(move |lua, text: mlua::LuaString| {
            let text = text.as_bytes();
            let limit = decode_output.lock().unwrap().allowance.limit();
            if text.len() > limit {
                return Err(mlua::Error::runtime(format!(
                    "json_decode: {} bytes of text; at most {limit} in one call",
                    text.len()
                )));
            }
            let json: Json = serde_json::from_slice(&text).map_err(mlua::Error::external)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::contract::Input;
    use std::time::Duration;

    fn limits() -> Limits {
        Limits {
            call_timeout: Duration::from_millis(200),
            instructions: 50_000_000,
            memory_bytes: 32 << 20,
            output_bytes: 1 << 20,
        }
    }

    /// A plugin whose `map` runs `body` (with `raw`, `emit` in scope).
    fn host(body: &str) -> Host {
        let source = format!(
            "local M = {{ name = 't', api = 1, sources = {{ 't' }} }}\n\
             function M.map(raw, emit, ctx)\n{body}\nend\nreturn M\n"
        );
        Host::load("@t.lua", &source, &Json::Null, limits()).unwrap()
    }

    fn map(host: &Host, raw: Json) -> Result<Vec<Json>, PluginError> {
        let input = Input::Map {
            raw: Arc::new(raw),
            source: "t".into(),
            session_id: None,
        };
        host.run(Hooks::MAP, input)
    }

    /// Runs a call that must fail; returns the error, and checks it ended soon after its
    /// deadline (the script could not keep the thread).
    fn fails(host: &Host, raw: Json) -> String {
        let started = Instant::now();
        let e = map(host, raw).unwrap_err().to_string();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "took {took:?}: {e}");
        e
    }

    #[test]
    fn a_loop_that_catches_the_budget_error_cannot_go_on() {
        for body in [
            // the loop's own instructions are few: the count check mostly fires inside pcall
            "while true do pcall(function() for i = 1, 300 do end end) end",
            "while true do pcall(pcall, function() while true do end end) end",
            "while true do xpcall(function() while true do end end, function(m) return m end) end",
            "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
            "coroutine.wrap(function() while true do end end)()",
            "local co = coroutine.wrap(function() while true do pcall(function() while true do end end) end end) co()",
            "while true do load(function() while true do end end) end",
        ] {
            let h = host(&format!(
                "if raw.ok then emit({{type='ok'}}) return end\n{body}"
            ));
            let e = fails(&h, serde_json::json!({}));
            assert!(e.contains("exceeded its deadline"), "{body}: {e}");
            // The state is usable again for the next call.
            let ok = map(&h, serde_json::json!({"ok": true})).unwrap();
            assert_eq!(ok.len(), 1, "{body}");
        }
    }

    #[test]
    fn finalizers_are_refused_and_the_array_metatable_is_out_of_reach() {
        let h = host("setmetatable({}, { __gc = function() while true do end end })");
        assert!(fails(&h, Json::Null).contains("__gc"));
        let h = host(
            "local mt = getmetatable(host.array({})) emit({ type = 'x', payload = { mt = mt } })",
        );
        let out = map(&h, Json::Null).unwrap();
        assert_eq!(out[0]["payload"]["mt"], "array");
        // Metatables without `__gc` still work.
        let h = host(
            "local t = setmetatable({}, { __index = function() return 7 end }) emit({ type = 'x', n = t.y })",
        );
        assert_eq!(map(&h, Json::Null).unwrap()[0]["n"], 7);
    }

    #[test]
    fn c_loops_that_allocate_nothing_are_bounded() {
        let h = host(
            "local s = string.rep('', 1e18) local t = ('x'):rep(3, ',') emit({ type = t .. #s .. string.rep('', 3, 1) })",
        );
        let started = Instant::now();
        assert_eq!(map(&h, Json::Null).unwrap()[0]["type"], "x,x,x011");
        assert!(started.elapsed() < Duration::from_secs(1));
        let h = host("string.rep('ab', 1e12)");
        assert!(fails(&h, Json::Null).contains("memory limit"));
        // Backtracking patterns are counted against the budget, not run to the end.
        let h = host("string.find(string.rep('a', 100000), '.-.-.-.-b')");
        assert!(fails(&h, Json::Null).contains("exceeded its deadline"));
        let h = host("for w in string.rep('a', 50000):gmatch('a*a*a*b') do end");
        assert!(fails(&h, Json::Null).contains("exceeded its deadline"));
        let h = host("string.gsub(string.rep('a', 50000), '.-.-b', 'x')");
        assert!(fails(&h, Json::Null).contains("exceeded its deadline"));
        let h = host(
            "local i = string.find(string.rep('a', 1e6), string.rep('a', 1e4) .. 'b', 1, true) emit({ type = tostring(i) })",
        );
        assert_eq!(map(&h, Json::Null).unwrap()[0]["type"], "nil");
        let h = host("table.move({}, 1, 1e15, 2)");
        assert!(fails(&h, Json::Null).contains("table.move"));
        let h = host("local t = table.move({1, 2, 3}, 1, 3, 2) emit({ type = 'x', t = t })");
        assert_eq!(
            map(&h, Json::Null).unwrap()[0]["t"],
            serde_json::json!([1, 1, 2, 3])
        );
    }

    #[test]
    fn what_one_call_emits_is_bounded_in_bytes_and_count() {
        let h = host(
            r#"local t = {"x"} for i = 1, 30 do t = {t, t} end emit({type = "x", payload = t})"#,
        );
        assert!(fails(&h, Json::Null).contains("bytes of JSON"));
        // 8 × 256 KB fits the 1 MB (plus twice the input) allowance no more than 4 times.
        let h = host(
            r#"local s = string.rep("y", 256 * 1024) for i = 1, 8 do emit({type = "x", payload = {s = s}}) end"#,
        );
        assert!(fails(&h, Json::Null).contains("bytes of JSON"));
        let h = host(r#"for i = 1, 300 do emit({type = "x"}) end"#);
        assert!(fails(&h, Json::Null).contains("more than 256 times"));
        // A filter may return what it was given, grown: the allowance scales with the input.
        let big = "z".repeat(2 << 20);
        let h = host(r#"emit({type = "x", payload = raw, copy = raw})"#);
        let out = map(&h, serde_json::json!({ "s": big })).unwrap();
        assert_eq!(out[0]["copy"]["s"].as_str().unwrap().len(), 2 << 20);
        // json_encode and json_decode may each build as much as the call's allowance.
        let h = host(r#"local t = {"x"} for i = 1, 30 do t = {t, t} end host.json_encode(t)"#);
        assert!(fails(&h, Json::Null).contains("bytes of JSON"));
        let h = host(r#"host.json_decode(string.rep(" ", 1200 * 1024) .. "0")"#);
        assert!(fails(&h, Json::Null).contains("json_decode"));
        // Encoding a field and decoding it back, twice the input, fits.
        let h = host(
            r#"local t = host.json_decode(host.json_encode(raw)) emit({ type = "x", payload = t })"#,
        );
        let out = map(&h, serde_json::json!({ "s": "w".repeat(3 << 20) })).unwrap();
        assert_eq!(out[0]["payload"]["s"].as_str().unwrap().len(), 3 << 20);
    }
}
