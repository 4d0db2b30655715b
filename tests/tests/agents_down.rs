//! The real Claude Code, hooked by `dstream install claude-code`, runs a Bash session while no
//! daemon is running. With autostart, a hook starts one and the session is complete in it;
//! with autostart off, the hooks spool, and a daemon started afterwards takes every event in,
//! once, in order, marked spooled, with an audit record of the call a rule would have held.
#![cfg(unix)]

use std::time::{Duration, Instant};

use dstream_tests::agents::{self, AgentEnv};
use dstream_tests::mock_model::{MockModel, Reply, Script};
use dstream_tests::{Client, Daemon};
use serde_json::{Value, json};

const FINAL: &str = "The command printed hello-from-dstream.";
const RULE: &str = r#"
[[checkpoints.rules]]
tool = "Bash"
input = "echo *"
action = "ask"
"#;
const WANT: [&str; 6] = [
    "lifecycle.session.created",
    "user.input",
    "execution.tool_use",
    "execution.tool_result",
    "lifecycle.session.idle",
    "lifecycle.session.ended",
];

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn in_order(have: &[&str], want: &[&str]) -> bool {
    let mut it = have.iter();
    want.iter().all(|w| it.any(|h| h == w))
}

/// The one session the daemon holds, once it has every event of a run.
fn the_session(c: &mut Client) -> (String, Vec<Value>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = c.ok("sessions.list", json!({}));
        let sessions: Vec<(String, Vec<Value>)> = list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let id = s["session_id"].as_str().unwrap().to_string();
                let events = c.read_all(&id);
                (id, events)
            })
            .collect();
        if let [(id, events)] = &sessions[..]
            && in_order(&types(events), &WANT)
        {
            return (id.clone(), events.clone());
        }
        assert!(
            Instant::now() < deadline,
            "no complete session: {sessions:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs Claude Code (hooks installed) once, asking it to run `echo hello-from-dstream`.
fn run_claude(d: &Daemon, env: &AgentEnv, autostart: bool) {
    let paths = agents::ensure_installed();
    agents::install(env, "claude-code");
    let mock = MockModel::anthropic(Script::tool_then_text(
        Reply::bash("echo hello-from-dstream"),
        FINAL,
    ));
    let mut cmd = agents::claude_command(&paths, env, &mock, "Run echo hello-from-dstream", &[]);
    cmd.envs(dstream_tests::client_env(d.socket()))
        .env("DSTREAM_CONFIG", d.config_path().unwrap())
        .env("DSTREAM_AUTOSTART", if autostart { "1" } else { "0" });
    let out = agents::run(env, cmd, Duration::from_secs(90));
    out.assert_success("claude -p with dstream hooks and no daemon");
    assert!(out.stdout.contains(FINAL), "stdout: {}", out.stdout);
}

#[test]
fn with_autostart_a_hook_starts_the_daemon_and_the_session_is_complete() {
    let d = Daemon::new(Some("# defaults\n"));
    let env = AgentEnv::new();
    let lock = d.data_dir().join("LOCK");
    // Whatever happens, the daemon the hook started goes with the test.
    struct Stop(std::path::PathBuf);
    impl Drop for Stop {
        fn drop(&mut self) {
            if let Some(pid) = std::fs::read_to_string(&self.0)
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            {
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
    }
    let _stop = Stop(lock.clone());
    run_claude(&d, &env, true);
    let pid: i32 = std::fs::read_to_string(&lock)
        .expect("a daemon was started")
        .trim()
        .parse()
        .unwrap();
    assert!(
        unsafe { libc::kill(pid, 0) } == 0,
        "the daemon keeps running"
    );
    let mut c = Client::connect(&d.socket());
    let (_, events) = the_session(&mut c);
    // Stored live through the started daemon, not spooled.
    assert!(
        events.iter().all(|e| e["metadata"]["spooled"].is_null()),
        "nothing was spooled"
    );
}

#[test]
fn with_autostart_off_the_hooks_spool_and_a_later_daemon_takes_the_session_in() {
    let mut d = Daemon::new(Some(RULE));
    let env = AgentEnv::new();
    run_claude(&d, &env, false);
    let spool = d.data_dir().join("spool");
    let spooled = std::fs::read_dir(&spool)
        .expect("the hooks spooled")
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".jsonl")
        })
        .count();
    assert!(
        spooled >= WANT.len(),
        "one spool file per hook event: {spooled}"
    );

    d.restart();
    let mut c = d.client();
    let (id, events) = the_session(&mut c);
    let t = types(&events);
    assert_eq!(t.first(), Some(&"lifecycle.session.created"), "{t:?}");
    assert_eq!(t.last(), Some(&"lifecycle.session.ended"), "{t:?}");
    let mut ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), events.len(), "each event once");
    for e in &events {
        assert_eq!(e["metadata"]["spooled"], true, "{id}: {e}");
    }
    let request = events
        .iter()
        .find(|e| e["type"] == "execution.tool_use")
        .unwrap();
    let result = events
        .iter()
        .find(|e| e["type"] == "execution.tool_result")
        .unwrap();
    assert_eq!(result["causation_id"], request["id"], "joined as when live");
    let bypassed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "checkpoint.bypassed")
        .collect();
    assert_eq!(bypassed.len(), 1, "{t:?}");
    assert_eq!(bypassed[0]["payload"]["would_have"], "ask");
    assert_eq!(bypassed[0]["payload"]["rule"], "rules[0]");
    assert!(
        !t.contains(&"checkpoint.requested"),
        "no checkpoint opened: {t:?}"
    );
    let stats = c.ok("stats", json!({}));
    assert_eq!(stats["spool"]["pending_files"], 0, "{stats}");
}
