//! Claude Code's `http` hooks against the daemon's `POST /hooks/claude-code`: the real Claude
//! Code, its hooks configured as `type: "http"` with the token from an environment variable it
//! is allowed to read, runs Bash calls against the mock model. The events are stored as the
//! command hook stores them; a call the policy denies does not run; a held call waits in the
//! HTTP response until a person approves, then runs.
#![cfg(unix)]

use std::time::Duration;

use dstream_tests::agents::{self, AgentEnv, RunOutput};
use dstream_tests::mock_model::{MockModel, Reply, Script};
use dstream_tests::relay::wait_for;
use dstream_tests::{Client, Daemon, daemon_bin, run_detached};
use serde_json::{Value, json};

const CONFIG: &str = r#"
[http]
listen = "0"

[checkpoints]
default_timeout_ms = 120000

[[checkpoints.rules]]
tool = "Bash"
input = "rm *"
action = "deny"

[[checkpoints.rules]]
tool = "Bash"
input = "echo held*"
action = "ask"
"#;

const EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Stop",
    "SessionEnd",
];

/// Claude Code's user settings with dstream's hooks as `http` hooks to the listener at `addr`.
fn write_http_hooks(env: &AgentEnv, addr: &str) {
    let handler = json!({
        "type": "http",
        "url": format!("http://{addr}/hooks/claude-code"),
        "headers": {"Authorization": "Bearer $DSTREAM_HTTP_TOKEN"},
        "allowedEnvVars": ["DSTREAM_HTTP_TOKEN"],
        "timeout": 600,
    });
    let hooks: serde_json::Map<String, Value> = EVENTS
        .iter()
        .map(|e| (e.to_string(), json!([{"hooks": [handler.clone()]}])))
        .collect();
    let dir = env.home.join(".claude");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("settings.json"),
        serde_json::to_vec_pretty(&json!({"hooks": hooks})).unwrap(),
    )
    .unwrap();
}

fn listener(d: &Daemon) -> (String, String) {
    let stats = d.client().ok("stats", json!({}));
    let addr = stats["http"]["listen"].as_str().unwrap().to_string();
    let token = std::fs::read_to_string(d.data_dir().join("http.token"))
        .unwrap()
        .trim()
        .to_string();
    (addr, token)
}

fn run_bash(
    paths: &agents::AgentPaths,
    env: &AgentEnv,
    token: &str,
    command: &str,
) -> std::thread::JoinHandle<RunOutput> {
    let mock = MockModel::anthropic(Script::tool_then_text(Reply::bash(command), "Done."));
    let mut cmd = agents::claude_command(paths, env, &mock, "Run the command", &[]);
    cmd.env("DSTREAM_HTTP_TOKEN", token);
    agents::spawn_run(cmd, mock)
}

/// Every stored event of every session, in session order.
fn all_events(c: &mut Client) -> Vec<Value> {
    let list = c.ok("sessions.list", json!({}));
    let mut out = Vec::new();
    for s in list["sessions"].as_array().unwrap() {
        out.extend(c.read_all(s["session_id"].as_str().unwrap()));
    }
    out
}

fn bash_commands(events: &[Value], kind: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .filter_map(|e| e["payload"]["input"]["command"].as_str().map(String::from))
        .collect()
}

#[test]
fn claude_code_http_hooks_store_deny_and_hold_like_the_command_hook() {
    let paths = agents::ensure_installed();
    let d = Daemon::start_with(CONFIG);
    let (addr, token) = listener(&d);
    let env = AgentEnv::new();
    write_http_hooks(&env, &addr);
    let mut c = d.client();

    // A call that runs: request and result stored, joined, from the HTTP hook.
    run_bash(&paths, &env, &token, "echo hi > x.txt")
        .join()
        .unwrap()
        .assert_success("claude with http hooks");
    assert!(env.project.join("x.txt").exists(), "the command ran");
    let events = wait_for("the tool result", Duration::from_secs(10), || {
        let e = all_events(&mut c);
        e.iter()
            .any(|e| e["type"] == "execution.tool_result")
            .then_some(e)
    });
    assert_eq!(
        bash_commands(&events, "execution.tool_use"),
        ["echo hi > x.txt"]
    );
    // (Claude Code 2.1.330 runs no `http` hook for SessionStart: only command hooks there.)
    for t in ["user.input", "lifecycle.session.ended"] {
        assert!(
            events.iter().any(|e| e["type"] == t),
            "no {t}: {:?}",
            events.iter().map(|e| e["type"].clone()).collect::<Vec<_>>()
        );
    }

    // A call the policy denies does not run.
    run_bash(&paths, &env, &token, "rm x.txt")
        .join()
        .unwrap()
        .assert_success("claude, denied call");
    assert!(
        env.project.join("x.txt").exists(),
        "the denied rm did not run"
    );
    assert!(
        all_events(&mut c)
            .iter()
            .any(|e| e["type"] == "checkpoint.rejected" && e["payload"]["rule"] == "rules[0]"),
        "the denial is recorded"
    );

    // A held call waits in the HTTP response until a person approves it.
    let held = run_bash(&paths, &env, &token, "echo held > held.txt");
    let pending = wait_for("the held call", Duration::from_secs(90), || {
        assert!(!held.is_finished(), "the run ended without waiting");
        let list = c.ok("checkpoint.list", json!({"state": "pending"}));
        list["checkpoints"]
            .as_array()
            .and_then(|a| a.first())
            .cloned()
    });
    assert!(
        !env.project.join("held.txt").exists(),
        "not run before the approval"
    );
    let socket = d.socket();
    let out = run_detached(
        &daemon_bin(),
        &[
            "approve".as_ref(),
            pending["id"].as_str().unwrap().as_ref(),
            "--socket".as_ref(),
            socket.as_os_str(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    held.join().unwrap().assert_success("claude, approved call");
    assert!(env.project.join("held.txt").exists(), "ran once approved");
    assert!(
        all_events(&mut c)
            .iter()
            .any(|e| e["type"] == "checkpoint.delivered"),
        "the decision's delivery is recorded"
    );
}

#[test]
fn a_hook_without_the_token_or_with_a_broken_body_is_refused() {
    let d = Daemon::start_with(CONFIG);
    let (addr, token) = listener(&d);
    let event = dstream_tests::claude_pre_tool_use("h1", "toolu_1", "ls");
    let body = serde_json::to_vec(&event).unwrap();
    let auth = format!("Bearer {token}");
    let post = |headers: &[(&str, &str)], body: &[u8]| {
        dstream_tests::relay::http(&addr, "POST", "/hooks/claude-code", headers, body).unwrap()
    };
    assert_eq!(post(&[], &body).status, 401);
    assert_eq!(post(&[("authorization", &auth)], b"{not json").status, 400);
    let r = post(
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        &body,
    );
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty(), "no rule, no decision: an empty answer");
    let stored = d.client().read_all("h1");
    assert_eq!(bash_commands(&stored, "execution.tool_use"), ["ls"]);
}
