//! Reading the agent's event from stdin: bounded, repaired where JSON cannot represent a
//! value, kept as text where it is not JSON or nests too deep, so the daemon always gets
//! something to store.

use std::io::Read;

use serde_json::Value;

/// The most of stdin the hook reads. Anything longer is not parsed (see [`read_input`]).
const MAX_INPUT_BYTES: usize = 64 << 20;
/// Events may nest this deep and still be sent as JSON: the daemon takes
/// [`dstream_sdk::event::MAX_NESTING_DEPTH`] levels in an event, and the mapping may place
/// the source event a few levels down.
const MAX_EVENT_DEPTH: usize = dstream_sdk::event::MAX_NESTING_DEPTH - 8;

/// The hook event as it will be sent, and what the reply needs to know about it.
pub(crate) struct Input {
    pub(crate) event: Value,
    /// `hook_event_name`, which picks the reply format.
    pub(crate) kind: Option<String>,
    /// The agent's session, passed as the `session_id` hint when it is a valid session id.
    pub(crate) session_id: Option<String>,
    /// Set when the event was changed to fit: not JSON, too big, or too deep.
    pub(crate) altered: Option<String>,
    /// When the hook got it (ms since the epoch), kept if it has to be spooled.
    pub(crate) received_ms: u64,
}

/// Reads the hook event from `reader`: at most [`MAX_INPUT_BYTES`].
///
/// - A JSON value is sent as it is (cut to fit a frame later, see [`crate::hook::fit`]).
/// - Anything else (not JSON, not UTF-8, nested deeper than an event may be, or longer than
///   the limit) is sent as a JSON string holding the text, so the daemon still stores what
///   the agent sent, as an unmapped event, rather than nothing.
pub(crate) fn read_input(reader: &mut impl Read) -> Input {
    let mut bytes = Vec::new();
    let read = reader
        .take(MAX_INPUT_BYTES as u64 + 1)
        .read_to_end(&mut bytes);
    let mut altered = match read {
        Err(e) => Some(format!("stdin could not be read whole: {e}")),
        Ok(_) if bytes.len() > MAX_INPUT_BYTES => {
            bytes.truncate(MAX_INPUT_BYTES);
            Some(format!(
                "stdin is longer than {MAX_INPUT_BYTES} bytes; the rest was not read"
            ))
        }
        Ok(_) => None,
    };
    // What JSON cannot represent (a lone surrogate, 1e999) is repaired and what nests too deep
    // is kept as text, rather than the whole event becoming one string: the daemon must still
    // read the tool call to decide it.
    let parsed = match altered {
        None => match std::str::from_utf8(&bytes)
            .ok()
            .and_then(crate::lossy_json::parse)
        {
            Some((mut v, repaired)) => {
                if repaired {
                    altered = Some(
                        "values JSON cannot represent (a lone surrogate, a number beyond \
                         f64) were replaced"
                            .into(),
                    );
                }
                if depth(&v) > MAX_EVENT_DEPTH {
                    cut_deep(&mut v, MAX_EVENT_DEPTH);
                    altered = Some(format!(
                        "parts nested deeper than {MAX_EVENT_DEPTH} levels are kept as text"
                    ));
                }
                Some(v)
            }
            None => {
                let why = match serde_json::from_slice::<Value>(&bytes) {
                    Err(e) => e.to_string(),
                    Ok(_) => "not UTF-8".into(),
                };
                altered = Some(format!("stdin is not JSON: {why}"));
                None
            }
        },
        Some(_) => None,
    };
    match parsed {
        Some(event) => {
            let field = |name: &str| event.get(name).and_then(Value::as_str).map(str::to_owned);
            Input {
                kind: field("hook_event_name"),
                session_id: field("session_id"),
                event,
                altered,
                received_ms: crate::util::time::now_ms(),
            }
        }
        None => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            Input {
                kind: sniff(&text, "hook_event_name"),
                session_id: sniff(&text, "session_id"),
                event: Value::String(text),
                altered,
                received_ms: crate::util::time::now_ms(),
            }
        }
    }
}

/// Replaces every array or object found `levels` deep with its JSON text.
fn cut_deep(v: &mut Value, levels: usize) {
    let children: Vec<&mut Value> = match v {
        Value::Array(a) => a.iter_mut().collect(),
        Value::Object(m) => m.values_mut().collect(),
        _ => return,
    };
    if levels <= 1 {
        for c in children {
            if matches!(c, Value::Array(_) | Value::Object(_)) {
                *c = Value::String(c.to_string());
            }
        }
        return;
    }
    for c in children {
        cut_deep(c, levels - 1);
    }
}

/// How deeply arrays and objects nest in `v` (0 for a scalar). serde_json's parser stops at
/// 128 levels, so the recursion is bounded.
fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The string value of `"key": "…"` in text that is not valid JSON as a whole (say, cut
/// short), when it is plain (no escapes) and short. Good enough to answer in the right format
/// and to file the text under the right session.
fn sniff(text: &str, key: &str) -> Option<String> {
    let needle = format!("\"{key}\"");
    let mut rest = &text[text.find(&needle)? + needle.len()..];
    rest = rest.trim_start().strip_prefix(':')?.trim_start();
    rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    let value = &rest[..end];
    (end <= 256 && !value.contains('\\')).then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_that_is_not_json_is_kept_as_text() {
        let text = br#"{"session_id":"abc-1","hook_event_name":"PreToolUse","tool_input":{"#;
        let input = read_input(&mut &text[..]);
        assert_eq!(
            input.event,
            Value::String(String::from_utf8_lossy(text).into())
        );
        assert_eq!(input.kind.as_deref(), Some("PreToolUse"));
        assert_eq!(input.session_id.as_deref(), Some("abc-1"));
        assert!(input.altered.unwrap().contains("not JSON"));

        let input = read_input(&mut &b"\xff\xfe garbage"[..]);
        assert!(input.event.is_string());
        assert_eq!(input.kind, None);

        let ok = read_input(&mut &br#"{"hook_event_name":"Stop","session_id":"s"}"#[..]);
        assert!(ok.altered.is_none());
        assert_eq!(ok.kind.as_deref(), Some("Stop"));
    }

    #[test]
    fn deeply_nested_parts_are_kept_as_text_and_the_rest_as_json() {
        let deep = format!(
            r#"{{"hook_event_name":"PreToolUse","tool_input":{{"x":{}1{}}}}}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        let input = read_input(&mut deep.as_bytes());
        // The call stays readable (tool, kind), only what nests too deep became a string.
        assert_eq!(input.kind.as_deref(), Some("PreToolUse"));
        assert!(input.event["tool_input"].is_object());
        assert!(depth(&input.event) <= MAX_EVENT_DEPTH);
        assert!(input.altered.unwrap().contains("deeper"));
    }

    #[test]
    fn sniff_reads_plain_string_fields_only() {
        assert_eq!(
            sniff(r#"{"a": "x", "k" : "v1"}"#, "k").as_deref(),
            Some("v1")
        );
        assert_eq!(sniff(r#"{"k": "v\"1"}"#, "k"), None);
        assert_eq!(sniff(r#"{"k": 5}"#, "k"), None);
        assert_eq!(sniff(r#"{"k": "unterminated"#, "k"), None);
        assert_eq!(sniff("", "k"), None);
    }
}
