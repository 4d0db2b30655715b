//! `string.gsub`: every match replaced by a string (with `%0`–`%9`), a table's value or a
//! function's result, what it builds capped in bytes.

use mlua::{Lua, MultiValue, Value};

use super::args::{bad_arg, capture_value, int_arg, push_captures, string_arg};
use super::compile::Cache;
use super::matcher::{Capture, Matcher, Tick};

/// Appends to `out`, failing past `cap` bytes.
fn append(out: &mut Vec<u8>, bytes: &[u8], cap: usize) -> mlua::Result<()> {
    if out.len().saturating_add(bytes.len()) > cap {
        return Err(mlua::Error::runtime(
            "gsub: the result would exceed the plugin's memory limit",
        ));
    }
    out.extend_from_slice(bytes);
    Ok(())
}

pub(super) fn gsub(
    lua: &Lua,
    args: MultiValue,
    tick: &Tick,
    cache: &Cache,
    cap: usize,
) -> mlua::Result<MultiValue> {
    let mut args = args.into_iter();
    let s = string_arg(lua, args.next().unwrap_or(Value::Nil), 1, "gsub")?;
    let p = string_arg(lua, args.next().unwrap_or(Value::Nil), 2, "gsub")?;
    let repl = args.next().unwrap_or(Value::Nil);
    let repl = match repl {
        Value::Integer(_) | Value::Number(_) => Value::String(string_arg(lua, repl, 3, "gsub")?),
        Value::String(_) | Value::Table(_) | Value::Function(_) => repl,
        other => {
            return Err(bad_arg(
                3,
                "gsub",
                &format!("string/function/table expected, got {}", other.type_name()),
            ));
        }
    };
    let max = match args.next().unwrap_or(Value::Nil) {
        Value::Nil => i64::MAX,
        v => int_arg(lua, v, 4, "gsub", i64::MAX)?,
    };
    let s_ref = s.as_bytes();
    let sb: &[u8] = &s_ref;
    let pat = cache.get(&p.as_bytes(), true);
    let repl_bytes = match &repl {
        Value::String(r) => Some(r.as_bytes().to_vec()),
        _ => None,
    };
    let mut m = Matcher::new(&pat, sb, tick);
    let mut out = Vec::new();
    let mut at = 0usize;
    let mut last: Option<usize> = None;
    let mut count: i64 = 0;
    while count < max {
        m.step()?;
        match m.match_at(at)? {
            Some(e) if Some(e) != last => {
                count += 1;
                let whole = &sb[at..e];
                match (&repl, &repl_bytes) {
                    (_, Some(r)) => expand(&m, sb, r, at, e, &mut out, cap)?,
                    (Value::Table(t), None) => {
                        let key = capture_value(lua, sb, m.capture(0, at, e)?)?;
                        let v: Value = t.get(key)?;
                        replace_with(lua, v, whole, &mut out, cap)?;
                    }
                    (Value::Function(f), None) => {
                        let mut caps = MultiValue::new();
                        push_captures(lua, sb, m.captures(at, e, true)?, &mut caps)?;
                        let v: Value = f.call(caps)?;
                        replace_with(lua, v, whole, &mut out, cap)?;
                    }
                    _ => append(&mut out, whole, cap)?,
                }
                at = e;
                last = Some(e);
            }
            _ => {
                if at >= sb.len() {
                    break;
                }
                // Copies up to the next place a match may start, at least one byte.
                let next = if pat.anchored {
                    at + 1
                } else {
                    m.next_start(at + 1)?.unwrap_or(sb.len())
                };
                append(&mut out, &sb[at..next], cap)?;
                at = next;
            }
        }
        if pat.anchored {
            break;
        }
    }
    if let Some(rest) = sb.get(at..) {
        append(&mut out, rest, cap)?;
    }
    let mut ret = MultiValue::new();
    // Unchanged: no need for a copy.
    let result = if count == 0 {
        s.clone()
    } else {
        lua.create_string(&out)?
    };
    ret.push_back(Value::String(result));
    ret.push_back(Value::Integer(count));
    Ok(ret)
}

/// A table's or function's answer: false or nil keeps the match, a string or number
/// replaces it (a number as Lua prints it).
fn replace_with(
    lua: &Lua,
    v: Value,
    whole: &[u8],
    out: &mut Vec<u8>,
    cap: usize,
) -> mlua::Result<()> {
    match v {
        Value::Nil | Value::Boolean(false) => append(out, whole, cap),
        Value::String(r) => append(out, &r.as_bytes(), cap),
        Value::Integer(_) | Value::Number(_) => match lua.coerce_string(v)? {
            Some(r) => append(out, &r.as_bytes(), cap),
            None => Err(mlua::Error::runtime("invalid replacement value (a number)")),
        },
        other => Err(mlua::Error::runtime(format!(
            "invalid replacement value (a {})",
            other.type_name()
        ))),
    }
}

/// A replacement string: `%0`–`%9` are captures, `%%` is `%`.
fn expand(
    m: &Matcher<'_>,
    s: &[u8],
    r: &[u8],
    start: usize,
    end: usize,
    out: &mut Vec<u8>,
    cap: usize,
) -> mlua::Result<()> {
    let mut i = 0;
    while i < r.len() {
        let chunk_end = memchr::memchr(b'%', &r[i..]).map_or(r.len(), |o| i + o);
        append(out, &r[i..chunk_end], cap)?;
        if chunk_end >= r.len() {
            break;
        }
        match r.get(chunk_end + 1) {
            Some(b'%') => append(out, b"%", cap)?,
            Some(b'0') => append(out, &s[start..end], cap)?,
            Some(&d) if d.is_ascii_digit() => {
                match m.capture(usize::from(d - b'1'), start, end)? {
                    Capture::Text(a, b) => append(out, &s[a..b], cap)?,
                    Capture::Position(p) => append(out, p.to_string().as_bytes(), cap)?,
                }
            }
            _ => {
                return Err(mlua::Error::runtime(
                    "invalid use of '%' in replacement string",
                ));
            }
        }
        i = chunk_end + 2;
    }
    Ok(())
}
