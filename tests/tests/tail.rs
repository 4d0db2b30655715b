//! `dstream tail` against a real daemon: Claude Code's hook events for a Bash call, ingested
//! through the daemon's own mapping, read as words (the call and its result joined), and
//! `--json` exactly the events the `read` RPC returns.
#![cfg(unix)]

use std::process::{Command, Output};
use std::time::Duration;

use dstream_tests::serde_json;
use dstream_tests::serde_json::{Value, json};
use dstream_tests::{Daemon, Watched, daemon_bin};

const SESSION: &str = "tail-e2e-1";

/// A Claude Code hook event of `kind` for the Bash call `echo hi > x.txt`, as Claude Code
/// 2.1 sends it.
fn hook_event(kind: &str) -> Value {
    let mut e = json!({
        "session_id": SESSION,
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/tmp/project",
        "permission_mode": "default",
        "hook_event_name": kind,
    });
    match kind {
        "UserPromptSubmit" => e["prompt"] = json!("write hi to x.txt\nplease"),
        _ => {
            e["tool_name"] = json!("Bash");
            e["tool_input"] = json!({"command": "echo hi > x.txt", "description": "write x"});
            e["tool_use_id"] = json!("toolu_tail_1");
        }
    }
    if kind == "PostToolUse" {
        e["tool_response"] = json!({"stdout": "", "stderr": "", "interrupted": false,
                                    "isImage": false, "noOutputExpected": true});
        e["duration_ms"] = json!(19);
    }
    e
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

#[test]
fn tail_prints_a_bash_call_and_its_result_in_words_and_json_unchanged() {
    let d = Daemon::start();
    let mut c = d.client();
    for kind in ["UserPromptSubmit", "PreToolUse", "PostToolUse"] {
        let r = c.ok(
            "ingest",
            json!({"source": "claude-code", "event": hook_event(kind)}),
        );
        assert!(!r["events"].as_array().unwrap().is_empty(), "{kind}: {r}");
    }
    // `ingest` answers once the events are stored, so the tail below sees all of them.

    let words = stdout(&d.cli(&["tail", SESSION, "--color", "never"]));
    let lines: Vec<&str> = words.lines().collect();
    assert_eq!(lines.len(), 3, "one line per event: {words}");
    assert!(
        lines[0].contains("you      write hi to x.txt …"),
        "the prompt's first line: {words}"
    );
    assert!(
        lines[1].contains("Bash     echo hi > x.txt  …"),
        "the call as it arrives: {words}"
    );
    assert!(
        lines[2].contains("Bash     echo hi > x.txt  → ok 19 ms"),
        "the result, joined to its call: {words}"
    );
    assert!(
        lines[2].trim_start().starts_with("3 "),
        "the LSN first: {words}"
    );
    assert!(
        !words.contains('\x1b'),
        "no colours off a terminal: {words:?}"
    );

    // From an LSN, as a `dstream search` hit gives it: the result still names its tool.
    let from = stdout(&d.cli(&["tail", SESSION, "--from", "3"]));
    assert_eq!(from.lines().count(), 1, "{from}");
    assert!(
        from.contains("Bash") && from.contains("→ ok 19 ms"),
        "{from}"
    );

    // `--color always` colours even into a pipe.
    let coloured = stdout(&d.cli(&["tail", SESSION, "--color", "always"]));
    assert!(coloured.contains("\x1b["), "{coloured:?}");

    // `--json`: each line is the event as `read` returns it, field for field.
    let json_out = stdout(&d.cli(&["tail", SESSION, "--json"]));
    let printed: Vec<Value> = json_out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(printed, c.read_all(SESSION));
}

/// Following live: the call is printed when it arrives, before any result exists, and the
/// result later as a line of its own that still names the call.
#[test]
fn a_followed_tail_prints_the_call_then_its_result_when_it_comes() {
    let d = Daemon::start();
    let mut c = d.client();
    let ingest = |c: &mut dstream_tests::Client, kind: &str| {
        c.ok(
            "ingest",
            json!({"source": "claude-code", "event": hook_event(kind)}),
        );
    };
    ingest(&mut c, "UserPromptSubmit");
    let mut tail = Watched::spawn(
        Command::new(daemon_bin())
            .args(["tail", SESSION, "--follow", "--color", "never", "--socket"])
            .arg(d.socket())
            .env("DSTREAM_AUTOSTART", "0"),
    );
    let wait = Duration::from_secs(20);
    assert!(tail.next_line(wait).contains("you      write hi to x.txt"));
    ingest(&mut c, "PreToolUse");
    let call = tail.next_line(wait);
    assert!(call.contains("Bash     echo hi > x.txt  …"), "{call}");
    ingest(&mut c, "PostToolUse");
    let result = tail.next_line(wait);
    assert!(
        result.contains("Bash     echo hi > x.txt  → ok 19 ms"),
        "{result}"
    );
}
