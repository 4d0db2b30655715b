//! The events on their way through the pipeline ([`Draft`]), and the ones the daemon writes
//! itself there: an `unmapped` raw event, a `plugin.error`, a `checkpoint.bypassed`, a tool
//! request rescued from a raw event the mapping lost. Apart from the steps that use them
//! so that every step builds them the same way.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value as Json, json};

use crate::plugins::{Failure, Plugin};

/// An event on its way through the pipeline: the session it goes to and its fields.
#[derive(Debug)]
pub(super) struct Draft {
    pub(super) session_id: String,
    pub(super) event: Map<String, Json>,
    /// The raw event as the agent sent it, to store as the event's `raw` when `event` has
    /// none: the text itself rather than a copy of its parsed tree, which cost every ingest
    /// a deep clone, a redaction walk and an encoding. Only text that parses without repair
    /// and holds no line break; the store's entry point redacts it like any field. Put in
    /// the tree ([`Draft::raw_in_tree`]) before a filter plugin, which must see it.
    pub(super) verbatim_raw: Option<Arc<RawValue>>,
}

impl Draft {
    pub(super) fn new(session_id: String, event: Map<String, Json>) -> Draft {
        Draft {
            session_id,
            event,
            verbatim_raw: None,
        }
    }

    /// Moves the verbatim raw event into `event` as the parsed `raw`.
    pub(super) fn raw_in_tree(&mut self, raw: &Json) {
        if self.verbatim_raw.take().is_some() {
            self.event.insert("raw".into(), raw.clone());
        }
    }
}

/// The event's id, given one now if it has none (a ULID), so later events can name it.
pub(super) fn ensure_id(event: &mut Map<String, Json>) -> String {
    match event.get("id").and_then(Json::as_str) {
        Some(id) if id.parse::<ulid::Ulid>().is_ok() => id.to_string(),
        _ => {
            let id = ulid::Ulid::new().to_string();
            event.insert("id".into(), json!(id));
            id
        }
    }
}

pub(super) fn object(v: Json) -> Map<String, Json> {
    match v {
        Json::Object(m) => m,
        _ => Map::new(),
    }
}

/// The session an event goes to when its mapping names none: the one the caller gave, else
/// the raw event's own `session_id`, else one per source.
pub(super) fn fallback_session(source: &str, given: Option<&str>, raw: &Json) -> String {
    fallback_session_with(source, given, || {
        raw.get("session_id")
            .and_then(Json::as_str)
            .map(Cow::Borrowed)
    })
}

/// [`fallback_session`], with the raw event's own `session_id` read by `own` only when the
/// caller gave none that is valid (the pipeline's router reads it from the unparsed text).
pub(super) fn fallback_session_with<'r>(
    source: &str,
    given: Option<&str>,
    own: impl FnOnce() -> Option<Cow<'r, str>>,
) -> String {
    let valid = |s: &str| dstream_sdk::validate_session_id(s).is_ok();
    if let Some(s) = given.filter(|s| valid(s)) {
        return s.to_string();
    }
    if let Some(s) = own().filter(|s| valid(s)) {
        return s.into_owned();
    }
    format!("{source}-unassigned")
}

/// `checkpoint.bypassed`: a tool call that ran before the daemon could decide it, and the
/// policy rule that would have stopped it, if one would have.
pub(super) fn bypassed_event(
    request: &Draft,
    cause: &str,
    why: &str,
    rule: Option<&crate::checkpoint::policy::RuleVerdict>,
) -> Draft {
    let payload = request.event.get("payload");
    let mut event = json!({
        "type": "checkpoint.bypassed",
        "actor": "dstream",
        "causation_id": cause,
        "payload": {
            "reason": why,
            "tool": payload.and_then(|p| p.get("tool")),
            "tool_use_id": payload.and_then(|p| p.get("tool_use_id")),
        },
    });
    if let Some(r) = rule {
        event["payload"]["would_have"] = json!(r.action);
        event["payload"]["rule"] = json!(r.rule);
        event["payload"]["rule_description"] = json!(r.description);
    }
    Draft::new(request.session_id.clone(), object(event))
}

