//! The built-in `claude-agent-sdk` mapping, in Rust: the twin of `plugins/claude-agent-sdk.lua`,
//! event for event and state for state (a test runs the same sequences of SDK messages through
//! both and holds them to the same output, call by call), without handing every message to Lua
//! and back. The Lua file stays the reference: it documents the mapping, and it is what a user
//! copies to change it (a `claude-agent-sdk.lua` in the plugin folder replaces this).
//!
//! Parity reaches into how the Lua host reads JSON: a JSON null is a value (present, truthy,
//! neither a string nor a table), an array has no named fields and an object no items, a
//! table's keys 1 and 1.0 are one key but "1" another, a number beyond i64 is a float, and
//! the host refuses a call that emits more than 256 events or tables nested 128 deep.

use std::collections::{HashMap, HashSet};
use std::mem;

use serde_json::{Map, Number, Value as Json};

use super::native_builtin::Mapping;

const ACTOR: &str = "claude-agent-sdk";
/// Sessions remembered, per generation (two generations), as the Lua's `MAX_SESSIONS`.
pub(super) const MAX_SESSIONS: usize = 1024;
/// Session ids remembered for created/resumed, per generation, as the Lua's `MAX_KNOWN`.
pub(super) const MAX_KNOWN: usize = 8192;
/// Tool calls remembered per session within a turn, as the Lua's `MAX_CALLS`.
pub(super) const MAX_CALLS: usize = 1024;
/// The Lua host's limits on one call: events emitted (`lua::output::MAX_EMITS`), and how deep
/// tables may nest in one (`luajson::MAX_DEPTH`). Past either the whole call fails there.
const MAX_EMITS: usize = 256;
const MAX_DEPTH: usize = 128;

/// The mapping, with nothing remembered yet. It has no settings.
pub(super) fn new(_config: &Json) -> Box<dyn Mapping> {
    Box::<AgentSdk>::default()
}

#[derive(Default)]
struct AgentSdk {
    sessions: Sessions,
    known: Known,
}

/// What is remembered of one session (a subagent's is a session of its own).
#[derive(Default)]
struct Session {
    /// The uuid of the turn's first message: every event's correlation_id.
    turn: Option<String>,
    /// The content blocks of the message being streamed, by their index.
    blocks: HashMap<BlockKey, Block>,
    message_id: Option<String>,
    /// Message ids whose stream events were seen: their `assistant` message is compact.
    streamed: HashSet<String>,
    /// Tool call id -> id of the call's last chunk (what its tool-result is caused by).
    calls: HashMap<String, String>,
    /// Tool call id -> the subagent session it spawned. Outlives the turn, as in the Lua.
    children: HashMap<String, String>,
}

impl Session {
    /// The Lua's `fresh(s)` at a `result`: the turn is over; the subagents are not.
    fn end_turn(&mut self) {
        *self = Session {
            children: mem::take(&mut self.children),
            ..Session::default()
        };
    }

    /// The Lua's `remember_call`: at most MAX_CALLS, then it starts over.
    fn remember_call(&mut self, id: &str, event_id: String) {
        if let Some(last) = self.calls.get_mut(id) {
            *last = event_id;
            return;
        }
        if self.calls.len() >= MAX_CALLS {
            self.calls.clear();
        }
        self.calls.insert(id.to_owned(), event_id);
    }
}

/// A content block being streamed.
#[derive(Default)]
struct Block {
    block_type: Option<String>,
    id: Option<String>,
    name: Option<String>,
    /// The tool call's JSON so far; `None` for a block that is not a tool call.
    json: Option<String>,
    /// Id of the block's last chunk.
    chunk: Option<String>,
}

/// A block's `index` as a Lua table key. Lua 5.4 stores a float with an integer value as that
/// integer (1.0 and 1 are one key, as are -0.0 and 0); a string is a key of its own; JSON
/// null is a (light userdata) key too. A table (array or object) is absent: the message is a
/// fresh table every call, so no later call can look one up.
#[derive(PartialEq, Eq, Hash)]
enum BlockKey {
    Int(i64),
    /// The bits of a float with a fraction, or beyond i64 (JSON has no NaN; -0.0 is 0).
    Float(u64),
    Str(String),
    Bool(bool),
    Null,
}

