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
//!
//! The parts: [`value`] (reading a message as Lua does, building tables), [`state`] (what is
//! remembered between calls, bounded as in Lua), [`call`] (one call's events and what each
//! carries), [`stream`] (stream events), [`messages`] (whole messages); this file takes a
//! message apart.

mod call;
mod messages;
mod state;
mod stream;
mod value;

use serde_json::Value as Json;

use super::native_builtin::Mapping;
use call::{Call, Opts};
use messages::{assistant, result, user};
use state::{Known, Session, Sessions};
use stream::stream_event;
use value::{Tbl, copy, lit, table, valid_id};

#[cfg(test)]
pub(super) use state::{MAX_CALLS, MAX_KNOWN, MAX_SESSIONS};

/// The mapping, with nothing remembered yet. It has no settings.
pub(super) fn new(_config: &Json) -> Box<dyn Mapping> {
    Box::<AgentSdk>::default()
}

#[derive(Default)]
struct AgentSdk {
    sessions: Sessions,
    known: Known,
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
