//! The `dstream` client commands against a real daemon, as a script or a person uses them.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use dstream_tests::serde_json::{self, Value, json};
use dstream_tests::{Daemon, daemon_bin};

fn dstream(d: &Daemon, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(daemon_bin())
        .args(args)
        .arg("--socket")
        .arg(d.socket())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn append_then_tail_sessions_and_query_show_the_same_events() {
    let d = Daemon::start();
    let input = r#"{"type":"user.input","actor":"me","payload":{"text":"hi"}}

{"type":"execution.tool_use","actor":"claude-code","payload":{"tool":"Bash"}}
{"session_id":"other","event":{"type":"execution.tool_use","actor":"opencode"}}
"#;
    let out = dstream(&d, &["append", "--session", "s1", "--json"], input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let acks = json_lines(&out);
    let lsns: Vec<(u64, u64)> = acks
        .iter()
        .map(|a| (a["line"].as_u64().unwrap(), a["lsn"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        lsns,
        [(1, 1), (3, 2), (4, 1)],
        "line numbers and LSNs, blank line skipped"
    );

    let out = dstream(&d, &["tail", "s1", "--json"], "");
    assert!(out.status.success());
    let events = json_lines(&out);
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["payload"], json!({"text": "hi"}));
    assert_eq!(events[1]["type"], "execution.tool_use");
    assert_eq!(events[1]["id"], acks[1]["id"]);

    let out = dstream(&d, &["tail", "s1", "--from", "2"], "");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("execution.tool_use") && !text.contains("user.input"),
        "{text}"
    );

    let out = dstream(&d, &["sessions", "--json"], "");
    let sessions: Vec<String> = json_lines(&out)
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sessions.len(), 2);
    assert!(sessions.contains(&"s1".to_string()) && sessions.contains(&"other".to_string()));

    let out = dstream(
        &d,
        &[
            "query",
            "--type",
            "execution.",
            "--actor",
            "opencode",
            "--json",
        ],
        "",
    );
    let found = json_lines(&out);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["session_id"], "other");

    let out = dstream(&d, &["stats", "--json"], "");
    assert_eq!(json_lines(&out)[0]["appends"], 3);
}

#[test]
fn append_stops_at_a_bad_line_and_names_it() {
    let d = Daemon::start();
    let input = "{\"type\":\"a\"}\n{\"type\":\"b\"}\nnot json\n{\"type\":\"c\"}\n";
    let out = dstream(&d, &["append", "--session", "s"], input);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 3"), "{stderr}");
    assert!(stderr.contains("appended 2 events"), "{stderr}");
    let out = dstream(&d, &["append", "--session", "../x"], "{\"type\":\"a\"}\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid session_id"));
    // Only the two good events before the bad line were stored.
    let out = dstream(&d, &["tail", "s", "--json"], "");
    let types: Vec<Value> = json_lines(&out).iter().map(|e| e["type"].clone()).collect();
    assert_eq!(types, [json!("a"), json!("b")]);
}

#[test]
fn tail_follow_prints_history_then_live_events() {
    let d = Daemon::start();
    dstream(&d, &["append", "--session", "live"], "{\"type\":\"old\"}\n");
    let mut follower = Command::new(daemon_bin())
        .args(["tail", "live", "--follow", "--json", "--socket"])
        .arg(d.socket())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Lines arrive on a thread so that a missing one fails the test instead of hanging it.
    let stdout = follower.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = || -> Value {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("tail --follow printed nothing");
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(next()["type"], "old");
    dstream(&d, &["append", "--session", "live"], "{\"type\":\"new\"}\n");
    let second = next();
    assert_eq!(
        (second["type"].as_str(), second["lsn"].as_u64()),
        (Some("new"), Some(2))
    );
    follower.kill().unwrap();
    follower.wait().unwrap();
}