impl BlockKey {
    fn of(v: Option<&Json>) -> Option<BlockKey> {
        Some(match v? {
            Json::Null => BlockKey::Null,
            Json::Bool(b) => BlockKey::Bool(*b),
            Json::String(s) => BlockKey::Str(s.clone()),
            Json::Number(n) => match n.as_i64() {
                Some(i) => BlockKey::Int(i),
                None => {
                    let f = n.as_f64()?;
                    // -2^63 <= f < 2^63: exactly an i64 when it has no fraction.
                    let two_63 = -(i64::MIN as f64);
                    if f.fract() == 0.0 && (-two_63..two_63).contains(&f) {
                        BlockKey::Int(f as i64)
                    } else {
                        BlockKey::Float(f.to_bits())
                    }
                }
            },
            Json::Array(_) | Json::Object(_) => return None,
        })
    }
}

/// Two generations of sessions, as the Lua's `state(sid)`: one is looked up in the current
/// generation, then moved from the old one; a full current generation becomes the old one.
#[derive(Default)]
struct Sessions {
    current: HashMap<String, Session>,
    old: HashMap<String, Session>,
}

impl Sessions {
    /// The session `id`, made current (the error cannot happen: it was just inserted).
    fn get(&mut self, id: &str) -> Result<&mut Session, String> {
        if !self.current.contains_key(id) {
            let s = self.old.remove(id).unwrap_or_default();
            if self.current.len() >= MAX_SESSIONS {
                self.old = mem::take(&mut self.current);
            }
            self.current.insert(id.to_owned(), s);
        }
        self.current
            .get_mut(id)
            .ok_or_else(|| "internal: a session state was lost".to_string())
    }
}

/// Session ids seen in a system init, in two generations (a lookup does not move one).
#[derive(Default)]
struct Known {
    current: HashSet<String>,
    old: HashSet<String>,
}

impl Known {
    fn seen_before(&mut self, id: &str) -> bool {
        if self.current.contains(id) || self.old.contains(id) {
            return true;
        }
        if self.current.len() >= MAX_KNOWN {
            self.old = mem::take(&mut self.current);
        }
        self.current.insert(id.to_owned());
        false
    }
}

/// A value as the Lua's `tbl` gives it: an object; an array, which has no named fields and
/// whose items `ipairs` walks (null is an item, not the end); or the empty table.
#[derive(Clone, Copy)]
enum Tbl<'a> {
    Object(&'a Map<String, Json>),
    Array(&'a [Json]),
    Empty,
}

impl<'a> Tbl<'a> {
    fn of(v: Option<&'a Json>) -> Tbl<'a> {
        match v {
            Some(Json::Object(m)) => Tbl::Object(m),
            Some(Json::Array(a)) => Tbl::Array(a),
            _ => Tbl::Empty,
        }
    }

    fn get(self, key: &str) -> Option<&'a Json> {
        match self {
            Tbl::Object(m) => m.get(key),
            _ => None,
        }
    }

    /// `ipairs`: an object has no item 1.
    fn items(self) -> &'a [Json] {
        match self {
            Tbl::Array(a) => a,
            _ => &[],
        }
    }

    /// A string field (the Lua's `str(t.key)`).
    fn str(self, key: &str) -> Option<&'a str> {
        self.get(key)?.as_str()
    }
}

/// A session id taken as it is (the Lua's `valid_id`; its `%w` is ASCII only): safe as a
/// file name, and not hidden.
fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn ulid() -> String {
    ulid::Ulid::new().to_string()
}

/// A Lua table constructor: the fields whose value is not nil.
fn table<const N: usize>(fields: [(&str, Option<Json>); N]) -> Map<String, Json> {
    let mut m = Map::new();
    for (k, v) in fields {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    }
    m
}

/// A string field's value, as `str(v)` gives it to a table constructor.
fn text(s: Option<&str>) -> Option<Json> {
    s.map(|s| Json::String(s.to_owned()))
}

fn lit(s: &str) -> Option<Json> {
    Some(Json::String(s.to_owned()))
}

/// A field of the message as it is: absent stays absent, null stays null.
fn copy(v: Option<&Json>) -> Option<Json> {
    v.cloned()
}

fn is_tool_block(t: Option<&str>) -> bool {
    matches!(t, Some("tool_use" | "server_tool_use" | "mcp_tool_use"))
}

