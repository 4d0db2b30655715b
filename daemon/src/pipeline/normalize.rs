//! Checking an event a plugin emitted, and turning it into the store's form: what a mapping
//! or a filter may write, and what the pipeline fills in (session, source, raw). Pure
//! functions, apart from the steps that call them, so that the rules are stated (and tested)
//! once.

use dstream_sdk::event::MAX_NESTING_DEPTH;
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value as Json, json};

use std::sync::Arc;

use super::draft::Draft;
use crate::jsonscan::nesting_depth;
use crate::store::{NewEventRaw, validate_event};
const FIELDS: &[&str] = &[
    "type",
    "id",
    "session_id",
    "stream_id",
    "causation_id",
    "correlation_id",
    "actor",
    "payload",
    "metadata",
    "raw",
];

/// How a mapped event gets the raw event it came from.
#[derive(Clone, Copy)]
pub(super) enum AttachRaw<'a> {
    /// Not at all (a filter's output, or `keep_raw = false`).
    No,
    /// As the parsed tree.
    Tree(&'a Json),
    /// As the text the agent sent (see [`Draft::verbatim_raw`]).
    Verbatim(&'a Arc<RawValue>),
}

/// The raw event's text, if it may be stored as sent: when every reader parses it to what
/// the mapping saw (`repaired`: the pipeline had to mend a lone surrogate or a number
/// beyond a double first) and it keeps to one line of the log.
pub(super) fn verbatim(text: Box<RawValue>, repaired: bool) -> Option<Arc<RawValue>> {
    let one_line = memchr::memchr2(b'\n', b'\r', text.get().as_bytes()).is_none();
    (!repaired && one_line).then(|| Arc::from(text))
}

/// Checks an event a plugin emitted and fills what the pipeline owes it: the session, the
/// source in `metadata`, and (for a mapping) the raw event, unless the plugin set `raw`.
/// `passing`: the type of the event a filter was given, which it may pass on even when only
/// the daemon may write that type (a filter sees the daemon's own checkpoint requests).
pub(super) fn normalize(
    emitted: Json,
    session: &str,
    source: &str,
    attach_raw: AttachRaw,
    passing: Option<&str>,
) -> Result<Draft, String> {
    let Json::Object(mut event) = emitted else {
        return Err("emitted a value that is not an event table".into());
    };
    if let Some(k) = event.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "emitted an event with unknown field {k:?} (fields: {})",
            FIELDS.join(", ")
        ));
    }
    match event.get("type") {
        Some(Json::String(t)) if crate::event_types::daemon_only(t) && passing != Some(t) => {
            return Err(crate::event_types::refusal(t));
        }
        Some(Json::String(t)) if !t.is_empty() => {}
        _ => return Err("emitted an event without a string `type`".into()),
    }
    for key in ["stream_id", "causation_id", "correlation_id", "actor", "id"] {
        match event.get(key) {
            None | Some(Json::String(_)) => {}
            Some(Json::Null) => {
                event.remove(key);
            }
            Some(_) => return Err(format!("`{key}` must be a string")),
        }
    }
    let session = match event.remove("session_id") {
        Some(Json::String(s)) => {
            dstream_sdk::validate_session_id(&s).map_err(|e| format!("session_id {s:?}: {e}"))?;
            s
        }
        None | Some(Json::Null) => session.to_string(),
        Some(_) => return Err("`session_id` must be a string".into()),
    };
    if let Some(Json::String(s)) = event.get("stream_id") {
        dstream_sdk::validate_session_id(s).map_err(|e| format!("stream_id {s:?}: {e}"))?;
    }
    match event
        .entry("metadata")
        .or_insert_with(|| Json::Object(Map::new()))
    {
        Json::Object(m) => {
            m.entry("source").or_insert_with(|| json!(source));
        }
        Json::Null => {
            event.insert("metadata".into(), json!({ "source": source }));
        }
        _ => return Err("`metadata` must be a table".into()),
    }
    let mut draft = Draft::new(session, event);
    if !draft.event.contains_key("raw") {
        match attach_raw {
            AttachRaw::No => {}
            AttachRaw::Tree(raw) => {
                draft.event.insert("raw".into(), raw.clone());
            }
            AttachRaw::Verbatim(text) => draft.verbatim_raw = Some(text.clone()),
        }
    }
    Ok(draft)
}

