//! The wire side: a frame checked into a JSON-RPC 2.0 request (or the error to answer, with
//! the id salvaged from a broken frame), replies and errors encoded as frames, and what every
//! method shares to read its params and write its result.

use dstream_sdk::RpcError;
use dstream_sdk::event::MAX_NESTING_DEPTH;
use dstream_sdk::protocol::codes;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::jsonscan::{nesting_depth, string_end};
use crate::store::StoreError;
use crate::subscription::Subscription;

/// The JSON bytes of a result, or an error.
pub type RpcResult = Result<Vec<u8>, RpcError>;

pub enum Reply {
    Now(RpcResult),
    /// Handed to a session writer, which answers once the event is durable; later requests
    /// on the connection are not held up by it.
    Submitted,
    /// A new subscription: the connection sends the reply, then starts the feed, so the reply
    /// comes before every notification.
    Subscribed(Subscription),
}

/// A request, borrowed from its frame.
#[derive(Debug)]
pub struct Request<'a> {
    pub id: Option<&'a RawValue>,
    pub method: String,
    pub params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

type ParseFailure = (Option<Box<RawValue>>, RpcError);

/// Deepest nesting a request frame may have: an event's fields (at most [`MAX_NESTING_DEPTH`])
/// sit a few levels down in it. Checked before serde_json (limit 128) parses the frame, so a
/// deeper frame gets a clear error rather than "recursion limit exceeded".
pub const MAX_FRAME_DEPTH: usize = MAX_NESTING_DEPTH + 8;

/// Checks a frame is a JSON-RPC 2.0 request. On failure, the id (when one could be read) and
/// the error to answer with.
pub fn parse_request(line: &[u8]) -> Result<Request<'_>, ParseFailure> {
    let text = std::str::from_utf8(line).map_err(|e| {
        (
            salvage_id(line),
            RpcError::new(
                codes::PARSE_ERROR,
                format!(
                    "frame is not valid UTF-8 (bad byte at offset {})",
                    e.valid_up_to()
                ),
            ),
        )
    })?;
    let depth = nesting_depth(line);
    if depth > MAX_FRAME_DEPTH {
        // Only `params` (or a stray member) can nest in a request object.
        let code = match line.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => codes::INVALID_PARAMS,
            _ => codes::INVALID_REQUEST,
        };
        return Err((
            salvage_id(line),
            RpcError::new(
                code,
                format!(
                    "request nests {depth} levels of arrays and objects; the limit is \
                     {MAX_FRAME_DEPTH} for a request, and {MAX_NESTING_DEPTH} for an event's \
                     payload, metadata and raw"
                ),
            ),
        ));
    }
    let value: &RawValue = serde_json::from_str(text).map_err(|e| {
        (
            salvage_id(line),
            RpcError::new(codes::PARSE_ERROR, format!("invalid JSON: {e}")),
        )
    })?;
    let invalid = |id: Option<&RawValue>, msg: &str| {
        (
            id.map(|i| i.to_owned()),
            RpcError::new(codes::INVALID_REQUEST, msg),
        )
    };
    match value.get().trim_start().as_bytes().first() {
        Some(b'{') => {}
        Some(b'[') => {
            return Err(invalid(
                None,
                "batch requests are not supported; send one request object per line",
            ));
        }
        _ => return Err(invalid(None, "a request must be a JSON object")),
    }
    let env: Envelope = serde_json::from_str(value.get()).map_err(|e| {
        (
            salvage_id(line),
            RpcError::new(codes::INVALID_REQUEST, format!("invalid request: {e}")),
        )
    })?;
    let id = env.id.filter(|i| i.get() != "null");
    if let Some(i) = id
        && !matches!(i.get().as_bytes()[0], b'"' | b'-' | b'0'..=b'9')
    {
        return Err(invalid(None, "id must be a string, a number or null"));
    }
    if env.jsonrpc.is_some_and(|v| v.get() != "\"2.0\"") {
        return Err(invalid(id, "jsonrpc must be \"2.0\""));
    }
    let method = match env.method.map(|m| serde_json::from_str::<String>(m.get())) {
        Some(Ok(m)) => m,
        Some(Err(_)) => return Err(invalid(id, "method must be a string")),
        None => return Err(invalid(id, "missing method")),
    };
    Ok(Request {
        id,
        method,
        params: env.params.filter(|p| p.get() != "null"),
    })
}

