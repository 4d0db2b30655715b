//! What a page read from the server holds, taken in without building it in memory: the
//! server is the one peer dstream does not control, so a page is never turned into a tree of
//! values (a 60 MB `[[],[],…]` would cost a dozen times its size).
//!
//! - [`messages`] lists the messages of a (bounded) control page as the raw JSON text each
//!   is, borrowed from the page.
//! - [`LsnScan`] reads a tail page chunk by chunk, as it arrives, and keeps only the highest
//!   top-level `lsn` it saw and how many messages there were: a resync of a long remote stream
//!   costs the same memory as a short one.
//! - [`valid_offset`] is what the relay accepts as a `Stream-Next-Offset` before it keeps one.

use std::fmt;

use serde::de::{Deserializer as _, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// Longest offset kept (PROTOCOL.md asks servers to stay under 256 characters).
const MAX_OFFSET_LEN: usize = 256;

/// Whether `offset` may be kept and sent back: 1 to 256 visible ASCII characters, none of the
/// query-string characters PROTOCOL.md forbids, and not a sentinel (`-1`, `now`), which a
/// server must never hand out.
pub fn valid_offset(offset: &str) -> bool {
    !offset.is_empty()
        && offset.len() <= MAX_OFFSET_LEN
        && offset != "-1"
        && offset != "now"
        && offset
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b',' | b'&' | b'=' | b'?' | b'/'))
}

/// The messages of a JSON-array page as the raw JSON text each is, borrowed from the page:
/// at most `max` of them, with the count of all. An empty (or all-whitespace) body is an
/// empty page.
pub fn messages(body: &[u8], max: usize) -> Result<(Vec<&RawValue>, usize), serde_json::Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((Vec::new(), 0));
    }
    struct Each(usize);
    impl<'de> Visitor<'de> for Each {
        type Value = (Vec<&'de RawValue>, usize);
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON array of messages")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let (mut kept, mut n) = (Vec::new(), 0);
            while let Some(m) = seq.next_element::<&'de RawValue>()? {
                if kept.len() < self.0 {
                    kept.push(m);
                }
                n += 1;
            }
            Ok((kept, n))
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let out = (&mut de).deserialize_seq(Each(max))?;
    de.end()?;
    Ok(out)
}

/// Why a tail page could not be scanned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanError {
    NotAnArray,
    /// Unbalanced brackets, a bracket or character where none may be, or a cut-off page.
    Malformed(&'static str),
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            ScanError::NotAnArray => f.write_str("the page is not a JSON array"),
            ScanError::Malformed(why) => write!(f, "the page is not valid JSON ({why})"),
        }
    }
}

/// Where the scanner is in the text of one message's top-level object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Before a key (after `{` or `,`).
    Key,
    /// After a key, before its `:`.
    Colon,
    /// Reading the value of the current key.
    Value,
}

/// Streams through a JSON-array page and finds the highest top-level `lsn` of its messages.
///
/// It tracks strings, escapes and nesting depth, and reads keys and numbers only at the top
/// level of each message (depth 2), so an `"lsn"` inside a payload is never taken for the
/// event's own. It checks the structure only as far as it needs to: brackets balance, one
/// array, nothing after it.
#[derive(Debug, Default)]
pub struct LsnScan {
    /// 0 before the array, 1 inside it, 2 inside a message object, more below that.
    depth: u32,
    started: bool,
    ended: bool,
    in_string: bool,
    escaped: bool,
    /// The message at depth 2 is an object (not an array or a scalar).
    in_object: bool,
    slot: Option<Slot>,
    /// The first bytes of the key being read (enough to tell `lsn` from others).
    key: [u8; 4],
    key_len: usize,
    /// The value being read belongs to the `lsn` key.
    lsn_value: bool,
    /// At depth 1, the next value starts a new message.
    message_due: bool,
    number: Option<u64>,
    pub messages: u64,
    pub max_lsn: Option<u64>,
}

