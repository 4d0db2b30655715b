//! Mock model servers, so the real agent CLIs (Claude Code, OpenCode, the Claude Agent SDK) run
//! offline in the tests.
//!
//! [`MockModel`] listens on `127.0.0.1:0`, answers plain HTTP/1.1 on background threads and keeps
//! every request it received (method, path, headers, body) for the test to assert on. It speaks
//! one of two dialects:
//!
//! - [`Dialect::Anthropic`]: the Messages API (`POST /v1/messages`, streaming SSE or plain JSON,
//!   `POST /v1/messages/count_tokens`, `GET /v1/models`), for Claude Code and the Agent SDK;
//! - [`Dialect::OpenAi`]: `POST /v1/chat/completions` (streaming or not) and `GET /v1/models`,
//!   for OpenCode configured with an OpenAI-compatible custom provider.
//!
//! What the "model" says comes from a [`Script`]: a list of conversations, each picked by a
//! trigger string found in the conversation's first user message, and each a list of
//! [`Reply`]s indexed by how many assistant turns the request already holds. So a conversation
//! `[bash("echo hi"), text("done")]` answers the first request with a tool call and the request
//! that carries the tool result with the final text. A subagent is just another conversation,
//! triggered by the prompt the main conversation hands to the Agent tool.
//!
//! Requests that offer no tools (title and summary generation, quota probes, ...) never follow
//! the script: they get [`Script::side_reply`] as plain text. A request with tools that matches
//! no conversation, or that has run past the end of its conversation, gets a plain final text,
//! so an agent always ends its turn instead of looping.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

/// Which API the mock speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// Anthropic Messages API.
    Anthropic,
    /// OpenAI chat completions.
    OpenAi,
}

/// One scripted model turn.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A final text answer (`stop_reason: end_turn` / `finish_reason: stop`).
    Text(String),
    /// Optional leading text, then one or more tool calls in the same assistant message
    /// (`stop_reason: tool_use` / `finish_reason: tool_calls`).
    Tools {
        text: Option<String>,
        calls: Vec<(String, Value)>,
    },
    /// An HTTP error with this status and JSON body instead of a model answer.
    Error { status: u16, body: Value },
}

impl Reply {
    /// A final text.
    pub fn text(s: impl Into<String>) -> Reply {
        Reply::Text(s.into())
    }

    /// One call of tool `name` with `input`.
    pub fn tool(name: impl Into<String>, input: Value) -> Reply {
        Reply::Tools {
            text: None,
            calls: vec![(name.into(), input)],
        }
    }

    /// Claude Code's `Bash` tool running `command`.
    pub fn bash(command: &str) -> Reply {
        Reply::tool(
            "Bash",
            json!({"command": command, "description": "Run a harmless test command"}),
        )
    }

    /// OpenCode's `bash` tool running `command`.
    pub fn opencode_bash(command: &str) -> Reply {
        Reply::tool("bash", json!({"command": command}))
    }

    /// An Anthropic-style error answer (`{"type":"error","error":{...}}`) with this status.
    pub fn anthropic_error(status: u16, kind: &str, message: &str) -> Reply {
        Reply::Error {
            status,
            body: json!({"type": "error", "error": {"type": kind, "message": message}}),
        }
    }
}

/// A conversation of the script: picked when its trigger occurs in the first user message.
#[derive(Clone, Debug)]
pub struct Conversation {
    pub trigger: String,
    pub replies: Vec<Reply>,
}

/// What the mock model answers; see the module docs.
#[derive(Clone, Debug)]
pub struct Script {
    pub conversations: Vec<Conversation>,
    /// Answer to requests that offer no tools (titles, summaries, probes).
    pub side_reply: String,
    /// Answer to a request with tools that matches no conversation or ran past its end.
    pub fallback_text: String,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            conversations: Vec::new(),
            side_reply: "dstream test session".to_string(),
            fallback_text: "done".to_string(),
        }
    }
}

impl Script {
    pub fn new() -> Script {
        Script::default()
    }

    /// Add a conversation picked by `trigger` (first match wins, in the order added; an empty
    /// trigger matches every conversation).
    pub fn on(mut self, trigger: impl Into<String>, replies: Vec<Reply>) -> Script {
        self.conversations.push(Conversation {
            trigger: trigger.into(),
            replies,
        });
        self
    }

    /// Every conversation: one tool call, then `final_text` once the result is back.
    pub fn tool_then_text(call: Reply, final_text: &str) -> Script {
        Script::new().on("", vec![call, Reply::text(final_text)])
    }

