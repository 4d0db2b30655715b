//! Checking an event a plugin emitted, and turning it into the store's form: what a mapping
//! or a filter may write, and what the pipeline fills in (session, source, raw). Pure
//! functions, apart from the steps that call them, so that the rules are stated (and tested)
//! once.

use dstream_sdk::event::MAX_NESTING_DEPTH;
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value as Json, json};

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

/// Checks an event a plugin emitted and fills what the pipeline owes it: the session, the
/// source in `metadata`, and (for a mapping) the raw event, unless the plugin set `raw`.
/// `passing`: the type of the event a filter was given, which it may pass on even when only
/// the daemon may write that type (a filter sees the daemon's own checkpoint requests).
pub(super) fn normalize(
    emitted: Json,
    session: &str,
    source: &str,
    raw: &Json,
    attach_raw: bool,
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
    if attach_raw && !event.contains_key("raw") {
        event.insert("raw".into(), raw.clone());
    }
    Ok(Draft {
        session_id: session,
        event,
    })
}

/// The store's form of a normalized event.
pub(super) fn to_new_event(event: &Map<String, Json>) -> Result<NewEventRaw, String> {
    let text = |k: &str| event.get(k).and_then(Json::as_str).map(str::to_string);
    let json = |k: &str| -> Result<Option<Box<RawValue>>, String> {
        match event.get(k) {
            None | Some(Json::Null) => Ok(None),
            Some(v) => {
                let raw = to_raw_value(v).map_err(|e| e.to_string())?;
                let depth = nesting_depth(raw.get().as_bytes());
                if depth > MAX_NESTING_DEPTH {
                    return Err(format!(
                        "{k} nests {depth} levels; the limit is {MAX_NESTING_DEPTH}"
                    ));
                }
                Ok(Some(raw))
            }
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
        raw: json("raw")?,
        ignored_lsn: None,
        ignored_id: None,
        ignored_timestamp: None,
        ignored_session_id: None,
    };
    validate_event(&new)?;
    Ok(new)
}

