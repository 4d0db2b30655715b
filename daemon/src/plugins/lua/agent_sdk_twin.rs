//! The Claude Agent SDK mapping written in Rust ([`crate::plugins::agent_sdk_map`]) held to its
//! reference, `plugins/claude-agent-sdk.lua`, run in a Lua state as the built-in was. The
//! mapping keeps state between messages, so sequences are compared: the same messages through
//! a fresh Lua state and a fresh Rust mapping, output for output, call by call.

use serde_json::{Map, Value as Json, json};

use super::state::Host;
use super::twin::{Ids, lua_builtin, lua_map};
use crate::plugins::agent_sdk_map::{self, MAX_CALLS, MAX_KNOWN, MAX_SESSIONS};
use crate::plugins::contract::PluginError;
use crate::plugins::native_builtin::Mapping;

const SOURCE: &str = "claude-agent-sdk";

/// The two mappings side by side, with what they were compared on.
struct Twin {
    lua: Host,
    rust: Box<dyn Mapping>,
    lua_ids: Ids,
    rust_ids: Ids,
    calls: usize,
    failed: usize,
}

impl Twin {
    fn new() -> Twin {
        Twin {
            lua: lua_builtin("claude-agent-sdk.lua", &json!({})),
            rust: agent_sdk_map::new(&json!({})),
            lua_ids: Ids::default(),
            rust_ids: Ids::default(),
            calls: 0,
            failed: 0,
        }
    }

    /// Maps `raw` with both, asserts the same result, and returns it.
    fn map(&mut self, raw: &Json) -> Result<Vec<Json>, String> {
        let by_lua = lua_map(&self.lua, raw, SOURCE);
        let by_rust = self.rust.map(raw, SOURCE);
        self.calls += 1;
        match (by_lua, by_rust) {
            (Ok(l), Ok(r)) => {
                let (l, r) = (self.lua_ids.normalize(l), self.rust_ids.normalize(r));
                assert_eq!(l, r, "call {}: {raw}", self.calls);
                Ok(r)
            }
            (Err(l), Err(r)) => {
                assert_eq!(l, PluginError::Call(r.clone()).to_string(), "{raw}");
                self.failed += 1;
                Err(r)
            }
            (l, r) => panic!("call {}: {raw}\nLua {l:?}\nRust {r:?}", self.calls),
        }
    }

    fn run(&mut self, seq: &[Json]) {
        for raw in seq {
            let _ = self.map(raw);
        }
    }
}

/// `seq` run through a fresh pair.
fn compare(seq: &[Json]) -> Twin {
    let mut twin = Twin::new();
    twin.run(seq);
    twin
}

fn fixture() -> Vec<Json> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/claude-agent-sdk/run-basic.jsonl"
    );
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Builds SDK messages of one session (or subagent), each with a uuid of its own.
struct Sdk {
    session_id: Json,
    parent_tool_use_id: Option<Json>,
    n: usize,
}

fn sdk(session_id: impl Into<Json>) -> Sdk {
    Sdk {
        session_id: session_id.into(),
        parent_tool_use_id: None,
        n: 0,
    }
}

impl Sdk {
    fn child_of(mut self, tool: impl Into<Json>) -> Sdk {
        self.parent_tool_use_id = Some(tool.into());
        self
    }

    fn message(&mut self, message_type: &str, fields: Json) -> Json {
        self.n += 1;
        let mut m = Map::new();
        m.insert("type".into(), json!(message_type));
        m.insert("session_id".into(), self.session_id.clone());
        m.insert("uuid".into(), json!(format!("uuid-{}", self.n)));
        m.insert(
            "parent_tool_use_id".into(),
            self.parent_tool_use_id.clone().unwrap_or(Json::Null),
        );
        for (k, v) in fields.as_object().unwrap() {
            m.insert(k.clone(), v.clone());
        }
        Json::Object(m)
    }

    fn stream(&mut self, event: Json) -> Json {
        self.message(
            "stream_event",
            json!({"event": event, "api_message_id": "msg_api_1"}),
        )
    }

