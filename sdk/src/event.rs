//! The event envelope: what every stored line holds, and what a client sends to append one.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest accepted session or stream id, in bytes.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// Deepest nesting of arrays and objects allowed in an event's `payload`, `metadata` and
/// `raw` (a scalar is depth 0, `{}` is 1). The daemon refuses deeper events at append, so every
/// reader (whose frames wrap the event in a few more levels) can parse whatever was accepted
/// within serde_json's default recursion limit of 128.
pub const MAX_NESTING_DEPTH: usize = 96;

/// One stored event, as the daemon returns it (`read`, `subscribe`, `query`).
///
/// `J` is how the JSON fields (`payload`, `metadata`, `raw`) are held: a parsed
/// [`serde_json::Value`] for clients, raw JSON text inside the daemon. The field order is the
/// on-disk order (`lsn` first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event<J = Value> {
    /// Dense per-session sequence number, from 1.
    pub lsn: u64,
    /// ULID, globally unique; the dedupe key.
    pub id: String,
    /// Taxonomy type, e.g. `execution.tool_use`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The session (and log file) this event belongs to.
    pub session_id: String,
    /// Root session of the lineage; equals `session_id` unless the session is a child.
    pub stream_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Milliseconds since the Unix epoch, stamped by the daemon.
    pub timestamp: u64,
    #[serde(default)]
    pub payload: J,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<J>,
    /// The untouched source event, when one was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<J>,
}

/// An event as a client hands it to `append`; the daemon fills `lsn`, `id`, `timestamp` and
/// `session_id`, and `stream_id` when it is absent. Unknown fields are refused (by the daemon
/// and by this type alike), so a misspelt field is an error, not silently dropped.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewEvent<J = Value> {
    #[serde(rename = "type")]
    pub event_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<J>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<J>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<J>,
    /// The fields the daemon fills in (`lsn`, `id`, `timestamp`, `session_id`) are accepted
    /// and ignored, so that a stored event (`dstream tail --json`) can be appended again.
    #[doc(hidden)]
    #[serde(default, rename = "lsn", skip_serializing)]
    pub ignored_lsn: Option<serde::de::IgnoredAny>,
    #[doc(hidden)]
    #[serde(default, rename = "id", skip_serializing)]
    pub ignored_id: Option<serde::de::IgnoredAny>,
    #[doc(hidden)]
    #[serde(default, rename = "timestamp", skip_serializing)]
    pub ignored_timestamp: Option<serde::de::IgnoredAny>,
    #[doc(hidden)]
    #[serde(default, rename = "session_id", skip_serializing)]
    pub ignored_session_id: Option<serde::de::IgnoredAny>,
}

impl NewEvent {
    pub fn new(event_type: impl Into<String>) -> Self {
        NewEvent {
            event_type: event_type.into(),
            ..Default::default()
        }
    }
    pub fn actor(mut self, actor: impl Into<String>) -> Self {
        self.actor = Some(actor.into());
        self
    }
    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = Some(payload);
        self
    }
    pub fn stream_id(mut self, stream_id: impl Into<String>) -> Self {
        self.stream_id = Some(stream_id.into());
        self
    }
    pub fn causation_id(mut self, id: impl Into<String>) -> Self {
        self.causation_id = Some(id.into());
        self
    }
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

/// Why a session id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionIdError {
    #[error("session id is empty")]
    Empty,
    #[error("session id is {0} bytes long; the limit is {MAX_SESSION_ID_LEN}")]
    TooLong(usize),
    #[error("session id may not start with '.'")]
    LeadingDot,
    #[error("session id contains {0:?}; allowed are ASCII letters, digits, '-', '_' and '.'")]
    BadChar(char),
}

/// Checks that `id` is safe to use as a file name on every platform: 1 to 128 bytes of ASCII
/// letters, digits, `-`, `_` and `.`, not starting with `.` (which rules out `.` and `..`).
pub fn validate_session_id(id: &str) -> Result<(), SessionIdError> {
    if id.is_empty() {
        return Err(SessionIdError::Empty);
    }
    if id.len() > MAX_SESSION_ID_LEN {
        return Err(SessionIdError::TooLong(id.len()));
    }
    if id.starts_with('.') {
        return Err(SessionIdError::LeadingDot);
    }
    match id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        Some(c) => Err(SessionIdError::BadChar(c)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_that_could_escape_the_data_dir_are_refused() {
        assert_eq!(validate_session_id(""), Err(SessionIdError::Empty));
        assert_eq!(validate_session_id(".."), Err(SessionIdError::LeadingDot));
        assert_eq!(validate_session_id("../x"), Err(SessionIdError::LeadingDot));
        assert_eq!(
            validate_session_id("a/b"),
            Err(SessionIdError::BadChar('/'))
        );
        assert_eq!(
            validate_session_id("a\\b"),
            Err(SessionIdError::BadChar('\\'))
        );
        assert_eq!(
            validate_session_id("a\0b"),
            Err(SessionIdError::BadChar('\0'))
        );
        assert_eq!(
            validate_session_id(&"x".repeat(129)),
            Err(SessionIdError::TooLong(129))
        );
        assert!(validate_session_id(&"x".repeat(128)).is_ok());
        assert!(validate_session_id("9f1c2b7e-0d1a-4c55-9a62-1b2c3d4e5f60").is_ok());
        assert!(validate_session_id("ses_01JDQ3V9.S6X4").is_ok());
    }

    #[test]
    fn new_event_serializes_only_what_was_set() {
        let e = NewEvent::new("user.input").actor("me");
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"user.input","actor":"me"}"#
        );
    }
}
