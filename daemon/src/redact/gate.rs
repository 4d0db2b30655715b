//! The gate before the rules: whether any rule can match a text at all. Every rule says what
//! each of its matches holds (a literal, a flag, or a secret-looking name before `=` or `:`),
//! so a literal search and a look around a few signs rule out most texts, and the regex set
//! runs only on the rest. A superset by construction: it may let through text no rule
//! matches, never the reverse.
//!
//! The literal search costs most per call, so the field scan runs it once over a field's whole
//! JSON text ([`Gate::may_hold_literals`]) and, where that finds none, skips it for each
//! string in the field.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, Input, MatchKind};

use super::keys::SecretKeys;

/// What every match of a rule holds.
#[derive(Clone, Copy)]
pub enum Needles {
    /// One of these, byte for byte.
    Exact(&'static [&'static str]),
    /// One of these words in any case: `(?i)` rules. Each comes with a short piece of it
    /// that is searched for in every case and then checked. Unicode case folding also maps
    /// `ſ` to `s` and the Kelvin sign to `k`: text holding either passes the gate whole.
    AnyCase(&'static [(&'static str, &'static str)]),
    /// A flag (`-` at the start or after white space, then `[A-Za-z0-9_-]`, then white space
    /// or `=`) that ends, in any case, with one of these words.
    FlagEndingWith(&'static [&'static str]),
    /// A flag that is one of these, byte for byte.
    FlagIs(&'static [&'static str]),
    /// The assignment rule: `=` or `:` after a name that may name a secret.
    Assignment,
    /// Anything (user patterns).
    Any,
}

/// The non-ASCII characters that `(?i)` matches to an ASCII letter (`ſ` ~ `s`, `K` ~ `k`).
pub(super) const FOLDS_TO_ASCII: &[&str] = &["\u{17F}", "\u{212A}"];

/// A word to find in any case, and where its searched piece starts in it.
#[derive(Clone, Copy)]
struct AnyCaseWord {
    word: &'static str,
    at: usize,
}

pub struct Gate {
    /// The exact needles: case-sensitive and few, so the searcher uses its SIMD prefilter
    /// (a case-insensitive one cannot).
    exact: Option<AhoCorasick>,
    /// Every case of each any-case word's piece (all as long, so that a leftmost-first
    /// search cannot report one piece in place of another at the same place), and for each
    /// pattern the words it is a piece of.
    pieces: Option<AhoCorasick>,
    piece_words: Vec<Vec<AnyCaseWord>>,
    /// Whether to look for the folds (there are any-case rules).
    folds: bool,
    flag_endings: Vec<&'static str>,
    flags: Vec<&'static str>,
    assignments: bool,
    any: bool,
}