    /// Claude Code delegates `echo hello-from-subagent` to a foreground subagent (the `Agent`
    /// tool), which runs it; both then answer.
    pub fn claude_subagent_echo() -> Script {
        Script::new()
            .on(
                "dstream-subagent-task",
                vec![
                    Reply::bash("echo hello-from-subagent"),
                    Reply::text("The subagent ran echo."),
                ],
            )
            .on(
                "",
                vec![
                    Reply::tool(
                        "Agent",
                        json!({"description": "Run echo in a subagent", "prompt": "dstream-subagent-task: run echo hello-from-subagent", "subagent_type": "general-purpose", "run_in_background": false}),
                    ),
                    Reply::text("The subagent is done."),
                ],
            )
    }

    /// Pick the reply for a model request that offers tools.
    fn reply_for(&self, first_user_text: &str, assistant_turns: usize) -> Reply {
        for c in &self.conversations {
            if first_user_text.contains(&c.trigger) {
                return c
                    .replies
                    .get(assistant_turns)
                    .cloned()
                    .unwrap_or_else(|| Reply::Text(self.fallback_text.clone()));
            }
        }
        Reply::Text(self.fallback_text.clone())
    }
}

/// One HTTP request the mock received.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn body_str(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON, if it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// Path without the query string.
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or("")
    }

    /// Whether this is a model call (Messages API or chat completions).
    pub fn is_model_call(&self) -> bool {
        self.method == "POST"
            && (self.route().ends_with("/messages") || self.route().ends_with("/chat/completions"))
    }

    /// Whether this model call carries a tool result back to the model (an Anthropic
    /// `tool_result` block or an OpenAI `role: tool` message).
    pub fn has_tool_result(&self) -> bool {
        let Some(v) = self.json() else { return false };
        let Some(msgs) = v.get("messages").and_then(Value::as_array) else {
            return false;
        };
        msgs.iter().any(|m| {
            m.get("role").and_then(Value::as_str) == Some("tool")
                || m.get("content")
                    .and_then(Value::as_array)
                    .is_some_and(|blocks| {
                        blocks
                            .iter()
                            .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                    })
        })
    }
}

struct State {
    dialect: Dialect,
    script: Script,
    requests: Mutex<Vec<Request>>,
    ids: AtomicU64,
    stop: AtomicBool,
}

/// A running mock model server; stops when dropped.
pub struct MockModel {
    addr: SocketAddr,
    state: Arc<State>,
    accept: Option<JoinHandle<()>>,
}

impl MockModel {
    /// An Anthropic Messages API mock.
    pub fn anthropic(script: Script) -> MockModel {
        MockModel::start(Dialect::Anthropic, script)
    }

    /// An OpenAI chat completions mock.
    pub fn openai(script: Script) -> MockModel {
        MockModel::start(Dialect::OpenAi, script)
    }

