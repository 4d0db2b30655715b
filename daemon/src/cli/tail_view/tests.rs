//! The renderer over real mapped events (the mapping tests' snapshots) and over the events the
//! daemon writes itself: the words a person reads, colours off, UTC.

use dstream_sdk::Event;
use serde_json::{Value as Json, json};

use crate::cli::tail_view::TailView;
use crate::cli::tail_view::paint::Style;

const PLAIN: Style = Style {
    color: false,
    width: 0,
    local_time: false,
};

macro_rules! snapshot {
    ($name:literal) => {
        include_str!(concat!(
            "../../../../tests/tests/snapshots/mappings__",
            $name,
            ".snap"
        ))
    };
}

/// `value` as a stored event: snapshots leave out the session and the time.
fn event(mut value: Json, session: &str) -> Event {
    value["session_id"] = json!(session);
    for (key, absent) in [("lsn", json!(0)), ("id", json!("-"))] {
        if value.get(key).is_none() {
            value[key] = absent;
        }
    }
    value["timestamp"] = json!((12 * 3600 + 60 + 30) * 1000);
    if value.get("stream_id").is_none() {
        value["stream_id"] = json!(session);
    }
    serde_json::from_value(value).expect("an event")
}

/// Every event of a snapshot as `(type, line)`, each session through a view of its own.
/// A snapshot is `{session: [event]}`, or a list of cases holding events somewhere inside.
fn lines(snap: &str) -> Vec<(String, String)> {
    let body = snap.splitn(3, "---").nth(2).expect("a snapshot body");
    let root: Json = serde_json::from_str(body).expect("json");
    let mut sessions: Vec<(String, Vec<Json>)> = Vec::new();
    match root.as_object() {
        Some(map) if map.values().all(Json::is_array) => {
            for (session, events) in map {
                sessions.push((
                    session.clone(),
                    events.as_array().cloned().unwrap_or_default(),
                ));
            }
        }
        _ => {
            let mut found = Vec::new();
            collect(&root, &mut found);
            sessions.push(("s".into(), found));
        }
    }
    let mut out = Vec::new();
    for (session, events) in sessions {
        let mut view = TailView::new(PLAIN);
        for e in events {
            let e = event(e, &session);
            out.push((e.event_type.clone(), view.line(&e)));
        }
    }
    out
}

/// The stored events anywhere inside `v`.
fn collect(v: &Json, out: &mut Vec<Json>) {
    match v {
        Json::Object(m) if m.contains_key("type") && m.contains_key("stream_id") => {
            out.push(v.clone())
        }
        Json::Object(m) => m.values().for_each(|v| collect(v, out)),
        Json::Array(a) => a.iter().for_each(|v| collect(v, out)),
        _ => {}
    }
}

/// The lines of events of type `t`, less the LSN and the time.
fn of(lines: &[(String, String)], t: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|(ty, _)| ty == t)
        .map(|(_, l)| l.split_once("12:01:30  ").expect("a time").1.to_string())
        .collect()
}

fn render(events: &[Json]) -> Vec<String> {
    let mut view = TailView::new(PLAIN);
    events
        .iter()
        .map(|e| view.line(&event(e.clone(), "s")))
        .map(|l| l.split_once("12:01:30  ").expect("a time").1.to_string())
        .collect()
}

#[test]
fn a_prompt_a_tool_call_its_result_and_the_reply() {
    let l = lines(snapshot!("claude-code__run-basic"));
    assert_eq!(
        of(&l, "user.input"),
        ["you      Run echo hello-from-dstream"]
    );
    assert_eq!(
        of(&l, "execution.tool_use"),
        ["Bash     echo hello-from-dstream  …"]
    );
    assert_eq!(
        of(&l, "execution.tool_result"),
        ["Bash     echo hello-from-dstream  → ok 28 ms"]
    );
    assert_eq!(
        of(&l, "message.chunk"),
        ["claude   The command printed hello-from-dstream."]
    );
    assert_eq!(
        of(&l, "lifecycle.session.created"),
        ["session  started in /tmp/project (startup)"]
    );
    assert_eq!(
        of(&l, "lifecycle.session.ended"),
        ["session  ended (other)"]
    );
    // The LSN leads the line, so `dstream tail S --from LSN` finds it.
    assert!(l[0].1.starts_with("    1 12:01:30  session"), "{:?}", l[0]);
}

