//! A JSON document as it was written, for editing a settings file without changing what the
//! edit does not touch: objects keep their keys in file order, a key written twice stays
//! twice, and numbers and strings keep their literal text (`1e2` stays `1e2`,
//! `12345678901234567890123` is not rounded to a float, `"\u00e9"` keeps its escape).
//!
//! serde_json's `Value` sorts keys, keeps one value per key and reads big numbers as floats;
//! its `preserve_order` and `arbitrary_precision` features would change that for every use of
//! serde_json in the workspace, so this module has its own small reader and writer.

use std::borrow::Cow;
use std::fmt;

/// Deepest nesting read (serde_json's default too). Settings files are a few levels deep, and
/// reading, writing and dropping a document recurse once per level.
const MAX_DEPTH: usize = 128;

#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    /// The number's text as written; never converted.
    Number(String),
    String(Str),
    Array(Vec<Json>),
    /// Entries in file order. A repeated key is kept as written; lookups see its last value,
    /// as JavaScript's `JSON.parse` (Claude Code's reader) does.
    Object(Vec<(Str, Json)>),
}

/// A JSON string: the text between its quotes, escapes as written. Always valid JSON string
/// content (the parser checks it; `Str::new` escapes what needs it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Str(String);

impl Str {
    pub fn new(value: &str) -> Str {
        let mut raw = String::with_capacity(value.len());
        for c in value.chars() {
            match c {
                '"' => raw.push_str("\\\""),
                '\\' => raw.push_str("\\\\"),
                '\n' => raw.push_str("\\n"),
                '\r' => raw.push_str("\\r"),
                '\t' => raw.push_str("\\t"),
                '\u{8}' => raw.push_str("\\b"),
                '\u{c}' => raw.push_str("\\f"),
                c if c < ' ' => raw.push_str(&format!("\\u{:04x}", c as u32)),
                c => raw.push(c),
            }
        }
        Str(raw)
    }

    /// The string's value, escapes decoded. An escaped lone surrogate (valid JSON, but not a
    /// character) reads as U+FFFD.
    pub fn value(&self) -> Cow<'_, str> {
        if self.0.contains('\\') {
            Cow::Owned(unescape(&self.0))
        } else {
            Cow::Borrowed(&self.0)
        }
    }

    /// Whether the string's value is `s` (without decoding when there is nothing to decode).
    pub fn is(&self, s: &str) -> bool {
        if self.0.contains('\\') {
            unescape(&self.0) == s
        } else {
            self.0 == s
        }
    }
}

impl From<u64> for Json {
    fn from(n: u64) -> Json {
        Json::Number(n.to_string())
    }
}

impl Json {
    pub fn string(value: &str) -> Json {
        Json::String(Str::new(value))
    }

