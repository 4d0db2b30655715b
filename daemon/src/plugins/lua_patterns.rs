//! Lua 5.4 patterns (reference manual §6.4.1) and the functions that use them (`string.find`,
//! `match`, `gmatch`, `gsub`, §6.4), written for the plugin sandbox.
//!
//! Why not Lua's own: its matcher backtracks inside one C call that no hook can interrupt, so
//! `string.find(string.rep('a', 1e5), '.-.-.-.-b')` would keep a core busy for hours. This one
//! counts its steps and asks `tick` every [`TICK_EVERY`] of them whether the plugin call may
//! go on; `tick` fails once the call's budget is spent, and the match ends with that error.
//!
//! The pattern is compiled into a list of [`Node`]s first; a malformed piece becomes an
//! [`Node::Error`] at its place, because Lua reports such an error only when the matcher
//! reaches it (`string.find('b', 'a%')` is nil, not an error), and the sandbox must behave the
//! same as the standard library for every pattern a plugin may already use.

use std::sync::Arc;

use mlua::{Function, Lua, MultiValue, Table, Value};

/// Matching steps between two calls of `tick`.
pub const TICK_EVERY: u32 = 1000;
/// Nested matcher calls (captures, quantifiers) before "pattern too complex", as Lua.
const MAX_DEPTH: usize = 200;
/// Captures one pattern may hold, as Lua.
const MAX_CAPTURES: usize = 32;

/// Asks whether the call may go on; `Err(reason)` once its budget is spent.
pub type Tick = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Why a match did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError {
    /// The pattern (or a replacement string) is malformed; the text is Lua's message.
    Malformed(String),
    /// `tick` said the call's budget is spent.
    Budget(String),
}

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PatternError::Malformed(m) | PatternError::Budget(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PatternError {}

impl From<PatternError> for mlua::Error {
    fn from(e: PatternError) -> Self {
        mlua::Error::runtime(e.to_string())
    }
}

type R<T> = Result<T, PatternError>;

fn malformed(m: impl Into<String>) -> PatternError {
    PatternError::Malformed(m.into())
}

/// One class letter's test (`%a`, `%d`, ...), over bytes as the C locale sees them; an
/// upper-case letter is the complement. Any other escaped byte stands for itself.
fn class_matches(class: u8, c: u8) -> bool {
    let hit = match class.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'g' => c.is_ascii_graphic(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        b's' => matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        // Not in the 5.4 manual, but Lua 5.4 still accepts it (deprecated since 5.2).
        b'z' => c == 0,
        _ => return class == c,
    };
    hit != class.is_ascii_uppercase()
}

/// A set of bytes as a bitmap: sets and classes are compiled to one, so testing a byte
/// costs the same whatever the set holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Set([u64; 4]);

impl Set {
    const EMPTY: Set = Set([0; 4]);

    #[inline]
    fn matches(&self, c: u8) -> bool {
        self.0[usize::from(c >> 6)] & (1u64 << (c & 63)) != 0
    }

    fn insert(&mut self, c: u8) {
        self.0[usize::from(c >> 6)] |= 1u64 << (c & 63);
    }

    fn union(&mut self, other: &Set) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a |= b;
        }
    }

    fn complement(&mut self) {
        for a in &mut self.0 {
            *a = !*a;
        }
    }

    /// What `%k` stands for, computed once per letter.
    fn class(k: u8) -> Set {
        static CLASSES: std::sync::OnceLock<Vec<Set>> = std::sync::OnceLock::new();
        let all = CLASSES.get_or_init(|| {
            (0..=255u8)
                .map(|k| {
                    let mut set = Set::EMPTY;
                    for c in 0..=255u8 {
                        if class_matches(k, c) {
                            set.insert(c);
                        }
                    }
                    set
                })
                .collect()
        });
        all.get(usize::from(k)).copied().unwrap_or(Set::EMPTY)
    }
}

/// What one pattern item matches in a single byte.
#[derive(Debug, Clone)]
enum Class {
    Any,
    Byte(u8),
    Set(Set),
}

