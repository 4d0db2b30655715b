//! Lua 5.4 patterns (`string.find`, `match`, `gmatch`, `gsub`) whose work is counted.
//!
//! Why not Lua's own: its matcher backtracks (`("a"):rep(1e5):find(".-.-.-b")` runs for
//! hours) inside one C call, where no hook can stop it, so a plugin thread stuck there burns
//! a core until the daemon exits. This is a port of `lstrlib.c`'s matcher with the same
//! semantics, that calls `tick` every [`TICK_EVERY`] steps; `tick` charges the call's budget
//! and fails once it is spent. Plain searches use a linear substring search (Lua's own is
//! quadratic in the worst case), and what `gsub` builds is bounded by the memory limit.

use std::ops::Range;
use std::sync::Arc;

use mlua::{Function, Lua, LuaString, MultiValue, Table, Value};

/// Matcher steps between two calls of `tick`.
pub const TICK_EVERY: u32 = 1000;
/// Deepest recursion of the matcher, as Lua's `MAXCCALLS`.
const MAX_DEPTH: u32 = 200;
/// Captures in one pattern, as Lua's `LUA_MAXCAPTURES`.
const MAX_CAPTURES: usize = 32;
const ESC: u8 = b'%';
const SPECIALS: &[u8] = b"^$*+?.([%-";

/// One capture: a piece of the subject, or a position (`()`), 1-based.
#[derive(Debug, Clone, PartialEq)]
pub enum Capture {
    Text(Range<usize>),
    Position(usize),
}

#[derive(Clone, Copy)]
enum CapLen {
    Unfinished,
    Position,
    Len(usize),
}

/// Matching `pattern` against `subject`; `tick` is called every [`TICK_EVERY`] steps.
pub struct Matcher<'a, F: FnMut() -> Result<(), String>> {
    subject: &'a [u8],
    pattern: &'a [u8],
    depth: u32,
    captures: Vec<(usize, CapLen)>,
    steps: u32,
    tick: F,
}

impl<'a, F: FnMut() -> Result<(), String>> Matcher<'a, F> {
    pub fn new(subject: &'a [u8], pattern: &'a [u8], tick: F) -> Self {
        Matcher {
            subject,
            pattern,
            depth: MAX_DEPTH,
            captures: Vec::new(),
            steps: 0,
            tick,
        }
    }

    /// The pattern byte at `i`, or 0 past its end (the C code reads the terminating NUL).
    fn p(&self, i: usize) -> u8 {
        self.pattern.get(i).copied().unwrap_or(0)
    }

    fn step(&mut self) -> Result<(), String> {
        self.steps += 1;
        if self.steps >= TICK_EVERY {
            self.steps = 0;
            (self.tick)()?;
        }
        Ok(())
    }

    /// The byte every match must start with, when the pattern from `p` begins with a plain
    /// character that is not optional: positions without it can be skipped, since Lua's
    /// matcher fails there at once, before reading the rest of the pattern.
    pub fn first_byte(&self, p: usize) -> Option<u8> {
        let c = *self.pattern.get(p)?;
        let optional = matches!(self.p(p + 1), b'*' | b'?' | b'-');
        (!SPECIALS.contains(&c) && c != b')' && !optional).then_some(c)
    }

    /// The first position from `from` where a match may start (see [`Self::first_byte`]);
    /// past the end of the subject when there is none.
    pub fn candidate(&self, from: usize, first: Option<u8>) -> usize {
        match first {
            Some(c) => memchr::memchr(c, self.subject.get(from..).unwrap_or_default())
                .map_or(self.subject.len() + 1, |k| from + k),
            None => from,
        }
    }

    /// Matches the pattern from `p` at subject position `s`: where the match ends, if it does.
    /// Captures are reset first.
    pub fn match_at(&mut self, s: usize, p: usize) -> Result<Option<usize>, String> {
        self.depth = MAX_DEPTH;
        self.captures.clear();
        self.do_match(s, p)
    }