    /// The string's value, if this is a string.
    pub fn as_str(&self) -> Option<Cow<'_, str>> {
        match self {
            Json::String(s) => Some(s.value()),
            _ => None,
        }
    }

    fn entries(&self) -> &[(Str, Json)] {
        match self {
            Json::Object(entries) => entries,
            _ => &[],
        }
    }

    /// The value at `key` (its last one when repeated); `None` on a non-object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        let entries = self.entries();
        entries
            .iter()
            .rev()
            .find(|(k, _)| k.is(key))
            .map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        match self {
            Json::Object(entries) => entries
                .iter_mut()
                .rev()
                .find(|(k, _)| k.is(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// How many times `key` is written in this object.
    pub fn count(&self, key: &str) -> usize {
        self.entries().iter().filter(|(k, _)| k.is(key)).count()
    }

    /// The value at `key` (its last one), added at the end (made by `new`) when missing;
    /// `None` when `self` is not an object.
    pub fn entry(&mut self, key: &str, new: impl FnOnce() -> Json) -> Option<&mut Json> {
        let Json::Object(entries) = self else {
            return None;
        };
        let at = match entries.iter().rposition(|(k, _)| k.is(key)) {
            Some(at) => at,
            None => {
                entries.push((Str::new(key), new()));
                entries.len() - 1
            }
        };
        Some(&mut entries[at].1)
    }

    /// Sets `key` (its last value when present, else a new entry at the end). No-op on a
    /// non-object.
    pub fn set(&mut self, key: &str, value: Json) {
        if let Some(slot) = self.entry(key, || Json::Null) {
            *slot = value;
        }
    }

    /// Removes every entry of `key`.
    pub fn remove(&mut self, key: &str) {
        if let Json::Object(entries) = self {
            entries.retain(|(k, _)| !k.is(key));
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = Cow<'_, str>> {
        self.entries().iter().map(|(k, _)| k.value())
    }
}

// ---- reading ----

/// Why a text is not JSON, and where.
#[derive(Debug)]
pub struct Error {
    what: &'static str,
    line: usize,
    column: usize,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{} at line {} column {}",
            self.what, self.line, self.column
        )
    }
}

impl std::error::Error for Error {}

/// Reads one JSON value (RFC 8259: no comments, no trailing commas, no byte order mark),
/// surrounded by nothing but whitespace.
pub fn parse(text: &str) -> Result<Json, Error> {
    let mut p = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        depth: 0,
    };
    let value = p.value()?;
    p.skip_ws();
    if p.pos < p.bytes.len() {
        return Err(p.error("unexpected text after the JSON value"));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn error(&self, what: &'static str) -> Error {
        let before = &self.text[..self.pos.min(self.text.len())];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Error {
            what,
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let here = self.peek() == Some(b);
        if here {
            self.pos += 1;
        }
        here
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn value(&mut self) -> Result<Json, Error> {
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.nested(Self::object),
            Some(b'[') => self.nested(Self::array),
            Some(b'"') => Ok(Json::String(self.string()?)),
            Some(b't') => self.word("true", Json::Bool(true)),
            Some(b'f') => self.word("false", Json::Bool(false)),
            Some(b'n') => self.word("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("expected a JSON value")),
            None => Err(self.error("the text ends where a value should be")),
        }
    }

    fn nested(&mut self, read: fn(&mut Self) -> Result<Json, Error>) -> Result<Json, Error> {
        if self.depth == MAX_DEPTH {
            return Err(self.error("nested more than 128 levels deep"));
        }
        self.depth += 1;
        self.pos += 1; // the opening bracket
        let value = read(self);
        self.depth -= 1;
        value
    }

    fn object(&mut self) -> Result<Json, Error> {
        let mut entries = Vec::new();
        self.skip_ws();
        if self.eat(b'}') {
            return Ok(Json::Object(entries));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a key in double quotes"));
            }
            let key = self.string()?;
            self.skip_ws();
            if !self.eat(b':') {
                return Err(self.error("expected `:` after a key"));
            }
            let value = self.value()?;
            entries.push((key, value));
            self.skip_ws();
            if self.eat(b'}') {
                return Ok(Json::Object(entries));
            }
            if !self.eat(b',') {
                return Err(self.error("expected `,` or `}`"));
            }
        }
    }

    fn array(&mut self) -> Result<Json, Error> {
        let mut items = Vec::new();
        self.skip_ws();
        if self.eat(b']') {
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_ws();
            if self.eat(b']') {
                return Ok(Json::Array(items));
            }
            if !self.eat(b',') {
                return Err(self.error("expected `,` or `]`"));
            }
        }
    }

    fn word(&mut self, word: &'static str, value: Json) -> Result<Json, Error> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.error("expected a JSON value"))
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, kept as text.
    fn number(&mut self) -> Result<Json, Error> {
        let start = self.pos;
        self.eat(b'-');
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if matches!(self.peek(), Some(b'0'..=b'9')) {
                    return Err(self.error("a number cannot have a leading zero"));
                }
            }
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error("expected a digit")),
        }
        if self.eat(b'.') && self.digits() == 0 {
            return Err(self.error("expected a digit after the decimal point"));
        }
        if self.eat(b'e') || self.eat(b'E') {
            let _ = self.eat(b'+') || self.eat(b'-');
            if self.digits() == 0 {
                return Err(self.error("expected a digit in the exponent"));
            }
        }
        Ok(Json::Number(self.text[start..self.pos].to_string()))
    }

    /// A string, from its opening quote; kept as written, after checking its escapes.
    fn string(&mut self) -> Result<Str, Error> {
        self.pos += 1;
        let start = self.pos;
        loop {
            match self.peek() {
                None => return Err(self.error("the text ends inside a string")),
                Some(b'"') => break,
                Some(b'\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                            self.pos += 1
                        }
                        Some(b'u') => {
                            self.pos += 1;
                            for _ in 0..4 {
                                if !self.peek().is_some_and(|b| b.is_ascii_hexdigit()) {
                                    return Err(self.error("expected four hex digits after \\u"));
                                }
                                self.pos += 1;
                            }
                        }
                        _ => return Err(self.error("invalid escape in a string")),
                    }
                }
                Some(0x00..=0x1f) => {
                    return Err(self.error("a control character in a string must be escaped"));
                }
                // ASCII or part of a UTF-8 sequence: `text` is a `str`, so the sequence is whole
                // and the slice below ends on a character boundary (the closing quote).
                Some(_) => self.pos += 1,
            }
        }
        let raw = self.text[start..self.pos].to_string();
        self.pos += 1;
        Ok(Str(raw))
    }
}