impl Class {
    #[inline]
    fn matches(&self, c: u8) -> bool {
        match self {
            Class::Any => true,
            Class::Byte(b) => *b == c,
            Class::Set(set) => set.matches(c),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rep {
    One,
    /// `*`: as many as possible.
    Star,
    /// `+`
    Plus,
    /// `-`: as few as possible.
    Lazy,
    /// `?`
    Opt,
}

#[derive(Debug, Clone)]
enum Node {
    Single(Class, Rep),
    Open,
    /// `()`: captures the position.
    Position,
    Close,
    /// `%1`–`%9` (and `%0`, an error when reached), as the digit's value.
    BackRef(u8),
    Balance(u8, u8),
    Frontier(Set),
    /// `$` at the pattern's end.
    End,
    Error(String),
}

/// A compiled pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// `^` at the start; callers other than `gmatch` honour it.
    anchored: bool,
    nodes: Vec<Node>,
}

/// Parses the set that starts after `[` at `i`; returns it and the index after its `]`.
fn parse_set(p: &[u8], mut i: usize) -> R<(Set, usize)> {
    let missing = || malformed("malformed pattern (missing ']')");
    let negated = p.get(i) == Some(&b'^');
    if negated {
        i += 1;
    }
    let start = i;
    // The first byte belongs to the set even when it is `]`; `%` hides the byte after it.
    let end = loop {
        if i >= p.len() {
            return Err(missing());
        }
        let c = p[i];
        i += 1;
        if c == b'%' && i < p.len() {
            i += 1;
        }
        match p.get(i) {
            Some(b']') => break i,
            Some(_) => {}
            None => return Err(missing()),
        }
    };
    let body = &p[start..end];
    let mut set = Set::EMPTY;
    let mut j = 0;
    while j < body.len() {
        let c = body[j];
        if c == b'%' {
            // Cannot be last: the scan above took the byte after it.
            if let Some(&k) = body.get(j + 1) {
                set.union(&Set::class(k));
            }
            j += 2;
        } else if body.get(j + 1) == Some(&b'-') && j + 2 < body.len() {
            for b in c..=body[j + 2] {
                set.insert(b);
            }
            j += 3;
        } else {
            set.insert(c);
            j += 1;
        }
    }
    if negated {
        set.complement();
    }
    Ok((set, end + 1))
}

impl Pattern {
    pub fn compile(p: &[u8], honour_anchor: bool) -> Pattern {
        let anchored = honour_anchor && p.first() == Some(&b'^');
        let mut i = usize::from(anchored);
        let mut nodes = Vec::new();
        while i < p.len() {
            match Self::node(p, i) {
                Ok((node, next)) => {
                    nodes.push(node);
                    i = next;
                }
                Err(e) => {
                    // Everything after a malformed piece is unreachable.
                    nodes.push(Node::Error(e.to_string()));
                    break;
                }
            }
        }
        Pattern { anchored, nodes }
    }

    /// The node starting at `i`, and where the next one starts.
    fn node(p: &[u8], i: usize) -> R<(Node, usize)> {
        let c = p[i];
        let class_end = match c {
            b'(' => {
                return Ok(if p.get(i + 1) == Some(&b')') {
                    (Node::Position, i + 2)
                } else {
                    (Node::Open, i + 1)
                });
            }
            b')' => return Ok((Node::Close, i + 1)),
            b'$' if i + 1 == p.len() => return Ok((Node::End, i + 1)),
            b'%' => match p.get(i + 1) {
                None => return Err(malformed("malformed pattern (ends with '%')")),
                Some(b'b') => {
                    return match (p.get(i + 2), p.get(i + 3)) {
                        (Some(&x), Some(&y)) => Ok((Node::Balance(x, y), i + 4)),
                        _ => Err(malformed("malformed pattern (missing arguments to '%b')")),
                    };
                }
                Some(b'f') => {
                    if p.get(i + 2) != Some(&b'[') {
                        return Err(malformed("missing '[' after '%f' in pattern"));
                    }
                    let (set, next) = parse_set(p, i + 3)?;
                    return Ok((Node::Frontier(set), next));
                }
                Some(&d) if d.is_ascii_digit() => return Ok((Node::BackRef(d - b'0'), i + 2)),
                Some(&k) => (Class::Set(Set::class(k)), i + 2),
            },
            b'[' => {
                let (set, next) = parse_set(p, i + 1)?;
                (Class::Set(set), next)
            }
            b'.' => (Class::Any, i + 1),
            _ => (Class::Byte(c), i + 1),
        };
        let (class, next) = class_end;
        let rep = match p.get(next) {
            Some(b'*') => Rep::Star,
            Some(b'+') => Rep::Plus,
            Some(b'-') => Rep::Lazy,
            Some(b'?') => Rep::Opt,
            _ => Rep::One,
        };
        let next = if rep == Rep::One { next } else { next + 1 };
        Ok((Node::Single(class, rep), next))
    }

    /// The class every match's first byte must be in (a frontier before it takes no
    /// byte, nor does a capture's start), so that the search can skip the positions where no match can start.
    fn first_class(&self) -> Option<&Class> {
        // Frontiers and capture starts take no byte.
        let first = self
            .nodes
            .iter()
            .find(|n| !matches!(n, Node::Frontier(_) | Node::Open | Node::Position))?;
        match first {
            Node::Single(class, Rep::One | Rep::Plus) => Some(class),
            _ => None,
        }
    }
}

/// Patterns compiled lately: plugins use the same few patterns on every event. Bounded in
/// entries and pattern length; emptied when full.
#[derive(Default)]
pub struct Cache(std::sync::Mutex<CacheMap>);

/// Compiled patterns by their text and whether `^` anchors.
type CacheMap = std::collections::HashMap<(Vec<u8>, bool), Arc<Pattern>>;

impl Cache {
    const ENTRIES: usize = 64;
    const LONGEST: usize = 256;

    fn get(&self, p: &[u8], honour_anchor: bool) -> Arc<Pattern> {
        if p.len() > Self::LONGEST {
            return Arc::new(Pattern::compile(p, honour_anchor));
        }
        let Ok(mut map) = self.0.lock() else {
            return Arc::new(Pattern::compile(p, honour_anchor));
        };
        if let Some(pat) = map.get(&(p.to_vec(), honour_anchor)) {
            return pat.clone();
        }
        if map.len() >= Self::ENTRIES {
            map.clear();
        }
        let pat = Arc::new(Pattern::compile(p, honour_anchor));
        map.insert((p.to_vec(), honour_anchor), pat.clone());
        pat
    }
}

/// Whether `p` has no byte that makes it a pattern, so `find` may search it as plain text.
fn is_plain(p: &[u8]) -> bool {
    !p.iter().any(|c| b"^$*+?.([%-".contains(c))
}

/// What a capture holds once the match succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Bytes `start..end` of the subject.
    Text(usize, usize),
    /// A position capture: the 1-based index.
    Position(usize),
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Open(usize),
    Closed(usize, usize),
    Position(usize),
}

/// One match of a pattern against a subject.
pub struct Matcher<'a> {
    pat: &'a Pattern,
    s: &'a [u8],
    slots: Vec<Slot>,
    depth: usize,
    steps: u32,
    tick: &'a Tick,
}