    fn class_end(&self, mut p: usize) -> Result<usize, String> {
        let c = self.p(p);
        p += 1;
        match c {
            ESC => {
                if p >= self.pattern.len() {
                    return Err("malformed pattern (ends with '%')".into());
                }
                Ok(p + 1)
            }
            b'[' => {
                if self.p(p) == b'^' {
                    p += 1;
                }
                loop {
                    if p >= self.pattern.len() {
                        return Err("malformed pattern (missing ']')".into());
                    }
                    let c = self.p(p);
                    p += 1;
                    if c == ESC && p < self.pattern.len() {
                        p += 1;
                    }
                    if self.p(p) == b']' {
                        return Ok(p + 1);
                    }
                }
            }
            _ => Ok(p),
        }
    }

    /// `[...]` from `p` (at the `[`) to `ec` (at the `]`).
    fn bracket_class(&self, c: u8, mut p: usize, ec: usize) -> bool {
        let mut sig = true;
        if self.p(p + 1) == b'^' {
            sig = false;
            p += 1;
        }
        loop {
            p += 1;
            if p >= ec {
                break;
            }
            if self.p(p) == ESC {
                p += 1;
                if class(c, self.p(p)) {
                    return sig;
                }
            } else if self.p(p + 1) == b'-' && p + 2 < ec {
                p += 2;
                if self.p(p - 2) <= c && c <= self.p(p) {
                    return sig;
                }
            } else if self.p(p) == c {
                return sig;
            }
        }
        !sig
    }

    fn single(&self, s: usize, p: usize, ep: usize) -> bool {
        let Some(&c) = self.subject.get(s) else {
            return false;
        };
        match self.p(p) {
            b'.' => true,
            ESC => class(c, self.p(p + 1)),
            b'[' => self.bracket_class(c, p, ep - 1),
            pc => pc == c,
        }
    }

    fn do_match(&mut self, s: usize, p: usize) -> Result<Option<usize>, String> {
        if self.depth == 0 {
            return Err("pattern too complex".into());
        }
        self.depth -= 1;
        let r = self.match_inner(s, p);
        self.depth += 1;
        r
    }

    fn match_inner(&mut self, mut s: usize, mut p: usize) -> Result<Option<usize>, String> {
        loop {
            self.step()?;
            if p == self.pattern.len() {
                return Ok(Some(s));
            }
            match self.p(p) {
                b'(' => {
                    return if self.p(p + 1) == b')' {
                        self.start_capture(s, p + 2, CapLen::Position)
                    } else {
                        self.start_capture(s, p + 1, CapLen::Unfinished)
                    };
                }
                b')' => return self.end_capture(s, p + 1),
                b'$' if p + 1 == self.pattern.len() => {
                    return Ok((s == self.subject.len()).then_some(s));
                }
                ESC if self.p(p + 1) == b'b' => match self.balance(s, p + 2)? {
                    Some(e) => {
                        s = e;
                        p += 4;
                        continue;
                    }
                    None => return Ok(None),
                },
                ESC if self.p(p + 1) == b'f' => {
                    p += 2;
                    if self.p(p) != b'[' {
                        return Err("missing '[' after '%f' in pattern".into());
                    }
                    let ep = self.class_end(p)?;
                    let previous = if s == 0 { 0 } else { self.subject[s - 1] };
                    let current = self.subject.get(s).copied().unwrap_or(0);
                    if !self.bracket_class(previous, p, ep - 1)
                        && self.bracket_class(current, p, ep - 1)
                    {
                        p = ep;
                        continue;
                    }
                    return Ok(None);
                }
                ESC if self.p(p + 1).is_ascii_digit() => {
                    match self.match_capture(s, self.p(p + 1))? {
                        Some(e) => {
                            s = e;
                            p += 2;
                            continue;
                        }
                        None => return Ok(None),
                    }
                }
                _ => {
                    let ep = self.class_end(p)?;
                    let suffix = self.p(ep);
                    if !self.single(s, p, ep) {
                        if matches!(suffix, b'*' | b'?' | b'-') {
                            p = ep + 1;
                            continue;
                        }
                        return Ok(None);
                    }
                    match suffix {
                        b'?' => {
                            if let Some(r) = self.do_match(s + 1, ep + 1)? {
                                return Ok(Some(r));
                            }
                            p = ep + 1;
                            continue;
                        }
                        b'+' => return self.max_expand(s + 1, p, ep),
                        b'*' => return self.max_expand(s, p, ep),
                        b'-' => return self.min_expand(s, p, ep),
                        _ => {
                            s += 1;
                            p = ep;
                            continue;
                        }
                    }
                }
            }
        }
    }

