//! JSON ⇄ Lua tables on the raw Lua stack.
//!
//! Why not mlua's serde bridge: it creates every value as a registry reference and moves it
//! between threads; for a typical 500-byte hook event that was ~10 µs each way, most of a
//! plugin call. Pushing straight onto the stack is a few times faster.
//!
//! Conventions (the same as mlua's, so scripts see no difference): `null` is the light
//! userdata NULL (`host.null`); arrays carry mlua's array metatable, so an empty array stays an
//! array; an empty table without it is an empty object; a table whose keys are exactly
//! 1..n is an array. Lua strings that are not UTF-8 are converted lossily.
//!
//! Both directions run inside `Lua::exec_raw`, a protected call: a memory error while
//! building tables unwinds to it (the frames it skips hold only references), and reading
//! tables uses only raw operations, which raise no errors.
//!
//! Reading back is charged to an [`Allowance`]: the Lua memory limit does not cover what is
//! built on the Rust side, and a table reachable many times (`t = {t, t}` thirty times over)
//! expands to far more JSON than the state holds.

use std::ffi::c_int;

use mlua::ffi;
use mlua::{Lua, LuaSerdeExt, Table, Value};
use serde_json::{Map, Number, Value as Json};

/// Deepest table nesting read back from Lua: deeper (or a table that contains itself) is an
/// error rather than a stack overflow.
const MAX_DEPTH: usize = 128;
/// What a value other than a string costs, in bytes: more than its JSON text, about what it
/// takes in memory as a `serde_json::Value`, so that the allowance bounds memory too.
const MIN_COST: usize = 32;

/// How many bytes of JSON a plugin call may still produce (events it emits, the value it
/// returns); shared by every value read back during the call.
#[derive(Debug)]
pub struct Allowance {
    limit: usize,
    left: usize,
}

impl Allowance {
    pub fn new(limit: usize) -> Allowance {
        Allowance { limit, left: limit }
    }

    /// The whole allowance, spent or not.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn charge(&mut self, bytes: usize) -> Result<(), String> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => {
                self.left = 0;
                Err(format!(
                    "the plugin produced more than {} bytes of JSON in one call",
                    self.limit
                ))
            }
        }
    }
}

/// The approximate size of `json` as JSON text, counted as [`Allowance`] charges it.
pub fn cost(json: &Json) -> usize {
    match json {
        Json::String(s) => s.len() + 2,
        Json::Array(items) => items.iter().map(cost).sum::<usize>() + MIN_COST,
        Json::Object(map) => {
            map.iter()
                .map(|(k, v)| k.len() + 3 + cost(v))
                .sum::<usize>()
                + MIN_COST
        }
        _ => MIN_COST,
    }
}

/// The Lua value for `json`.
pub fn to_lua(lua: &Lua, json: &Json) -> mlua::Result<Value> {
    let array_mt = lua.array_metatable();
    // SAFETY: the closure only pushes values and sets fields on tables it created; the stack
    // is grown before each push (see `push`).
    unsafe {
        lua.exec_raw::<Value>(array_mt, |state| {
            push(state, json, 1);
            ffi::lua_replace(state, 1); // the result takes the argument's place
        })
    }
}

/// Pushes `json`; `mt` is the stack index of the array metatable.
unsafe fn push(state: *mut ffi::lua_State, json: &Json, mt: c_int) {
    unsafe {
        // Raises a (protected) error when the stack cannot grow.
        ffi::luaL_checkstack(state, 4, c"JSON nests too deeply".as_ptr());
        match json {
            Json::Null => ffi::lua_pushlightuserdata(state, std::ptr::null_mut()),
            Json::Bool(b) => ffi::lua_pushboolean(state, *b as c_int),
            Json::Number(n) => match n.as_i64() {
                Some(i) => ffi::lua_pushinteger(state, i),
                None => ffi::lua_pushnumber(state, n.as_f64().unwrap_or(f64::NAN)),
            },
            Json::String(s) => {
                ffi::lua_pushlstring(state, s.as_ptr().cast(), s.len());
            }
            Json::Array(items) => {
                ffi::lua_createtable(state, items.len().min(1 << 20) as c_int, 0);
                for (i, item) in items.iter().enumerate() {
                    push(state, item, mt);
                    ffi::lua_rawseti(state, -2, i as ffi::lua_Integer + 1);
                }
                ffi::lua_pushvalue(state, mt);
                ffi::lua_setmetatable(state, -2);
            }
            Json::Object(map) => {
                ffi::lua_createtable(state, 0, map.len().min(1 << 20) as c_int);
                for (k, v) in map {
                    ffi::lua_pushlstring(state, k.as_ptr().cast(), k.len());
                    push(state, v, mt);
                    ffi::lua_rawset(state, -3);
                }
            }
        }
    }
}