#[test]
fn a_failed_call_says_its_exit_status_and_first_error_line() {
    let l = lines(snapshot!("claude-code__run-tool-failure"));
    assert_eq!(
        of(&l, "execution.tool_result"),
        [
            "Bash     ls /nonexistent-dstream-dir  → exit 2: ls: cannot access '/nonexistent-dstream-dir': No such file or directory"
        ]
    );
    let l = lines(snapshot!("opencode__run-tool-failure"));
    let results = of(&l, "execution.tool_result");
    assert!(
        results
            .iter()
            .any(|r| r
                .starts_with("bash     ls /nonexistent-dstream-dir  → exit 2: ls: cannot access")),
        "{results:#?}"
    );
}

#[test]
fn the_agents_permission_prompts_and_refusals() {
    let l = lines(snapshot!("claude-code__run-permission"));
    assert_eq!(
        of(&l, "execution.permission_requested"),
        ["⏸ ask    Write /tmp/dstream-never-written.txt — the agent asks for permission"]
    );
    let l = lines(snapshot!("claude-code__run-permission-denied"));
    assert_eq!(
        of(&l, "execution.permission_denied"),
        ["Write    /tmp/dstream-never-written.txt  ✗ denied: Classifier unavailable"]
    );
    let l = lines(snapshot!("opencode__run-permission"));
    assert_eq!(
        of(&l, "execution.permission_replied"),
        ["bash     touch dstream-asked.txt  ✗ reject"]
    );
    assert!(
        of(&l, "execution.tool_result").iter().any(|r| r
            .ends_with("→ denied: The user rejected permission to use this specific tool call.")),
        "{l:#?}"
    );
}

#[test]
fn usage_shows_dollars_first_then_model_and_tokens() {
    let l = lines(snapshot!("opencode__run-basic"));
    assert!(
        of(&l, "usage.request")
            .iter()
            .all(|u| u == "$0.0000  mock-model 12 in / 8 out"),
        "{l:#?}"
    );
    // As the telemetry mapping writes it: exact micro-dollars win over the float.
    let otel = json!({"lsn": 9, "id": "u", "type": "usage.request", "actor": "claude-code",
        "payload": {"model": "claude-sonnet-4-5", "input_tokens": 1234, "output_tokens": 567,
                    "cache_read_input_tokens": 9000, "cost_usd": 0.0123000001,
                    "cost_usd_micros": 12300}});
    assert_eq!(
        render(&[otel]),
        ["$0.0123  claude-sonnet-4-5 1,234 in / 567 out (9,000 cached)"]
    );
    let l = lines(snapshot!("claude-agent-sdk__run-basic"));
    assert_eq!(
        of(&l, "usage.session"),
        ["$0.0004  session total claude-opus-5-5 24 in / 16 out, 2 turns, 208 ms"]
    );
}

#[test]
fn subagents_are_named_when_spawned_and_finished() {
    let l = lines(snapshot!("claude-code__run-subagent"));
    assert_eq!(
        of(&l, "agent.spawned"),
        [
            "agent    spawned general-purpose → ab4044e0-38b7-4a93-815b-70a9cb05f7af.agent-a3e3692b25df97a2a"
        ]
    );
    assert!(of(&l, "agent.completed")[0].starts_with("agent    general-purpose finished: "));
    // The Task call shows what it was asked to do.
    assert!(
        of(&l, "execution.tool_use").contains(&"Agent    Run echo in a subagent  …".to_string())
            || of(&l, "execution.tool_use")
                .contains(&"Task     Run echo in a subagent  …".to_string()),
        "{:#?}",
        of(&l, "execution.tool_use")
    );
}

#[test]
fn errors_and_aborts_are_said_plainly() {
    let l = lines(snapshot!("claude-code__run-stop-failure"));
    assert!(
        of(&l, "session.error")[0]
            .starts_with("error    API Error: 500 mock model: internal error."),
        "{l:#?}"
    );
    assert_eq!(
        of(&l, "agent.aborted"),
        ["agent    stopped: error: server_error"]
    );
    // Red, when colours are on.
    let mut view = TailView::new(Style {
        color: true,
        ..PLAIN
    });
    let e = event(
        json!({"lsn": 1, "id": "x", "type": "session.error", "payload": {"message": "boom"}}),
        "s",
    );
    assert!(view.line(&e).contains("\x1b[31mboom"), "{}", view.line(&e));
}

