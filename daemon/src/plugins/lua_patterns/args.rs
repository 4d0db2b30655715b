//! Arguments and results as Lua's string library takes and gives them: strings and integers
//! converted as Lua converts them, its error messages, `init` positions, captures as values.

use mlua::{Lua, MultiValue, Value};

use super::matcher::Capture;

pub(super) fn capture_value(lua: &Lua, s: &[u8], c: Capture) -> mlua::Result<Value> {
    Ok(match c {
        Capture::Text(a, b) => Value::String(lua.create_string(s.get(a..b).unwrap_or(&[]))?),
        Capture::Position(p) => Value::Integer(p as i64),
    })
}

pub(super) fn push_captures(
    lua: &Lua,
    s: &[u8],
    caps: Vec<Capture>,
    out: &mut MultiValue,
) -> mlua::Result<()> {
    for c in caps {
        out.push_back(capture_value(lua, s, c)?);
    }
    Ok(())
}

/// A string argument, numbers converted as Lua does.
pub(super) fn string_arg(
    lua: &Lua,
    v: Value,
    n: usize,
    fname: &str,
) -> mlua::Result<mlua::LuaString> {
    match v {
        Value::String(s) => Ok(s),
        Value::Integer(_) | Value::Number(_) => match lua.coerce_string(v)? {
            Some(s) => Ok(s),
            None => Err(bad_arg(n, fname, "string expected")),
        },
        other => Err(bad_arg(
            n,
            fname,
            &format!("string expected, got {}", other.type_name()),
        )),
    }
}

pub(super) fn bad_arg(n: usize, fname: &str, why: &str) -> mlua::Error {
    mlua::Error::runtime(format!("bad argument #{n} to '{fname}' ({why})"))
}

/// An optional integer argument, as Lua converts it.
pub(super) fn int_arg(
    lua: &Lua,
    v: Value,
    n: usize,
    fname: &str,
    default: i64,
) -> mlua::Result<i64> {
    match v {
        Value::Nil => Ok(default),
        Value::Integer(i) => Ok(i),
        Value::Number(f) => {
            float_to_int(f).ok_or_else(|| bad_arg(n, fname, "number has no integer representation"))
        }
        Value::String(_) => match lua.coerce_number(v)? {
            Some(f) => float_to_int(f)
                .ok_or_else(|| bad_arg(n, fname, "number has no integer representation")),
            None => Err(bad_arg(n, fname, "number expected, got string")),
        },
        other => Err(bad_arg(
            n,
            fname,
            &format!("number expected, got {}", other.type_name()),
        )),
    }
}

fn float_to_int(f: f64) -> Option<i64> {
    (f.fract() == 0.0 && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f))
        .then_some(f as i64)
}

/// `init` as a 0-based start: negative counts from the end; `None` past `len + 1`.
pub(super) fn start_index(init: i64, len: usize) -> Option<usize> {
    let len_i = len as i64;
    let pos = if init > 0 {
        init
    } else if init == 0 || init < -len_i {
        1
    } else {
        len_i + init + 1
    };
    (pos <= len_i + 1).then(|| (pos - 1) as usize)
}

pub(super) fn truthy(v: &Value) -> bool {
    !matches!(v, Value::Nil | Value::Boolean(false))
}