/// The JSON value of a Lua table (or any value a plugin returns), charged to `allowance`.
pub fn from_lua(lua: &Lua, value: Value, allowance: &mut Allowance) -> mlua::Result<Json> {
    if let Value::Table(_) = &value {
    } else {
        let bytes = match &value {
            Value::String(s) => s.as_bytes().len() + 2,
            _ => MIN_COST,
        };
        allowance.charge(bytes).map_err(mlua::Error::runtime)?;
        return match value {
            Value::Nil => Ok(Json::Null),
            Value::Boolean(b) => Ok(Json::Bool(b)),
            Value::Integer(i) => Ok(Json::from(i)),
            Value::Number(n) => number(n).map_err(mlua::Error::runtime),
            Value::String(s) => Ok(Json::String(s.to_string_lossy())),
            Value::LightUserData(u) if u.0.is_null() => Ok(Json::Null),
            other => lua.from_value(other),
        };
    }
    let array_mt: Table = lua.array_metatable();
    let mut out: Result<Json, String> = Ok(Json::Null);
    // SAFETY: reading uses raw accessors only, which raise no Lua errors, and the stack is
    // grown (without raising) before each level.
    unsafe {
        lua.exec_raw::<()>((array_mt, value), |state| {
            out = read(state, 2, 1, 0, allowance);
            ffi::lua_settop(state, 0);
        })?;
    }
    out.map_err(mlua::Error::runtime)
}

fn number(n: f64) -> Result<Json, String> {
    Number::from_f64(n)
        .map(Json::Number)
        .ok_or_else(|| format!("{n} is not a JSON number"))
}

/// Reads the value at `idx` (absolute); `mt` is the array metatable's index.
unsafe fn read(
    state: *mut ffi::lua_State,
    idx: c_int,
    mt: c_int,
    depth: usize,
    allowance: &mut Allowance,
) -> Result<Json, String> {
    unsafe {
        let kind = ffi::lua_type(state, idx);
        if kind != ffi::LUA_TSTRING {
            allowance.charge(MIN_COST)?;
        }
        match kind {
            ffi::LUA_TNIL => Ok(Json::Null),
            ffi::LUA_TBOOLEAN => Ok(Json::Bool(ffi::lua_toboolean(state, idx) != 0)),
            ffi::LUA_TNUMBER => {
                if ffi::lua_isinteger(state, idx) != 0 {
                    Ok(Json::from(ffi::lua_tointegerx(
                        state,
                        idx,
                        std::ptr::null_mut(),
                    )))
                } else {
                    number(ffi::lua_tonumberx(state, idx, std::ptr::null_mut()))
                }
            }
            ffi::LUA_TSTRING => Ok(Json::String(string_at(state, idx, 2, allowance)?)),
            ffi::LUA_TLIGHTUSERDATA if ffi::lua_touserdata(state, idx).is_null() => Ok(Json::Null),
            ffi::LUA_TTABLE => read_table(state, idx, mt, depth, allowance),
            t => Err(format!(
                "a {} cannot be stored in an event",
                match t {
                    ffi::LUA_TFUNCTION => "function",
                    ffi::LUA_TTHREAD => "coroutine",
                    _ => "userdata",
                }
            )),
        }
    }
}

