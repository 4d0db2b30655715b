//! Reading a message as the Lua host gives it to the Lua file, and building tables as its
//! constructors do.

use serde_json::{Map, Number, Value as Json};

/// The Lua host's limit on how deep tables may nest in what a call emits
/// (`luajson::MAX_DEPTH`): past it the whole call fails there.
const MAX_DEPTH: usize = 128;

/// A value as the Lua's `tbl` gives it: an object; an array, which has no named fields and
/// whose items `ipairs` walks (null is an item, not the end); or the empty table.
#[derive(Clone, Copy)]
pub(super) enum Tbl<'a> {
    Object(&'a Map<String, Json>),
    Array(&'a [Json]),
    Empty,
}

impl<'a> Tbl<'a> {
    pub(super) fn of(v: Option<&'a Json>) -> Tbl<'a> {
        match v {
            Some(Json::Object(m)) => Tbl::Object(m),
            Some(Json::Array(a)) => Tbl::Array(a),
            _ => Tbl::Empty,
        }
    }

    pub(super) fn get(self, key: &str) -> Option<&'a Json> {
        match self {
            Tbl::Object(m) => m.get(key),
            _ => None,
        }
    }

    /// `ipairs`: an object has no item 1.
    pub(super) fn items(self) -> &'a [Json] {
        match self {
            Tbl::Array(a) => a,
            _ => &[],
        }
    }

    /// A string field (the Lua's `str(t.key)`).
    pub(super) fn str(self, key: &str) -> Option<&'a str> {
        self.get(key)?.as_str()
    }
}

/// A session id taken as it is (the Lua's `valid_id`; its `%w` is ASCII only): safe as a
/// file name, and not hidden.
pub(super) fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

pub(super) fn ulid() -> String {
    ulid::Ulid::new().to_string()
}

/// A Lua table constructor: the fields whose value is not nil.
pub(super) fn table<const N: usize>(fields: [(&str, Option<Json>); N]) -> Map<String, Json> {
    let mut m = Map::new();
    for (k, v) in fields {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    }
    m
}

/// A string field's value, as `str(v)` gives it to a table constructor.
pub(super) fn text(s: Option<&str>) -> Option<Json> {
    s.map(|s| Json::String(s.to_owned()))
}

pub(super) fn lit(s: &str) -> Option<Json> {
    Some(Json::String(s.to_owned()))
}

/// A field of the message as it is: absent stays absent, null stays null.
pub(super) fn copy(v: Option<&Json>) -> Option<Json> {
    v.cloned()
}

pub(super) fn is_tool_block(t: Option<&str>) -> bool {
    matches!(t, Some("tool_use" | "server_tool_use" | "mcp_tool_use"))
}

/// What the Lua host does to an event it reads back: a number beyond i64 was a float in Lua;
/// a table nested MAX_DEPTH deep fails the call.
pub(super) fn read_back(v: &mut Json, depth: usize) -> Result<(), String> {
    match v {
        Json::Number(n) if n.as_i64().is_none() && n.is_u64() => {
            if let Some(f) = n.as_f64().and_then(Number::from_f64) {
                *n = f;
            }
        }
        Json::Array(items) => {
            if depth >= MAX_DEPTH {
                return Err(too_deep());
            }
            for item in items {
                read_back(item, depth + 1)?;
            }
        }
        Json::Object(m) => {
            if depth >= MAX_DEPTH {
                return Err(too_deep());
            }
            for item in m.values_mut() {
                read_back(item, depth + 1)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn too_deep() -> String {
    format!("tables nest more than {MAX_DEPTH} levels deep (or a table contains itself)")
}
