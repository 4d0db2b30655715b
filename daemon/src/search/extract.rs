//! Which text of an event is indexed: the string leaves of its `payload` (prompts, assistant
//! text, tool names and inputs such as commands, file paths and patterns, tool output), or of
//! its `raw` source event when the payload has none (an unmapped event). Identifiers and
//! binary-looking blobs are left out, and the text is bounded per event.
//!
//! The index stores no text; a hit's snippet is made by extracting the same text again from
//! the stored event, so this must stay a pure function of the event's JSON.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// At most this much text of one event is indexed (cut at a character boundary).
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// A string longer than this with no whitespace in it is taken for a blob (base64, an image)
/// unless it looks like a path or a URL.
const BLOB_BYTES: usize = 256;

/// What the index keeps of one event.
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    pub lsn: u64,
    pub timestamp: u64,
    pub event_type: String,
    /// The text to index, leaves separated by newlines; empty when the event has none.
    pub text: String,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    lsn: u64,
    #[serde(rename = "type")]
    event_type: String,
    #[serde(default)]
    timestamp: u64,
    #[serde(default)]
    payload: Value,
    /// Left as text: it is read only when the payload has no text (most events keep the
    /// agent's whole hook event here, the costliest part to parse).
    #[serde(default, borrow)]
    raw: Option<&'a RawValue>,
}

/// The indexable text of one stored event (its JSON); `None` when it is not an event.
pub fn extract(json: &[u8]) -> Option<Extracted> {
    let e: Envelope = serde_json::from_slice(json).ok()?;
    let mut text = String::new();
    leaves(&e.payload, None, &mut text);
    if text.is_empty()
        && let Some(raw) = e.raw
    {
        let raw: Value = serde_json::from_str(raw.get()).ok()?;
        leaves(&raw, None, &mut text);
    }
    Some(Extracted {
        lsn: e.lsn,
        timestamp: e.timestamp,
        event_type: e.event_type,
        text,
    })
}

/// Appends the indexable string leaves of `v` (under `key`) to `out`, up to the bound.
fn leaves(v: &Value, key: Option<&str>, out: &mut String) {
    if out.len() >= MAX_TEXT_BYTES {
        return;
    }
    match v {
        Value::String(s) if key.is_none_or(|k| !is_identifier_key(k)) && !is_blob(s) => {
            push_bounded(out, s)
        }
        Value::Array(items) => {
            for item in items {
                leaves(item, key, out);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                leaves(item, Some(k), out);
            }
        }
        _ => {}
    }
}

/// Ids (`tool_use_id`, `message_id`, `uuid`, …) and signatures match nothing anyone searches
/// for, and would fill the index with unique terms.
fn is_identifier_key(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    lower == "id"
        || lower.ends_with("_id")
        || lower.ends_with("_ids")
        || lower.ends_with("uuid")
        || lower == "signature"
        // camelCase: `toolUseId`, `messageID`
        || key.ends_with("Id")
        || key.ends_with("ID")
}

/// Base64 and other long unbroken runs (images, encrypted content): not words.
fn is_blob(s: &str) -> bool {
    if s.starts_with("data:") && s.contains(";base64,") {
        return true;
    }
    s.len() > BLOB_BYTES
        && !s.as_bytes()[..BLOB_BYTES]
            .iter()
            .any(|b| b.is_ascii_whitespace() || *b == b'/' || *b == b'.')
}

fn push_bounded(out: &mut String, s: &str) {
    if s.is_empty() {
        return;
    }
    if !out.is_empty() {
        out.push('\n');
    }
    let room = MAX_TEXT_BYTES.saturating_sub(out.len());
    let mut end = s.len().min(room);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.push_str(&s[..end]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_commands_paths_and_output_are_indexed_ids_and_blobs_are_not() {
        let json = serde_json::json!({
            "lsn": 3, "id": "01J", "type": "execution.tool_use", "session_id": "s",
            "stream_id": "s", "timestamp": 7,
            "payload": {
                "tool": "Bash", "tool_use_id": "toolu_1",
                "input": {"command": "grep -rn needle src/", "file_path": "/tmp/x.txt"},
                "output": {"stdout": "found it", "stderr": ""},
                "image": "A".repeat(400),
                "count": 5
            },
            "metadata": {"hook": "PreToolUse"}
        });
        let e = extract(json.to_string().as_bytes()).unwrap();
        assert_eq!((e.lsn, e.timestamp), (3, 7));
        assert_eq!(e.event_type, "execution.tool_use");
        for want in ["Bash", "grep -rn needle src/", "/tmp/x.txt", "found it"] {
            assert!(e.text.contains(want), "{want}: {:?}", e.text);
        }
        for not in ["toolu_1", "AAAA", "PreToolUse", "01J"] {
            assert!(!e.text.contains(not), "{not}: {:?}", e.text);
        }
    }

    #[test]
    fn raw_is_read_only_when_the_payload_has_no_text_and_text_is_bounded() {
        let json = serde_json::json!({
            "lsn": 1, "type": "unmapped", "timestamp": 1, "payload": {},
            "raw": {"prompt": "from the source"}
        });
        assert_eq!(
            extract(json.to_string().as_bytes()).unwrap().text,
            "from the source"
        );
        let big = "é ".repeat(MAX_TEXT_BYTES);
        let json = serde_json::json!({"lsn": 1, "type": "t", "payload": {"text": big}});
        let e = extract(json.to_string().as_bytes()).unwrap();
        assert!(e.text.len() <= MAX_TEXT_BYTES && e.text.len() > MAX_TEXT_BYTES - 4);
        assert!(extract(b"not json").is_none());
    }
}
