//! The real agents, wired to a real daemon by `dstream install`, against the mock models: a
//! whole run lands as normalized events in the agent's session log, in order, with the tool
//! call's request and result joined and every source event kept in `raw`.
//!
//! Uses the pinned agent CLIs (`dstream_tests::agents::ensure_installed`, from the npm
//! registry on first use) and the mock model servers; nothing else leaves the machine.
#![cfg(unix)]

use std::process::Command;
use std::time::{Duration, Instant};

use dstream_tests::agents::{self, AgentEnv};
use dstream_tests::mock_model::{MockModel, Reply, Script};
use dstream_tests::{Client, Daemon};
use serde_json::{Value, json};

const FINAL: &str = "The command printed hello-from-dstream.";

/// The sessions the daemon knows, with their events, once `want` holds (hooks may still be
/// finishing when the agent exits).
fn sessions_when(
    c: &mut Client,
    want: impl Fn(&[(String, Vec<Value>)]) -> bool,
) -> Vec<(String, Vec<Value>)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = c.ok("sessions.list", json!({}));
        let mut all = Vec::new();
        for s in list["sessions"].as_array().unwrap() {
            let id = s["session_id"].as_str().unwrap().to_string();
            let events = c.read_all(&id);
            all.push((id, events));
        }
        if want(&all) || Instant::now() > deadline {
            return all;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

/// `want` appears in `have` in this order (other events may come between).
fn in_order(have: &[&str], want: &[&str]) -> bool {
    let mut it = have.iter();
    want.iter().all(|w| it.any(|h| h == w))
}

#[test]
fn a_claude_code_run_lands_in_one_session_log_in_order() {
    let paths = agents::ensure_installed();
    let d = Daemon::start();
    let env = AgentEnv::new();
    agents::install(&env, "claude-code");
    let mock = MockModel::anthropic(Script::tool_then_text(
        Reply::bash("echo hello-from-dstream"),
        FINAL,
    ));
    let mut cmd: Command =
        agents::claude_command(&paths, &env, &mock, "Run echo hello-from-dstream", &[]);
    cmd.envs(dstream_tests::client_env(d.socket()));
    let out = agents::run(&env, cmd, Duration::from_secs(90));
    out.assert_success("claude -p with dstream hooks");
    assert!(out.stdout.contains(FINAL), "stdout: {}", out.stdout);

    let want = [
        "lifecycle.session.created",
        "user.input",
        "execution.tool_use",
        "execution.tool_result",
        "lifecycle.session.idle",
        "lifecycle.session.ended",
    ];
    let mut c = d.client();
    let sessions = sessions_when(&mut c, |all| {
        all.iter().any(|(_, e)| in_order(&types(e), &want))
    });
    assert_eq!(sessions.len(), 1, "one session: {sessions:#?}");
    let (id, events) = &sessions[0];
    let t = types(events);
    assert!(in_order(&t, &want), "{id}: {t:?}");
    assert_eq!(t.first(), Some(&"lifecycle.session.created"));
    assert_eq!(t.last(), Some(&"lifecycle.session.ended"));

    let request = events
        .iter()
        .find(|e| e["type"] == "execution.tool_use")
        .unwrap();
    assert_eq!(request["payload"]["tool"], "Bash");
    assert_eq!(
        request["payload"]["input"]["command"],
        "echo hello-from-dstream"
    );
    let result = events
        .iter()
        .find(|e| e["type"] == "execution.tool_result")
        .unwrap();
    assert_eq!(
        result["causation_id"], request["id"],
        "result joined to its request"
    );
    assert_eq!(
        result["payload"]["tool_use_id"],
        request["payload"]["tool_use_id"]
    );
    assert!(
        result["payload"]["output"]
            .to_string()
            .contains("hello-from-dstream")
    );
    for e in events {
        assert_eq!(e["session_id"], id.as_str());
        assert_eq!(e["raw"]["session_id"], id.as_str(), "raw kept: {e}");
        assert_eq!(e["raw"]["hook_event_name"], e["metadata"]["hook"], "{e}");
    }
}

#[test]
fn an_opencode_run_lands_in_one_session_log_in_order() {
    let paths = agents::ensure_installed();
    let d = Daemon::start();
    let env = AgentEnv::new();
    agents::install(&env, "opencode");
    let mock = MockModel::openai(Script::tool_then_text(
        Reply::opencode_bash("echo hello-from-dstream"),
        FINAL,
    ));
    let mut cmd = agents::opencode_command(&paths, &env, &mock, "Run echo hello-from-dstream", &[]);
    cmd.envs(dstream_tests::client_env(d.socket()));
    let out = agents::run(&env, cmd, Duration::from_secs(120));
    out.assert_success("opencode run with the dstream plugin");
    assert!(out.stdout.contains(FINAL), "stdout: {}", out.stdout);

    let want = [
        "lifecycle.session.created",
        "user.input",
        "execution.tool_use",
        "execution.tool_result",
        "lifecycle.session.idle",
    ];
    let mut c = d.client();
    let sessions = sessions_when(&mut c, |all| {
        all.iter().any(|(_, e)| in_order(&types(e), &want))
    });
    let (id, events) = sessions
        .iter()
        .find(|(_, e)| types(e).contains(&"lifecycle.session.created"))
        .unwrap_or_else(|| panic!("no OpenCode session: {sessions:#?}"));
    let t = types(events);
    assert!(in_order(&t, &want), "{id}: {t:?}");
    assert_eq!(t.first(), Some(&"lifecycle.session.created"), "{t:?}");
    assert!(
        !t.contains(&"unmapped"),
        "every OpenCode event of a plain run is mapped: {t:?}"
    );
    let request = events
        .iter()
        .find(|e| e["type"] == "execution.tool_use" && e["payload"]["phase"] == "requested")
        .unwrap_or_else(|| panic!("no requested tool call: {t:?}"));
    assert_eq!(
        request["payload"]["input"]["command"], "echo hello-from-dstream",
        "{request}"
    );
    let result = events
        .iter()
        .find(|e| e["type"] == "execution.tool_result")
        .unwrap();
    assert_eq!(
        result["payload"]["tool_use_id"],
        request["payload"]["tool_use_id"]
    );
    let cause = result["causation_id"].as_str().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["id"] == cause && e["type"] == "execution.tool_use"),
        "the result's cause is a request of the same call: {result}"
    );
    assert!(result.to_string().contains("hello-from-dstream"));
    for e in events {
        assert!(!e["raw"].is_null(), "raw kept: {e}");
    }
}