/// What the Lua host does to an event it reads back: a number beyond i64 was a float in Lua;
/// a table nested MAX_DEPTH deep fails the call.
fn read_back(v: &mut Json, depth: usize) -> Result<(), String> {
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

/// The metadata a stream event adds to what it emits.
struct StreamMeta<'a> {
    event: Option<&'a str>,
    message_id: Option<&'a Json>,
    args_error: Option<String>,
}

/// The Lua's `out(type, payload, o)` options.
#[derive(Default)]
struct Opts<'m> {
    id: Option<String>,
    causation_id: Option<String>,
    by_user: bool,
    meta: Option<&'m StreamMeta<'m>>,
}

/// One call: the message, where its events go, and the events so far.
struct Call<'a> {
    raw: Tbl<'a>,
    session_id: Option<String>,
    stream_id: Option<&'a str>,
    correlation_id: Option<String>,
    events: Vec<Json>,
}

impl<'a> Call<'a> {
    fn new(raw: Tbl<'a>) -> Call<'a> {
        Call {
            raw,
            session_id: None,
            stream_id: None,
            correlation_id: None,
            events: Vec::new(),
        }
    }

    fn out(&mut self, event_type: &str, payload: Map<String, Json>, o: Opts) -> Result<(), String> {
        if self.events.len() >= MAX_EMITS {
            return Err(format!(
                "emit called more than {MAX_EMITS} times in one call"
            ));
        }
        let mut meta = table([
            ("hook", text(self.raw.str("type"))),
            ("uuid", text(self.raw.str("uuid"))),
        ]);
        if let Some(m) = o.meta {
            if let Some(event) = m.event {
                meta.insert("event".into(), event.into());
            }
            if let Some(id) = m.message_id {
                meta.insert("message_id".into(), id.clone());
            }
            if let Some(e) = &m.args_error {
                meta.insert("args_error".into(), e.as_str().into());
            }
        }
        let mut e = Map::new();
        e.insert("type".into(), event_type.into());
        e.insert("payload".into(), Json::Object(payload));
        e.insert(
            "actor".into(),
            if o.by_user { "user" } else { ACTOR }.into(),
        );
        e.insert("metadata".into(), Json::Object(meta));
        if let Some(s) = &self.session_id {
            e.insert("session_id".into(), s.as_str().into());
        }
        if let Some(s) = self.stream_id {
            e.insert("stream_id".into(), s.into());
        }
        if let Some(c) = &self.correlation_id {
            e.insert("correlation_id".into(), c.as_str().into());
        }
        if let Some(id) = o.id {
            e.insert("id".into(), id.into());
        }
        if let Some(c) = o.causation_id {
            e.insert("causation_id".into(), c.into());
        }
        let mut e = Json::Object(e);
        read_back(&mut e, 0)?;
        self.events.push(e);
        Ok(())
    }

    fn chunk(&mut self, c: Map<String, Json>, o: Opts) -> Result<(), String> {
        self.out("message.chunk", c, o)
    }

    fn unmapped(&mut self, hint: &str) -> Result<(), String> {
        let payload = table([
            ("source", lit(ACTOR)),
            ("message_type", copy(self.raw.get("type"))),
            ("subtype", copy(self.raw.get("subtype"))),
            ("hint", lit(hint)),
        ]);
        self.out("unmapped", payload, Opts::default())
    }

    /// The tool-call chunk of a complete tool_use block; remembered when there is a session.
    fn tool_call(
        &mut self,
        s: Option<&mut Session>,
        id: Option<&str>,
        name: Option<&str>,
        args: Option<Json>,
        cause: Option<String>,
        meta: Option<&StreamMeta>,
    ) -> Result<(), String> {
        let event_id = ulid();
        let c = table([
            ("type", lit("tool-call")),
            ("toolCallId", text(id)),
            ("toolName", text(name)),
            ("args", args),
        ]);
        let o = Opts {
            id: Some(event_id.clone()),
            causation_id: cause,
            meta,
            ..Opts::default()
        };
        self.chunk(c, o)?;
        if let (Some(s), Some(id)) = (s, id) {
            s.remember_call(id, event_id);
        }
        Ok(())
    }
}

impl Mapping for AgentSdk {
    fn map(&mut self, raw: &Json, _source: &str) -> Result<Vec<Json>, String> {
        let raw = match raw {
            Json::Object(m) => Tbl::Object(m),
            // An array is a Lua table too: a message with no fields.
            Json::Array(a) => Tbl::Array(a),
            _ => {
                let mut cx = Call::new(Tbl::Empty);
                cx.unmapped("not an SDK message object")?;
                return Ok(cx.events);
            }
        };
        let mut cx = Call::new(raw);
        let sid = raw.str("session_id").filter(|s| valid_id(s));
        let mut key = None;
        if let Some(sid) = sid {
            let parent_tool = raw.str("parent_tool_use_id");
            let child = parent_tool
                .map(|p| format!("{sid}.agent-{p}"))
                .filter(|c| valid_id(c));
            match (parent_tool, child) {
                (Some(tool), Some(child)) => {
                    let parent = self.sessions.get(sid)?;
                    if !parent.children.contains_key(tool) {
                        parent.children.insert(tool.to_owned(), child.clone());
                        // In the parent's log, and its turn.
                        cx.session_id = Some(sid.to_owned());
                        cx.correlation_id = parent.turn.clone();
                        let payload = table([
                            ("child_session_id", lit(&child)),
                            ("tool_use_id", lit(tool)),
                        ]);
                        cx.out("agent.spawned", payload, Opts::default())?;
                    }
                    cx.stream_id = Some(sid);
                    key = Some(child);
                }
                _ => key = Some(sid.to_owned()),
            }
        }
        let s = match &key {
            Some(k) => {
                let s = self.sessions.get(k)?;
                if s.turn.is_none() {
                    s.turn = raw.str("uuid").map(str::to_owned);
                }
                // The turn changes only at a result, after its events.
                cx.correlation_id = s.turn.clone();
                Some(s)
            }
            None => None,
        };
        cx.session_id = key;

        let t = raw.get("type");
        match t.and_then(Json::as_str) {
            Some("stream_event") => {
                // Without a session, what a stream event remembers is dropped with the call.
                let mut scratch = Session::default();
                let s = s.unwrap_or(&mut scratch);
                stream_event(&mut cx, s, Tbl::of(raw.get("event")))?;
            }
            Some("assistant") => assistant(&mut cx, s, Tbl::of(raw.get("message")))?,
            Some("user") => user(&mut cx, s, Tbl::of(raw.get("message")))?,
            Some("result") => {
                result(&mut cx, raw)?;
                if let Some(s) = s {
                    s.end_turn();
                }
            }
            Some("system") => match raw.str("subtype") {
                Some("init") => {
                    let again = sid.is_some_and(|sid| self.known.seen_before(sid));
                    let event_type = if again {
                        "lifecycle.session.resumed"
                    } else {
                        "lifecycle.session.created"
                    };
                    let payload = table([
                        ("model", copy(raw.get("model"))),
                        ("cwd", copy(raw.get("cwd"))),
                        ("permission_mode", copy(raw.get("permissionMode"))),
                        ("claude_code_version", copy(raw.get("claude_code_version"))),
                        ("output_style", copy(raw.get("output_style"))),
                    ]);
                    cx.out(event_type, payload, Opts::default())?;
                }
                Some("status") => {
                    let payload = table([("status", copy(raw.get("status")))]);
                    cx.out("lifecycle.session.status", payload, Opts::default())?;
                }
                Some("compact_boundary") => {
                    let cm = Tbl::of(raw.get("compact_metadata"));
                    let payload = table([
                        ("trigger", copy(cm.get("trigger"))),
                        ("pre_tokens", copy(cm.get("pre_tokens"))),
                    ]);
                    cx.out("lifecycle.session.compacted", payload, Opts::default())?;
                }
                _ => cx.unmapped("system message subtype not known to this mapping")?,
            },
            // A JSON null type is a value in Lua, not a missing one.
            _ if t.is_none() => cx.unmapped("message without a type")?,
            _ => cx.unmapped("SDK message type not known to this mapping")?,
        }
        Ok(cx.events)
    }
}

fn stream_event(cx: &mut Call, s: &mut Session, ev: Tbl) -> Result<(), String> {
    let et = ev.str("type");
    let index = ev.get("index");
    let mut meta = StreamMeta {
        event: et,
        message_id: cx.raw.get("api_message_id"),
        args_error: None,
    };
    match et {
        Some("content_block_delta") => {
            let d = Tbl::of(ev.get("delta"));
            let dt = d.get("type");
            let o = Opts {
                meta: Some(&meta),
                ..Opts::default()
            };
            match dt.and_then(Json::as_str) {
                Some("text_delta") => {
                    let c = table([
                        ("type", lit("text-delta")),
                        ("textDelta", copy(d.get("text"))),
                    ]);
                    cx.chunk(c, o)
                }
                Some("thinking_delta") => {
                    let c = table([
                        ("type", lit("reasoning")),
                        ("textDelta", copy(d.get("thinking"))),
                    ]);
                    cx.chunk(c, o)
                }
                Some("input_json_delta") => {
                    let mut b = BlockKey::of(index).and_then(|k| s.blocks.get_mut(&k));
                    if let (Some(json), Some(part)) = (
                        b.as_deref_mut().and_then(|b| b.json.as_mut()),
                        d.str("partial_json"),
                    ) {
                        json.push_str(part);
                    }
                    let event_id = ulid();
                    let c = table([
                        ("type", lit("tool-call-delta")),
                        ("toolCallId", text(b.as_ref().and_then(|b| b.id.as_deref()))),
                        ("argsTextDelta", copy(d.get("partial_json"))),
                    ]);
                    let o = Opts {
                        id: Some(event_id.clone()),
                        causation_id: b.as_ref().and_then(|b| b.chunk.clone()),
                        ..o
                    };
                    cx.chunk(c, o)?;
                    // Any block, a tool call or not, chains the deltas it is given.
                    if let Some(b) = b {
                        b.chunk = Some(event_id);
                    }
                    Ok(())
                }
                _ => {
                    let payload = table([
                        ("event", text(et)),
                        ("index", copy(index)),
                        ("delta_type", copy(dt)),
                    ]);
                    plain(cx, payload, &meta)
                }
            }
        }
        Some("content_block_start") => {
            let cb = Tbl::of(ev.get("content_block"));
            let bt = cb.str("type");
            if is_tool_block(bt) {
                let event_id = ulid();
                let (id, name) = (cb.str("id"), cb.str("name"));
                if let Some(k) = BlockKey::of(index) {
                    let b = Block {
                        block_type: bt.map(str::to_owned),
                        id: id.map(str::to_owned),
                        name: name.map(str::to_owned),
                        json: Some(String::new()),
                        chunk: Some(event_id.clone()),
                    };
                    s.blocks.insert(k, b);
                }
                let c = table([
                    ("type", lit("tool-call-streaming-start")),
                    ("toolCallId", text(id)),
                    ("toolName", text(name)),
                ]);
                let o = Opts {
                    id: Some(event_id),
                    meta: Some(&meta),
                    ..Opts::default()
                };
                return cx.chunk(c, o);
            }
            if let Some(k) = BlockKey::of(index) {
                let b = Block {
                    block_type: bt.map(str::to_owned),
                    ..Block::default()
                };
                s.blocks.insert(k, b);
            }
            let payload = table([
                ("event", text(et)),
                ("index", copy(index)),
                ("block_type", text(bt)),
            ]);
            plain(cx, payload, &meta)
        }
        Some("content_block_stop") => {
            let b = BlockKey::of(index).and_then(|k| s.blocks.remove(&k));
            match b {
                Some(Block {
                    json: Some(json),
                    id,
                    name,
                    chunk,
                    ..
                }) => {
                    let args = if json.is_empty() {
                        Json::Object(Map::new())
                    } else {
                        match serde_json::from_slice(json.as_bytes()) {
                            Ok(v) => v,
                            Err(e) => {
                                // What the Lua keeps of host.json_decode's error: its first line.
                                let e = e.to_string();
                                meta.args_error =
                                    Some(e.split('\n').next().unwrap_or_default().to_owned());
                                Json::String(json)
                            }
                        }
                    };
                    let (id, name) = (id.as_deref(), name.as_deref());
                    cx.tool_call(Some(s), id, name, Some(args), chunk, Some(&meta))
                }
                b => {
                    let payload = table([
                        ("event", text(et)),
                        ("index", copy(index)),
                        ("block_type", b.and_then(|b| b.block_type).map(Json::String)),
                    ]);
                    plain(cx, payload, &meta)
                }
            }
        }
        Some("message_start") => {
            let msg = Tbl::of(ev.get("message"));
            let mid = msg.str("id").or_else(|| cx.raw.str("api_message_id"));
            s.blocks = HashMap::new();
            s.message_id = mid.map(str::to_owned);
            if let Some(mid) = mid {
                s.streamed.insert(mid.to_owned());
            }
            let payload = table([
                ("message_id", text(mid)),
                ("model", copy(msg.get("model"))),
                ("usage", copy(msg.get("usage"))),
            ]);
            let o = Opts {
                meta: Some(&meta),
                ..Opts::default()
            };
            cx.out("execution.step_start", payload, o)
        }
        Some("message_delta") => {
            let d = Tbl::of(ev.get("delta"));
            let message_id = match &s.message_id {
                Some(m) => lit(m),
                None => copy(cx.raw.get("api_message_id")),
            };
            let payload = table([
                ("message_id", message_id),
                ("stop_reason", copy(d.get("stop_reason"))),
                ("usage", copy(ev.get("usage"))),
            ]);
            let o = Opts {
                meta: Some(&meta),
                ..Opts::default()
            };
            cx.out("execution.step_finish", payload, o)
        }
        Some("message_stop") => {
            s.blocks = HashMap::new();
            plain(cx, table([("event", text(et))]), &meta)
        }
        Some("error") => {
            let err = Tbl::of(ev.get("error"));
            let payload = table([
                ("error", copy(err.get("type"))),
                ("message", copy(err.get("message"))),
            ]);
            let o = Opts {
                meta: Some(&meta),
                ..Opts::default()
            };
            cx.out("session.error", payload, o)
        }
        _ => plain(cx, table([("event", text(et))]), &meta),
    }
}

/// A `message.stream_event`: a stream event with no event of its own in the taxonomy.
fn plain(cx: &mut Call, payload: Map<String, Json>, meta: &StreamMeta) -> Result<(), String> {
    let o = Opts {
        meta: Some(meta),
        ..Opts::default()
    };
    cx.out("message.stream_event", payload, o)
}

fn assistant(cx: &mut Call, mut s: Option<&mut Session>, msg: Tbl) -> Result<(), String> {
    let mid = msg.str("id");
    let content = Tbl::of(msg.get("content")).items();
    let blocks = content
        .iter()
        .map(|b| {
            let b = Tbl::of(Some(b));
            Json::Object(table([
                ("type", copy(b.get("type"))),
                ("id", copy(b.get("id"))),
                ("name", copy(b.get("name"))),
            ]))
        })
        .collect();
    let streamed = match (s.as_deref(), mid) {
        (Some(s), Some(mid)) => s.streamed.contains(mid),
        _ => false,
    };
    let payload = table([
        ("role", lit("assistant")),
        ("message_id", text(mid)),
        ("model", copy(msg.get("model"))),
        ("stop_reason", copy(msg.get("stop_reason"))),
        ("usage", copy(msg.get("usage"))),
        ("blocks", Some(Json::Array(blocks))),
        ("streamed", Some(Json::Bool(streamed))),
    ]);
    cx.out("message.completed", payload, Opts::default())?;
    if streamed {
        return Ok(());
    }
    // Not streamed (no stream events for it, e.g. without includePartialMessages): its
    // content as the chunks streaming would have given.
    for b in content {
        let b = Tbl::of(Some(b));
        match b.str("type") {
            Some("text") => {
                let c = table([
                    ("type", lit("text-delta")),
                    ("textDelta", copy(b.get("text"))),
                ]);
                cx.chunk(c, Opts::default())?;
            }
            Some("thinking") => {
                let c = table([
                    ("type", lit("reasoning")),
                    ("textDelta", copy(b.get("thinking"))),
                ]);
                cx.chunk(c, Opts::default())?;
            }
            t if is_tool_block(t) => {
                let (id, name) = (b.str("id"), b.str("name"));
                cx.tool_call(s.as_deref_mut(), id, name, copy(b.get("input")), None, None)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn user(cx: &mut Call, mut s: Option<&mut Session>, msg: Tbl) -> Result<(), String> {
    let content = msg.get("content");
    if let Some(Json::String(t)) = content {
        let o = Opts {
            by_user: true,
            ..Opts::default()
        };
        return cx.out("user.input", table([("text", lit(t))]), o);
    }
    let mut texts: Vec<&str> = Vec::new();
    let mut emitted = false;
    for b in Tbl::of(content).items() {
        let b = Tbl::of(Some(b));
        match b.str("type") {
            Some("tool_result") => {
                let id = b.str("tool_use_id");
                let is_error = b.get("is_error") == Some(&Json::Bool(true));
                let cause = match (s.as_deref(), id) {
                    (Some(s), Some(id)) => s.calls.get(id).cloned(),
                    _ => None,
                };
                let c = table([
                    ("type", lit("tool-result")),
                    ("toolCallId", text(id)),
                    ("result", copy(b.get("content"))),
                    ("isError", is_error.then_some(Json::Bool(true))),
                ]);
                let o = Opts {
                    causation_id: cause,
                    ..Opts::default()
                };
                cx.chunk(c, o)?;
                emitted = true;
                if let (Some(s), Some(id)) = (s.as_deref_mut(), id)
                    && let Some(child) = s.children.get(id)
                {
                    let payload = table([
                        ("child_session_id", lit(child)),
                        ("tool_use_id", lit(id)),
                        ("is_error", Some(Json::Bool(is_error))),
                    ]);
                    cx.out("agent.completed", payload, Opts::default())?;
                    s.children.remove(id);
                }
            }
            Some("text") => texts.extend(b.str("text")),
            _ => {}
        }
    }
    if !texts.is_empty() {
        let o = Opts {
            by_user: true,
            ..Opts::default()
        };
        cx.out("user.input", table([("text", lit(&texts.join("\n")))]), o)?;
        emitted = true;
    }
    if !emitted {
        cx.unmapped("user message without text or tool results")?;
    }
    Ok(())
}

fn finish_reason(stop_reason: &str) -> Option<&'static str> {
    Some(match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "max_tokens" => "length",
        "tool_use" => "tool-calls",
        "refusal" => "content-filter",
        "pause_turn" => "other",
        _ => return None,
    })
}

fn result(cx: &mut Call, raw: Tbl) -> Result<(), String> {
    let subtype = raw.get("subtype");
    // A null subtype is not nil: a failure.
    let failed = raw.get("is_error") == Some(&Json::Bool(true))
        || subtype.is_some_and(|st| st.as_str() != Some("success"));
    let u = Tbl::of(raw.get("usage"));
    let finish = if failed {
        "error"
    } else {
        raw.str("stop_reason")
            .and_then(finish_reason)
            .unwrap_or("unknown")
    };
    let usage = table([
        ("inputTokens", copy(u.get("input_tokens"))),
        ("outputTokens", copy(u.get("output_tokens"))),
        (
            "cacheReadInputTokens",
            copy(u.get("cache_read_input_tokens")),
        ),
        (
            "cacheCreationInputTokens",
            copy(u.get("cache_creation_input_tokens")),
        ),
    ]);
    let c = table([
        ("type", lit("done")),
        ("finishReason", lit(finish)),
        ("cost", copy(raw.get("total_cost_usd"))),
        ("usage", Some(Json::Object(usage))),
        ("durationMs", copy(raw.get("duration_ms"))),
        ("numTurns", copy(raw.get("num_turns"))),
    ]);
    cx.chunk(c, Opts::default())?;
    let payload = table([
        ("total_cost_usd", copy(raw.get("total_cost_usd"))),
        ("input_tokens", copy(u.get("input_tokens"))),
        ("output_tokens", copy(u.get("output_tokens"))),
        (
            "cache_read_input_tokens",
            copy(u.get("cache_read_input_tokens")),
        ),
        (
            "cache_creation_input_tokens",
            copy(u.get("cache_creation_input_tokens")),
        ),
        ("model_usage", copy(raw.get("modelUsage"))),
        ("num_turns", copy(raw.get("num_turns"))),
        ("duration_ms", copy(raw.get("duration_ms"))),
    ]);
    cx.out("usage.session", payload, Opts::default())?;
    if failed {
        let payload = table([
            ("error", copy(subtype)),
            ("message", text(raw.str("result"))),
            ("errors", copy(raw.get("errors"))),
            ("stop_reason", copy(raw.get("stop_reason"))),
        ]);
        cx.out("session.error", payload, Opts::default())?;
    }
    Ok(())
}
