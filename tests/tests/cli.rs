//! The `dstream` client commands against a real daemon, as a script or a person uses them.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dstream_tests::serde_json::{self, Value, json};
use dstream_tests::{Daemon, daemon_bin, wait_child};

/// How long a client command may take before the test calls it hung.
const COMMAND_DEADLINE: Duration = Duration::from_secs(20);

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

/// Runs `dstream` with `stdin`, and fails the test (killing the process) if it has not exited
/// within [`COMMAND_DEADLINE`].
fn dstream_within(d: &Daemon, args: &[&str], stdin: &str) -> Output {
    run_within(Command::new(daemon_bin()), d.socket(), args, stdin)
}

fn run_within(mut cmd: Command, socket: PathBuf, args: &[&str], stdin: &str) -> Output {
    let mut child = cmd
        .args(args)
        .arg("--socket")
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_string();
    let writer = std::thread::spawn(move || input.write_all(stdin.as_bytes()));
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stdout.read_to_end(&mut buf).map(|_| buf)
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stderr.read_to_end(&mut buf).map(|_| buf)
    });
    let Some(status) = wait_child(&mut child, COMMAND_DEADLINE) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("dstream {args:?} was still running after {COMMAND_DEADLINE:?}");
    };
    let _ = writer.join();
    Output {
        status,
        stdout: out_reader.join().unwrap().unwrap(),
        stderr: err_reader.join().unwrap().unwrap(),
    }
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
        text.contains("Bash") && !text.contains("you      hi"),
        "the tool call in words, from LSN 2 only: {text}"
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
    assert!(stderr.contains("appended 2 events (lsn 1..2)"), "{stderr}");
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

#[test]
fn an_event_over_the_frame_limit_fails_append_with_the_daemons_message() {
    let d = Daemon::start_with("[daemon]\nmax_frame_bytes = 4096\n");
    let big = format!(
        "{{\"type\":\"big\",\"payload\":{{\"text\":\"{}\"}}}}\n",
        "x".repeat(8000)
    );
    let out = dstream_within(&d, &["append", "--session", "s"], &big);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("line 1") && stderr.contains("exceeds the limit of 4096 bytes"),
        "{stderr}"
    );
    assert!(stderr.contains("appended 0 events"), "{stderr}");
    // The daemon and the session are fine afterwards.
    let out = dstream_within(&d, &["append", "--session", "s"], "{\"type\":\"small\"}\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("appended 1 event (lsn 1..1)"), "{stderr}");
}

/// Events of `session` as the daemon has them now (none while the session does not exist).
fn events_now(d: &Daemon, session: &str) -> Vec<Value> {
    match d
        .client()
        .call("read", json!({"session_id": session, "from_lsn": 1}))
    {
        Ok(r) => r["events"].as_array().unwrap().clone(),
        Err(_) => Vec::new(),
    }
}

fn wait_for_events(d: &Daemon, session: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = events_now(d, session);
        if events.len() >= count {
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "{session} has {} events after 10 s while stdin is still open; expected {count}",
            events.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn append_sends_each_line_as_it_arrives_while_stdin_stays_open() {
    let d = Daemon::start();
    let mut child = Command::new(daemon_bin())
        .args(["append", "--session", "live", "--socket"])
        .arg(d.socket())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"{\"type\":\"first\"}\n").unwrap();
    stdin.flush().unwrap();
    let events = wait_for_events(&d, "live", 1);
    assert_eq!(events[0]["type"], "first");

    stdin.write_all(b"{\"type\":\"second\"}\n").unwrap();
    stdin.flush().unwrap();
    let events = wait_for_events(&d, "live", 2);
    assert_eq!(events[1]["type"], "second");
    assert!(
        child.try_wait().unwrap().is_none(),
        "append must keep reading while stdin is open"
    );

    drop(stdin);
    let status = wait_child(&mut child, COMMAND_DEADLINE).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("append did not exit after stdin closed")
    });
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("appended 2 events (lsn 1..2)"), "{stderr}");
    assert_eq!(events_now(&d, "live").len(), 2);
}

#[test]
fn a_daemon_error_is_printed_once() {
    let d = Daemon::start();
    let out = dstream_within(&d, &["tail", "a/b"], "");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("invalid session_id").count(),
        1,
        "the message once: {stderr}"
    );
    assert_eq!(stderr.matches("(code -32001)").count(), 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn tail_follow_ends_with_the_daemons_error_when_the_log_cannot_be_read() {
    let d = Daemon::start();
    let out = dstream_within(
        &d,
        &["append", "--session", "bad"],
        "{\"type\":\"a\",\"payload\":{\"text\":\"hello\"}}\n",
    );
    assert!(out.status.success());
    // Damage the stored record in place (same length), so reading it fails its checksum.
    let log = d.log_path("bad");
    let mut data = std::fs::read(&log).unwrap();
    let at = data
        .windows(5)
        .position(|w| w == b"hello")
        .expect("payload in the log");
    data[at] = b'j';
    let mut f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();

    let out = dstream_within(&d, &["tail", "bad", "--follow"], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the daemon ended the subscription") && stderr.contains("lsn 1"),
        "{stderr}"
    );
    assert!(!stderr.contains("unknown notification"), "{stderr}");
}

#[test]
fn stats_shows_uptime_as_a_duration() {
    let d = Daemon::start();
    let out = dstream_within(&d, &["stats"], "");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().next() == Some("uptime")),
        "{text}"
    );
    assert!(!text.contains("uptime_ms"), "{text}");
    // Scripts keep the field's real name.
    let out = dstream_within(&d, &["stats", "--json"], "");
    assert!(json_lines(&out)[0]["uptime_ms"].is_u64());
}

/// Whether every directory leading to `path`, and `path` itself, is executable by others.
fn others_can_execute(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.ancestors()
        .all(|p| std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_socket_this_user_may_not_open_is_reported_as_permission_denied() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

    const NOBODY: u32 = 65534;
    let d = Daemon::start();
    let socket = d.socket();
    // SAFETY: geteuid has no preconditions.
    let out = if unsafe { libc::geteuid() } != 0 {
        // Without root the client cannot be another user, but the socket can refuse this one:
        // a non-root owner is held to the mode bits.
        set_mode(&socket, 0o000);
        let out = run_within(Command::new(daemon_bin()), socket.clone(), &["stats"], "");
        set_mode(&socket, 0o600);
        out
    } else {
        // Root passes any mode: run the client as another user, who may reach the socket but
        // not open it (it stays owner-only).
        for dir in [d.dir(), socket.parent().unwrap()] {
            let mode = std::fs::metadata(dir).unwrap().permissions().mode();
            set_mode(dir, mode | 0o001);
        }
        assert_eq!(
            std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777,
            0o600
        );

        // The binary must be runnable by that user; copy it somewhere it is if need be.
        let copy_dir = tempfile::tempdir().unwrap();
        let bin = if others_can_execute(&daemon_bin()) {
            daemon_bin()
        } else {
            set_mode(copy_dir.path(), 0o755);
            let bin = copy_dir.path().join("dstream");
            dstream_tests::copy_executable(&daemon_bin(), &bin);
            assert!(others_can_execute(&bin), "{}", bin.display());
            bin
        };
        let mut cmd = Command::new(bin);
        cmd.uid(NOBODY).gid(NOBODY);
        run_within(cmd, socket.clone(), &["stats"], "")
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
    assert!(stderr.contains("dstream.sock"), "{stderr}");
    assert!(!stderr.contains("no dstream daemon is running"), "{stderr}");
}