impl<'a> Matcher<'a> {
    pub fn new(pat: &'a Pattern, s: &'a [u8], tick: &'a Tick) -> Self {
        Matcher {
            pat,
            s,
            slots: Vec::new(),
            depth: 0,
            steps: 0,
            tick,
        }
    }

    #[inline]
    fn step(&mut self) -> R<()> {
        self.steps += 1;
        if self.steps >= TICK_EVERY {
            self.steps = 0;
            (self.tick)().map_err(PatternError::Budget)?;
        }
        Ok(())
    }

    #[inline]
    fn single(&self, class: &Class, at: usize) -> bool {
        self.s.get(at).is_some_and(|&c| class.matches(c))
    }

    /// Tries the match at exactly `start`; the end of the match if it succeeds.
    pub fn match_at(&mut self, start: usize) -> R<Option<usize>> {
        self.slots.clear();
        self.depth = 0;
        self.m(start, 0)
    }

    /// The first match at or after `init` (only at `init` if anchored): (start, end).
    pub fn find_from(&mut self, init: usize) -> R<Option<(usize, usize)>> {
        let mut at = init;
        loop {
            if !self.pat.anchored {
                match self.next_start(at)? {
                    Some(next) => at = next,
                    None => return Ok(None),
                }
            }
            self.step()?;
            if let Some(end) = self.match_at(at)? {
                return Ok(Some((at, end)));
            }
            if self.pat.anchored || at >= self.s.len() {
                return Ok(None);
            }
            at += 1;
        }
    }