impl LsnScan {
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), ScanError> {
        for &b in chunk {
            self.byte(b)?;
        }
        Ok(())
    }

    /// The page is complete: it must have been one whole array.
    pub fn finish(mut self) -> Result<LsnScan, ScanError> {
        self.end_number();
        if !self.started {
            // An empty body reads as an empty page.
            return Ok(self);
        }
        if !self.ended || self.in_string {
            return Err(ScanError::Malformed("cut off"));
        }
        Ok(self)
    }

    fn byte(&mut self, b: u8) -> Result<(), ScanError> {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.depth == 2 && self.slot == Some(Slot::Key) {
                    self.slot = Some(Slot::Colon);
                }
            } else if self.depth == 2 && self.slot == Some(Slot::Key) {
                if self.key_len < self.key.len() {
                    self.key[self.key_len] = b;
                }
                self.key_len += 1;
            }
            return Ok(());
        }
        if b.is_ascii_whitespace() {
            self.end_number();
            return Ok(());
        }
        if self.ended {
            return Err(ScanError::Malformed("text after the array"));
        }
        if !self.started {
            if b != b'[' {
                return Err(ScanError::NotAnArray);
            }
            self.started = true;
            self.depth = 1;
            self.message_due = true;
            return Ok(());
        }
        if self.depth == 1 && b != b',' && b != b']' && std::mem::take(&mut self.message_due) {
            self.messages += 1;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 2 && self.slot == Some(Slot::Key) {
                    self.key_len = 0;
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 2 {
                    self.in_object = b == b'{';
                    self.slot = self.in_object.then_some(Slot::Key);
                }
            }
            b'}' | b']' => {
                self.end_number();
                if self.depth == 0 {
                    return Err(ScanError::Malformed("unbalanced brackets"));
                }
                self.depth -= 1;
                if self.depth == 1 {
                    self.slot = None;
                    self.in_object = false;
                } else if self.depth == 0 {
                    if b != b']' {
                        return Err(ScanError::Malformed("unbalanced brackets"));
                    }
                    self.ended = true;
                }
            }
            b':' if self.depth == 2 && self.in_object => {
                if self.slot != Some(Slot::Colon) {
                    return Err(ScanError::Malformed("a colon out of place"));
                }
                self.lsn_value = self.key_len == 3 && &self.key[..3] == b"lsn";
                self.number = None;
                self.slot = Some(Slot::Value);
            }
            b',' => {
                self.end_number();
                if self.depth == 1 {
                    self.message_due = true;
                } else if self.depth == 2 && self.in_object {
                    self.slot = Some(Slot::Key);
                    self.lsn_value = false;
                }
            }
            b'0'..=b'9' if self.depth == 2 && self.lsn_value => {
                let d = (b - b'0') as u64;
                self.number = match self.number {
                    None => Some(d),
                    Some(n) => n.checked_mul(10).and_then(|n| n.checked_add(d)),
                };
                if self.number.is_none() {
                    // Too large to be an LSN: not one.
                    self.lsn_value = false;
                }
            }
            _ => {
                if self.depth == 2 && self.lsn_value {
                    // `-`, `.`, `e`, `t`… : not a whole non-negative integer.
                    self.lsn_value = false;
                    self.number = None;
                }
            }
        }
        Ok(())
    }

    fn end_number(&mut self) {
        if self.lsn_value
            && let Some(n) = self.number.take()
        {
            self.max_lsn = Some(self.max_lsn.map_or(n, |m| m.max(n)));
            self.lsn_value = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(text: &str) -> Result<(u64, Option<u64>), ScanError> {
        // Fed one byte at a time: chunk boundaries fall everywhere.
        let mut s = LsnScan::default();
        for b in text.as_bytes() {
            s.feed(std::slice::from_ref(b))?;
        }
        let s = s.finish()?;
        Ok((s.messages, s.max_lsn))
    }

    #[test]
    fn finds_the_highest_top_level_lsn() {
        let page = r#"[{"lsn":3,"payload":{"lsn":99}},{"id":"x","lsn":7},{"lsn":5}]"#;
        assert_eq!(scan(page), Ok((3, Some(7))));
        // Key order does not matter; strings with brackets, escapes and `"lsn"` inside are
        // skipped.
        let page = r#"[{"payload":"{\"lsn\":1000}]","lsn":12, "x":[1,{"lsn":50}]}]"#;
        assert_eq!(scan(page), Ok((1, Some(12))));
    }

    #[test]
    fn messages_without_an_lsn_or_with_a_bad_one_count_but_give_none() {
        assert_eq!(scan("[]"), Ok((0, None)));
        assert_eq!(scan(""), Ok((0, None)));
        assert_eq!(scan(r#"[{"a":1},[],{"lsn":"7"}]"#), Ok((3, None)));
        assert_eq!(
            scan(r#"[{"lsn":-4},{"lsn":1.5},{"lsn":1e3}]"#),
            Ok((3, None))
        );
        assert_eq!(scan(r#"[{"lsn":99999999999999999999999}]"#), Ok((1, None)));
        assert_eq!(scan(r#"[{"lsnx":4},{"ls":5}]"#), Ok((2, None)));
        assert_eq!(scan(r#"[1, "two", true, null, [3]]"#), Ok((5, None)));
    }

    #[test]
    fn refuses_what_is_not_one_whole_array() {
        assert_eq!(scan(r#"{"lsn":1}"#), Err(ScanError::NotAnArray));
        assert!(scan(r#"[{"lsn":1}"#).is_err());
        assert!(scan(r#"[{"lsn":1}]]"#).is_err());
        assert!(scan(r#"[{"lsn":1}] x"#).is_err());
        assert!(scan(r#"["open string]"#).is_err());
    }

    #[test]
    fn a_deep_page_costs_no_memory() {
        let deep = format!("[{}{}]", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(scan(&deep), Ok((1, None)));
    }

    #[test]
    fn each_message_is_handed_over_as_text() {
        let (kept, n) = messages(br#" [{"a":1}, [2], "three"] "#, 2).unwrap();
        assert_eq!(n, 3);
        let kept: Vec<&str> = kept.iter().map(|m| m.get()).collect();
        assert_eq!(kept, [r#"{"a":1}"#, "[2]"]);
        assert_eq!(messages(b"  ", 9).unwrap().1, 0);
        assert!(messages(b"{}", 9).is_err());
        assert!(messages(b"[1] [2]", 9).is_err());
    }

    #[test]
    fn offsets_are_checked_before_they_are_kept() {
        for ok in [
            "0000000000000000_0000000000000042",
            "abc-123",
            "zzz-1",
            "01JQXK5V00",
        ] {
            assert!(valid_offset(ok), "{ok}");
        }
        let long = "a".repeat(257);
        for bad in [
            "", "-1", "now", "a b", "a/b", "a?b", "a&b", "a=b", "a,b", "é", &long,
        ] {
            assert!(!valid_offset(bad), "{bad:?}");
        }
    }
}