fn skip_ws(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The request id of a frame that could not be parsed (invalid, too deep, or cut short: an
/// oversize frame's first bytes), so the error reply reaches the caller: the value of the
/// first top-level `"id"` member, if it is a complete string or number. One linear pass,
/// no recursion.
pub fn salvage_id(frame: &[u8]) -> Option<Box<RawValue>> {
    let mut i = skip_ws(frame, 0);
    if frame.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let (mut depth, mut expect_key) = (1usize, true);
    while i < frame.len() {
        match frame[i] {
            b'"' => {
                let end = string_end(frame, i)?;
                if depth == 1 && expect_key {
                    let colon = skip_ws(frame, end);
                    if frame.get(colon) != Some(&b':') {
                        return None;
                    }
                    let value = skip_ws(frame, colon + 1);
                    if &frame[i..end] == b"\"id\"" {
                        return id_at(frame, value);
                    }
                    expect_key = false;
                    i = value;
                } else {
                    i = end;
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return None;
                }
            }
            b',' if depth == 1 => expect_key = true,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The string or number starting at `frame[i]`, if it is complete and valid JSON.
fn id_at(frame: &[u8], i: usize) -> Option<Box<RawValue>> {
    let end = match frame.get(i)? {
        b'"' => string_end(frame, i)?,
        b'-' | b'0'..=b'9' => {
            let len = frame[i..]
                .iter()
                .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                .count();
            // A number running to the end of a cut frame may be cut too.
            match frame.get(i + len) {
                Some(b',' | b'}') => {}
                Some(b) if b.is_ascii_whitespace() => {}
                _ => return None,
            }
            i + len
        }
        _ => return None,
    };
    serde_json::from_slice(&frame[i..end]).ok()
}

pub fn reply_frame(id: Option<&RawValue>, result: RpcResult) -> Vec<u8> {
    match result {
        Ok(json) => {
            let id = id.map_or("null", |i| i.get());
            let mut f = Vec::with_capacity(json.len() + id.len() + 40);
            f.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
            f.extend_from_slice(id.as_bytes());
            f.extend_from_slice(b",\"result\":");
            f.extend_from_slice(&json);
            f.extend_from_slice(b"}\n");
            f
        }
        Err(e) => error_frame(id, &e),
    }
}

pub fn error_frame(id: Option<&RawValue>, err: &RpcError) -> Vec<u8> {
    let id = id.map_or("null", |i| i.get());
    let err = serde_json::to_string(err).unwrap_or_else(|_| "{}".into());
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{err}}}\n").into_bytes()
}

pub(super) fn params<T: DeserializeOwned>(params: Option<&RawValue>) -> Result<T, RpcError> {
    let text = params.map_or("{}", |p| p.get());
    serde_json::from_str(text)
        .map_err(|e| RpcError::new(codes::INVALID_PARAMS, format!("invalid params: {e}")))
}

pub(super) fn to_json<T: serde::Serialize>(value: &T) -> RpcResult {
    serde_json::to_vec(value).map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))
}

pub(super) fn check_session_id(id: &str, what: &str) -> Result<(), RpcError> {
    dstream_sdk::validate_session_id(id).map_err(|e| {
        RpcError::new(
            codes::INVALID_SESSION_ID,
            format!("invalid {what} {id:?}: {e}"),
        )
    })
}

pub fn store_error(e: StoreError) -> RpcError {
    let code = match &e {
        StoreError::NotFound(_) => codes::SESSION_NOT_FOUND,
        StoreError::NotQuarantined(_) | StoreError::Refused(_) => codes::INVALID_PARAMS,
        StoreError::Exists(_) => codes::SESSION_EXISTS,
        StoreError::Gone {
            deleted_at_ms,
            reason,
            ..
        } => {
            let data = serde_json::json!({"deleted_at_ms": deleted_at_ms, "reason": reason});
            return RpcError::new(codes::SESSION_GONE, e.to_string()).with_data(data);
        }
        StoreError::Quarantined { .. } => codes::SESSION_QUARANTINED,
        StoreError::Corrupt { .. } => codes::CORRUPT_RECORD,
        StoreError::ShuttingDown => codes::SHUTTING_DOWN,
        StoreError::Io { .. } | StoreError::Failed { .. } | StoreError::Locked { .. } => {
            codes::STORAGE_FAILED
        }
    };
    RpcError::new(code, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(frame: &str) -> Option<String> {
        salvage_id(frame.as_bytes()).map(|v| v.get().to_owned())
    }

    #[test]
    fn depth_counts_brackets_outside_strings_only() {
        assert_eq!(nesting_depth(b"1"), 0);
        assert_eq!(nesting_depth(b"\"[[{\""), 0);
        assert_eq!(nesting_depth(b"{}"), 1);
        assert_eq!(nesting_depth(br#"{"a":[1,{"b":"]]\"[["}],"c":[[[]]]}"#), 4);
        assert_eq!(nesting_depth(br#"["\\",["\\\"[",[]]]"#), 3);
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(nesting_depth(deep.as_bytes()), 100_000);
        // Unterminated input is counted as far as it goes.
        assert_eq!(nesting_depth(b"[[\"[[[["), 2);
    }

    #[test]
    fn the_top_level_id_is_found_in_broken_or_cut_frames() {
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":77,"method":"append","params":{"x":"#).as_deref(),
            Some("77")
        );
        assert_eq!(
            id(r#"{ "id" : "a\"b" , "method": }"#).as_deref(),
            Some(r#""a\"b""#)
        );
        assert_eq!(
            id(r#"{"params":{"id":1},"x":["id",2],"id":-3.5e2,"#).as_deref(),
            Some("-3.5e2")
        );
        assert_eq!(id(r#"{"k":"\"id\":5","id":6}"#).as_deref(), Some("6"));
        // Not at the top level, not a string or number, cut short, or absent.
        assert_eq!(id(r#"{"params":{"id":1}}"#), None);
        assert_eq!(id(r#"{"id":null,"method":"x"}"#), None);
        assert_eq!(id(r#"{"id":{"a":1}}"#), None);
        assert_eq!(id(r#"{"id":12"#), None);
        assert_eq!(id(r#"{"id":"abc"#), None);
        assert_eq!(id(r#"[{"id":1}]"#), None);
        assert_eq!(id("hello"), None);
        assert_eq!(id(r#"{"id":1x}"#), None);
    }

    #[test]
    fn parse_errors_carry_the_salvaged_id() {
        let (id, e) = parse_request(br#"{"jsonrpc":"2.0","id":9,"method":"hello","#).unwrap_err();
        assert_eq!(id.unwrap().get(), "9");
        assert_eq!(e.code, codes::PARSE_ERROR);

        let frame = format!(
            r#"{{"jsonrpc":"2.0","id":"deep","method":"append","params":{}1{}}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        let (id, e) = parse_request(frame.as_bytes()).unwrap_err();
        assert_eq!(id.unwrap().get(), "\"deep\"");
        assert_eq!(e.code, codes::INVALID_PARAMS);
        assert!(e.message.contains("nests 301 levels"), "{}", e.message);
    }
}