    /// The first position from `at` on where a match may start, `None` if none can; each
    /// byte skipped counts as a step.
    fn next_start(&mut self, at: usize) -> R<Option<usize>> {
        let Some(class) = self.pat.first_class() else {
            return Ok(Some(at));
        };
        let rest = self.s.get(at..).unwrap_or(&[]);
        if let Class::Byte(b) = class {
            return Ok(memchr::memchr(*b, rest).map(|off| at + off));
        }
        for (off, &c) in rest.iter().enumerate() {
            if class.matches(c) {
                return Ok(Some(at + off));
            }
            self.step()?;
        }
        Ok(None)
    }

    /// Matches nodes from `n` at subject position `s`; recursion only where a choice must
    /// be undone (quantifiers, captures), so the depth follows the pattern, not the subject.
    fn m(&mut self, mut s: usize, mut n: usize) -> R<Option<usize>> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(malformed("pattern too complex"));
        }
        let r = self.m_inner(&mut s, &mut n);
        self.depth -= 1;
        r
    }

    fn m_inner(&mut self, s: &mut usize, n: &mut usize) -> R<Option<usize>> {
        let pat = self.pat;
        loop {
            self.step()?;
            let Some(node) = pat.nodes.get(*n) else {
                return Ok(Some(*s));
            };
            match node {
                Node::Single(class, rep) => match rep {
                    Rep::One => {
                        if !self.single(class, *s) {
                            return Ok(None);
                        }
                        *s += 1;
                        *n += 1;
                    }
                    Rep::Opt => {
                        if self.single(class, *s)
                            && let Some(e) = self.m(*s + 1, *n + 1)?
                        {
                            return Ok(Some(e));
                        }
                        *n += 1;
                    }
                    Rep::Plus => {
                        if !self.single(class, *s) {
                            return Ok(None);
                        }
                        return self.greedy(class, *s + 1, *n + 1);
                    }
                    Rep::Star => return self.greedy(class, *s, *n + 1),
                    Rep::Lazy => return self.lazy(class, *s, *n + 1),
                },
                Node::Open | Node::Position => {
                    if self.slots.len() >= MAX_CAPTURES {
                        return Err(malformed("too many captures"));
                    }
                    let slot = if matches!(node, Node::Open) {
                        Slot::Open(*s)
                    } else {
                        Slot::Position(*s)
                    };
                    self.slots.push(slot);
                    let r = self.m(*s, *n + 1)?;
                    if r.is_none() {
                        self.slots.pop();
                    }
                    return Ok(r);
                }
                Node::Close => {
                    // Closes the innermost capture still open.
                    let Some((k, start)) =
                        self.slots
                            .iter()
                            .enumerate()
                            .rev()
                            .find_map(|(k, slot)| match slot {
                                Slot::Open(st) => Some((k, *st)),
                                _ => None,
                            })
                    else {
                        return Err(malformed("invalid pattern capture"));
                    };
                    self.slots[k] = Slot::Closed(start, *s);
                    let r = self.m(*s, *n + 1)?;
                    if r.is_none() {
                        self.slots[k] = Slot::Open(start);
                    }
                    return Ok(r);
                }
                Node::BackRef(d) => {
                    let idx = usize::from(*d).wrapping_sub(1);
                    let (a, b) = match self.slots.get(idx) {
                        Some(Slot::Closed(a, b)) => (*a, *b),
                        Some(Slot::Position(_)) => return Ok(None),
                        _ => return Err(malformed(format!("invalid capture index %{d}"))),
                    };
                    let len = b - a;
                    match self.s.get(*s..*s + len) {
                        Some(here) if here == &self.s[a..b] => {
                            *s += len;
                            *n += 1;
                        }
                        _ => return Ok(None),
                    }
                }
                Node::Balance(open, close) => {
                    if self.s.get(*s) != Some(open) {
                        return Ok(None);
                    }
                    let mut depth = 1usize;
                    let mut i = *s + 1;
                    let end = loop {
                        let Some(&c) = self.s.get(i) else {
                            return Ok(None);
                        };
                        self.step()?;
                        i += 1;
                        // The closing byte is tested first, so `%b''` works.
                        if c == *close {
                            depth -= 1;
                            if depth == 0 {
                                break i;
                            }
                        } else if c == *open {
                            depth += 1;
                        }
                    };
                    *s = end;
                    *n += 1;
                }
                Node::Frontier(set) => {
                    // Outside the subject counts as `\0`.
                    let prev = if *s == 0 {
                        0
                    } else {
                        self.s.get(*s - 1).copied().unwrap_or(0)
                    };
                    let cur = self.s.get(*s).copied().unwrap_or(0);
                    if set.matches(prev) || !set.matches(cur) {
                        return Ok(None);
                    }
                    *n += 1;
                }
                Node::End => {
                    return Ok((*s == self.s.len()).then_some(*s));
                }
                Node::Error(m) => return Err(malformed(m.clone())),
            }
        }
    }

    /// `*` / `+`: the longest run first, then shorter ones.
    fn greedy(&mut self, class: &Class, s: usize, next: usize) -> R<Option<usize>> {
        let mut count = 0;
        while self.single(class, s + count) {
            self.step()?;
            count += 1;
        }
        loop {
            if let Some(e) = self.m(s + count, next)? {
                return Ok(Some(e));
            }
            if count == 0 {
                return Ok(None);
            }
            count -= 1;
        }
    }

    /// `-`: the shortest run first, then longer ones.
    fn lazy(&mut self, class: &Class, mut s: usize, next: usize) -> R<Option<usize>> {
        loop {
            if let Some(e) = self.m(s, next)? {
                return Ok(Some(e));
            }
            if !self.single(class, s) {
                return Ok(None);
            }
            s += 1;
        }
    }

    /// The captures of the last successful match, or the whole match if it has none.
    pub fn captures(&self, start: usize, end: usize, whole_if_none: bool) -> R<Vec<Capture>> {
        if self.slots.is_empty() && whole_if_none {
            return Ok(vec![Capture::Text(start, end)]);
        }
        self.slots
            .iter()
            .map(|slot| match *slot {
                Slot::Closed(a, b) => Ok(Capture::Text(a, b)),
                Slot::Position(p) => Ok(Capture::Position(p + 1)),
                Slot::Open(_) => Err(malformed("unfinished capture")),
            })
            .collect()
    }

    /// Capture `i` (0-based) for a replacement string: the whole match when there are no
    /// captures and `i` is 0.
    fn capture(&self, i: usize, start: usize, end: usize) -> R<Capture> {
        match self.slots.get(i) {
            None if i == 0 => Ok(Capture::Text(start, end)),
            None => Err(malformed(format!("invalid capture index %{}", i + 1))),
            Some(Slot::Open(_)) => Err(malformed("unfinished capture")),
            Some(Slot::Closed(a, b)) => Ok(Capture::Text(*a, *b)),
            Some(Slot::Position(p)) => Ok(Capture::Position(p + 1)),
        }
    }
}

