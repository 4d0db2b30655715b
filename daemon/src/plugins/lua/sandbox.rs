//! The sandbox around a plugin's Lua state: the globals a plugin must not reach removed
//! (files, processes, bytecode, the collector), and the functions that could outlast the
//! call's budget or its memory limit wrapped (see [`super`] for the whole list and why).

use std::sync::Arc;

use mlua::{Function, Lua, LuaSerdeExt, Table, Value};

use super::budget::Budget;
use crate::plugins::lua_patterns;

/// Most elements one `table.move` may copy: its C loop allocates nothing for absent elements,
/// so the memory limit would not stop `table.move(t, 1, 1e15, 2)`.
const MAX_MOVE: i64 = 1 << 22;

/// Removes what a plugin must not reach: files, processes, bytecode, the collector; and wraps
/// what could otherwise outlast the call's budget (see the module comment).
pub(super) fn sandbox(lua: &Lua, budget: &Arc<Budget>, memory_bytes: usize) -> mlua::Result<()> {
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