    fn assistant(&mut self, id: &str, content: Json) -> Json {
        self.message(
            "assistant",
            json!({"message": {"id": id, "model": "claude-x", "role": "assistant",
                "stop_reason": null, "usage": {"input_tokens": 3, "output_tokens": 5},
                "content": content}}),
        )
    }

    fn user(&mut self, content: Json) -> Json {
        self.message(
            "user",
            json!({"message": {"role": "user", "content": content}}),
        )
    }

    fn system(&mut self, subtype: &str, fields: Json) -> Json {
        let mut m = self.message("system", fields);
        m["subtype"] = json!(subtype);
        m
    }

    fn result(&mut self, fields: Json) -> Json {
        let mut base = json!({"subtype": "success", "is_error": false, "stop_reason": "end_turn",
            "total_cost_usd": 0.0125, "duration_ms": 1500, "num_turns": 2,
            "usage": {"input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 7},
            "modelUsage": {"claude-x": {"costUSD": 0.0125}}, "result": "done"});
        for (k, v) in fields.as_object().unwrap() {
            base[k] = v.clone();
        }
        self.message("result", base)
    }
}

fn start(index: impl Into<Json>, block: Json) -> Json {
    json!({"type": "content_block_start", "index": index.into(), "content_block": block})
}

fn delta(index: impl Into<Json>, delta: Json) -> Json {
    json!({"type": "content_block_delta", "index": index.into(), "delta": delta})
}

fn json_part(index: impl Into<Json>, part: &str) -> Json {
    delta(
        index,
        json!({"type": "input_json_delta", "partial_json": part}),
    )
}

fn stop(index: impl Into<Json>) -> Json {
    json!({"type": "content_block_stop", "index": index.into()})
}

fn tool(kind: &str, id: &str, name: &str) -> Json {
    json!({"type": kind, "id": id, "name": name, "input": {}})
}

fn message_start(id: &str) -> Json {
    json!({"type": "message_start", "message": {"id": id, "model": "claude-x",
        "usage": {"input_tokens": 12, "output_tokens": 1}}})
}

fn tool_result(id: &str, content: Json, is_error: impl Into<Json>) -> Json {
    json!({"type": "tool_result", "tool_use_id": id, "content": content, "is_error": is_error.into()})
}

/// Short sequences that together reach every branch of the mapping.
fn scenarios() -> Vec<Vec<Json>> {
    let mut s = sdk("sess-main");
    let mut scenarios = vec![
        // Text and thinking, streamed.
        vec![
            s.system("init", json!({"model": "claude-x", "cwd": "/tmp", "permissionMode": "default",
                "claude_code_version": "2.1.0", "output_style": "default", "tools": ["Bash"]})),
            s.stream(message_start("msg_1")),
            s.stream(start(0, json!({"type": "text", "text": ""}))),
            s.stream(delta(0, json!({"type": "text_delta", "text": "Hello"}))),
            s.stream(stop(0)),
            s.stream(start(1, json!({"type": "thinking", "thinking": ""}))),
            s.stream(delta(1, json!({"type": "thinking_delta", "thinking": "Hmm"}))),
            s.stream(delta(1, json!({"type": "signature_delta", "signature": "sig"}))),
            s.stream(stop(1)),
            s.stream(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 8}})),
            s.assistant("msg_1", json!([{"type": "text", "text": "Hello"},
                {"type": "thinking", "thinking": "Hmm"}])),
            s.stream(json!({"type": "message_stop"})),
        ],
        // A tool call streamed in parts, and its result.
        vec![
            s.stream(message_start("msg_2")),
            s.stream(start(2, tool("tool_use", "toolu_1", "Bash"))),
            s.stream(json_part(2, r#"{"command":"#)),
            s.stream(json_part(2, r#""ls"}"#)),
            s.stream(stop(2)),
            s.user(json!([tool_result("toolu_1", json!("a\nb"), false)])),
        ],
        // Server and MCP tool calls, empty and invalid JSON, deltas of other kinds.
        vec![
            s.stream(start(3, tool("server_tool_use", "srvtoolu_1", "web_search"))),
            s.stream(stop(3)),
            s.stream(start(4, tool("mcp_tool_use", "mcptoolu_1", "mcp__x__y"))),
            s.stream(json_part(4, r#"{"bad"#)),
            s.stream(stop(4)),
            s.stream(start(5, json!({"type": "text"}))),
            s.stream(json_part(5, "not a tool")),
            s.stream(json_part(5, "again")),
            s.stream(delta(5, json!({"type": "citations_delta", "citation": {}}))),
            s.stream(stop(5)),
            s.stream(json_part(9, "no block")),
            s.stream(stop(9)),
            s.user(json!([tool_result("srvtoolu_1", json!([{"type": "text", "text": "r"}]), true),
                tool_result("mcptoolu_1", json!(null), "yes"), tool_result("toolu_none", json!(1), true)])),
        ],
        // A message that was not streamed: its content becomes the chunks.
        vec![
            s.assistant("msg_9", json!([
                {"type": "text", "text": "T"},
                {"type": "thinking", "thinking": "R"},
                {"type": "tool_use", "id": "toolu_5", "name": "Read", "input": {"path": "/x", "n": [1, 2.5, null]}},
                {"type": "server_tool_use", "id": "srvtoolu_5", "name": "web_fetch"},
                {"type": "mcp_tool_use", "id": 7, "name": ["n"], "input": "text input"},
                {"type": "image", "source": {}},
                null, "text", 5, [1], {}
            ])),
            s.user(json!([
                tool_result("toolu_5", json!("ok"), false),
                tool_result("srvtoolu_5", json!({"err": 1}), true),
                {"type": "text", "text": "first"},
                {"type": "text", "text": 5},
                {"type": "text", "text": "second"},
                {"type": "image"}
            ])),
        ],
        // Streamed, then its assistant message (compact); the same id not streamed later.
        vec![
            s.stream(message_start("msg_3")),
            s.assistant("msg_3", json!([tool("tool_use", "toolu_3", "Bash")])),
            s.stream(json!({"type": "message_start", "message": {"model": "m"}})),
            s.stream(json!({"type": "message_delta", "delta": {}})),
            s.assistant("msg_api_1", json!([])),
        ],
        // User messages of every shape.
        vec![
            s.user(json!("a prompt")),
            s.user(json!([])),
            s.user(json!({"type": "text", "text": "an object"})),
            s.user(json!([{"type": "text", "text": "only text"}])),
            s.user(json!([{"type": "text"}, {"type": "tool_use"}])),
            s.user(json!(null)),
            s.message("user", json!({})),
        ],
        // System messages.
        vec![
            s.system("init", json!({"model": "claude-x"})),
            s.system("status", json!({"status": "requesting"})),
            s.system("status", json!({"status": null})),
            s.system("compact_boundary", json!({"compact_metadata": {"trigger": "auto", "pre_tokens": 150000}})),
            s.system("compact_boundary", json!({"compact_metadata": "x"})),
            s.system("hook_response", json!({})),
            s.message("system", json!({})),
        ],
        // Stream events of no block: errors, unknown ones, none.
        vec![
            s.stream(json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})),
            s.stream(json!({"type": "error"})),
            s.stream(json!({"type": "ping"})),
            s.stream(json!({})),
            s.message("stream_event", json!({})),
            s.message("stream_event", json!({"event": "text"})),
            s.message("stream_event", json!({"event": [1, 2]})),
        ],
        // Unknown and missing types.
        vec![
            s.message("keep_alive", json!({})),
            json!({"session_id": "sess-main", "uuid": "u-x"}),
            json!({"type": null, "session_id": "sess-main"}),
            json!({"type": 5, "subtype": ["init"], "session_id": "sess-main"}),
            json!({"type": {"t": 1}}),
        ],
    ];
    // Every result: each stop reason, failures.
    let mut results: Vec<Json> = [
        "end_turn",
        "stop_sequence",
        "max_tokens",
        "tool_use",
        "refusal",
        "pause_turn",
        "model_context_window_exceeded",
    ]
    .iter()
    .map(|r| s.result(json!({"stop_reason": r})))
    .collect();
    results.extend([
        s.result(json!({"stop_reason": null})),
        s.result(json!({"stop_reason": 5})),
        s.message("result", json!({})),
        s.result(json!({"subtype": "error_max_turns", "is_error": true, "errors": ["too many"]})),
        s.result(json!({"subtype": "error_during_execution", "result": 5})),
        s.result(json!({"subtype": null})),
        s.result(json!({"subtype": "success", "is_error": true, "usage": [1]})),
        s.result(json!({"subtype": "success", "is_error": "true", "usage": null})),
    ]);
    scenarios.push(results);
    // A subagent: spawned at its first message, completed at its tool call's result.
    let mut p = sdk("sess-parent");
    let mut c = sdk("sess-parent").child_of("toolu_task");
    scenarios.push(vec![
        p.system("init", json!({})),
        p.assistant("msg_p1", json!([tool("tool_use", "toolu_task", "Task")])),
        c.stream(message_start("msg_c1")),
        c.stream(start(0, tool("tool_use", "toolu_c", "Grep"))),
        c.stream(stop(0)),
        c.assistant("msg_c1", json!([tool("tool_use", "toolu_c", "Grep")])),
        c.user(json!([tool_result("toolu_c", json!("found"), false)])),
        c.result(json!({})),
        p.user(json!([tool_result(
            "toolu_task",
            json!("agent done"),
            true
        )])),
        c.user(json!("late")),
        p.result(json!({})),
    ]);
    // Subagent ids that cannot make a session id.
    let mut bad = Vec::new();
    for tool_id in [
        json!("../up"),
        json!("x".repeat(120)),
        json!(""),
        json!(5),
        json!(null),
        json!("ünï"),
    ] {
        let mut c = sdk("sess-parent").child_of(tool_id.clone());
        bad.push(c.stream(message_start("msg_c2")));
        bad.push(c.user(json!([tool_result("toolu_task", json!(1), false)])));
        let mut p = sdk("sess-parent");
        if let Some(t) = tool_id.as_str() {
            bad.push(p.user(json!([tool_result(t, json!(1), false)])));
        }
    }
    scenarios.push(bad);
    // Session ids that are not safe, or not strings.
    let mut odd = Vec::new();
    for sid in [
        json!("../x"),
        json!(".hidden"),
        json!("a".repeat(129)),
        json!("a".repeat(128)),
        json!("a".repeat(120)),
        json!("sé"),
        json!(""),
        json!("a b"),
        json!("a/b"),
        json!(null),
        json!(5),
        json!({}),
        json!(["s"]),
    ] {
        let mut o = sdk(sid.clone());
        odd.push(o.system("init", json!({})));
        odd.push(o.stream(start(0, tool("tool_use", "toolu_o", "Bash"))));
        odd.push(o.stream(stop(0)));
        odd.push(o.assistant("msg_o", json!([tool("tool_use", "toolu_o2", "Bash")])));
        odd.push(o.user(json!([tool_result("toolu_o2", json!(1), false)])));
        let mut c = sdk(sid).child_of("toolu_t");
        odd.push(c.user(json!("child")));
        odd.push(o.result(json!({})));
    }
    scenarios.push(odd);
    // Block indexes as Lua keys: 1 and 1.0 are one key, "1" another; null and booleans are
    // keys; a table is never found again.
    let mut k = sdk("sess-keys");
    let mut keys = vec![k.stream(message_start("msg_k"))];
    for (at, then) in [
        (json!(1), json!(1.0)),
        (json!(1.0), json!(1)),
        (json!("1"), json!(1)),
        (json!("1"), json!("1")),
        (json!(null), json!(null)),
        (json!(true), json!(true)),
        (json!(false), json!(true)),
        (json!([0]), json!([0])),
        (json!({}), json!({})),
        (json!(-0.0), json!(0)),
        (json!(1.5), json!(1.5)),
        (json!(u64::MAX), json!(1.8446744073709552e19)),
        (json!(i64::MAX), json!(9.223372036854776e18)),
        (json!(i64::MAX), json!(i64::MAX)),
        (json!(i64::MIN), json!(-9.223372036854776e18)),
        (json!(9007199254740993_u64), json!(9007199254740992.0)),
    ] {
        keys.push(k.stream(start(at.clone(), tool("tool_use", "toolu_k", "K"))));
        keys.push(k.stream(json_part(then.clone(), "[1,")));
        keys.push(k.stream(json_part(at.clone(), "2]")));
        keys.push(k.stream(stop(then)));
        keys.push(k.stream(stop(at)));
    }
    keys.push(
        k.stream(json!({"type": "content_block_start", "content_block": {"type": "tool_use"}})),
    );
    keys.push(k.stream(json!({"type": "content_block_delta", "delta": {"type": "input_json_delta", "partial_json": "{}"}})));
    keys.push(k.stream(json!({"type": "content_block_stop"})));
    keys.push(k.stream(start(0, json!({"type": "text"}))));
    keys.push(k.stream(json!({"type": "message_stop"})));
    keys.push(k.stream(stop(0)));
    scenarios.push(keys);
    scenarios
}

/// Values that are not what the mapping expects, for any field.
fn odd_values() -> Vec<Json> {
    vec![
        json!(null),
        json!(true),
        json!(0),
        json!(1),
        json!(1.0),
        json!(-0.0),
        json!(u64::MAX),
        json!(""),
        json!("x"),
        json!("é"),
        json!([]),
        json!({}),
        json!([null, 1]),
        json!({"type": "text", "id": 1}),
    ]
}

/// JSON pointers to every value inside `v`.
fn pointers(v: &Json, at: String, out: &mut Vec<String>) {
    match v {
        Json::Object(m) => {
            for (k, item) in m {
                let p = format!("{at}/{k}");
                out.push(p.clone());
                pointers(item, p, out);
            }
        }
        Json::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(item, p, out);
            }
        }
        _ => {}
    }
}