fn capture_value(lua: &Lua, s: &[u8], c: Capture) -> mlua::Result<Value> {
    Ok(match c {
        Capture::Text(a, b) => Value::String(lua.create_string(s.get(a..b).unwrap_or(&[]))?),
        Capture::Position(p) => Value::Integer(p as i64),
    })
}

fn push_captures(
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
fn string_arg(lua: &Lua, v: Value, n: usize, fname: &str) -> mlua::Result<mlua::LuaString> {
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

fn bad_arg(n: usize, fname: &str, why: &str) -> mlua::Error {
    mlua::Error::runtime(format!("bad argument #{n} to '{fname}' ({why})"))
}

/// An optional integer argument, as Lua converts it.
fn int_arg(lua: &Lua, v: Value, n: usize, fname: &str, default: i64) -> mlua::Result<i64> {
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
fn start_index(init: i64, len: usize) -> Option<usize> {
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

fn truthy(v: &Value) -> bool {
    !matches!(v, Value::Nil | Value::Boolean(false))
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

fn gsub(
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Lua's own functions stay in `string`; ours go into the global `pat`.
    fn state(tick: Tick) -> Lua {
        let lua = Lua::new();
        let pat = lua.create_table().unwrap();
        install(&lua, &pat, tick, 1 << 20).unwrap();
        lua.globals().set("pat", pat).unwrap();
        lua
    }

    fn never_spent() -> Tick {
        Arc::new(|| Ok(()))
    }

    /// Runs `call(lib, ...)` with `string` and with `pat`; describes any difference.
    const COMPARE: &str = r#"
        local function norm(lib, name, ...)
          local args = table.pack(...)
          return table.pack(pcall(function()
            if name == "gmatch" then
              local out, n = {}, 0
              for a, b, c in lib.gmatch(table.unpack(args, 1, args.n)) do
                n = n + 1
                out[#out + 1] = tostring(a) .. "|" .. tostring(b) .. "|" .. tostring(c)
                if n > 40 then break end
              end
              return table.concat(out, ",")
            end
            return lib[name](table.unpack(args, 1, args.n))
          end))
        end
        return function(name, ...)
          local a, b = norm(string, name, ...), norm(pat, name, ...)
          if a[1] ~= b[1] then
            return "lua ok=" .. tostring(a[1]) .. " (" .. tostring(a[2]) .. "), ours ok="
              .. tostring(b[1]) .. " (" .. tostring(b[2]) .. ")"
          end
          if not a[1] then return nil end -- both failed
          if a.n ~= b.n then return "lua gave " .. a.n .. " values, ours " .. b.n end
          for i = 2, a.n do
            if a[i] ~= b[i] or math.type(a[i]) ~= math.type(b[i]) then
              return "value " .. (i - 1) .. ": lua " .. tostring(a[i]) .. ", ours " .. tostring(b[i])
            end
          end
          return nil
        end
    "#;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            // xorshift64*: deterministic, so a failure is reproducible.
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[self.below(xs.len())]
        }
    }

    const ATOMS: &[&str] = &[
        "a", "b", "c", ".", "%a", "%d", "%s", "%w", "%W", "%p", "%l", "%u", "%x", "%c", "%g", "%S",
        "%Z", "%.", "%%", "[ab]", "[^a]", "[a-c]", "[%d_]", "[]]", "[^]a]", "[a-]", "[%a%-]", "1",
        " ", "(", ")", "()", "%1", "%2", "%0", "%bab", "%b()", "%f[%w]", "%f[^a]", "%f[%s]", "$",
        "^", "*", "+", "-", "?", "[", "%", "%b", "%f", "%fa", "[a", "%z", "x",
    ];
    const QUANTS: &[&str] = &["", "", "", "*", "+", "-", "?"];
    const SUBJECT: &[u8] = b"aabbc1 ()_.A-\0";

    fn pattern(rng: &mut Rng) -> String {
        let mut p = String::new();
        if rng.below(5) == 0 {
            p.push('^');
        }
        for _ in 0..rng.below(6) {
            let atom = rng.pick(ATOMS);
            p.push_str(atom);
            if atom.len() <= 4 && !matches!(atom, "(" | ")" | "()") {
                p.push_str(rng.pick(QUANTS));
            }
        }
        if rng.below(5) == 0 {
            p.push('$');
        }
        p
    }

    fn subject(rng: &mut Rng) -> String {
        (0..rng.below(14))
            .map(|_| SUBJECT[rng.below(SUBJECT.len())] as char)
            .collect()
    }

    #[test]
    fn agrees_with_lua_on_generated_cases() {
        let lua = state(never_spent());
        let compare: Function = lua.load(COMPARE).eval().unwrap();
        let repl_fn: Function = lua
            .load(
                r#"return function(a, b) if a == "b" then return nil end
                   if a == "c" then return false end
                   if a == "1" then return 7 end
                   return "<" .. tostring(a) .. ":" .. tostring(b) .. ">" end"#,
            )
            .eval()
            .unwrap();
        let repl_tab: Table = lua
            .load(r#"return { a = "A", b = false, ab = "%1", [1] = 1.5, ["1"] = 2 }"#)
            .eval()
            .unwrap();
        let repl_strs = ["x", "[%0]", "%1-%1", "%2", "%%", "%", "%a", "", "(%1)"];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut failures = Vec::new();
        let mut cases = 0;
        for _ in 0..4000 {
            let p = pattern(&mut rng);
            let s = subject(&mut rng);
            let init: Value = match rng.below(6) {
                0 => Value::Nil,
                1 => Value::Integer(-(rng.below(5) as i64)),
                _ => Value::Integer(rng.below(s.len() + 3) as i64),
            };
            let s_v = Value::String(lua.create_string(&s).unwrap());
            let p_v = Value::String(lua.create_string(&p).unwrap());
            let mut run = |name: &str, extra: Vec<Value>| {
                let mut args = MultiValue::new();
                args.push_back(Value::String(lua.create_string(name).unwrap()));
                args.push_back(s_v.clone());
                args.push_back(p_v.clone());
                args.extend(extra.clone());
                cases += 1;
                if let Some(diff) = compare.call::<Option<String>>(args).unwrap() {
                    failures.push(format!("{name}({s:?}, {p:?}, {extra:?}): {diff}"));
                }
            };
            run("find", vec![init.clone()]);
            run("find", vec![init.clone(), Value::Boolean(true)]);
            run("match", vec![init.clone()]);
            run("gmatch", vec![init.clone()]);
            let n = match rng.below(3) {
                0 => Value::Nil,
                _ => Value::Integer(rng.below(4) as i64 - 1),
            };
            let r = repl_strs[rng.below(repl_strs.len())];
            run(
                "gsub",
                vec![Value::String(lua.create_string(r).unwrap()), n.clone()],
            );
            run("gsub", vec![Value::Function(repl_fn.clone()), n.clone()]);
            run("gsub", vec![Value::Table(repl_tab.clone()), n]);
        }
        assert!(
            failures.is_empty(),
            "{} of {cases} differ:\n{}",
            failures.len(),
            failures[..failures.len().min(40)].join("\n")
        );
    }

    #[test]
    fn hand_picked_cases_agree_with_lua() {
        let lua = state(never_spent());
        let compare: Function = lua.load(COMPARE).eval().unwrap();
        let cases: &[(&str, &str, &str)] = &[
            ("find", "hello world", "o w"),
            ("find", "hello", "l+"),
            ("find", "a.b", "."),
            ("match", "key = value", "(%w+)%s*=%s*(%w+)"),
            ("match", "  x", "()x()"),
            ("match", "THE (quick) fox", "%((%a+)%)"),
            ("match", "f(a(b)c)d", "%b()"),
            ("match", "THE (quick) fox", "%f[%a]%a+"),
            ("match", "hello", "(h)(e)(l)(l)(o)"),
            ("match", "abcabc", "(abc)%1"),
            ("match", "[[x]]", "%[(=*)%[(.-)%]%1%]"),
            ("gsub", "hello world", "(%w+)"),
            ("gsub", "abc", ""),
            ("gsub", "abc", "%w*"),
            ("gmatch", "one two  three", "%a+"),
            ("gmatch", "abc", ""),
            ("gmatch", "^a^a", "^a"),
            ("find", "a\0b", "%z"),
            ("find", "a\0b", "\0"),
            ("match", "a\0b", "[\0]"),
            ("match", "x", "(()"),
            ("match", "x", "%f"),
            ("match", "x", "[a-"),
            ("find", "b", "a%"),
            ("match", "a", "a%"),
        ];
        for (name, s, p) in cases {
            let d: Option<String> = if *name == "gsub" {
                compare.call((*name, *s, *p, "<%0>")).unwrap()
            } else {
                compare.call((*name, *s, *p)).unwrap()
            };
            assert!(d.is_none(), "{name}({s:?}, {p:?}): {d:?}");
        }
        // Deep nesting: Lua's limit, not a stack overflow.
        let deep = "(".repeat(250) + "a" + &")".repeat(250);
        let d: Option<String> = compare.call(("match", "a", deep)).unwrap();
        assert!(d.is_none(), "{d:?}");
        let many = "a?".repeat(300);
        let d: Option<String> = compare
            .call(("match", "a".repeat(300), many.clone()))
            .unwrap();
        assert!(d.is_none(), "{d:?}");
        let r: mlua::Result<Value> = lua
            .load(format!("return pat.match(string.rep('a', 300), '{many}')"))
            .eval();
        assert!(r.unwrap_err().to_string().contains("pattern too complex"));
        let r: mlua::Result<Value> = lua.load("return pat.find('a', 'a%')").eval();
        assert!(
            r.unwrap_err()
                .to_string()
                .contains("malformed pattern (ends with '%')")
        );
        let r: mlua::Result<Value> = lua.load("return pat.find('a', '(a)%2')").eval();
        assert!(
            r.unwrap_err()
                .to_string()
                .contains("invalid capture index %2")
        );
        let r: mlua::Result<Value> = lua.load("return pat.find('a', '%fa')").eval();
        assert!(
            r.unwrap_err()
                .to_string()
                .contains("missing '[' after '%f' in pattern")
        );
    }

    /// A tick that fails after `ms` milliseconds, as the sandbox's deadline does.
    fn deadline(ms: u64) -> Tick {
        let until = Instant::now() + Duration::from_millis(ms);
        Arc::new(move || {
            if Instant::now() > until {
                Err("plugin call exceeded its deadline".into())
            } else {
                Ok(())
            }
        })
    }

    #[test]
    fn backtracking_bombs_end_at_the_budget() {
        for code in [
            "return pat.find(string.rep('a', 100000), '.-.-.-.-b')",
            "return pat.gsub(string.rep('a', 50000), '.-.-.-b', 'x')",
            "for w in pat.gmatch(string.rep('a', 50000), 'a*a*a*b') do end",
        ] {
            let lua = state(deadline(200));
            let started = Instant::now();
            let e = lua.load(code).exec().unwrap_err().to_string();
            assert!(e.contains("exceeded its deadline"), "{code}: {e}");
            assert!(started.elapsed() < Duration::from_secs(2), "{code}");
        }
        // A plain search of a long needle is linear.
        let lua = state(deadline(2000));
        let i: Option<i64> = lua
            .load("return pat.find(string.rep('a', 1e6), string.rep('a', 1e4) .. 'b', 1, true)")
            .eval()
            .unwrap();
        assert_eq!(i, None);
    }

    #[test]
    fn what_gsub_builds_is_capped() {
        let lua = Lua::new();
        let pat = lua.create_table().unwrap();
        install(&lua, &pat, never_spent(), 1000).unwrap();
        lua.globals().set("pat", pat).unwrap();
        let e = lua
            .load("return pat.gsub(string.rep('a', 100), 'a', string.rep('b', 20))")
            .exec()
            .unwrap_err()
            .to_string();
        assert!(e.contains("memory limit"), "{e}");
    }
}