    fn balance(&mut self, s: usize, p: usize) -> Result<Option<usize>, String> {
        if p + 1 >= self.pattern.len() {
            return Err("malformed pattern (missing arguments to '%b')".into());
        }
        if self.subject.get(s) != Some(&self.p(p)) {
            return Ok(None);
        }
        let (b, e) = (self.p(p), self.p(p + 1));
        let mut depth = 1;
        for i in s + 1..self.subject.len() {
            self.step()?;
            let c = self.subject[i];
            if c == e {
                depth -= 1;
                if depth == 0 {
                    return Ok(Some(i + 1));
                }
            } else if c == b {
                depth += 1;
            }
        }
        Ok(None)
    }

    fn max_expand(&mut self, s: usize, p: usize, ep: usize) -> Result<Option<usize>, String> {
        let mut i = 0;
        while self.single(s + i, p, ep) {
            self.step()?;
            i += 1;
        }
        loop {
            if let Some(r) = self.do_match(s + i, ep + 1)? {
                return Ok(Some(r));
            }
            if i == 0 {
                return Ok(None);
            }
            i -= 1;
        }
    }

    fn min_expand(&mut self, mut s: usize, p: usize, ep: usize) -> Result<Option<usize>, String> {
        loop {
            if let Some(r) = self.do_match(s, ep + 1)? {
                return Ok(Some(r));
            }
            if !self.single(s, p, ep) {
                return Ok(None);
            }
            s += 1;
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: CapLen) -> Result<Option<usize>, String> {
        if self.captures.len() >= MAX_CAPTURES {
            return Err("too many captures".into());
        }
        self.captures.push((s, what));
        let r = self.do_match(s, p)?;
        if r.is_none() {
            self.captures.pop();
        }
        Ok(r)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> Result<Option<usize>, String> {
        let Some(l) = self
            .captures
            .iter()
            .rposition(|c| matches!(c.1, CapLen::Unfinished))
        else {
            return Err("invalid pattern capture".into());
        };
        self.captures[l].1 = CapLen::Len(s - self.captures[l].0);
        let r = self.do_match(s, p)?;
        if r.is_none() {
            self.captures[l].1 = CapLen::Unfinished;
        }
        Ok(r)
    }

    fn match_capture(&mut self, s: usize, digit: u8) -> Result<Option<usize>, String> {
        let l = (digit as usize).wrapping_sub(b'1' as usize);
        let (start, len) = match self.captures.get(l) {
            Some(&(start, CapLen::Len(len))) => (start, len),
            // As in C, where the position's length (-2) compares as huge: no match.
            Some(&(_, CapLen::Position)) => return Ok(None),
            _ => return Err(format!("invalid capture index %{}", l.wrapping_add(1))),
        };
        let piece = &self.subject[start..start + len];
        Ok(self
            .subject
            .get(s..s + len)
            .filter(|here| *here == piece)
            .map(|_| s + len))
    }

    /// Capture `i` of a match `s..e`; with no captures, capture 0 is the whole match.
    pub fn capture(&self, i: usize, s: usize, e: usize) -> Result<Capture, String> {
        if i >= self.captures.len() {
            if i != 0 {
                return Err(format!("invalid capture index %{}", i + 1));
            }
            return Ok(Capture::Text(s..e));
        }
        match self.captures[i] {
            (_, CapLen::Unfinished) => Err("unfinished capture".into()),
            (start, CapLen::Position) => Ok(Capture::Position(start + 1)),
            (start, CapLen::Len(len)) => Ok(Capture::Text(start..start + len)),
        }
    }

    /// Every capture of a match `s..e` (the whole match when there are none).
    pub fn captures(&self, s: usize, e: usize, whole: bool) -> Result<Vec<Capture>, String> {
        let n = if self.captures.is_empty() && whole {
            1
        } else {
            self.captures.len()
        };
        (0..n).map(|i| self.capture(i, s, e)).collect()
    }
}

/// `%a`, `%d`, … as in the C locale; any other character stands for itself.
fn class(c: u8, cl: u8) -> bool {
    let res = match cl.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'g' => c.is_ascii_graphic(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        // C's isspace: also \v (0x0b), which Rust's is_ascii_whitespace leaves out.
        b's' => c.is_ascii_whitespace() || c == 0x0b,
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        b'z' => c == 0,
        _ => return cl == c,
    };
    if cl.is_ascii_lowercase() { res } else { !res }
}

/// Whether `pattern` has no magic characters (a plain search will do).
pub fn is_plain(pattern: &[u8]) -> bool {
    !pattern.iter().any(|c| SPECIALS.contains(c))
}

/// Lua's `posrelat` for a start position: 1-based, negative from the end; 0-based result,
/// which may be past the end.
pub fn start_index(init: i64, len: usize) -> usize {
    match init {
        1.. => init as usize - 1,
        0 => 0,
        // From the end; before the start counts from the start.
        _ => len.saturating_sub(init.unsigned_abs() as usize),
    }
}

/// What the string functions call every [`TICK_EVERY`] steps: fails once the call is spent.
pub type Tick = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Replaces `string.find`, `match`, `gmatch` and `gsub` with the counted versions; what `gsub`
/// builds may not exceed `max_bytes`.
pub fn install(lua: &Lua, tick: Tick, max_bytes: usize) -> mlua::Result<()> {
    let string: Table = lua.globals().get("string")?;
    let raw_find: Function = string.get("find")?;
    let t = tick.clone();
    let counted_find = lua.create_function(
        move |lua, (s, p, init, plain): (LuaString, LuaString, Option<i64>, Value)| {
            let plain = !matches!(plain, Value::Nil | Value::Boolean(false));
            find(lua, &s.as_bytes(), &p.as_bytes(), init, Some(plain), &t)
        },
    )?;
    // A plain search of a short needle in a short text goes to Lua's own (at most 64 × 64 KB
    // compares): a call into Rust costs more than the search, and filters do many of them.
    let fast_find: Function = lua
        .load(
            r#"local raw_find, counted_find = ...
            local type = type
            return function(s, p, init, plain)
              if plain and type(s) == "string" and type(p) == "string" and #p <= 64 and #s <= 65536 then
                return raw_find(s, p, init, true)
              end
              return counted_find(s, p, init, plain)
            end"#,
        )
        .set_name("=sandbox")
        .call((raw_find, counted_find))?;
    string.set("find", fast_find)?;
    let t = tick.clone();
    string.set(
        "match",
        lua.create_function(
            move |lua, (s, p, init): (LuaString, LuaString, Option<i64>)| {
                find(lua, &s.as_bytes(), &p.as_bytes(), init, None, &t)
            },
        )?,
    )?;
    let t = tick.clone();
    string.set(
        "gmatch",
        lua.create_function(
            move |lua, (s, p, init): (LuaString, LuaString, Option<i64>)| {
                gmatch(lua, s, p, init, t.clone())
            },
        )?,
    )?;
    string.set(
        "gsub",
        lua.create_function(
            move |lua, (s, p, repl, max): (LuaString, LuaString, Value, Option<i64>)| {
                gsub(lua, &s, &p.as_bytes(), repl, max, max_bytes, &tick)
            },
        )?,
    )?;
    Ok(())
}

fn lua_err(e: String) -> mlua::Error {
    mlua::Error::runtime(e)
}

fn capture_value(lua: &Lua, subject: &[u8], c: Capture) -> mlua::Result<Value> {
    Ok(match c {
        Capture::Text(r) => Value::String(lua.create_string(&subject[r])?),
        Capture::Position(n) => Value::Integer(n as i64),
    })
}

fn values(lua: &Lua, subject: &[u8], caps: Vec<Capture>) -> mlua::Result<MultiValue> {
    caps.into_iter()
        .map(|c| capture_value(lua, subject, c))
        .collect()
}

/// `string.find` (`plain` is Some) or `string.match` (None).
fn find(
    lua: &Lua,
    s: &[u8],
    p: &[u8],
    init: Option<i64>,
    plain: Option<bool>,
    tick: &Tick,
) -> mlua::Result<MultiValue> {
    let init = start_index(init.unwrap_or(1), s.len());
    if init > s.len() {
        return Ok(MultiValue::from_iter([Value::Nil]));
    }
    if plain == Some(true) || (plain.is_some() && is_plain(p)) {
        // Linear, but not free: charged as one step per byte scanned.
        for _ in 0..(s.len() - init) / TICK_EVERY as usize {
            tick().map_err(lua_err)?;
        }
        return Ok(match memchr::memmem::find(&s[init..], p) {
            Some(i) => MultiValue::from_iter([
                Value::Integer((init + i + 1) as i64),
                Value::Integer((init + i + p.len()) as i64),
            ]),
            None => MultiValue::from_iter([Value::Nil]),
        });
    }
    let anchor = p.first() == Some(&b'^');
    let p0 = anchor as usize;
    let mut m = Matcher::new(s, p, || tick());
    let first = if anchor { None } else { m.first_byte(p0) };
    let mut start = m.candidate(init, first);
    while start <= s.len() {
        if let Some(e) = m.match_at(start, p0).map_err(lua_err)? {
            let mut out = MultiValue::new();
            if plain.is_some() {
                out.push_back(Value::Integer(start as i64 + 1));
                out.push_back(Value::Integer(e as i64));
                out.extend(values(
                    lua,
                    s,
                    m.captures(start, e, false).map_err(lua_err)?,
                )?);
            } else {
                out = values(lua, s, m.captures(start, e, true).map_err(lua_err)?)?;
            }
            return Ok(out);
        }
        if anchor {
            break;
        }
        start = m.candidate(start + 1, first);
    }
    Ok(MultiValue::from_iter([Value::Nil]))
}

fn gmatch(
    lua: &Lua,
    s: LuaString,
    p: LuaString,
    init: Option<i64>,
    tick: Tick,
) -> mlua::Result<Function> {
    let len = s.as_bytes().len();
    let mut next = start_index(init.unwrap_or(1), len).min(len + 1);
    let mut last: Option<usize> = None;
    lua.create_function_mut(move |lua, ()| {
        let (subject, pattern) = (s.as_bytes(), p.as_bytes());
        let mut m = Matcher::new(&subject, &pattern, || tick());
        let first = m.first_byte(0);
        while next <= subject.len() {
            next = m.candidate(next, first);
            if next > subject.len() {
                break;
            }
            let start = next;
            if let Some(e) = m.match_at(start, 0).map_err(lua_err)?
                && Some(e) != last
            {
                next = e;
                last = Some(e);
                return values(lua, &subject, m.captures(start, e, true).map_err(lua_err)?);
            }
            next += 1;
        }
        Ok(MultiValue::new())
    })
}

fn gsub(
    lua: &Lua,
    subject: &LuaString,
    p: &[u8],
    repl: Value,
    max: Option<i64>,
    max_bytes: usize,
    tick: &Tick,
) -> mlua::Result<(Value, i64)> {
    let repl = match repl {
        Value::Integer(_) | Value::Number(_) => match lua.coerce_string(repl)? {
            Some(s) => Value::String(s),
            None => Value::Nil,
        },
        v @ (Value::String(_) | Value::Function(_) | Value::Table(_)) => v,
        other => {
            return Err(lua_err(format!(
                "bad argument #3 to 'gsub' (string/function/table expected, got {})",
                other.type_name()
            )));
        }
    };
    let s = &*subject.as_bytes();
    let max = max.unwrap_or(s.len() as i64 + 1);
    let anchor = p.first() == Some(&b'^');
    let p0 = anchor as usize;
    let mut m = Matcher::new(s, p, || tick());
    let mut out: Vec<u8> = Vec::new();
    let mut src = 0;
    let mut last = None;
    let mut n = 0i64;
    let mut changed = false;
    let too_big = || lua_err("gsub: the result would exceed the plugin's memory limit".into());
    let first = if anchor { None } else { m.first_byte(p0) };
    while n < max {
        match m.match_at(src, p0).map_err(lua_err)? {
            Some(e) if Some(e) != last => {
                n += 1;
                changed |= add_value(lua, &m, &mut out, s, src, e, &repl)?;
                src = e;
                last = Some(e);
            }
            _ if src < s.len() => {
                let next = m.candidate(src + 1, first).min(s.len());
                out.extend_from_slice(&s[src..next]);
                src = next;
            }
            _ => break,
        }
        if out.len() > max_bytes {
            return Err(too_big());
        }
        if anchor {
            break;
        }
    }
    if !changed {
        return Ok((Value::String(subject.clone()), n));
    }
    out.extend_from_slice(&s[src..]);
    if out.len() > max_bytes {
        return Err(too_big());
    }
    Ok((Value::String(lua.create_string(&out)?), n))
}

/// Appends the replacement of the match `s..e`; whether it changed the subject.
fn add_value<F: FnMut() -> Result<(), String>>(
    lua: &Lua,
    m: &Matcher<'_, F>,
    out: &mut Vec<u8>,
    subject: &[u8],
    s: usize,
    e: usize,
    repl: &Value,
) -> mlua::Result<bool> {
    let value = match repl {
        Value::String(text) => {
            let text = text.as_bytes();
            let mut i = 0;
            while i < text.len() {
                let c = text[i];
                i += 1;
                if c != ESC {
                    out.push(c);
                    continue;
                }
                let d = text.get(i).copied().unwrap_or(0);
                i += 1;
                match d {
                    ESC => out.push(ESC),
                    b'0' => out.extend_from_slice(&subject[s..e]),
                    b'1'..=b'9' => match m.capture((d - b'1') as usize, s, e).map_err(lua_err)? {
                        Capture::Text(r) => out.extend_from_slice(&subject[r]),
                        Capture::Position(n) => out.extend_from_slice(n.to_string().as_bytes()),
                    },
                    _ => {
                        return Err(lua_err("invalid use of '%' in replacement string".into()));
                    }
                }
            }
            return Ok(true);
        }
        Value::Function(f) => {
            let caps = values(lua, subject, m.captures(s, e, true).map_err(lua_err)?)?;
            f.call::<Value>(caps)?
        }
        Value::Table(t) => {
            let key = capture_value(lua, subject, m.capture(0, s, e).map_err(lua_err)?)?;
            t.get::<Value>(key)?
        }
        _ => Value::Nil,
    };
    match value {
        Value::Nil | Value::Boolean(false) => {
            out.extend_from_slice(&subject[s..e]);
            Ok(false)
        }
        v @ (Value::String(_) | Value::Integer(_) | Value::Number(_)) => {
            if let Some(text) = lua.coerce_string(v)? {
                out.extend_from_slice(&text.as_bytes());
            }
            Ok(true)
        }
        other => Err(lua_err(format!(
            "invalid replacement value (a {})",
            other.type_name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `string.find` semantics over the whole subject: (start, end) 0-based, end exclusive.
    fn find(s: &str, p: &str) -> Result<Option<(usize, usize, Vec<Capture>)>, String> {
        let (anchor, pat) = match p.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, p),
        };
        let mut m = Matcher::new(s.as_bytes(), pat.as_bytes(), || Ok(()));
        for start in 0..=s.len() {
            if let Some(e) = m.match_at(start, 0)? {
                return Ok(Some((start, e, m.captures(start, e, false)?)));
            }
            if anchor {
                break;
            }
        }
        Ok(None)
    }

    #[test]
    fn matches_as_lua_does() {
        let t = |s: usize, e: usize| Capture::Text(s..e);
        assert_eq!(find("hello world", "o w").unwrap().unwrap().0, 4);
        assert_eq!(find("hello", "l+").unwrap().unwrap().1, 4);
        assert_eq!(
            find("  trim  ", "^%s*(.-)%s*$").unwrap().unwrap().2,
            [t(2, 6)]
        );
        assert_eq!(
            find("key=val", "(%w+)=(%w+)").unwrap().unwrap().2,
            [t(0, 3), t(4, 7)]
        );
        assert_eq!(
            find("abc", "()b()").unwrap().unwrap().2,
            [Capture::Position(2), Capture::Position(3)]
        );
        assert_eq!(find("f(a(b)c)d", "%b()").unwrap().unwrap().1, 8);
        assert_eq!(find("THE (quick) fox", "%f[%a]%a+").unwrap().unwrap().0, 0);
        assert_eq!(find("abab", "(ab)%1").unwrap().unwrap().1, 4);
        assert_eq!(find("x-1", "[%w_]-1").unwrap().unwrap().0, 2);
        assert_eq!(find("a]b", "[]]").unwrap().unwrap().0, 1); // a `]` first is literal
        assert_eq!(find("a]b", "[%]]").unwrap().unwrap().0, 1);
        assert_eq!(find("q", "[^%d]?q$").unwrap().unwrap().1, 1);
        assert_eq!(find("abc", "^b"), Ok(None));
        assert!(find("x", "(").is_err());
        assert!(find("x", "%").is_err());
        assert!(find("x", "[a").is_err());
        assert!(find("x", "%1").is_err());
    }

    #[test]
    fn backtracking_is_counted_and_stopped() {
        let s = "a".repeat(100_000);
        let mut ticks = 0u32;
        let mut m = Matcher::new(s.as_bytes(), b".-.-.-.-b", || {
            ticks += 1;
            if ticks > 100 {
                Err("spent".into())
            } else {
                Ok(())
            }
        });
        let started = std::time::Instant::now();
        assert_eq!(m.match_at(0, 0), Err("spent".into()));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn start_positions_follow_lua() {
        assert_eq!(start_index(1, 5), 0);
        assert_eq!(start_index(0, 5), 0);
        assert_eq!(start_index(-2, 5), 3);
        assert_eq!(start_index(-9, 5), 0);
        assert_eq!(start_index(9, 5), 8);
        assert!(is_plain(b"abc"));
        assert!(!is_plain(b"a.c"));
    }

    /// The same calls through Lua's own string library and through this one agree.
    #[test]
    fn agrees_with_lua_s_own_string_library() {
        let script = r#"
          local out = {}
          local function add(...)
            local t = table.pack(...)
            for i = 1, t.n do t[i] = tostring(t[i]) end
            out[#out + 1] = table.concat(t, ",", 1, t.n)
          end
          local function try(f, ...)
            local ok, a, b, c, d = pcall(f, ...)
            if ok then add(a, b, c, d) else add("error") end
          end
          local subjects = { "", "hello world", "  trim me  ", "key = value; k2=v2",
            "f(a(b)c)d", "THE (quick) fox", "aaa", "x-1_y", "a.b.c", "tab\tnl\nvt\v", "1 22 333" }
          local patterns = { "o", "l+", "^%s*(.-)%s*$", "(%w+)%s*=%s*(%w+)", "%b()", "%f[%a]%a+",
            "a-", "a*", "a?", "()", "(a)%1", "[%w_]+", "[^%s]+", "%.", ".", "$", "^", "%d+",
            "[a-c]", "[%]]", "(()a)", "%s", "x?-?1", "[]]", "%", "(", "%1", "[a",
            "e(.)", "a+", "=%s*", "k(%w*)", "l(", "o%" }
          for _, s in ipairs(subjects) do
            for _, p in ipairs(patterns) do
              try(string.find, s, p) try(string.find, s, p, 3) try(string.find, s, p, -2, true)
              try(string.match, s, p) try(string.match, s, p, 2)
              try(string.find, s, p, 0) try(string.match, s, p, -100) try(string.find, s, p, 99)
              try(string.gsub, s, p, "<%0>") try(string.gsub, s, p, "%1", 2)
              try(string.gsub, s, p, function(a) return a and #tostring(a) end)
              try(string.gsub, s, p, { a = "A", o = false })
              try(function() local r = {} for a, b in s:gmatch(p, 2) do r[#r + 1] = tostring(a) .. "/" .. tostring(b) end return table.concat(r, " ") end)
            end
          end
          try(string.gsub, "abc", "%w", "%2") try(string.gsub, "abc", "%w", "%")
          try(string.gsub, "abc", "%w", 7) try(string.gsub, "abc", "b", true)
          try(string.gsub, "hello world", "(o)", "[%1%1]", 1) try(string.find, 123, 2)
          return table.concat(out, "\n")
        "#;
        let theirs: String = Lua::new().load(script).eval().unwrap();
        let lua = Lua::new();
        install(&lua, Arc::new(|| Ok(())), 1 << 20).unwrap();
        let ours: String = lua.load(script).eval().unwrap();
        for (i, (a, b)) in theirs.lines().zip(ours.lines()).enumerate() {
            assert_eq!(a, b, "line {i}");
        }
        assert_eq!(theirs.lines().count(), ours.lines().count());
    }
}
