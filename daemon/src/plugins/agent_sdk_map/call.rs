//! One call of the mapping: the message, the events it made so far, and what every event
//! carries (the Lua's `out`).

use serde_json::{Map, Value as Json};

use super::state::Session;
use super::value::{Tbl, copy, lit, read_back, table, text, ulid};
const ACTOR: &str = "claude-agent-sdk";
/// The Lua host's limit on events emitted in one call (`lua::output::MAX_EMITS`): past it the
/// whole call fails there.
const MAX_EMITS: usize = 256;

/// The metadata a stream event adds to what it emits.
pub(super) struct StreamMeta<'a> {
    pub(super) event: Option<&'a str>,
    pub(super) message_id: Option<&'a Json>,
    pub(super) args_error: Option<String>,
}

/// The Lua's `out(type, payload, o)` options.
#[derive(Default)]
pub(super) struct Opts<'m> {
    pub(super) id: Option<String>,
    pub(super) causation_id: Option<String>,
    pub(super) by_user: bool,
    pub(super) meta: Option<&'m StreamMeta<'m>>,
}

/// One call: the message, where its events go, and the events so far.
pub(super) struct Call<'a> {
    pub(super) raw: Tbl<'a>,
    pub(super) session_id: Option<String>,
    pub(super) stream_id: Option<&'a str>,
    pub(super) correlation_id: Option<String>,
    pub(super) events: Vec<Json>,
}

impl<'a> Call<'a> {
    pub(super) fn new(raw: Tbl<'a>) -> Call<'a> {
        Call {
            raw,
            session_id: None,
            stream_id: None,
            correlation_id: None,
            events: Vec::new(),
        }
    }

    pub(super) fn out(
        &mut self,
        event_type: &str,
        payload: Map<String, Json>,
        o: Opts,
    ) -> Result<(), String> {
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

    pub(super) fn chunk(&mut self, c: Map<String, Json>, o: Opts) -> Result<(), String> {
        self.out("message.chunk", c, o)
    }

    pub(super) fn unmapped(&mut self, hint: &str) -> Result<(), String> {
        let payload = table([
            ("source", lit(ACTOR)),
            ("message_type", copy(self.raw.get("type"))),
            ("subtype", copy(self.raw.get("subtype"))),
            ("hint", lit(hint)),
        ]);
        self.out("unmapped", payload, Opts::default())
    }

    /// The tool-call chunk of a complete tool_use block; remembered when there is a session.
    pub(super) fn tool_call(
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