/// `v` with the value at `pointer` replaced by `with`, or removed (`None`).
fn mutated(v: &Json, pointer: &str, with: Option<&Json>) -> Json {
    let mut v = v.clone();
    match with {
        Some(w) => *v.pointer_mut(pointer).unwrap() = w.clone(),
        None => {
            let (parent, last) = pointer.rsplit_once('/').unwrap();
            match v.pointer_mut(parent).unwrap() {
                Json::Object(m) => {
                    m.remove(last);
                }
                Json::Array(a) => {
                    a.remove(last.parse::<usize>().unwrap());
                }
                _ => unreachable!(),
            }
        }
    }
    v
}

fn nested(levels: usize) -> Json {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!([v]);
    }
    v
}

#[test]
fn the_constants_are_the_lua_files() {
    let text = crate::plugins::builtin::FILES
        .iter()
        .find(|(f, _)| *f == "claude-agent-sdk.lua")
        .unwrap()
        .1;
    for (name, value) in [
        ("MAX_SESSIONS", MAX_SESSIONS),
        ("MAX_KNOWN", MAX_KNOWN),
        ("MAX_CALLS", MAX_CALLS),
    ] {
        assert!(
            text.contains(&format!("local {name} = {value} ")),
            "{name} is not {value} in the Lua file"
        );
    }
}