/// A tool call read from the raw event by the daemon itself, for the decision the mapping
/// did not ask for.
pub(super) fn rescued_request(
    source: &str,
    fallback: &str,
    req: crate::tool_request::ToolRequest,
) -> Draft {
    let mut payload = json!({
        "phase": "requested",
        "tool": req.tool,
        "input": req.input,
        "rescued": "the mapping produced no request for this tool call; read by the daemon",
    });
    if let Some(id) = req.tool_use_id {
        payload["tool_use_id"] = json!(id);
    }
    Draft::new(
        req.session_id.unwrap_or_else(|| fallback.to_string()),
        object(json!({
            "type": "execution.tool_use",
            "actor": source,
            "payload": payload,
            "metadata": {"source": source},
        })),
    )
}

pub(super) fn unmapped(source: &str, session: &str, raw: &Json, error: Option<&str>) -> Draft {
    let mut payload = Map::new();
    payload.insert("source".into(), json!(source));
    if let Some(e) = error {
        payload.insert("error".into(), json!(e));
    }
    let event = object(json!({
        "type": "unmapped",
        "actor": source,
        "payload": payload,
        "metadata": {"source": source},
        "raw": raw,
    }));
    Draft::new(session.to_string(), event)
}

pub(super) fn plugin_error(
    plugin: &Plugin,
    hook: &str,
    error: &str,
    failure: Option<&Failure>,
    session: &str,
) -> Draft {
    let mut payload = json!({"plugin": plugin.name(), "hook": hook, "error": error});
    if let Some(reason) = failure.and_then(|f| f.disabled_now.as_ref()) {
        payload["disabled"] = json!(reason);
    }
    Draft::new(
        session.to_string(),
        object(json!({
            "type": "plugin.error",
            "actor": "dstream",
            "payload": payload,
            "metadata": {"plugin": plugin.name()},
        })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_keeps_a_valid_id_and_gets_one_otherwise() {
        let valid = ulid::Ulid::new().to_string();
        let mut e = object(json!({"id": valid}));
        assert_eq!(ensure_id(&mut e), valid);
        for mut e in [
            object(json!({})),
            object(json!({"id": "not-a-ulid"})),
            object(json!({"id": 1})),
        ] {
            let id = ensure_id(&mut e);
            assert!(id.parse::<ulid::Ulid>().is_ok(), "{id}");
            assert_eq!(e["id"], json!(id));
        }
    }

    #[test]
    fn the_fallback_session_is_the_callers_then_the_raw_events_then_the_sources() {
        let raw = json!({"session_id": "in-raw"});
        assert_eq!(fallback_session("cc", Some("given"), &raw), "given");
        assert_eq!(fallback_session("cc", None, &raw), "in-raw");
        assert_eq!(fallback_session("cc", Some("../bad"), &raw), "in-raw");
        let bad_raw = json!({"session_id": "a/b"});
        assert_eq!(fallback_session("cc", None, &bad_raw), "cc-unassigned");
        assert_eq!(fallback_session("cc", None, &Json::Null), "cc-unassigned");
    }

    #[test]
    fn an_unmapped_event_keeps_the_raw_event_and_why() {
        let raw = json!({"anything": [1, 2]});
        let d = unmapped("src", "s", &raw, Some("boom"));
        assert_eq!(d.session_id, "s");
        assert_eq!(
            Json::Object(d.event),
            json!({
                "type": "unmapped",
                "actor": "src",
                "payload": {"source": "src", "error": "boom"},
                "metadata": {"source": "src"},
                "raw": raw,
            })
        );
        let d = unmapped("src", "s", &raw, None);
        assert_eq!(d.event["payload"], json!({"source": "src"}));
    }
}