/// The string at `idx`, charged before it is copied: its length plus `extra` (quotes, colon).
unsafe fn string_at(
    state: *mut ffi::lua_State,
    idx: c_int,
    extra: usize,
    allowance: &mut Allowance,
) -> Result<String, String> {
    unsafe {
        let mut len = 0usize;
        let ptr = ffi::lua_tolstring(state, idx, &mut len);
        allowance.charge(len.saturating_add(extra))?;
        let bytes = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

unsafe fn read_table(
    state: *mut ffi::lua_State,
    idx: c_int,
    mt: c_int,
    depth: usize,
    allowance: &mut Allowance,
) -> Result<Json, String> {
    if depth >= MAX_DEPTH {
        return Err(format!(
            "tables nest more than {MAX_DEPTH} levels deep (or a table contains itself)"
        ));
    }
    unsafe {
        if ffi::lua_checkstack(state, 4) == 0 {
            return Err("tables nest too deeply".into());
        }
        let len = ffi::lua_rawlen(state, idx);
        let marked_array = ffi::lua_getmetatable(state, idx) != 0 && {
            let same = ffi::lua_rawequal(state, -1, mt) != 0;
            ffi::lua_pop(state, 1);
            same
        };
        // Anything but the keys 1..len makes it an object.
        let mut is_array = marked_array || len > 0;
        if is_array && !marked_array {
            let mut count = 0usize;
            ffi::lua_pushnil(state);
            while ffi::lua_next(state, idx) != 0 {
                count += 1;
                ffi::lua_pop(state, 1);
            }
            is_array = count == len;
        }
        if is_array {
            let mut items = Vec::with_capacity(len.min(1 << 16));
            for i in 1..=len {
                ffi::lua_rawgeti(state, idx, i as ffi::lua_Integer);
                let top = ffi::lua_gettop(state);
                let item = read(state, top, mt, depth + 1, allowance);
                ffi::lua_pop(state, 1);
                items.push(item?);
            }
            return Ok(Json::Array(items));
        }
        let mut map = Map::new();
        ffi::lua_pushnil(state);
        while ffi::lua_next(state, idx) != 0 {
            let top = ffi::lua_gettop(state);
            let key = match ffi::lua_type(state, top - 1) {
                ffi::LUA_TSTRING => match string_at(state, top - 1, 3, allowance) {
                    Ok(k) => k,
                    Err(e) => {
                        ffi::lua_pop(state, 2);
                        return Err(e);
                    }
                },
                ffi::LUA_TNUMBER if ffi::lua_isinteger(state, top - 1) != 0 => {
                    if let Err(e) = allowance.charge(MIN_COST) {
                        ffi::lua_pop(state, 2);
                        return Err(e);
                    }
                    ffi::lua_tointegerx(state, top - 1, std::ptr::null_mut()).to_string()
                }
                _ => {
                    ffi::lua_pop(state, 2);
                    return Err("a table key that is neither a string nor an integer".into());
                }
            };
            let value = read(state, top, mt, depth + 1, allowance);
            ffi::lua_pop(state, 1); // the value; the key stays for lua_next
            match value {
                Ok(v) => {
                    map.insert(key, v);
                }
                Err(e) => {
                    ffi::lua_pop(state, 1);
                    return Err(e);
                }
            }
        }
        Ok(Json::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plenty() -> Allowance {
        Allowance::new(1 << 30)
    }

    #[test]
    fn json_survives_a_round_trip_through_lua() {
        let lua = Lua::new();
        for v in [
            json!({"a": [1, 2.5, "x", null, true, {}, []], "b": {"c": {"d": -7}}, "e": ""}),
            json!([]),
            json!({}),
            json!([[[]]]),
            json!(i64::MAX),
            json!("ünïcödé"),
            json!({"1": "string key stays", "x": [null, null]}),
        ] {
            let l = to_lua(&lua, &v).unwrap();
            assert_eq!(from_lua(&lua, l, &mut plenty()).unwrap(), v);
        }
    }

    #[test]
    fn lua_values_that_are_not_json_are_refused_clearly() {
        let lua = Lua::new();
        let t: Value = lua.load("local t = {} t.self = t return t").eval().unwrap();
        let e = from_lua(&lua, t, &mut plenty()).unwrap_err().to_string();
        assert!(e.contains("contains itself"), "{e}");
        let t: Value = lua.load("return { f = print }").eval().unwrap();
        assert!(
            from_lua(&lua, t, &mut plenty())
                .unwrap_err()
                .to_string()
                .contains("function")
        );
        let t: Value = lua.load("return { [true] = 1 }").eval().unwrap();
        assert!(from_lua(&lua, t, &mut plenty()).is_err());
        let t: Value = lua.load("return { x = 0/0 }").eval().unwrap();
        assert!(from_lua(&lua, t, &mut plenty()).is_err());
        // A sequence with holes is an object with integer keys.
        let t: Value = lua.load("return { [1] = 'a', [3] = 'c' }").eval().unwrap();
        assert_eq!(
            from_lua(&lua, t, &mut plenty()).unwrap(),
            json!({"1": "a", "3": "c"})
        );
    }

    #[test]
    fn a_table_reachable_many_times_is_charged_each_time() {
        // 2^30 leaves as JSON, a few hundred bytes in Lua.
        let lua = Lua::new();
        let t: Value = lua
            .load(r#"local t = {"x"} for i = 1, 30 do t = {t, t} end return t"#)
            .eval()
            .unwrap();
        let started = std::time::Instant::now();
        let e = from_lua(&lua, t, &mut Allowance::new(1 << 20))
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 1048576 bytes of JSON"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn the_allowance_is_shared_by_the_values_of_one_call() {
        let lua = Lua::new();
        let big: Value = lua
            .load(r#"return { s = string.rep("a", 600000) }"#)
            .eval()
            .unwrap();
        let mut allowance = Allowance::new(1 << 20);
        let first = from_lua(&lua, big.clone(), &mut allowance).unwrap();
        assert!(cost(&first) <= 1 << 20);
        let e = from_lua(&lua, big, &mut allowance).unwrap_err().to_string();
        assert!(e.contains("more than"), "{e}");
        // A bare string is charged too.
        let s: Value = lua
            .load(r#"return string.rep("b", 2000000)"#)
            .eval()
            .unwrap();
        assert!(from_lua(&lua, s, &mut Allowance::new(1 << 20)).is_err());
    }

    #[test]
    fn the_charge_matches_the_cost_of_the_json() {
        let lua = Lua::new();
        let v = json!({"a": [1, "xy", null, {"k": true}], "bb": "ccc"});
        let mut allowance = Allowance::new(cost(&v));
        let l = to_lua(&lua, &v).unwrap();
        assert_eq!(from_lua(&lua, l.clone(), &mut allowance).unwrap(), v);
        let mut short = Allowance::new(cost(&v) - 1);
        assert!(from_lua(&lua, l, &mut short).is_err());
    }
}