#[test]
fn a_checkpoint_waits_then_says_who_decided() {
    let lines = render(&[
        json!({"lsn": 3, "id": "01JCALL", "type": "execution.tool_use", "actor": "claude-code",
            "payload": {"tool": "Bash", "tool_use_id": "toolu_1",
                        "input": {"command": "rm -rf build"}},
            "metadata": {"decision": {"action": "ask", "checkpoint_id": "ck_1"}}}),
        json!({"lsn": 4, "id": "01JASK", "type": "checkpoint.requested", "actor": "dstream",
            "causation_id": "01JCALL",
            "payload": {"checkpoint_id": "ck_1", "tool": "Bash", "summary": "Bash: rm -rf build",
                        "input": {"command": "rm -rf build"}}}),
        json!({"lsn": 5, "id": "01JYES", "type": "checkpoint.approved", "actor": "dstream",
            "causation_id": "01JASK",
            "payload": {"checkpoint_id": "ck_1", "decision": "approve", "decided_by": "user:alice",
                        "summary": "Bash: rm -rf build"}}),
        json!({"lsn": 6, "id": "01JCALL2", "type": "execution.tool_use", "actor": "claude-code",
            "payload": {"tool": "Bash", "tool_use_id": "toolu_2", "input": {"command": "rm -rf /"}},
            "metadata": {"decision": {"action": "deny", "reason": "no rm here",
                                      "decided_by": "rule:rm"}}}),
        json!({"lsn": 7, "id": "01JNO", "type": "checkpoint.rejected", "actor": "dstream",
            "causation_id": "01JCALL2",
            "payload": {"auto": true, "action": "deny", "tool": "Bash", "tool_use_id": "toolu_2",
                        "decided_by": "rule:rm", "reason": "no rm here"}}),
        json!({"lsn": 8, "id": "01JLATE", "type": "checkpoint.expired", "actor": "dstream",
            "payload": {"checkpoint_id": "ck_1", "decision": "reject", "decided_by": "timeout"}}),
    ]);
    assert_eq!(
        lines,
        [
            "Bash     rm -rf build  ⏸ waiting for a decision",
            "⏸ ask    Bash rm -rf build — waiting (checkpoint ck_1)",
            "Bash     rm -rf build  ✓ approved by alice",
            "Bash     rm -rf /  ✗ denied by rule rm: no rm here",
            "Bash     rm -rf /  ✗ denied by rule rm: no rm here",
            "Bash     rm -rf build  ⌛ no one decided in time: reject",
        ]
    );
}

#[test]
fn an_unknown_type_shows_its_name_and_payload() {
    let lines = render(&[
        json!({"lsn": 1, "id": "a", "type": "telemetry.hook_ran", "payload": {"n": 1}}),
        json!({"lsn": 2, "id": "b", "type": "x", "payload": null}),
    ]);
    assert_eq!(lines, ["telemetry.hook_ran {\"n\":1}", "x"]);
}

#[test]
fn every_snapshot_event_is_one_line() {
    for snap in [
        snapshot!("claude-agent-sdk__run-basic"),
        snapshot!("claude-agent-sdk__unknown_and_malformed"),
        snapshot!("claude-code-transcript__unknown_and_malformed"),
        snapshot!("claude-code__run-compact"),
        snapshot!("claude-code__run-session-extras"),
        snapshot!("claude-code__run-setup"),
        snapshot!("claude-code__run-subagent-sync"),
        snapshot!("claude-code__run-worktree"),
        snapshot!("claude-code__unknown_and_malformed"),
        snapshot!("opencode-export__unknown_and_malformed"),
        snapshot!("opencode__run-subagent"),
        snapshot!("opencode__unknown_and_malformed"),
    ] {
        for (t, line) in lines(snap) {
            assert!(!line.contains('\n'), "{t}: {line:?}");
            assert!(line.contains(" 12:01:30  "), "{t}: {line:?}");
        }
    }
}