/// Decodes the escapes of a string the parser (or `Str::new`) checked.
fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    let hex4 = |chars: &mut std::str::Chars| -> Option<u32> {
        let digits = chars.as_str().get(..4)?;
        let n = u32::from_str_radix(digits, 16).ok()?;
        chars.nth(3);
        Some(n)
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let decoded = match chars.next() {
            Some('b') => '\u{8}',
            Some('f') => '\u{c}',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('t') => '\t',
            Some('u') => {
                let unit = hex4(&mut chars).unwrap_or(0xfffd);
                if (0xd800..0xdc00).contains(&unit) {
                    // A high surrogate pairs with a `\uDC00`–`\uDFFF` right after it.
                    let mut ahead = chars.clone();
                    let low = (ahead.next() == Some('\\') && ahead.next() == Some('u'))
                        .then(|| hex4(&mut ahead))
                        .flatten()
                        .filter(|low| (0xdc00..0xe000).contains(low));
                    match low {
                        Some(low) => {
                            chars = ahead;
                            char::from_u32(0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00))
                                .unwrap_or('\u{fffd}')
                        }
                        None => '\u{fffd}',
                    }
                } else {
                    char::from_u32(unit).unwrap_or('\u{fffd}')
                }
            }
            Some(c) => c, // `"`, `\` and `/` stand for themselves
            None => break,
        };
        out.push(decoded);
    }
    out
}

// ---- writing ----

/// The document laid out as serde_json's `to_string_pretty` does (two-space indent), with
/// every number and string as it was written.
pub fn to_pretty(doc: &Json) -> String {
    let mut out = String::new();
    write(&mut out, doc, Some(0));
    out
}

/// The document on one line, without spaces.
#[cfg(test)]
pub fn to_compact(doc: &Json) -> String {
    let mut out = String::new();
    write(&mut out, doc, None);
    out
}

/// Writes `value`; `indent` is its nesting level when pretty, `None` when compact.
fn write(out: &mut String, value: &Json, indent: Option<usize>) {
    let inner = indent.map(|level| level + 1);
    let newline = |out: &mut String, level: Option<usize>| {
        if let Some(level) = level {
            out.push('\n');
            for _ in 0..level {
                out.push_str("  ");
            }
        }
    };
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(text) => out.push_str(text),
        Json::String(s) => write_str(out, s),
        Json::Array(items) if items.is_empty() => out.push_str("[]"),
        Json::Object(entries) if entries.is_empty() => out.push_str("{}"),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, inner);
                write(out, item, inner);
            }
            newline(out, indent);
            out.push(']');
        }
        Json::Object(entries) => {
            out.push('{');
            for (i, (key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, inner);
                write_str(out, key);
                out.push_str(if indent.is_some() { ": " } else { ":" });
                write(out, item, inner);
            }
            newline(out, indent);
            out.push('}');
        }
    }
}

