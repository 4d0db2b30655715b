//! `dstream replay` against a real daemon: the state at an LSN (`--print`, as text and as
//! JSON) over a session with tool calls, edits, model calls and a checkpoint; the errors a
//! bad session or a missing daemon give; and the full-screen view driven in tmux (keys move
//! the cursor and the state with it, `]` jumps to the next tool call, what is new since the
//! last look is marked, `q` exits 0).
#![cfg(unix)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dstream_tests::serde_json::{self, Value, json};
use dstream_tests::tmux::Tmux;
use dstream_tests::{Client, Daemon, daemon_bin};

const SESSION: &str = "replay-e2e-1";

/// LSNs of the session's events by what they are, read back from its log (the daemon writes
/// the checkpoint's events itself, so their LSNs are looked up, not assumed).
struct Lsns {
    prompt: u64,
    read: u64,
    first_cost: u64,
    edit: u64,
    write: u64,
    asked: u64,
    bash: u64,
    approved: u64,
    last: u64,
}

/// A session as an agent leaves it: a prompt, Read then Edit of `/p/a.rs`, Write of
/// `/p/b.rs`, three model calls ($0.01, $0.02, $0.005), a Bash call held by a checkpoint
/// and approved.
fn session(d: &Daemon) -> Lsns {
    let mut c = d.client();
    let call = |c: &mut Client, id: &str, tool: &str, input: Value| {
        c.append(
            SESSION,
            "execution.tool_use",
            json!({"tool": tool, "tool_use_id": id, "input": input}),
        )
        .0
    };
    let prompt = c
        .append(
            SESSION,
            "user.input",
            json!({"text": "fix the bug in a.rs"}),
        )
        .0;
    let read = call(&mut c, "t1", "Read", json!({"file_path": "/p/a.rs"}));
    c.append(
        SESSION,
        "execution.tool_result",
        json!({"tool": "Read", "tool_use_id": "t1", "ok": true}),
    );
    let first_cost = c
        .append(
            SESSION,
            "usage.request",
            json!({"model": "claude-sonnet-4-5", "cost_usd": 0.01, "input_tokens": 10}),
        )
        .0;
    let edit = call(
        &mut c,
        "t2",
        "Edit",
        json!({"file_path": "/p/a.rs", "old_string": "a", "new_string": "b"}),
    );
    let write = call(
        &mut c,
        "t3",
        "Write",
        json!({"file_path": "/p/b.rs", "content": "x"}),
    );
    c.append(
        SESSION,
        "usage.request",
        json!({"model": "claude-sonnet-4-5", "cost_usd_micros": 20_000}),
    );
    let cp = c.ok(
        "checkpoint.request",
        json!({"session_id": SESSION, "key": "deploy", "tool": "Bash",
               "input": {"command": "./deploy --prod"}}),
    );
    let bash = call(&mut c, "t4", "Bash", json!({"command": "./deploy --prod"}));
    c.ok(
        "checkpoint.resolve",
        json!({"id": cp["id"], "decision": "approve"}),
    );
    c.append(
        SESSION,
        "usage.request",
        json!({"model": "claude-sonnet-4-5", "cost_usd": 0.005}),
    );
    let events = c.read_all(SESSION);
    let lsn_of = |ty: &str| {
        events
            .iter()
            .find(|e| e["type"] == ty)
            .and_then(|e| e["lsn"].as_u64())
            .unwrap_or_else(|| panic!("no {ty} in the log"))
    };
    Lsns {
        prompt,
        read,
        first_cost,
        edit,
        write,
        asked: lsn_of("checkpoint.requested"),
        bash,
        approved: lsn_of("checkpoint.approved"),
        last: events.last().unwrap()["lsn"].as_u64().unwrap(),
    }
}

fn replay(d: &Daemon, args: &[&str]) -> Output {
    let mut all = vec!["replay", SESSION];
    all.extend_from_slice(args);
    d.cli(&all)
}

