//! The pattern compiler: a Lua pattern's text compiled once into [`Node`]s, its sets and
//! classes into byte bitmaps, and a small cache of lately compiled patterns. A malformed piece
//! compiles to [`Node::Error`] at its place, for the matcher to raise only if it gets there,
//! as Lua does.

use std::sync::Arc;

use super::error::{R, malformed};

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
pub(super) struct Set([u64; 4]);

impl Set {
    const EMPTY: Set = Set([0; 4]);

    #[inline]
    pub(super) fn matches(&self, c: u8) -> bool {
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
pub(super) enum Class {
    Any,
    Byte(u8),
    Set(Set),
}

impl Class {
    #[inline]
    pub(super) fn matches(&self, c: u8) -> bool {
        match self {
            Class::Any => true,
            Class::Byte(b) => *b == c,
            Class::Set(set) => set.matches(c),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rep {
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
pub(super) enum Node {
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
    pub(super) anchored: bool,
    pub(super) nodes: Vec<Node>,
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
    pub(super) fn first_class(&self) -> Option<&Class> {
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

    pub(super) fn get(&self, p: &[u8], honour_anchor: bool) -> Arc<Pattern> {
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
