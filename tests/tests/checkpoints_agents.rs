//! Checkpoints with the real agents: with a rule that asks for Bash, the agent's tool call
//! waits until a person decides from another process (`dstream reject|approve [--edit]`);
//! a rejected command does not run, an approved one does, an edited one runs as edited.
//!
//! The pinned agent CLIs (`dstream_tests::agents`) run offline against the mock models, with
//! dstream put in place by `dstream install`, as in agents_e2e.rs.
#![cfg(unix)]

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use dstream_tests::agents::{self, AgentEnv, AgentPaths, RunOutput};
use dstream_tests::mock_model::{MockModel, Reply, Script};
use dstream_tests::serde_json::{Value, json};
use dstream_tests::{Client, Daemon};

const POLICY: &str = r#"
[[checkpoints.rules]]
tool = "Bash"
action = "ask"
timeout_ms = 120000
"#;
const FINAL: &str = "Done with the command.";

fn dstream(d: &Daemon, args: &[&str]) -> Output {
    let out = d.cli(args);
    assert!(out.status.success(), "dstream {args:?}: {out:?}");
    out
}

/// The one pending checkpoint, from `dstream pending --json`, once the agent's call waits.
fn wait_pending(d: &Daemon, agent: &std::thread::JoinHandle<RunOutput>) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let out = dstream(d, &["pending", "--json"]);
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(line) = text.lines().next() {
            return dstream_tests::serde_json::from_str(line).unwrap();
        }
        assert!(
            !agent.is_finished(),
            "the agent finished without its call waiting for a decision"
        );
        assert!(Instant::now() < deadline, "no checkpoint appeared");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn checkpoint_events(c: &mut Client) -> Vec<Value> {
    let list = c.ok("sessions.list", json!({}));
    let mut out = Vec::new();
    for s in list["sessions"].as_array().unwrap() {
        for e in c.read_all(s["session_id"].as_str().unwrap()) {
            if e["type"].as_str().unwrap().starts_with("checkpoint.") {
                out.push(e);
            }
        }
    }
    out
}

/// One case: the agent is asked to run `command`; `decide` is what the person does.
struct Case<'a> {
    name: &'a str,
    decide: &'a dyn Fn(&Daemon, &str, &Path),
}

fn claude_run(
    paths: &AgentPaths,
    d: &Daemon,
    env: &AgentEnv,
    command: &str,
) -> std::thread::JoinHandle<RunOutput> {
    agents::spawn_claude_bash(paths, env, &d.socket(), command, FINAL)
}

fn opencode_run(
    paths: &AgentPaths,
    d: &Daemon,
    env: &AgentEnv,
    command: &str,
) -> std::thread::JoinHandle<RunOutput> {
    agents::install(env, "opencode");
    let mock = MockModel::openai(Script::tool_then_text(Reply::opencode_bash(command), FINAL));
    let mut cmd = agents::opencode_command(paths, env, &mock, "Run the command", &[]);
    cmd.envs(dstream_tests::client_env(d.socket()));
    agents::spawn_run(cmd, mock)
}

type Runner = fn(&AgentPaths, &Daemon, &AgentEnv, &str) -> std::thread::JoinHandle<RunOutput>;

/// Runs reject, approve and approve-with-an-edit against one daemon and checks what ran.
fn three_cases(agent: &str, run: Runner) {
    let paths = agents::ensure_installed();
    let d = Daemon::start_with(POLICY);
    let cases = [
        Case {
            name: "reject",
            decide: &|d, id, _| {
                dstream(d, &["reject", id, "--note", "not this one"]);
            },
        },
        Case {
            name: "approve",
            decide: &|d, id, _| {
                dstream(d, &["approve", id]);
            },
        },
        Case {
            name: "edit",
            decide: &|d, id, project| {
                let edit = project.join("edit.json");
                let cmd = format!("touch {}", project.join("edited-marker").display());
                std::fs::write(&edit, json!({"command": cmd}).to_string()).unwrap();
                dstream(d, &["approve", id, "--edit", edit.to_str().unwrap()]);
            },
        },
    ];
    for case in &cases {
        // The marker lives in the agent's project, created fresh for each run.
        let probe = AgentEnv::new();
        let marker_name = format!("marker-{}", case.name);
        let command = format!("touch {}", probe.project.join(&marker_name).display());
        let agent_run = run(&paths, &d, &probe, &command);
        let cp = wait_pending(&d, &agent_run);
        assert!(
            cp["summary"].as_str().unwrap().contains(&marker_name),
            "{agent}: {cp}"
        );
        assert!(
            !probe.project.join(&marker_name).exists(),
            "{agent}: the command ran before anyone decided"
        );
        (case.decide)(&d, cp["id"].as_str().unwrap(), &probe.project);
        let out = agent_run.join().unwrap();
        out.assert_success(&format!("{agent} run, case {}", case.name));
        let ran = probe.project.join(&marker_name).exists();
        let edited = probe.project.join("edited-marker").exists();
        match case.name {
            "reject" => assert!(!ran && !edited, "{agent}: a rejected command ran"),
            "approve" => assert!(ran, "{agent}: the approved command did not run"),
            _ => assert!(
                edited && !ran,
                "{agent}: the edited command should have run instead (ran original: {ran}, edited: {edited})"
            ),
        }
    }
    let mut c = d.client();
    // A delivery is recorded just after the agent got its decision: give the last one a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut events = checkpoint_events(&mut c);
    while events
        .iter()
        .filter(|e| e["type"] == "checkpoint.delivered")
        .count()
        < 3
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
        events = checkpoint_events(&mut c);
    }
    let count = |t: &str| events.iter().filter(|e| e["type"] == t).count();
    assert_eq!(count("checkpoint.requested"), 3, "{agent}: {events:#?}");
    assert_eq!(count("checkpoint.rejected"), 1, "{agent}");
    assert_eq!(count("checkpoint.approved"), 2, "{agent}");
    assert_eq!(
        count("checkpoint.delivered"),
        3,
        "{agent}: each waiting agent got its decision"
    );
}

#[test]
fn claude_code_waits_for_reject_approve_and_edit() {
    three_cases("claude-code", claude_run);
}

#[test]
fn opencode_waits_for_reject_approve_and_edit() {
    three_cases("opencode", opencode_run);
}