#[test]
fn maps_the_captured_run_as_the_lua_file_does() {
    let run = fixture();
    let twin = compare(&run);
    assert_eq!((twin.calls, twin.failed), (run.len(), 0));
    // Twice through one state: the second init is a resumed session.
    let mut twice = Twin::new();
    twice.run(&run);
    let again = twice.map(&run[0]).unwrap();
    assert_eq!(again[0]["type"], "lifecycle.session.resumed");
    twice.run(&run[1..]);
}

#[test]
fn maps_every_branch_as_the_lua_file_does() {
    let scenarios = scenarios();
    let mut twin = Twin::new();
    for s in &scenarios {
        twin.run(s);
    }
    // What is not an SDK message object; an array is a table without fields.
    for raw in [
        json!([1, 2]),
        json!([]),
        json!("text"),
        json!(""),
        json!(5),
        json!(1.5),
        json!(true),
        json!(null),
    ] {
        twin.map(&raw).unwrap();
    }
    println!("{} calls compared", twin.calls);
    assert!(twin.calls > 150, "{}", twin.calls);
}

/// Each scenario again with one field of one message replaced by an odd value, or removed:
/// the messages before it give the state it meets, those after show what it left.
#[test]
fn maps_odd_values_at_every_field_as_the_lua_file_does() {
    let mut twin = Twin::new();
    let odd = odd_values();
    for s in scenarios() {
        // The long ones are cut to their first messages, which reach their branches.
        let s = &s[..s.len().min(8)];
        for (i, message) in s.iter().enumerate() {
            let mut at = Vec::new();
            pointers(message, String::new(), &mut at);
            for pointer in at {
                for with in odd.iter().map(Some).chain([None]) {
                    twin.run(&s[..i]);
                    twin.map(&mutated(message, &pointer, with)).ok();
                    twin.run(&s[i + 1..(i + 3).min(s.len())]);
                }
            }
        }
    }
    println!(
        "{} calls compared, {} failed in both",
        twin.calls, twin.failed
    );
}

