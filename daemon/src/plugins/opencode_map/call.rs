//! One call of the mapping: the state it changes ([`Cx`]), the events it makes ([`Out`]) and
//! what each sets beyond its session's defaults ([`Extra`]). Every part that handles an
//! OpenCode event builds its events here.

use serde_json::{Map, Value as Json};

use super::state::{Lineage, Sessions};
use super::value::{self, Payload};

const ACTOR: &str = "opencode";

/// What `[plugins.lua.opencode]` switches; each only off by an explicit `false`.
#[derive(Clone, Copy)]
pub(super) struct Config {
    pub(super) coalesce_text: bool,
    pub(super) coalesce_tools: bool,
}

/// One map call: the state it changes and the events it makes.
pub(super) struct Cx<'m, 'r> {
    pub(super) config: Config,
    pub(super) sessions: &'m mut Sessions,
    pub(super) out: Out<'m, 'r>,
}

/// The events of one call, and what each carries in its metadata.
pub(super) struct Out<'m, 'r> {
    pub(super) lineage: &'m mut Lineage,
    pub(super) hook: Option<&'r str>,
    pub(super) event_id: Option<&'r str>,
    pub(super) events: Vec<Json>,
}

/// What an event sets beyond its session's defaults (the Lua file's `o`).
#[derive(Default)]
pub(super) struct Extra {
    pub(super) id: Option<String>,
    pub(super) causation_id: Option<String>,
    /// Else the session's turn.
    pub(super) correlation_id: Option<String>,
    /// Else "opencode".
    pub(super) actor: Option<&'static str>,
    pub(super) raw: Option<Json>,
    pub(super) flushed_by: Option<&'static str>,
}

impl Extra {
    pub(super) fn turn(turn: Option<String>) -> Extra {
        Extra {
            correlation_id: turn,
            ..Extra::default()
        }
    }

    pub(super) fn caused(id: Option<String>, causation_id: Option<String>) -> Extra {
        Extra {
            id,
            causation_id,
            ..Extra::default()
        }
    }
}

impl Out<'_, '_> {
    /// One event (the Lua file's `out`): of session `sid` (none: the pipeline's fallback),
    /// whose turn `turn` is the default correlation.
    pub(super) fn emit(
        &mut self,
        sid: Option<&str>,
        turn: Option<&str>,
        event_type: &str,
        payload: Payload,
        x: Extra,
    ) {
        let mut meta = Map::new();
        if let Some(hook) = self.hook {
            meta.insert("hook".into(), hook.into());
        }
        if let Some(id) = self.event_id {
            meta.insert("event_id".into(), id.into());
        }
        if let Some(why) = x.flushed_by {
            meta.insert("flushed_by".into(), why.into());
        }
        let mut e = Map::new();
        e.insert("type".into(), event_type.into());
        e.insert("payload".into(), payload.into_json());
        e.insert("actor".into(), x.actor.unwrap_or(ACTOR).into());
        e.insert("metadata".into(), Json::Object(meta));
        let mut correlation = x.correlation_id;
        if let Some(sid) = sid {
            e.insert("session_id".into(), sid.into());
            if let Some(root) = self.lineage.root_of(sid) {
                e.insert("stream_id".into(), root.into());
            }
            if correlation.is_none() {
                correlation = turn.map(str::to_owned);
            }
        }
        if let Some(c) = correlation {
            e.insert("correlation_id".into(), c.into());
        }
        if let Some(id) = x.id {
            e.insert("id".into(), id.into());
        }
        if let Some(c) = x.causation_id {
            e.insert("causation_id".into(), c.into());
        }
        if let Some(raw) = x.raw {
            e.insert("raw".into(), raw);
        }
        self.events.push(Json::Object(e));
    }

    /// An event kept as `unmapped`, with why.
    pub(super) fn unmapped(
        &mut self,
        sid: Option<&str>,
        turn: Option<&str>,
        event_type: Option<&str>,
        hint: impl value::Field,
    ) {
        let payload = Payload::default()
            .with("source", "opencode")
            .with("event_type", event_type)
            .with("hint", hint);
        self.emit(sid, turn, "unmapped", payload, Extra::default());
    }
}

/// A fresh event id, as `host.ulid()` makes them.
pub(super) fn ulid() -> String {
    ulid::Ulid::new().to_string()
}
