//! The matcher: one compiled pattern against one subject, backtracking as Lua's does, with
//! every step counted and `tick` asked every [`TICK_EVERY`] steps whether the call may go on.
//! Depth and captures are bounded as in Lua.

use std::sync::Arc;

use super::compile::{Class, Node, Pattern, Rep};
use super::error::{PatternError, R, malformed};

/// Matching steps between two calls of `tick`.
pub const TICK_EVERY: u32 = 1000;
/// Nested matcher calls (captures, quantifiers) before "pattern too complex", as Lua.
const MAX_DEPTH: usize = 200;
/// Captures one pattern may hold, as Lua.
const MAX_CAPTURES: usize = 32;

/// Asks whether the call may go on; `Err(reason)` once its budget is spent.
pub type Tick = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

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
    pub(super) fn step(&mut self) -> R<()> {
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
    pub(super) fn next_start(&mut self, at: usize) -> R<Option<usize>> {
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
    pub(super) fn capture(&self, i: usize, start: usize, end: usize) -> R<Capture> {
        match self.slots.get(i) {
            None if i == 0 => Ok(Capture::Text(start, end)),
            None => Err(malformed(format!("invalid capture index %{}", i + 1))),
            Some(Slot::Open(_)) => Err(malformed("unfinished capture")),
            Some(Slot::Closed(a, b)) => Ok(Capture::Text(*a, *b)),
            Some(Slot::Position(p)) => Ok(Capture::Position(p + 1)),
        }
    }
}