#[test]
fn the_bounds_are_the_lua_files() {
    // More sessions than two generations hold: the first ones are forgotten (their open
    // tool call, their turn, their subagents); one seen again moves to the new generation.
    let mut twin = Twin::new();
    let mut parent = sdk("s-parent");
    let mut child = sdk("s-parent").child_of("toolu_sub");
    twin.map(&parent.system("init", json!({}))).unwrap();
    twin.map(&child.user(json!("hi"))).unwrap();
    let n = 2 * MAX_SESSIONS + 10;
    for i in 0..n {
        let mut s = sdk(format!("s{i}"));
        twin.map(&s.stream(start(0, tool("tool_use", &format!("t{i}"), "Bash"))))
            .unwrap();
        if i == MAX_SESSIONS + 5 {
            twin.map(&sdk("s10").system("status", json!({}))).unwrap();
        }
    }
    for i in [
        0,
        10,
        11,
        MAX_SESSIONS - 1,
        MAX_SESSIONS,
        MAX_SESSIONS + 1,
        2 * MAX_SESSIONS - 1,
        2 * MAX_SESSIONS,
        n - 1,
    ] {
        let out = twin.map(&sdk(format!("s{i}")).stream(stop(0))).unwrap();
        let kept = out[0]["payload"]["type"] == "tool-call";
        assert_eq!(kept, i != 0 && i != 11 && i >= 10, "session s{i}");
    }
    // The subagent's parent was forgotten: spawned again.
    let out = twin.map(&child.user(json!("again"))).unwrap();
    assert_eq!(out[0]["type"], "agent.spawned");

    println!("sessions: {} calls compared", twin.calls);

    // More session ids than two generations of known ones: created again.
    let mut twin = Twin::new();
    let n = 2 * MAX_KNOWN + 10;
    for i in 0..n {
        twin.map(&sdk(format!("k{i}")).system("init", json!({})))
            .unwrap();
    }
    for i in [
        0,
        MAX_KNOWN - 1,
        MAX_KNOWN,
        2 * MAX_KNOWN - 1,
        2 * MAX_KNOWN,
        n - 1,
    ] {
        let out = twin
            .map(&sdk(format!("k{i}")).system("init", json!({})))
            .unwrap();
        let resumed = out[0]["type"] == "lifecycle.session.resumed";
        assert_eq!(resumed, i >= MAX_KNOWN, "k{i}");
    }

    // More tool calls in a turn than are remembered: their results lose their cause.
    let mut s = sdk("s-calls");
    let calls = |range: std::ops::Range<usize>| {
        let blocks: Vec<Json> = range
            .map(|i| tool("tool_use", &format!("c{i}"), "Bash"))
            .collect();
        Json::Array(blocks)
    };
    let results = |ids: &[usize]| {
        let blocks: Vec<Json> = ids
            .iter()
            .map(|i| tool_result(&format!("c{i}"), json!("ok"), false))
            .collect();
        Json::Array(blocks)
    };
    let caused = |out: Vec<Json>| -> Vec<bool> {
        out.iter()
            .map(|e| e.get("causation_id").is_some())
            .collect()
    };
    for first in (0..MAX_CALLS).step_by(128) {
        twin.map(&s.assistant(&format!("mc{first}"), calls(first..first + 128)))
            .unwrap();
    }
    // All remembered; a call seen again is not a new one, even then.
    twin.map(&s.assistant("mc-again", calls(5..6))).unwrap();
    let out = twin.map(&s.user(results(&[0, 5]))).unwrap();
    assert_eq!(caused(out), [true, true]);
    twin.map(&s.assistant("mc-more", calls(MAX_CALLS..MAX_CALLS + 10)))
        .unwrap();
    let out = twin
        .map(&s.user(results(&[0, 5, MAX_CALLS - 1, MAX_CALLS, MAX_CALLS + 9])))
        .unwrap();
    assert_eq!(caused(out), [false, false, false, true, true]);

    // More events in one call than the Lua host takes: the call fails, what it did before
    // stays done.
    let mut e = sdk("s-emits");
    for blocks in [254, 255, 256, 300] {
        let content: Vec<Json> = (0..blocks)
            .map(|i| tool("tool_use", &format!("e{blocks}-{i}"), "Bash"))
            .collect();
        let out = twin.map(&e.assistant(&format!("me{blocks}"), Json::Array(content)));
        assert_eq!(out.is_ok(), blocks < 256, "{blocks}");
        let results: Vec<Json> = (0..blocks)
            .map(|i| tool_result(&format!("e{blocks}-{i}"), json!(1), false))
            .collect();
        let _ = twin.map(&e.user(Json::Array(results.clone())));
        let mut with_text = results;
        with_text.push(json!({"type": "text", "text": "t"}));
        let _ = twin.map(&e.user(Json::Array(with_text)));
    }
    // A subagent's spawn counts too.
    let mut c = sdk("s-emits").child_of("toolu_many");
    let content: Vec<Json> = (0..255)
        .map(|i| json!({"type": "text", "text": i}))
        .collect();
    assert!(twin.map(&c.assistant("mx", Json::Array(content))).is_err());
    twin.map(&c.user(json!("spawned before the failure")))
        .unwrap();

    // Tables nested deeper than the Lua host reads back: in decoded arguments, in a field
    // copied one level deeper, in a tool input.
    let mut d = sdk("s-deep");
    for levels in [124, 125, 126, 127, 128] {
        twin.map(&d.stream(start(0, tool("tool_use", "toolu_d", "Deep"))))
            .unwrap();
        let text = serde_json::to_string(&nested(levels)).unwrap();
        twin.map(&d.stream(json_part(0, &text))).unwrap();
        let _ = twin.map(&d.stream(stop(0)));
        let _ = twin.map(&d.result(json!({"modelUsage": nested(levels)})));
        let _ = twin.map(&d.assistant(
            "md",
            json!([{"type": "tool_use", "id": "toolu_dd", "input": nested(levels)}]),
        ));
    }
    println!(
        "{} calls compared, {} failed in both",
        twin.calls, twin.failed
    );
    assert!(twin.failed >= 8, "{}", twin.failed);
}