/// `--print --json` at `lsn`.
fn state_at(d: &Daemon, lsn: u64) -> Value {
    let out = replay(d, &["--at", &lsn.to_string(), "--print", "--json"]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

fn files(state: &Value) -> Vec<(String, bool)> {
    state["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["changed"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn print_gives_the_files_cost_and_calls_at_each_lsn() {
    let d = Daemon::start();
    let l = session(&d);

    let s = state_at(&d, l.prompt);
    assert_eq!(
        (&s["lsn"], &s["tool_calls"], &s["cost_usd_micros"]),
        (&json!(l.prompt), &json!(0), &json!(0)),
        "{s}"
    );
    assert!(files(&s).is_empty(), "{s}");

    let s = state_at(&d, l.read);
    assert_eq!(s["tool_calls"], 1, "{s}");
    assert_eq!(files(&s), [("/p/a.rs".into(), false)], "read, not changed");

    assert_eq!(state_at(&d, l.first_cost)["cost_usd_micros"], 10_000);

    let s = state_at(&d, l.edit);
    assert_eq!(files(&s), [("/p/a.rs".into(), true)], "{s}");
    assert_eq!(s["tool_calls"], 2);

    let s = state_at(&d, l.write);
    assert_eq!(
        files(&s),
        [("/p/a.rs".into(), true), ("/p/b.rs".into(), true)]
    );
    assert_eq!(
        (&s["tool_calls"], &s["cost_usd_micros"]),
        (&json!(3), &json!(10_000))
    );

    let s = state_at(&d, l.asked);
    assert_eq!(s["cost_usd_micros"], 30_000, "{s}");
    assert_eq!(s["pending"].as_array().unwrap().len(), 1, "{s}");
    assert!(
        s["pending"][0]["summary"]
            .as_str()
            .unwrap()
            .contains("./deploy"),
        "{s}"
    );
    assert_eq!(s["decided"], json!([]));

    let s = state_at(&d, l.approved);
    assert_eq!(s["pending"], json!([]), "{s}");
    assert_eq!(s["decided"][0]["outcome"], "approved", "{s}");
    assert_eq!(s["tool_calls"], 4, "the Bash call at {} counts", l.bash);

    let s = state_at(&d, l.last);
    assert_eq!(
        (&s["cost_usd_micros"], &s["model_calls"]),
        (&json!(35_000), &json!(3))
    );
    assert_eq!(
        (&s["lsn"], &s["last_lsn"]),
        (&json!(l.last), &json!(l.last))
    );

    // The text says the same, in the words of the side pane.
    let out = replay(&d, &["--at", &l.write.to_string(), "--print"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        format!("position    LSN {}/{}", l.write, l.last),
        "tool calls  3".to_string(),
        "cost        $0.0100 (1 model call)".to_string(),
        "files       2 touched, 2 changed".to_string(),
        "  changed   /p/b.rs".to_string(),
        "line        Write /p/b.rs".to_string(),
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(&line)),
            "no {line:?} in:\n{text}"
        );
    }

    // Output that is not a terminal gets the same text without --print.
    let piped = replay(&d, &["--at", &l.write.to_string()]);
    assert!(piped.status.success(), "{piped:?}");
    assert_eq!(String::from_utf8_lossy(&piped.stdout), text);

    // The agent's own telemetry arrives: from there on only it counts, as in `dstream usage`.
    let r = d.client().ok(
        "append",
        json!({"session_id": SESSION, "event": {"type": "usage.request",
               "payload": {"model": "claude-sonnet-4-5", "cost_usd": 0.5},
               "metadata": {"source": "otlp"}}}),
    );
    let telemetry = r["lsn"].as_u64().unwrap();
    assert_eq!(state_at(&d, l.last)["cost_usd_micros"], 35_000);
    let s = state_at(&d, telemetry);
    assert_eq!(
        (&s["cost_usd_micros"], &s["model_calls"]),
        (&json!(500_000), &json!(1)),
        "{s}"
    );
    let usage = d.cli(&["usage", "--session", SESSION, "--scan", "--json"]);
    assert!(usage.status.success(), "{usage:?}");
    let usage: Value = serde_json::from_slice(&usage.stdout).unwrap();
    assert_eq!(
        s["cost_usd_micros"], usage["total"]["cost_usd_micros"],
        "{usage}"
    );
}

#[test]
fn a_bad_session_or_no_daemon_is_a_clear_error() {
    let d = Daemon::start();
    d.client()
        .append("there", "user.input", json!({"text": "hi"}));
    let out = d.cli(&["replay", "not-there", "--print"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not-there") && err.contains("not found"),
        "{err}"
    );

    let out = d.cli(&["replay", "bad/id", "--print"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("session id"),
        "{out:?}"
    );

    // No daemon: the words every client command uses.
    let socket = d.dir().join("nothing-here.sock");
    let run = |args: &[&str]| {
        Command::new(daemon_bin())
            .args(args)
            .arg("--socket")
            .arg(&socket)
            .env("DSTREAM_AUTOSTART", "0")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let replayed = run(&["replay", "there", "--print"]);
    let tailed = run(&["tail", "there"]);
    assert!(!replayed.status.success());
    assert!(!replayed.stderr.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&replayed.stderr),
        String::from_utf8_lossy(&tailed.stderr)
    );
}

/// The exit status the replay in tmux left in `path` (the pane's shell writes it).
fn exit_status(path: &std::path::Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s.trim().to_string();
        }
        assert!(Instant::now() < deadline, "the replay did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn keys_step_through_the_session_in_a_terminal() {
    let d = Daemon::start();
    let l = session(&d);
    let status = d.dir().join("replay.status");
    let command = |extra: &str| {
        format!(
            "env XDG_STATE_HOME={} {} replay {SESSION} {extra} --socket {}; echo $? > {}",
            d.dir().join("state").display(),
            daemon_bin().display(),
            d.socket().display(),
            status.display()
        )
    };
    let at = |lsn: u64| format!("LSN {lsn}/{} ", l.last);
    let tmux = Tmux::start(&command(""));
    // Never looked at before: it starts at the first event.
    let screen = tmux.wait_for(&at(l.prompt));
    assert!(screen.contains("tool calls  0"), "{screen}");
    assert!(
        screen.contains("you      fix the bug in a.rs"),
        "tail's words:\n{screen}"
    );

    tmux.keys(&["Right"]);
    let screen = tmux.wait_for(&at(l.read));
    assert!(screen.contains("tool calls  1"), "{screen}");
    assert!(screen.contains("  read      /p/a.rs"), "{screen}");

    // `]`: the next tool call, past the result and the model call in between.
    tmux.keys(&["]"]);
    let screen = tmux.wait_for(&at(l.edit));
    assert!(screen.contains("tool calls  2"), "{screen}");
    assert!(screen.contains("  changed   /p/a.rs"), "{screen}");
    assert!(screen.contains("cost        $0.0100"), "{screen}");
    tmux.keys(&["]"]);
    tmux.wait_for(&at(l.write));
    tmux.keys(&["]"]);
    tmux.wait_for(&at(l.bash));
    tmux.keys(&["["]);
    tmux.wait_for(&at(l.write));

    // `c`: the checkpoint, pending at the time.
    tmux.keys(&["c"]);
    let screen = tmux.wait_for(&at(l.asked));
    assert!(
        screen.contains("checkpoints 1 pending, 0 decided"),
        "{screen}"
    );

    // Search, then the end.
    tmux.keys(&["/"]);
    tmux.keys(&["-l", "DEPLOY --prod"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for(&at(l.bash));
    tmux.keys(&["End"]);
    let screen = tmux.wait_for(&at(l.last));
    assert!(
        screen.contains("cost        $0.0350 (3 model calls)"),
        "{screen}"
    );
    assert!(
        screen.contains("checkpoints 0 pending, 1 decided"),
        "{screen}"
    );
    tmux.keys(&["q"]);
    assert_eq!(exit_status(&status), "0");
    drop(tmux);

    // Looked at up to the end; one more event, and the next replay starts on it.
    let mut c = d.client();
    let (new, _) = c.append(SESSION, "user.input", json!({"text": "one more thing"}));
    let _ = std::fs::remove_file(&status);
    let tmux = Tmux::start(&command("--follow"));
    let screen = tmux.wait_for("1 new since you last looked");
    assert!(screen.contains(&format!("LSN {new}/{new} ")), "{screen}");
    assert!(screen.contains("1 new (•)"), "{screen}");
    // Following: an event appended now shows, and the cursor on the last one moves to it.
    let (live, _) = c.append(SESSION, "user.input", json!({"text": "appended live"}));
    let screen = tmux.wait_for(&format!("LSN {live}/{live} "));
    assert!(screen.contains("you      appended live"), "{screen}");
    tmux.keys(&["Escape"]);
    assert_eq!(exit_status(&status), "0");
}

/// An OpenCode run through the daemon's own mapping (a `read` of a missing file, model calls
/// as `step-finish` parts): the file its input names is touched, each call counts once
/// though OpenCode reports it in several phases, and the model calls are `dstream usage`'s
/// (the captured run cost nothing, so the dollars are checked above, not here).
#[test]
fn an_opencode_run_reads_as_its_files_calls_and_usage() {
    let d = Daemon::start();
    let mut c = d.client();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/opencode/run-tool-failure.jsonl");
    let mut session = None;
    for line in std::fs::read_to_string(&fixture).unwrap().lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        let event = if line["hook"] == "event" {
            &line["event"]
        } else {
            &line
        };
        let r = c.ok("ingest", json!({"source": "opencode", "event": event}));
        if let Some(s) = r["events"][0]["session_id"].as_str() {
            session.get_or_insert_with(|| s.to_string());
        }
    }
    let session = session.expect("the run stored events");
    let events = c.read_all(&session);
    let mut calls: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "execution.tool_use")
        .filter_map(|e| e["payload"]["tool_use_id"].as_str())
        .collect();
    let phases = calls.len();
    calls.sort();
    calls.dedup();
    assert!(
        phases > calls.len(),
        "the fixture reports a call in several phases"
    );

    let out = d.cli(&["replay", &session, "--print", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["tool_calls"], calls.len(), "{s}");
    assert!(
        files(&s).contains(&("missing-dstream-file.txt".into(), false)),
        "{s}"
    );
    let usage = d.cli(&["usage", "--session", &session, "--scan", "--json"]);
    assert!(usage.status.success(), "{usage:?}");
    let usage: Value = serde_json::from_slice(&usage.stdout).unwrap();
    assert!(usage["total"]["requests"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(
        s["cost_usd_micros"], usage["total"]["cost_usd_micros"],
        "{s}\n{usage}"
    );
    assert_eq!(s["model_calls"], usage["total"]["requests"]);
}
