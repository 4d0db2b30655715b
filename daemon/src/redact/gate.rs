//! The gate before the rules: whether any rule can match a text at all. Every rule names
//! literals one of which each of its matches contains, so one Aho-Corasick pass over the text
//! (plus a look at the names before its `=` and `:`) rules out most texts, and the regex set
//! runs only on the rest. A superset by construction: it may let through text no rule
//! matches, never the reverse.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use super::keys::SecretKeys;
use super::rules::Spec;

/// What text a rule can match: text that contains one of its needles.
#[derive(Clone, Copy)]
pub enum Needles {
    /// One of these, byte for byte.
    Exact(&'static [&'static str]),
    /// One of these in any case: `(?i)` rules. Unicode case folding also maps `ſ` to `s` and
    /// the Kelvin sign to `k`: text holding either passes the gate whole.
    AnyCase(&'static [&'static str]),
    /// The assignment rule: `=` or `:` after a name that may name a secret.
    Assignment,
    /// Anything (user patterns).
    Any,
}

/// The non-ASCII characters that `(?i)` matches to an ASCII letter (`ſ` ~ `s`, `K` ~ `k`).
pub(super) const FOLDS_TO_ASCII: &[&str] = &["\u{17F}", "\u{212A}"];

pub struct Gate {
    /// Every needle, matched in any case; `exact[i]` says whether `patterns[i]` must match
    /// in its own case too.
    needles: Option<AhoCorasick>,
    patterns: Vec<&'static str>,
    exact: Vec<bool>,
    assignments: bool,
    any: bool,
}

impl Gate {
    pub(super) fn new(specs: &[Spec]) -> Gate {
        let mut patterns: Vec<&'static str> = Vec::new();
        let mut exact = Vec::new();
        let (mut assignments, mut any, mut folds) = (false, false, false);
        for s in specs {
            match s.needles {
                Needles::Exact(n) => {
                    patterns.extend(n);
                    exact.extend(n.iter().map(|_| true));
                }
                Needles::AnyCase(n) => {
                    patterns.extend(n);
                    exact.extend(n.iter().map(|_| false));
                    folds = true;
                }
                Needles::Assignment => assignments = true,
                Needles::Any => any = true,
            }
        }
        if folds {
            patterns.extend(FOLDS_TO_ASCII);
            exact.extend(FOLDS_TO_ASCII.iter().map(|_| true));
        }
        // Standard semantics, for overlapping search: a case-insensitive hit on an exact
        // needle must not hide a true hit that overlaps it.
        let needles = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(&patterns)
            .ok();
        // A set that cannot be built (none can, with these needles) lets everything through.
        let any = any || (needles.is_none() && !patterns.is_empty());
        Gate {
            needles,
            patterns,
            exact,
            assignments,
            any,
        }
    }

    /// Whether some rule may match `text` (false: none does).
    pub fn may_match(&self, text: &str, keys: &SecretKeys) -> bool {
        self.any || self.has_needle(text) || (self.assignments && may_assign(text, keys))
    }

    fn has_needle(&self, text: &str) -> bool {
        let Some(ac) = &self.needles else {
            return false;
        };
        let bytes = text.as_bytes();
        ac.find_overlapping_iter(text).any(|m| {
            let i = m.pattern().as_usize();
            !self.exact[i] || bytes[m.range()] == *self.patterns[i].as_bytes()
        })
    }
}

/// Whether `text` has an `=` or `:` after a name that may name a secret. The assignment
/// rule's name is the run of name characters that ends right before the sign (after an
/// optional quote, `\"` or `\'`, and spaces or tabs), or a suffix of it.
fn may_assign(text: &str, keys: &SecretKeys) -> bool {
    let b = text.as_bytes();
    memchr::memchr2_iter(b'=', b':', b).any(|at| {
        let mut end = at;
        while end > 0 && matches!(b[end - 1], b' ' | b'\t') {
            end -= 1;
        }
        if end > 0 && matches!(b[end - 1], b'"' | b'\'') {
            end -= 1;
            if end > 0 && b[end - 1] == b'\\' {
                end -= 1;
            }
        }
        let mut start = end;
        while start > 0 && is_name_byte(b[start - 1]) {
            start -= 1;
        }
        // Name bytes are ASCII: the run is a whole `str`.
        start < end && keys.may_end_in_secret_assignment(&text[start..end])
    })
}

/// The characters of the assignment rule's name (`[A-Za-z0-9_.-]`).
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}