    pub fn start(dialect: Dialect, script: Script) -> MockModel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind mock model server");
        let addr = listener.local_addr().expect("local_addr");
        let state = Arc::new(State {
            dialect,
            script,
            requests: Mutex::new(Vec::new()),
            ids: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let st = Arc::clone(&state);
        let accept = std::thread::Builder::new()
            .name(format!("mock-model-{}", addr.port()))
            .spawn(move || {
                for conn in listener.incoming() {
                    if st.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let st = Arc::clone(&st);
                    let _ = std::thread::Builder::new()
                        .name("mock-model-conn".to_string())
                        .spawn(move || {
                            let _ = serve_connection(conn, &st);
                        });
                }
            })
            .expect("spawn mock model thread");
        MockModel {
            addr,
            state,
            accept: Some(accept),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (no trailing slash, no `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The model calls received so far (see [`Request::is_model_call`]).
    pub fn model_calls(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(Request::is_model_call)
            .collect()
    }

    /// Whether any model call carried a tool result back.
    pub fn saw_tool_result(&self) -> bool {
        self.requests().iter().any(Request::has_tool_result)
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn serve_connection(conn: TcpStream, st: &State) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(120)))?;
    conn.set_nodelay(true)?;
    let mut writer = conn.try_clone()?;
    let mut reader = BufReader::new(conn);
    loop {
        if st.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Some(req) = read_request(&mut reader, &mut writer)? else {
            return Ok(());
        };
        st.requests.lock().unwrap().push(req.clone());
        let resp = respond(st, &req);
        writer.write_all(&resp)?;
        writer.flush()?;
    }
}

/// Read one request; `None` at a clean end of stream.
fn read_request(
    reader: &mut BufReader<TcpStream>,
    writer: &mut TcpStream,
) -> io::Result<Option<Request>> {
    let mut line = String::new();
    // Skip stray empty lines between requests.
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        if !line.trim().is_empty() {
            break;
        }
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("/").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "eof in headers",
            ));
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    if get("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
        writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let mut body = Vec::new();
    if get("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let mut t = String::new();
                    if reader.read_line(&mut t)? == 0 || t.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let mut chunk = vec![0; size];
            reader.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk);
            let mut crlf = [0u8; 2];
            reader.read_exact(&mut crlf)?;
        }
    } else if let Some(len) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body = vec![0; len];
        reader.read_exact(&mut body)?;
    }
    Ok(Some(Request {
        method,
        path,
        headers,
        body,
    }))
}

fn http_response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        529 => "Overloaded",
        _ => "Status",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
         connection: keep-alive\r\ncache-control: no-cache\r\nrequest-id: req_dstream_mock\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn json_response(status: u16, v: &Value) -> Vec<u8> {
    http_response(status, "application/json", v.to_string().as_bytes())
}

fn respond(st: &State, req: &Request) -> Vec<u8> {
    let route = req.route();
    if req.method == "HEAD" {
        return http_response(200, "text/plain", b"");
    }
    if req.method == "GET" && route.ends_with("/models") {
        return json_response(
            200,
            &json!({"object": "list", "data": [], "has_more": false, "first_id": null, "last_id": null}),
        );
    }
    if req.method == "POST" && route.ends_with("/messages/count_tokens") {
        let n = (req.body.len() / 4).max(1);
        return json_response(200, &json!({"input_tokens": n}));
    }
    if req.is_model_call() {
        let Some(body) = req.json() else {
            return json_response(400, &json!({"error": "body is not JSON"}));
        };
        return match st.dialect {
            Dialect::Anthropic => anthropic_answer(st, &body),
            Dialect::OpenAi => openai_answer(st, &body),
        };
    }
    json_response(
        404,
        &json!({"type": "error", "error": {"type": "not_found_error", "message": format!("mock model: no route {} {}", req.method, route)}}),
    )
}

/// Text of the first user message (all its text blocks, joined by newlines).
fn first_user_text(body: &Value) -> String {
    let Some(msgs) = body.get("messages").and_then(Value::as_array) else {
        return String::new();
    };
    let Some(m) = msgs
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
    else {
        return String::new();
    };
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn assistant_turns(body: &Value) -> usize {
    body.get("messages")
        .and_then(Value::as_array)
        .map(|msgs| {
            msgs.iter()
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
                .count()
        })
        .unwrap_or(0)
}

fn offers_tools(body: &Value) -> bool {
    body.get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty())
}

fn pick_reply(st: &State, body: &Value) -> Reply {
    if !offers_tools(body) {
        return Reply::Text(st.script.side_reply.clone());
    }
    st.script
        .reply_for(&first_user_text(body), assistant_turns(body))
}

fn next_id(st: &State) -> u64 {
    st.ids.fetch_add(1, Ordering::SeqCst) + 1
}

fn anthropic_answer(st: &State, body: &Value) -> Vec<u8> {
    let reply = pick_reply(st, body);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("claude-mock")
        .to_string();
    let (text, calls) = match reply {
        Reply::Error { status, body } => return json_response(status, &body),
        Reply::Text(t) => (Some(t), Vec::new()),
        Reply::Tools { text, calls } => (text, calls),
    };
    let n = next_id(st);
    let msg_id = format!("msg_dstream_{n:04}");
    let mut blocks = Vec::new();
    if let Some(t) = text {
        blocks.push(json!({"type": "text", "text": t}));
    }
    for (i, (name, input)) in calls.iter().enumerate() {
        blocks.push(json!({"type": "tool_use", "id": format!("toolu_dstream_{n:04}_{i}"), "name": name, "input": input}));
    }
    let stop_reason = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    let usage = json!({"input_tokens": 12, "output_tokens": 8, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    let streaming = body.get("stream").and_then(Value::as_bool) == Some(true);
    if !streaming {
        return json_response(
            200,
            &json!({
                "id": msg_id, "type": "message", "role": "assistant", "model": model,
                "content": blocks, "stop_reason": stop_reason, "stop_sequence": null, "usage": usage,
            }),
        );
    }
    let mut sse = String::new();
    let mut event = |name: &str, data: Value| {
        sse.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }}),
    );
    for (index, block) in blocks.iter().enumerate() {
        if block["type"] == "text" {
            event(
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
            );
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": block["text"]}}),
            );
        } else {
            event(
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}),
            );
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": block["input"].to_string()}}),
            );
        }
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
    }
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 8}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    http_response(200, "text/event-stream", sse.as_bytes())
}

fn openai_answer(st: &State, body: &Value) -> Vec<u8> {
    let reply = pick_reply(st, body);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-model")
        .to_string();
    let (text, calls) = match reply {
        Reply::Error { status, body } => return json_response(status, &body),
        Reply::Text(t) => (Some(t), Vec::new()),
        Reply::Tools { text, calls } => (text, calls),
    };
    let n = next_id(st);
    let id = format!("chatcmpl-dstream-{n:04}");
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, input))| {
            json!({"index": i, "id": format!("call_dstream_{n:04}_{i}"), "type": "function",
                   "function": {"name": name, "arguments": input.to_string()}})
        })
        .collect();
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let usage = json!({"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20});
    let streaming = body.get("stream").and_then(Value::as_bool) == Some(true);
    if !streaming {
        let mut message = json!({"role": "assistant", "content": text});
        if !tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(tool_calls);
        }
        return json_response(
            200,
            &json!({"id": id, "object": "chat.completion", "created": 1_700_000_000, "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}),
        );
    }
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut sse = String::new();
    let mut data = |v: Value| sse.push_str(&format!("data: {v}\n\n"));
    data(chunk(json!({"role": "assistant", "content": ""}), None));
    if let Some(t) = text {
        data(chunk(json!({"content": t}), None));
    }
    if !tool_calls.is_empty() {
        data(chunk(json!({"tool_calls": tool_calls}), None));
    }
    data(chunk(json!({}), Some(finish)));
    data(
        json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
               "choices": [], "usage": usage}),
    );
    sse.push_str("data: [DONE]\n\n");
    http_response(200, "text/event-stream", sse.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// POST `body` to `path` on `mock` over a raw socket and return the response's body.
    fn post(mock: &MockModel, path: &str, body: &Value) -> (u16, String) {
        let mut s = TcpStream::connect(mock.addr()).unwrap();
        let body = body.to_string();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reader = BufReader::new(s);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        let code = status.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut len = 0;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).unwrap();
            if h.trim().is_empty() {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut buf = vec![0; len];
        reader.read_exact(&mut buf).unwrap();
        (code, String::from_utf8(buf).unwrap())
    }

    #[test]
    fn anthropic_script_answers_tool_call_then_text_and_records_requests() {
        let mock = MockModel::anthropic(Script::tool_then_text(Reply::bash("echo hi"), "bye"));
        let first = json!({"model": "m", "stream": true, "tools": [{"name": "Bash"}],
                           "messages": [{"role": "user", "content": "go"}]});
        let (code, sse) = post(&mock, "/v1/messages?beta=true", &first);
        assert_eq!(code, 200);
        assert!(sse.contains("event: message_start"), "{sse}");
        assert!(sse.contains(r#""type":"tool_use""#), "{sse}");
        assert!(sse.contains(r#""stop_reason":"tool_use""#), "{sse}");
        let second = json!({"model": "m", "tools": [{"name": "Bash"}], "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "hi"}]}]});
        let (code, msg) = post(&mock, "/v1/messages", &second);
        assert_eq!(code, 200);
        let msg: Value = serde_json::from_str(&msg).unwrap();
        assert_eq!(msg["content"][0]["text"], "bye");
        assert_eq!(msg["stop_reason"], "end_turn");
        // A request without tools is a side query: plain text, never the script.
        let side = json!({"model": "m", "messages": [{"role": "user", "content": "go"}]});
        let (_, msg) = post(&mock, "/v1/messages", &side);
        assert!(msg.contains("dstream test session"), "{msg}");
        assert_eq!(mock.model_calls().len(), 3);
        assert!(mock.saw_tool_result());
    }

    #[test]
    fn openai_stream_carries_tool_calls_and_done() {
        let mock = MockModel::openai(Script::tool_then_text(Reply::opencode_bash("ls"), "ok"));
        let req = json!({"model": "m", "stream": true, "tools": [{"type": "function"}],
                         "messages": [{"role": "user", "content": "go"}]});
        let (code, sse) = post(&mock, "/v1/chat/completions", &req);
        assert_eq!(code, 200);
        assert!(sse.contains(r#""tool_calls":[{"#), "{sse}");
        assert!(sse.contains(r#""finish_reason":"tool_calls""#), "{sse}");
        assert!(sse.trim_end().ends_with("data: [DONE]"), "{sse}");
        assert!(!mock.saw_tool_result());
    }
}
