//! One plugin's Lua state: built in a fresh sandbox with its budget, `host` table and `emit`,
//! the script run and its declaration read, `init` called; then shared by the plugin's
//! thread and the pipeline's (see [`super`]) until the set lets it go. Calling its functions
//! is [`super::call`]'s job.

use std::sync::{Arc, Mutex};

use mlua::chunk::ChunkMode;
use mlua::state::{GcGenParams, GcMode};
use mlua::{Function, Lua, LuaOptions, StdLib, Table, Value};
use serde_json::Value as Json;

use super::budget::Budget;
use super::error::clean_error;
use super::host_table::install_host_table;
use super::meta::{read_meta, read_needles};
use super::output::{Output, emit_function};
use super::sandbox::sandbox;
use crate::plugins::contract::{Limits, PluginError, PluginMeta};

/// A loaded plugin: its Lua state, its budget and limits, what it declared, and its `emit`.
pub(super) struct Host {
    pub(super) lua: Lua,
    pub(super) module: Table,
    pub(super) budget: Arc<Budget>,
    pub(super) limits: Limits,
    pub(super) meta: PluginMeta,
    /// What `emit` collected during the current call, and what it may still add.
    pub(super) output: Arc<Mutex<Output>>,
    pub(super) emit: Function,
}

impl Drop for Host {
    fn drop(&mut self) {
        // Closing the state runs no script code (no finalizers), but should anything run, it
        // meets a spent budget.
        self.budget.close();
    }
}

impl Host {
    pub(super) fn load(
        chunk_name: &str,
        source: &str,
        config: &Json,
        limits: Limits,
    ) -> Result<Host, PluginError> {
        let lua_err = |e: mlua::Error| PluginError::Load(clean_error(&e));
        let libs = StdLib::COROUTINE | StdLib::TABLE | StdLib::STRING | StdLib::UTF8 | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::default()).map_err(lua_err)?;
        lua.set_memory_limit(limits.memory_bytes).map_err(lua_err)?;
        // A call builds tables that die with it (the event handed in, what it emits): the
        // generational collector frees those young objects without traversing the rest.
        lua.gc_set_mode(GcMode::Generational(GcGenParams::default()));
        let budget = Budget::install(&lua).map_err(lua_err)?;
        sandbox(&lua, &budget, limits.memory_bytes).map_err(lua_err)?;
        let output = Arc::new(Mutex::new(Output::new(limits.output_bytes)));
        install_host_table(&lua, chunk_name, config, &output).map_err(lua_err)?;
        let emit = emit_function(&lua, &output).map_err(lua_err)?;
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
}
