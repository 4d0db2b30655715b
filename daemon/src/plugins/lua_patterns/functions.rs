//! `string.find`, `match` and `gmatch` on the matcher, and [`install`], which puts them and
//! `gsub` into a state's `string` table. Plain searches skip the matcher: they are linear.

use std::sync::Arc;

use mlua::{Function, Lua, MultiValue, Table, Value};

use super::args::{int_arg, push_captures, start_index, string_arg, truthy};
use super::compile::Cache;
use super::gsub::gsub;
use super::matcher::{Matcher, Tick};

/// Whether `p` has no byte that makes it a pattern, so `find` may search it as plain text.
fn is_plain(p: &[u8]) -> bool {
    !p.iter().any(|c| b"^$*+?.([%-".contains(c))
}

/// A linear substring search. Short needles, the common case, skip memmem's setup: memchr
/// to each candidate, then a compare of at most 16 bytes, so still linear.
fn plain_find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let Some((&first, rest)) = needle.split_first() else {
        return Some(0);
    };
    if needle.len() > 16 {
        return memchr::memmem::find(hay, needle);
    }
    let mut at = 0;
    while let Some(off) = hay.get(at..).and_then(|h| memchr::memchr(first, h)) {
        let start = at + off;
        match hay.get(start + 1..start + needle.len()) {
            Some(tail) if tail == rest => return Some(start),
            Some(_) => at = start + 1,
            None => return None,
        }
    }
    None
}

/// `string.find` (`want_positions`) and `string.match`.
fn find_or_match(
    lua: &Lua,
    (s, p, init, plain): (Value, Value, Value, Value),
    tick: &Tick,
    cache: &Cache,
    want_positions: bool,
) -> mlua::Result<MultiValue> {
    let fname = if want_positions { "find" } else { "match" };
    let s = string_arg(lua, s, 1, fname)?;
    let p = string_arg(lua, p, 2, fname)?;
    let init = int_arg(lua, init, 3, fname, 1)?;
    let plain = want_positions && truthy(&plain);
    let s_ref = s.as_bytes();
    let p_ref = p.as_bytes();
    let sb: &[u8] = &s_ref;
    let pb: &[u8] = &p_ref;
    let mut out = MultiValue::new();
    let Some(init) = start_index(init, sb.len()) else {
        out.push_back(Value::Nil);
        return Ok(out);
    };
    if want_positions && (plain || is_plain(pb)) {
        // A linear search: nothing to backtrack, nothing to count.
        let hit = sb.get(init..).and_then(|rest| plain_find(rest, pb));
        match hit {
            Some(off) => {
                out.push_back(Value::Integer((init + off + 1) as i64));
                out.push_back(Value::Integer((init + off + pb.len()) as i64));
            }
            None => out.push_back(Value::Nil),
        }
        return Ok(out);
    }
    let pat = cache.get(pb, true);
    let mut m = Matcher::new(&pat, sb, tick);
    match m.find_from(init)? {
        Some((a, e)) => {
            if want_positions {
                out.push_back(Value::Integer((a + 1) as i64));
                out.push_back(Value::Integer(e as i64));
                push_captures(lua, sb, m.captures(a, e, false)?, &mut out)?;
            } else {
                push_captures(lua, sb, m.captures(a, e, true)?, &mut out)?;
            }
        }
        None => out.push_back(Value::Nil),
    }
    Ok(out)
}

fn gmatch(lua: &Lua, args: MultiValue, tick: &Tick, cache: &Cache) -> mlua::Result<Function> {
    let mut args = args.into_iter();
    let s = string_arg(lua, args.next().unwrap_or(Value::Nil), 1, "gmatch")?;
    let p = string_arg(lua, args.next().unwrap_or(Value::Nil), 2, "gmatch")?;
    let init = int_arg(lua, args.next().unwrap_or(Value::Nil), 3, "gmatch", 1)?;
    let subject = s.as_bytes().to_vec();
    // Starting past the end, as Lua does, it finds nothing (not even an empty match).
    let start = start_index(init, subject.len()).unwrap_or(subject.len() + 1);
    // In gmatch a leading `^` is an ordinary byte (an anchor would stop the iteration).
    let pat = cache.get(&p.as_bytes(), false);
    let tick = tick.clone();
    let state = std::sync::Mutex::new((start, None::<usize>));
    lua.create_function(move |lua, ()| {
        let mut guard = state
            .lock()
            .map_err(|_| mlua::Error::runtime("gmatch: poisoned"))?;
        let (pos, last) = &mut *guard;
        let mut m = Matcher::new(&pat, &subject, &tick);
        let mut at = *pos;
        while at <= subject.len() {
            m.step()?;
            // An empty match right where the last one ended is no new match.
            if let Some(e) = m.match_at(at)?
                && Some(e) != *last
            {
                *pos = e;
                *last = Some(e);
                let mut out = MultiValue::new();
                push_captures(lua, &subject, m.captures(at, e, true)?, &mut out)?;
                return Ok(out);
            }
            at += 1;
        }
        *pos = at;
        let mut out = MultiValue::new();
        out.push_back(Value::Nil);
        Ok(out)
    })
}

/// Puts `find`, `match`, `gmatch` and `gsub` into `string`; what `gsub` builds is capped at
/// `max_bytes`.
pub fn install(lua: &Lua, string: &Table, tick: Tick, max_bytes: usize) -> mlua::Result<()> {
    let cache = Arc::new(Cache::default());
    let (t, c) = (tick.clone(), cache.clone());
    string.set(
        "find",
        lua.create_function(move |lua, args: (Value, Value, Value, Value)| {
            find_or_match(lua, args, &t, &c, true)
        })?,
    )?;
    let (t, c) = (tick.clone(), cache.clone());
    string.set(
        "match",
        lua.create_function(move |lua, args: (Value, Value, Value, Value)| {
            find_or_match(lua, args, &t, &c, false)
        })?,
    )?;
    let (t, c) = (tick.clone(), cache.clone());
    string.set(
        "gmatch",
        lua.create_function(move |lua, args: MultiValue| gmatch(lua, args, &t, &c))?,
    )?;
    string.set(
        "gsub",
        lua.create_function(move |lua, args: MultiValue| {
            gsub(lua, args, &tick, &cache, max_bytes)
        })?,
    )?;
    Ok(())
}