fn write_str(out: &mut String, s: &Str) {
    out.push('"');
    out.push_str(&s.0);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        to_compact(&parse(text).unwrap_or_else(|e| panic!("{text}: {e}")))
    }

    #[test]
    fn numbers_keep_their_text() {
        for n in [
            "0",
            "-0",
            "-0.0",
            "1e2",
            "1E+2",
            "2.5e-3",
            "1.50",
            "100.0",
            "12345678901234567890123",
            "-98765432109876543210987654321.000000000000000000001",
            "18446744073709551616",
            "1e400",
            "4.9e-325",
        ] {
            let doc = format!(r#"{{"n":{n},"a":[{n}]}}"#);
            assert_eq!(round_trip(&doc), doc);
            assert_eq!(
                to_pretty(&parse(&doc).unwrap()),
                format!("{{\n  \"n\": {n},\n  \"a\": [\n    {n}\n  ]\n}}")
            );
        }
    }

    #[test]
    fn repeated_keys_are_kept_and_read_as_their_last_value() {
        let text = r#"{"k":1,"x":{"k":[]},"k":2,"k":3}"#;
        let doc = parse(text).unwrap();
        assert_eq!(to_compact(&doc), text);
        assert_eq!(doc.count("k"), 3);
        assert_eq!(doc.get("k"), Some(&Json::Number("3".into())));
        let mut doc = doc;
        doc.set("k", Json::from(4));
        assert_eq!(to_compact(&doc), r#"{"k":1,"x":{"k":[]},"k":2,"k":4}"#);
        doc.remove("k");
        assert_eq!(to_compact(&doc), r#"{"x":{"k":[]}}"#);
    }

    #[test]
    fn strings_keep_their_escapes_and_compare_by_value() {
        let text = r#"{"hook\u0073":"caf\u00e9 \/ \"q\" \ud83d\ude00 \ud800 é","t":"a\tb"}"#;
        let doc = parse(text).unwrap();
        assert_eq!(to_compact(&doc), text);
        assert!(doc.get("hooks").is_some());
        assert_eq!(doc.keys().collect::<Vec<_>>(), ["hooks", "t"]);
        assert_eq!(
            doc.get("hooks").unwrap().as_str().unwrap(),
            "café / \"q\" \u{1f600} \u{fffd} é"
        );
        assert_eq!(doc.get("t").unwrap().as_str().unwrap(), "a\tb");
        // New strings are escaped as serde_json escapes them.
        for s in [
            "plain",
            "quote \" back \\ nl \n tab \t",
            "\u{1} \u{7f} é \u{1f600}",
        ] {
            let ours = to_compact(&Json::string(s));
            assert_eq!(ours, serde_json::to_string(s).unwrap());
            assert_eq!(parse(&ours).unwrap().as_str().unwrap(), s);
        }
    }

    #[test]
    fn the_pretty_layout_is_serde_jsons() {
        // Keys in sorted order, so that serde_json's `Value` keeps them.
        let text = r#"{"a":[1,[],{},{"b":null,"c":[true,false]}],"d":"x","e":{"f":{"g":[]}}}"#;
        let theirs =
            serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(text).unwrap())
                .unwrap();
        assert_eq!(to_pretty(&parse(text).unwrap()), theirs);
        // And whitespace around anything is read.
        assert_eq!(
            round_trip(" \n\t{ \"a\" : [ 1 , 2 ] }\r\n"),
            r#"{"a":[1,2]}"#
        );
    }

    #[test]
    fn what_is_not_json_is_refused_with_a_place() {
        for (bad, why) in [
            ("", "ends where a value"),
            ("{", "expected a key"),
            ("{\"a\" 1}", "expected `:`"),
            ("{\"a\":1,}", "expected a key"),
            ("[1,]", "expected a JSON value"),
            ("[1 2]", "expected `,` or `]`"),
            ("{\"a\":1 \"b\":2}", "expected `,` or `}`"),
            ("01", "leading zero"),
            ("-", "expected a digit"),
            ("1.", "after the decimal point"),
            (".5", "expected a JSON value"),
            ("1e", "in the exponent"),
            ("+1", "expected a JSON value"),
            ("NaN", "expected a JSON value"),
            ("tru", "expected a JSON value"),
            ("\"a\nb\"", "control character"),
            ("\"\\x\"", "invalid escape"),
            ("\"\\u12\"", "four hex digits"),
            ("\"open", "inside a string"),
            ("{} {}", "after the JSON value"),
            ("\u{feff}{}", "expected a JSON value"),
            ("// c\n{}", "expected a JSON value"),
        ] {
            let err = parse(bad).map(|v| to_compact(&v)).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        let err = parse("{\n  \"a\": tru\n}").unwrap_err().to_string();
        assert!(err.ends_with("at line 2 column 8"), "{err}");
    }

    #[test]
    fn nesting_is_bounded() {
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(round_trip(&ok), ok);
        let deep = "[".repeat(100_000);
        let err = parse(&deep).unwrap_err().to_string();
        assert!(err.contains("nested more than 128"), "{err}");
    }

    #[test]
    fn two_hundred_thousand_keys_read_and_write_back_unchanged() {
        // Reading used to look up every key among those before it, which took minutes here.
        let mut text = String::from("{");
        for i in 0..200_000 {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&format!("\"k{}\":{i}", i % 150_000)); // some keys twice
        }
        text.push('}');
        let doc = parse(&text).unwrap();
        assert_eq!(doc.keys().count(), 200_000);
        assert_eq!(doc.count("k7"), 2);
        assert_eq!(to_compact(&doc), text);
        let pretty = to_pretty(&doc);
        assert_eq!(parse(&pretty).unwrap(), doc);
    }
}
