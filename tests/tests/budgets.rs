//! Budgets that brake, against a real daemon: spending recorded as `usage.request` events
//! crosses `[[budgets]]`; each crossing is recorded once per budget and period (also across a
//! restart); then a `deny` budget refuses the tool calls in its scope, an `ask` budget holds them
//! in a checkpoint that names it until a person approves, and calls outside the scope run.
#![cfg(unix)]

use std::process::Child;
use std::time::{Duration, Instant};

use dstream_tests::{Client, Daemon, claude_pre_tool_use, daemon_bin, spawn_hook, wait_child};
use serde_json::{Value, json};

const CONFIG: &str = r#"
[[budgets]]
name = "per-session"
scope = "session"
limit_usd = 1.0
action = "deny"

[[budgets]]
name = "daily"
scope = "day"
limit_usd = 1.5
action = "ask"

# Crossed by every session's first call: it marks how far the daemon has summed.
[[budgets]]
name = "ping"
scope = "session"
limit_usd = 0.01
action = "notify"
"#;

fn spend(c: &mut Client, session: &str, usd: f64) {
    let event = json!({"type": "usage.request", "actor": "claude-code",
        "payload": {"model": "m", "cost_usd": usd, "cost_usd_micros": (usd * 1e6).round() as u64,
            "input_tokens": 10, "output_tokens": 5},
        "metadata": {"source": "otlp"}});
    c.ok("append", json!({"session_id": session, "event": event}));
}

fn crossings(c: &mut Client, session: &str) -> Vec<String> {
    c.read_all(session)
        .iter()
        .filter(|e| e["type"] == "usage.budget_exceeded")
        .map(|e| e["payload"]["budget"].as_str().unwrap().to_string())
        .collect()
}

/// Polls until `session` holds the crossings `want` (in order).
fn wait_crossings(c: &mut Client, session: &str, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = crossings(c, session);
        if got == want {
            return;
        }
        assert!(
            got.len() < want.len() && Instant::now() < deadline,
            "{session}: crossings {got:?}, expected {want:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the hook answered Claude Code, once it exited.
fn hook_answer(mut child: Child) -> Value {
    wait_child(&mut child, Duration::from_secs(30)).expect("the hook exits");
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or(Value::Null)
}

fn permission(answer: &Value) -> (String, String) {
    let o = &answer["hookSpecificOutput"];
    let s = |k: &str| o[k].as_str().unwrap_or("").to_string();
    (s("permissionDecision"), s("permissionDecisionReason"))
}

#[test]
fn crossed_budgets_refuse_or_hold_the_tool_calls_in_their_scope() {
    let mut d = Daemon::start_with(CONFIG);
    let mut c = d.client();

    // Session a spends past its own limit (not the day's).
    spend(&mut c, "a", 1.2);
    wait_crossings(&mut c, "a", &["per-session", "ping"]);
    let (decision, reason) = permission(&hook_answer(spawn_hook(
        &d.socket(),
        &claude_pre_tool_use("a", "toolu_a1", "ls"),
    )));
    assert_eq!(decision, "deny");
    assert!(reason.contains("per-session"), "{reason}");
    // Another session is outside that scope: its call runs, nothing held.
    let answer = hook_answer(spawn_hook(
        &d.socket(),
        &claude_pre_tool_use("b", "toolu_b1", "ls"),
    ));
    assert_ne!(permission(&answer).0, "deny", "{answer}");
    assert_ne!(permission(&answer).0, "ask", "{answer}");

    // Session b's spending crosses the day's budget: b's next call waits for a person.
    spend(&mut c, "b", 0.4);
    wait_crossings(&mut c, "b", &["daily", "ping"]);
    let hook = spawn_hook(&d.socket(), &claude_pre_tool_use("b", "toolu_b2", "ls -la"));
    let cp = c.pending_in("b");
    let summary = cp["summary"].as_str().unwrap();
    assert!(
        summary.contains("Bash: ls -la") && summary.contains("\"daily\" crossed"),
        "{summary}"
    );
    let out = d.cli_as_person(&["approve", cp["id"].as_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(permission(&hook_answer(hook)).0, "allow");

    // What `dstream usage` says about them.
    let out = d.cli(&["usage"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("budget \"daily\" (day") && text.contains("CROSSED: tool calls wait"),
        "{text}"
    );
    let out = d.cli(&["usage", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let daily = &report["budgets"][1];
    assert_eq!(daily["name"], "daily", "{report}");
    assert_eq!(daily["spent_usd_micros"], 1_600_000, "{report}");
    assert_eq!(daily["crossed"], true, "{report}");
    // And `dstream doctor` warns of them.
    let out = d.cli(&[
        "doctor",
        "--json",
        "--config",
        d.config_path().unwrap().to_str().unwrap(),
    ]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "budgets")
        .cloned()
        .unwrap_or_else(|| panic!("no budgets check: {report}"));
    assert_eq!(check["status"], "warn", "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains("\"per-session\"") && detail.contains("\"daily\""),
        "{detail}"
    );

    // After a restart the sums come back from the logs, and no crossing is recorded twice.
    drop(c);
    d.stop();
    d.restart();
    let mut c = d.client();
    let (decision, _) = permission(&hook_answer(spawn_hook(
        &d.socket(),
        &claude_pre_tool_use("a", "toolu_a2", "pwd"),
    )));
    assert_eq!(decision, "deny", "the brake holds after a restart");
    spend(&mut c, "b", 0.1);
    // Summed in commit order: once c's crossing is recorded, b's spending was seen too.
    spend(&mut c, "c", 0.1);
    wait_crossings(&mut c, "c", &["ping"]);
    assert_eq!(crossings(&mut c, "a"), ["per-session", "ping"]);
    assert_eq!(crossings(&mut c, "b"), ["daily", "ping"]);
}

#[test]
fn a_budget_that_cannot_work_is_a_configuration_error() {
    for (bad, why) in [
        ("limit_usd = -1.0\naction = \"ask\"", "limit_usd"),
        ("limit_usd = 1.0\naction = \"maybe\"", "action"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, format!("[[budgets]]\nscope = \"day\"\n{bad}\n")).unwrap();
        let out = std::process::Command::new(daemon_bin())
            .args(["doctor", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("budgets") && text.contains(why), "{text}");
    }
}
