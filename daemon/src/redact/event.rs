//! The store's entry point: an event as it is about to be queued, redacted, or withheld
//! when redaction fails (fail closed: the clear text is never stored instead).

use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value, json};

use super::redactor::{Redactor, add_count};
use crate::store::NewEventRaw;

/// What replaces a field whose redaction failed.
pub const REDACTION_FAILED: &str = "[WITHHELD: redaction failed]";

/// An event ready to store, and the `plugin.error` to store after it when its redaction
/// failed.
pub struct Guarded {
    pub event: NewEventRaw,
    pub error: Option<NewEventRaw>,
    /// How many secrets were replaced.
    pub redactions: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    #[error("{field} is not JSON the redactor can read: {error}")]
    Parse { field: &'static str, error: String },
    #[error("cannot encode the redacted {field}: {error}")]
    Encode { field: &'static str, error: String },
}

impl Redactor {
    /// Redacts `event` for the store. Never returns the clear text of a field it could not
    /// redact: that field is withheld and a `plugin.error` is returned to store beside it.
    pub fn guard(&self, mut event: NewEventRaw) -> Guarded {
        match self.redact_raw(&mut event) {
            Ok(redactions) => Guarded {
                event,
                error: None,
                redactions,
            },
            Err(e) => {
                tracing::error!(error = %e, event_type = %event.event_type, "redaction failed; the event's content is withheld");
                let marker = to_raw_value(&json!({"redaction_failed": REDACTION_FAILED})).ok();
                event.payload = marker.clone();
                event.raw = None;
                event.metadata = to_raw_value(&json!({"redaction_failed": true})).ok();
                let error = NewEventRaw {
                    event_type: "plugin.error".into(),
                    actor: Some("dstream".into()),
                    payload: to_raw_value(&json!({
                        "plugin": "redact",
                        "hook": "redact",
                        "error": e.to_string(),
                        "withheld": event.event_type,
                    }))
                    .ok(),
                    ..Default::default()
                };
                Guarded {
                    event,
                    error: Some(error),
                    redactions: 0,
                }
            }
        }
    }

    fn redact_raw(&self, event: &mut NewEventRaw) -> Result<usize, RedactError> {
        let mut total = 0;
        for (field, slot) in [
            ("payload", &mut event.payload),
            ("raw", &mut event.raw),
            ("metadata", &mut event.metadata),
        ] {
            if let Some(raw) = slot
                && let Some((redacted, n)) = self.redact_field(field, raw)?
            {
                *slot = Some(redacted);
                total += n;
            }
        }
        if total > 0 {
            let mut meta = match &event.metadata {
                Some(m) => parse("metadata", m)?,
                None => Value::Null,
            };
            let map = match &mut meta {
                Value::Object(m) => std::mem::take(m),
                _ => Map::new(),
            };
            let mut holder = Map::new();
            holder.insert("metadata".into(), Value::Object(map));
            add_count(&mut holder, total);
            let meta = holder.remove("metadata").unwrap_or(Value::Null);
            event.metadata = Some(encode("metadata", &meta)?);
        }
        Ok(total)
    }

    /// The field redacted and its count, or `None` when it holds no secret.
    fn redact_field(
        &self,
        field: &'static str,
        raw: &RawValue,
    ) -> Result<Option<(Box<RawValue>, usize)>, RedactError> {
        if !self.candidate(raw.get()) {
            return Ok(None);
        }
        let mut v = parse(field, raw)?;
        let n = self.redact_value(&mut v);
        if n == 0 {
            return Ok(None);
        }
        Ok(Some((encode(field, &v)?, n)))
    }
}

fn parse(field: &'static str, raw: &RawValue) -> Result<Value, RedactError> {
    serde_json::from_str(raw.get()).map_err(|e| RedactError::Parse {
        field,
        error: e.to_string(),
    })
}

fn encode(field: &'static str, v: &Value) -> Result<Box<RawValue>, RedactError> {
    to_raw_value(v).map_err(|e| RedactError::Encode {
        field,
        error: e.to_string(),
    })
}