/// The store's form of a normalized event (its `raw` the verbatim text when it has one).
pub(super) fn to_new_event(
    event: &Map<String, Json>,
    verbatim_raw: Option<&RawValue>,
) -> Result<NewEventRaw, String> {
    let text = |k: &str| event.get(k).and_then(Json::as_str).map(str::to_string);
    let shallow = |k: &str, raw: Box<RawValue>| {
        let depth = nesting_depth(raw.get().as_bytes());
        if depth > MAX_NESTING_DEPTH {
            return Err(format!(
                "{k} nests {depth} levels; the limit is {MAX_NESTING_DEPTH}"
            ));
        }
        Ok(Some(raw))
    };
    let json = |k: &str| -> Result<Option<Box<RawValue>>, String> {
        match event.get(k) {
            None | Some(Json::Null) => Ok(None),
            Some(v) => shallow(k, to_raw_value(v).map_err(|e| e.to_string())?),
        }
    };
    let new = NewEventRaw {
        event_type: text("type").unwrap_or_default(),
        actor: text("actor"),
        payload: json("payload")?,
        stream_id: text("stream_id"),
        causation_id: text("causation_id"),
        correlation_id: text("correlation_id"),
        metadata: json("metadata")?,
        raw: match verbatim_raw {
            // Checked too: not every way in (OTLP records) checks the raw event's depth.
            Some(text) if !event.contains_key("raw") => shallow("raw", text.to_owned())?,
            _ => json("raw")?,
        },
        ignored_lsn: None,
        ignored_id: None,
        ignored_timestamp: None,
        ignored_session_id: None,
    };
    validate_event(&new)?;
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> Json {
        json!({"hook_event_name": "PreToolUse", "session_id": "from-raw"})
    }

    /// As a mapping emits it: raw attached when asked.
    fn mapped(emitted: Json, attach_raw: bool) -> Result<Draft, String> {
        let raw = raw();
        let attach = if attach_raw {
            AttachRaw::Tree(&raw)
        } else {
            AttachRaw::No
        };
        normalize(emitted, "fallback", "claude-code", attach, None)
    }

    #[test]
    fn a_mapped_event_gets_session_source_and_raw() {
        let d = mapped(
            json!({"type": "user.input", "payload": {"text": "hi"}}),
            true,
        )
        .unwrap();
        assert_eq!(d.session_id, "fallback");
        assert_eq!(
            Json::Object(d.event),
            json!({
                "type": "user.input",
                "payload": {"text": "hi"},
                "metadata": {"source": "claude-code"},
                "raw": raw(),
            })
        );
    }

    #[test]
    fn raw_is_attached_only_when_asked_and_a_plugins_own_is_kept() {
        let d = mapped(json!({"type": "user.input"}), false).unwrap();
        assert!(!d.event.contains_key("raw"));
        let d = mapped(json!({"type": "user.input", "raw": {"own": 1}}), true).unwrap();
        assert_eq!(d.event["raw"], json!({"own": 1}));
    }

    #[test]
    fn the_session_the_event_names_wins_and_leaves_the_fields() {
        let d = mapped(json!({"type": "x", "session_id": "named"}), false).unwrap();
        assert_eq!(d.session_id, "named");
        assert!(!d.event.contains_key("session_id"));
        let d = mapped(json!({"type": "x", "session_id": null}), false).unwrap();
        assert_eq!(d.session_id, "fallback");
        let e = mapped(json!({"type": "x", "session_id": "../up"}), false).unwrap_err();
        assert!(e.starts_with("session_id \"../up\""), "{e}");
        let e = mapped(json!({"type": "x", "stream_id": "a/b"}), false).unwrap_err();
        assert!(e.starts_with("stream_id \"a/b\""), "{e}");
        let e = mapped(json!({"type": "x", "session_id": 7}), false).unwrap_err();
        assert_eq!(e, "`session_id` must be a string");
    }

    #[test]
    fn ids_and_links_are_kept_as_given_and_nulls_dropped() {
        let d = mapped(
            json!({"type": "x", "id": "01J0000000000000000000000A", "causation_id": "c",
                   "correlation_id": null, "actor": null, "stream_id": "root"}),
            false,
        )
        .unwrap();
        assert_eq!(d.event["id"], json!("01J0000000000000000000000A"));
        assert_eq!(d.event["causation_id"], json!("c"));
        assert_eq!(d.event["stream_id"], json!("root"));
        assert!(!d.event.contains_key("correlation_id") && !d.event.contains_key("actor"));
        let e = mapped(json!({"type": "x", "id": 5}), false).unwrap_err();
        assert_eq!(e, "`id` must be a string");
    }

    #[test]
    fn metadata_keeps_its_own_source() {
        let d = mapped(
            json!({"type": "x", "metadata": {"source": "own", "k": 1}}),
            false,
        )
        .unwrap();
        assert_eq!(d.event["metadata"], json!({"source": "own", "k": 1}));
        let d = mapped(json!({"type": "x", "metadata": null}), false).unwrap();
        assert_eq!(d.event["metadata"], json!({"source": "claude-code"}));
        let e = mapped(json!({"type": "x", "metadata": [1]}), false).unwrap_err();
        assert_eq!(e, "`metadata` must be a table");
    }

    #[test]
    fn what_is_not_an_event_is_refused() {
        let e = mapped(json!("user.input"), false).unwrap_err();
        assert_eq!(e, "emitted a value that is not an event table");
        for bad in [json!({}), json!({"type": ""}), json!({"type": 3})] {
            let e = mapped(bad, false).unwrap_err();
            assert_eq!(e, "emitted an event without a string `type`");
        }
        let e = mapped(json!({"type": "x", "lsn": 3}), false).unwrap_err();
        assert!(
            e.starts_with("emitted an event with unknown field \"lsn\""),
            "{e}"
        );
    }

    #[test]
    fn daemon_types_pass_a_filter_only_as_they_came() {
        let requested = json!({"type": "checkpoint.requested"});
        let e = mapped(requested.clone(), false).unwrap_err();
        assert_eq!(e, crate::event_types::refusal("checkpoint.requested"));
        let passing = Some("checkpoint.requested");
        let d = normalize(requested, "s", "src", AttachRaw::No, passing).unwrap();
        assert_eq!(d.event["type"], json!("checkpoint.requested"));
        let other = json!({"type": "checkpoint.approved"});
        assert!(normalize(other, "s", "src", AttachRaw::No, passing).is_err());
    }

    #[test]
    fn the_store_form_carries_every_field() {
        let d = mapped(
            json!({"type": "x", "actor": "a", "payload": {"p": 1}, "causation_id": "c",
                   "correlation_id": "r", "stream_id": "root"}),
            true,
        )
        .unwrap();
        let e = to_new_event(&d.event, None).unwrap();
        assert_eq!(
            (
                e.event_type.as_str(),
                e.actor.as_deref(),
                e.causation_id.as_deref()
            ),
            ("x", Some("a"), Some("c"))
        );
        assert_eq!(
            (e.correlation_id.as_deref(), e.stream_id.as_deref()),
            (Some("r"), Some("root"))
        );
        assert_eq!(e.payload.unwrap().get(), r#"{"p":1}"#);
        assert_eq!(e.metadata.unwrap().get(), r#"{"source":"claude-code"}"#);
        assert!(e.raw.is_some());
    }

    #[test]
    fn the_store_form_refuses_deep_nesting() {
        let mut deep = json!(1);
        for _ in 0..=MAX_NESTING_DEPTH {
            deep = json!([deep]);
        }
        let event = object_of(json!({"type": "x", "payload": deep}));
        let e = to_new_event(&event, None).unwrap_err();
        assert!(e.starts_with("payload nests"), "{e}");
    }

    /// As a mapping emits it, with the raw event kept as the text `kept`.
    fn with_text(emitted: Json, kept: &Arc<RawValue>) -> Draft {
        normalize(emitted, "s", "src", AttachRaw::Verbatim(kept), None).unwrap()
    }

    #[test]
    fn the_raw_event_is_stored_as_sent_when_readers_can_read_it_so() {
        let text = |t: &str| RawValue::from_string(t.to_string()).unwrap();
        let sent = r#"{"z": 1, "a":  "é", "n": 1.50}"#;
        let kept = verbatim(text(sent), false).unwrap();
        let d = with_text(json!({"type": "x", "payload": {"p": 1}}), &kept);
        assert!(!d.event.contains_key("raw"));
        // Key order, spacing and number form as the agent sent them.
        let e = to_new_event(&d.event, d.verbatim_raw.as_deref()).unwrap();
        assert_eq!(e.raw.unwrap().get(), sent);
        // A mapping's own `raw` wins, as it does over the parsed tree.
        let d = with_text(json!({"type": "x", "raw": {"own": 1}}), &kept);
        assert!(d.verbatim_raw.is_none());
        let e = to_new_event(&d.event, d.verbatim_raw.as_deref()).unwrap();
        assert_eq!(e.raw.unwrap().get(), r#"{"own":1}"#);
        // Text a reader could not parse as sent, or that would break the line, is not kept.
        assert!(verbatim(text(r#"{"s": "\ud800"}"#), true).is_none());
        assert!(verbatim(text("{\n\"a\": 1}"), false).is_none());
        assert!(verbatim(text("{\r\"a\": 1}"), false).is_none());
    }

    #[test]
    fn a_filter_gets_the_raw_event_in_the_tree() {
        let kept = verbatim(RawValue::from_string(r#"{"a":1}"#.into()).unwrap(), false).unwrap();
        let mut d = with_text(json!({"type": "x"}), &kept);
        d.raw_in_tree(&json!({"a": 1}));
        assert!(d.verbatim_raw.is_none());
        assert_eq!(d.event["raw"], json!({"a": 1}));
    }

    #[test]
    fn a_raw_event_kept_as_sent_is_held_to_the_same_depth() {
        let deep = format!(
            "{}1{}",
            "[".repeat(MAX_NESTING_DEPTH + 1),
            "]".repeat(MAX_NESTING_DEPTH + 1)
        );
        let kept = verbatim(RawValue::from_string(deep).unwrap(), false).unwrap();
        let d = with_text(json!({"type": "x"}), &kept);
        let e = to_new_event(&d.event, d.verbatim_raw.as_deref()).unwrap_err();
        assert!(e.starts_with("raw nests"), "{e}");
    }

    fn object_of(v: Json) -> Map<String, Json> {
        crate::pipeline::draft::object(v)
    }
}