#[test]
fn an_opencode_run_without_a_daemon_is_spooled_at_exit_and_drained_later() {
    let paths = agents::ensure_installed();
    let mut d = Daemon::new(None);
    let env = AgentEnv::new();
    agents::install(&env, "opencode");
    let mock = MockModel::openai(Script::tool_then_text(
        Reply::opencode_bash("echo hello-from-dstream"),
        FINAL,
    ));
    let mut cmd = agents::opencode_command(&paths, &env, &mock, "Run echo hello-from-dstream", &[]);
    // No daemon, autostart off: the plugin holds the events and writes them to the spool when
    // OpenCode exits; the tool call goes ahead (fail open) without waiting for a daemon.
    cmd.envs(dstream_tests::client_env(d.socket()));
    let started = Instant::now();
    let out = agents::run(&env, cmd, Duration::from_secs(120));
    out.assert_success("opencode run with the dstream plugin and no daemon");
    assert!(out.stdout.contains(FINAL), "stdout: {}", out.stdout);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the tool call did not wait out its 30 s deadline: {:?}",
        started.elapsed()
    );
    let spool = d.data_dir().join("spool");
    let files: Vec<_> = std::fs::read_dir(&spool)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".jsonl") && n.contains("-opencode-"))
        .collect();
    assert!(!files.is_empty(), "nothing spooled in {}", spool.display());

    d.restart();
    let want = [
        "lifecycle.session.created",
        "user.input",
        "execution.tool_use",
        "execution.tool_result",
        "lifecycle.session.idle",
    ];
    let mut c = d.client();
    let sessions = sessions_when(&mut c, |all| {
        all.iter().any(|(_, e)| in_order(&types(e), &want))
    });
    let (id, events) = sessions
        .iter()
        .find(|(_, e)| types(e).contains(&"lifecycle.session.created"))
        .unwrap_or_else(|| panic!("no OpenCode session: {sessions:#?}"));
    let t = types(events);
    assert!(in_order(&t, &want), "{id}: {t:?}");
    for e in events.iter().filter(|e| !e["raw"].is_null()) {
        assert_eq!(e["metadata"]["spooled"], true, "{e}");
    }
}