impl Gate {
    /// The gate of every rule, from each rule's needles.
    pub(super) fn new<'a>(all: impl IntoIterator<Item = &'a Needles>) -> Gate {
        let mut exact: Vec<&str> = Vec::new();
        let mut pieces: Vec<(String, Vec<AnyCaseWord>)> = Vec::new();
        let (mut flag_endings, mut flags) = (Vec::new(), Vec::new());
        let (mut assignments, mut any) = (false, false);
        for needles in all {
            match *needles {
                Needles::Exact(n) => exact.extend(n),
                Needles::AnyCase(words) => {
                    for &(word, piece) in words {
                        let Some(at) = word.find(piece) else {
                            any = true;
                            continue;
                        };
                        let w = AnyCaseWord { word, at };
                        for variant in cases_of(piece) {
                            match pieces.iter_mut().find(|(p, _)| *p == variant) {
                                Some((_, words)) => words.push(w),
                                None => pieces.push((variant, vec![w])),
                            }
                        }
                    }
                }
                Needles::FlagEndingWith(n) => flag_endings.extend(n),
                Needles::FlagIs(n) => flags.extend(n),
                Needles::Assignment => assignments = true,
                Needles::Any => any = true,
            }
        }
        // The flag words are matched in any case too.
        let folds = !pieces.is_empty() || !flag_endings.is_empty();
        let same_length = pieces.windows(2).all(|w| w[0].0.len() == w[1].0.len());
        let (piece_texts, piece_words): (Vec<String>, Vec<Vec<AnyCaseWord>>) =
            pieces.into_iter().unzip();
        let (exact, ok_exact) = searcher(&exact);
        let (pieces, ok_pieces) = searcher(&piece_texts);
        Gate {
            exact,
            pieces,
            piece_words,
            folds,
            flag_endings,
            flags,
            assignments,
            // A searcher that cannot be built (none can, with these needles) lets all pass.
            any: any || !ok_exact || !ok_pieces || !same_length,
        }
    }

    /// Whether some rule may match `text` (false: none does).
    pub fn may_match(&self, text: &str, keys: &SecretKeys) -> bool {
        self.may_match_with(text, keys, true)
    }

    /// [`Gate::may_match`], with the literal search skipped when `literals` is false (the
    /// text is known to hold none of the needles).
    pub fn may_match_with(&self, text: &str, keys: &SecretKeys, literals: bool) -> bool {
        self.any
            || (literals && self.has_literal(text))
            || ((!self.flags.is_empty() || !self.flag_endings.is_empty()) && self.may_flag(text))
            || (self.assignments && may_assign(text, keys))
    }

    fn has_literal(&self, text: &str) -> bool {
        self.exact.as_ref().is_some_and(|s| s.is_match(text))
            || self.has_any_case_word(text)
            || (self.folds && has_fold(text))
    }

    fn has_any_case_word(&self, text: &str) -> bool {
        let Some(pieces) = &self.pieces else {
            return false;
        };
        let b = text.as_bytes();
        let mut from = 0;
        // A piece whose word is not there may overlap one whose word is: go on right after
        // its start, not after its end.
        while let Some(m) = pieces.find(Input::new(text).span(from..text.len())) {
            let found = self.piece_words[m.pattern().as_usize()].iter().any(|w| {
                let start = m.start().checked_sub(w.at);
                let word = start.and_then(|s| b.get(s..s + w.word.len()));
                word.is_some_and(|t| t.eq_ignore_ascii_case(w.word.as_bytes()))
            });
            if found {
                return true;
            }
            from = m.start() + 1;
        }
        false
    }

    /// Whether a string inside JSON text `json` (at any depth of JSON in strings) may hold a
    /// needle. Unescaping cannot make one: no needle holds a character JSON escapes, unless
    /// it is written `\uXXXX` (or `\/`), and then this says yes.
    pub fn may_hold_literals(&self, json: &str) -> bool {
        let b = json.as_bytes();
        let escaped =
            memchr::memchr_iter(b'\\', b).any(|at| matches!(b.get(at + 1), Some(b'u' | b'/')));
        escaped || self.has_literal(json)
    }

    /// Whether `text` has a flag that may be one of the rules' (see [`Needles::FlagIs`]).
    fn may_flag(&self, text: &str) -> bool {
        let b = text.as_bytes();
        memchr::memchr_iter(b'-', b).any(|at| {
            let after_space = text[..at]
                .chars()
                .next_back()
                .is_none_or(char::is_whitespace);
            if !after_space {
                return false;
            }
            let end = at + b[at..].iter().take_while(|&&c| is_flag_byte(c)).count();
            let next_ok = text[end..]
                .chars()
                .next()
                .is_some_and(|c| c == '=' || c.is_whitespace());
            let flag = &b[at..end];
            next_ok
                && (self.flags.iter().any(|f| flag == f.as_bytes())
                    || self
                        .flag_endings
                        .iter()
                        .any(|w| ends_with_any_case(flag, w)))
        })
    }
}

/// A searcher for `needles` (`None` when there are none), and whether it could be built.
fn searcher<S: AsRef<str>>(needles: &[S]) -> (Option<AhoCorasick>, bool) {
    if needles.is_empty() {
        return (None, true);
    }
    // Leftmost-first: the semantics with the packed (SIMD) prefilter; any match will do.
    let built = AhoCorasickBuilder::new()
        .match_kind(MatchKind::LeftmostFirst)
        .build(needles.iter().map(|n| n.as_ref()))
        .ok();
    let ok = built.is_some();
    (built, ok)
}

/// Every ASCII case of `piece` (`ab`: `ab`, `aB`, `Ab`, `AB`).
fn cases_of(piece: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for c in piece.chars() {
        let (lo, up) = (c.to_ascii_lowercase(), c.to_ascii_uppercase());
        out = out
            .into_iter()
            .flat_map(|p| {
                let other = (lo != up).then(|| format!("{p}{up}"));
                std::iter::once(format!("{p}{lo}")).chain(other)
            })
            .collect();
    }
    out
}

/// Whether `text` holds a character of [`FOLDS_TO_ASCII`]: one pass for their lead bytes,
/// `ſ` being C5 BF and `K` E2 84 AA in UTF-8.
fn has_fold(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr2_iter(0xC5, 0xE2, b).any(|at| {
        FOLDS_TO_ASCII
            .iter()
            .any(|f| b[at..].starts_with(f.as_bytes()))
    })
}

fn ends_with_any_case(s: &[u8], suffix: &str) -> bool {
    s.len() >= suffix.len() && s[s.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

/// The characters of a flag's name (`[A-Za-z0-9_-]`).
fn is_flag_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-')
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
        start < end && keys.may_end_in_secret_assignment(&b[start..end])
    })
}

/// The characters of the assignment rule's name (`[A-Za-z0-9_.-]`).
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}
