//! Claude Code's `http` hooks against the daemon's `POST /hooks/claude-code`: the real Claude
//! Code, installed with `dstream install claude-code --user --http` (hooks of `type: "http"`
//! with the token from an environment variable it is allowed to read; SessionStart keeps the
//! command hook), runs Bash calls against the mock model. The events are stored as the
//! command hook stores them; a call the policy denies does not run; a held call waits in the
//! HTTP response until a person approves, then runs.
#![cfg(unix)]

use std::time::Duration;

use dstream_tests::agents::{self, AgentEnv, RunOutput};
use dstream_tests::mock_model::{MockModel, Reply, Script};
use dstream_tests::relay::wait_for;
use dstream_tests::{Client, Daemon, daemon_bin};
use serde_json::{Value, json};

const POLICY: &str = r#"
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A daemon whose listener is on a fixed port (as `install --http` needs), with `POLICY`.
fn daemon() -> Daemon {
    Daemon::start_with(&format!(
        "[http]\nlisten = \"127.0.0.1:{}\"\n{POLICY}",
        free_port()
    ))
}

/// `dstream install claude-code --user --http` in the agent's home, for daemon `d`.
fn install_http_hooks(env: &AgentEnv, d: &Daemon) -> Value {
    let out = env
        .command(daemon_bin())
        .args([
            "install",
            "claude-code",
            "--user",
            "--http",
            "--no-telemetry",
        ])
        .env("DSTREAM_CONFIG", d.config_path().unwrap())
        .env("DSTREAM_DATA_DIR", d.data_dir())
        .env("DSTREAM_SOCKET", d.socket())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("fails open"), "{said}");
    let settings = std::fs::read(env.home.join(".claude/settings.json")).unwrap();
    serde_json::from_slice(&settings).unwrap()
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
    d: &Daemon,
    command: &str,
) -> std::thread::JoinHandle<RunOutput> {
    let mock = MockModel::anthropic(Script::tool_then_text(Reply::bash(command), "Done."));
    let mut cmd = agents::claude_command(paths, env, &mock, "Run the command", &[]);
    // For the SessionStart command hook.
    cmd.envs(dstream_tests::client_env(d.socket()));
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
    let d = daemon();
    let (addr, token) = listener(&d);
    let env = AgentEnv::new();
    let settings = install_http_hooks(&env, &d);
    let pre = &settings["hooks"]["PreToolUse"][0]["hooks"][0];
    assert_eq!(pre["type"], "http", "{settings}");
    assert_eq!(pre["url"], format!("http://{addr}/hooks/claude-code"));
    assert_eq!(settings["env"]["DSTREAM_HTTP_TOKEN"], token.as_str());
    assert!(
        !pre.to_string().contains(&token),
        "the hook names the variable, not the secret"
    );
    assert_eq!(
        settings["hooks"]["SessionStart"][0]["hooks"][0]["type"],
        "command"
    );
    let mut c = d.client();

    // A call that runs: request and result stored, joined, from the HTTP hook.
    run_bash(&paths, &env, &d, "echo hi > x.txt")
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
    // SessionStart through its command hook (Claude Code runs no `http` hook there).
    for t in [
        "lifecycle.session.created",
        "user.input",
        "lifecycle.session.ended",
    ] {
        assert!(
            events.iter().any(|e| e["type"] == t),
            "no {t}: {:?}",
            events.iter().map(|e| e["type"].clone()).collect::<Vec<_>>()
        );
    }

    // A call the policy denies does not run.
    run_bash(&paths, &env, &d, "rm x.txt")
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
    let held = run_bash(&paths, &env, &d, "echo held > held.txt");
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
    let out = d.cli_as_person(&["approve", pending["id"].as_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    held.join().unwrap().assert_success("claude, approved call");
    assert!(env.project.join("held.txt").exists(), "ran once approved");
    assert!(
        all_events(&mut c)
            .iter()
            .any(|e| e["type"] == "checkpoint.delivered"),
        "the decision's delivery is recorded"
    );

    // `dstream doctor` finds the hooks posting where the daemon listens; `uninstall` takes
    // the hooks and the token back out.
    let out = env
        .command(daemon_bin())
        .args(["doctor", "--json"])
        .env("DSTREAM_CONFIG", d.config_path().unwrap())
        .env("DSTREAM_DATA_DIR", d.data_dir())
        .env("DSTREAM_SOCKET", d.socket())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hooks = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "claude_code.hooks")
        .cloned()
        .unwrap();
    assert_eq!(hooks["status"], "ok", "{hooks}");
    let out = env
        .command(daemon_bin())
        .args(["uninstall", "claude-code", "--user"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        !env.home.join(".claude/settings.json").exists(),
        "nothing of the user's was in it: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_hook_without_the_token_or_with_a_broken_body_is_refused() {
    let d = daemon();
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

#[test]
fn an_agent_that_hooks_over_http_cannot_approve_its_own_call() {
    let d = daemon();
    let (addr, token) = listener(&d);
    // This test process plays Claude Code: it POSTs the hook itself and waits for the answer.
    let event = dstream_tests::claude_pre_tool_use("h2", "toolu_2", "echo held-by-http");
    let body = serde_json::to_vec(&event).unwrap();
    let waiting = std::thread::spawn(move || {
        let auth = format!("Bearer {token}");
        dstream_tests::relay::http(
            &addr,
            "POST",
            "/hooks/claude-code",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            &body,
        )
        .unwrap()
    });
    let mut c = d.client();
    let id = wait_for("the held call", Duration::from_secs(20), || {
        let pending = c.ok("checkpoint.list", json!({"state": "pending"}));
        pending["checkpoints"][0]["id"].as_str().map(str::to_string)
    });
    // Its Bash tool runs `dstream approve`: a process under the agent that sent the hook.
    let out = std::process::Command::new(daemon_bin())
        .args(["approve", &id, "--socket"])
        .arg(d.socket())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot approve its own"),
        "{out:?}"
    );
    // A person in another terminal: the held response ends with the allow.
    let out = d.cli_as_person(&["approve", &id]);
    assert!(out.status.success(), "{out:?}");
    let answer = waiting.join().unwrap();
    let v: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(
        v["hookSpecificOutput"]["permissionDecision"], "allow",
        "{v}"
    );
}
