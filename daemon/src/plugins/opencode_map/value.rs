//! OpenCode's JSON read as the Lua file reads it, and payloads built as its tables serialize.
//!
//! What the Lua side does to values, kept here so that the output is the same: a JSON array
//! is a table without fields; `null` is a value (present, truthy in `a or b`) but no table
//! and no string; `false` is falsy; an integer beyond `i64` reaches Lua as a float and comes
//! back as one.

use serde_json::{Map, Number, Value as Json};

/// A JSON value as a Lua table to read fields from (the Lua file's `tbl(v)`): an object's
/// fields; an array, or anything that is not a table, has none.
#[derive(Clone, Copy)]
pub(super) struct Table<'a>(Option<&'a Map<String, Json>>);

impl<'a> Table<'a> {
    pub fn of(v: Option<&'a Json>) -> Table<'a> {
        Table(v.and_then(Json::as_object))
    }

    /// `t.key`: absent is Lua's nil (a JSON null is present).
    pub fn get(self, key: &str) -> Option<&'a Json> {
        self.0?.get(key)
    }

    /// `str(t.key)`.
    pub fn str(self, key: &str) -> Option<&'a str> {
        self.get(key)?.as_str()
    }

    /// `tbl(t.key)`.
    pub fn table(self, key: &str) -> Table<'a> {
        Table::of(self.get(key))
    }

    /// `valid_id(t.key)`.
    pub fn id(self, key: &str) -> Option<&'a str> {
        valid_id(self.get(key))
    }

    /// `num(t.key)`.
    pub fn num(self, key: &str) -> Option<&'a Json> {
        self.get(key).filter(|v| v.is_number())
    }
}

/// Whether `type(v) == "table"`: an object or an array.
pub(super) fn is_table(v: Option<&Json>) -> bool {
    matches!(v, Some(Json::Object(_) | Json::Array(_)))
}

/// Lua's `a or b`: `a` unless it is nil or false (a JSON null is kept).
pub(super) fn or<'a>(a: Option<&'a Json>, b: Option<&'a Json>) -> Option<&'a Json> {
    match a {
        None | Some(Json::Bool(false)) => b,
        _ => a,
    }
}

/// An id the mapping takes as a session (or child session) id: up to 128 bytes of ASCII
/// letters, digits, `-`, `_` and `.`, not starting with a dot (no path can be made of it).
pub(super) fn valid_id(v: Option<&Json>) -> Option<&str> {
    let s = v?.as_str()?;
    let ok = !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    ok.then_some(s)
}

/// A value of the input as the Lua file emits it: the same, except that an integer beyond
/// `i64` went through Lua as a float.
pub(super) fn copy(v: &Json) -> Json {
    match v {
        Json::Number(n) => match n.as_u64() {
            Some(u) if u > i64::MAX as u64 => Json::from(u as f64),
            _ => v.clone(),
        },
        Json::Array(items) => Json::Array(items.iter().map(copy).collect()),
        Json::Object(map) => Json::Object(map.iter().map(|(k, v)| (k.clone(), copy(v))).collect()),
        _ => v.clone(),
    }
}

/// A Lua number: integer and float arithmetic differ.
#[derive(Clone, Copy)]
enum LuaNum {
    Int(i64),
    Float(f64),
}

impl LuaNum {
    fn of(v: Option<&Json>) -> Option<LuaNum> {
        let n = v?.as_number()?;
        Some(match n.as_i64() {
            Some(i) => LuaNum::Int(i),
            None => LuaNum::Float(n.as_f64()?),
        })
    }

    fn float(self) -> f64 {
        match self {
            LuaNum::Int(i) => i as f64,
            LuaNum::Float(f) => f,
        }
    }
}

/// `end - start` of a `time` table, as Lua 5.4 computes it (integers wrap, a float on either
/// side makes a float). A difference that is not a JSON number (infinite) fails the call, as
/// emitting it fails in Lua.
pub(super) fn duration(time: Table) -> Result<Option<Json>, String> {
    let (Some(a), Some(b)) = (LuaNum::of(time.get("start")), LuaNum::of(time.get("end"))) else {
        return Ok(None);
    };
    if let (LuaNum::Int(a), LuaNum::Int(b)) = (a, b) {
        return Ok(Some(Json::from(b.wrapping_sub(a))));
    }
    let d = b.float() - a.float();
    Number::from_f64(d)
        .map(|n| Some(Json::Number(n)))
        .ok_or_else(|| format!("{d} is not a JSON number"))
}

/// A value as a payload field: `None` is Lua's nil, a field left out.
pub(super) trait Field {
    fn into_field(self) -> Option<Json>;
}

impl Field for Json {
    fn into_field(self) -> Option<Json> {
        Some(self)
    }
}

impl Field for &Json {
    fn into_field(self) -> Option<Json> {
        Some(copy(self))
    }
}

impl Field for &str {
    fn into_field(self) -> Option<Json> {
        Some(Json::String(self.to_owned()))
    }
}

impl Field for String {
    fn into_field(self) -> Option<Json> {
        Some(Json::String(self))
    }
}

impl Field for bool {
    fn into_field(self) -> Option<Json> {
        Some(Json::Bool(self))
    }
}

impl Field for usize {
    fn into_field(self) -> Option<Json> {
        Some(Json::from(self))
    }
}

/// A nil field (`None`) is left out, as Lua leaves out a nil in a table constructor.
impl<T: Field> Field for Option<T> {
    fn into_field(self) -> Option<Json> {
        self.and_then(Field::into_field)
    }
}

/// An event's payload, as the Lua table it stands for serializes: the fields that are not nil.
#[derive(Default)]
pub(super) struct Payload(Map<String, Json>);

impl Payload {
    pub fn with(mut self, key: &str, value: impl Field) -> Payload {
        self.set(key, value);
        self
    }

    pub fn set(&mut self, key: &str, value: impl Field) {
        match value.into_field() {
            Some(v) => self.0.insert(key.to_owned(), v),
            None => self.0.remove(key),
        };
    }

    pub fn get(&self, key: &str) -> Option<&Json> {
        self.0.get(key)
    }

    pub fn into_json(self) -> Json {
        Json::Object(self.0)
    }
}
