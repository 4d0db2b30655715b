//! Never lose a session: hooks that find no daemon start one (autostart), or spool the event
//! when they cannot; the daemon drains the spool once each, in order, across a kill -9.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use dstream_tests::{Daemon, data_dir_for};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(60);

/// Waits until `check` holds, failing the test with `what` after `timeout`.
fn until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn event(kind: &str, session: &str, n: usize) -> Value {
    match kind {
        "PreToolUse" => json!({
            "session_id": session, "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": format!("echo {n}")}, "tool_use_id": format!("toolu_{n}"),
            "cwd": "/tmp",
        }),
        _ => json!({
            "session_id": session, "hook_event_name": "UserPromptSubmit",
            "prompt": format!("prompt {n}"), "cwd": "/tmp",
        }),
    }
}

/// Runs `dstream hook claude-code` with `event`, the socket and data dir given, and `env`.
fn hook(
    socket: &Path,
    data_dir: &Path,
    event: &Value,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut child = dstream_tests::hook_command()
        .args(args)
        .env("DSTREAM_SOCKET", socket)
        .env("DSTREAM_DATA_DIR", data_dir)
        .env_remove("DSTREAM_AUTOSTART")
        .env_remove("DSTREAM_CONFIG")
        .env_remove("DSTREAM_HOOK_FAIL_CLOSED")
        .env("XDG_CONFIG_HOME", data_dir.parent().unwrap().join("config"))
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(event.to_string().as_bytes())
        .unwrap();
    dstream_tests::wait_child(&mut child, LONG).expect("the hook exits");
    child.wait_with_output().unwrap()
}

fn spool_files(data_dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(data_dir.join("spool"))
        .map(|d| {
            d.map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
                .filter(|p| p.file_name().unwrap() != "overflow.jsonl")
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Stops a daemon the test did not start itself (autostarted), by the pid in its lock file.
struct Autostarted(PathBuf);

impl Autostarted {
    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.0.join("LOCK"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Autostarted {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn alive(pid: i32) -> bool {
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn twenty_hooks_with_no_daemon_start_one_and_store_each_event_once() {
    let dir = temp_dir();
    let socket = dir.path().join("run").join("dstream.sock");
    let data = dir.path().join("data");
    let guard = Autostarted(data.clone());
    let hooks: Vec<_> = (0..20)
        .map(|n| {
            let (socket, data) = (socket.clone(), data.clone());
            std::thread::spawn(move || {
                hook(
                    &socket,
                    &data,
                    &event("UserPromptSubmit", "s-auto", n),
                    &[],
                    &[],
                )
            })
        })
        .collect();
    for h in hooks {
        let out = h.join().unwrap();
        assert!(out.status.success());
        assert!(out.stdout.is_empty(), "{out:?}");
    }
    // One daemon, still running, holding the data directory; nothing spooled.
    let pid = guard.pid().expect("a daemon wrote its pid");
    assert!(
        alive(pid),
        "the started daemon keeps running after the hooks exit"
    );
    assert!(spool_files(&data).is_empty(), "nothing had to be spooled");
    let daemons = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.unwrap().path().join("cmdline")).ok())
        .filter(|c| {
            let c = String::from_utf8_lossy(c);
            c.contains("daemon") && c.contains(socket.to_str().unwrap())
        })
        .count();
    assert_eq!(daemons, 1, "exactly one daemon for the socket");
    let mut client = dstream_tests::Client::connect(&socket);
    let events = client.read_all("s-auto");
    let mut prompts: Vec<String> = events
        .iter()
        .filter(|e| e["type"] == "user.input")
        .map(|e| {
            e["payload"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    prompts.sort();
    let mut want: Vec<String> = (0..20).map(|n| format!("prompt {n}")).collect();
    want.sort();
    assert_eq!(
        prompts, want,
        "each of the 20 events stored once: {events:?}"
    );
    // Its environment is the fixed minimal one, not the hook's.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(!environ.contains("DSTREAM_SOCKET"), "{environ}");
    assert!(
        environ.contains("PATH=/usr/local/bin:/usr/bin:/bin"),
        "{environ}"
    );
}

#[test]
fn spooled_events_are_drained_once_in_order_marked_and_audited() {
    let mut d = Daemon::new(Some(
        r#"
[[checkpoints.rules]]
tool = "Bash"
input = "rm -rf *"
action = "ask"
"#,
    ));
    let (socket, data) = (d.socket(), d.data_dir());
    let off = [("DSTREAM_AUTOSTART", "0")];
    let mut sent = Vec::new();
    for n in 0..6 {
        let mut e = event(
            if n % 2 == 0 {
                "UserPromptSubmit"
            } else {
                "PreToolUse"
            },
            "s-spool",
            n,
        );
        if n == 3 {
            e["tool_input"]["command"] = json!("rm -rf build");
        }
        let out = hook(&socket, &data, &e, &[], &off);
        assert!(out.stdout.is_empty(), "fails open: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("spooled"),
            "{out:?}"
        );
        sent.push(e);
    }
    // Fail-closed: denied, and still spooled (the call did not run).
    let mut refused = event("PreToolUse", "s-spool", 6);
    refused["tool_input"]["command"] = json!("rm -rf dist");
    let out = hook(&socket, &data, &refused, &["--fail-closed"], &off);
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny");
    assert_eq!(spool_files(&data).len(), 7);
    for f in spool_files(&data) {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    d.restart();
    let mut c = d.client();
    until("the spool to drain", LONG, || spool_files(&data).is_empty());
    let events = c.read_all("s-spool");
    let requests: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "user.input" || e["type"] == "execution.tool_use")
        .collect();
    assert_eq!(requests.len(), 7, "{events:#?}");
    for (n, e) in requests.iter().enumerate() {
        assert_eq!(e["metadata"]["spooled"], true, "{e}");
        assert!(e["metadata"]["received_ms"].as_u64().unwrap() > 0);
        let text = e.to_string();
        assert!(
            text.contains(&format!("prompt {n}")) || text.contains(&format!("toolu_{n}")),
            "order at {n}: {e}"
        );
    }
    // The call a rule would have asked about ran unchecked: recorded, naming the rule; no
    // checkpoint was opened for any spooled call.
    let bypassed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "checkpoint.bypassed")
        .collect();
    assert_eq!(bypassed.len(), 1, "{bypassed:?}");
    assert_eq!(bypassed[0]["payload"]["tool_use_id"], "toolu_3");
    assert_eq!(bypassed[0]["payload"]["would_have"], "ask");
    assert_eq!(bypassed[0]["payload"]["rule"], "rules[0]");
    assert!(!events.iter().any(|e| e["type"] == "checkpoint.requested"));
    let denied = requests.last().unwrap();
    assert_eq!(denied["metadata"]["decision"]["action"], "deny", "{denied}");
    let stats = c.ok("stats", json!({}));
    assert_eq!(stats["spool"]["drained_events"], 7, "{stats}");
    assert_eq!(stats["spool"]["pending_files"], 0);
}

/// Writes a spool file of `n` records of session `session` directly, as a writer would.
fn write_spool(data: &Path, name: &str, session: &str, n: usize) -> PathBuf {
    let dir = data.join("spool");
    std::fs::create_dir_all(&dir).unwrap();
    let mut body = String::new();
    for i in 0..n {
        let rec = json!({"v": 1, "received_ms": 1_700_000_000_000u64 + i as u64, "source": "claude-code",
            "session_id": session, "event": event("UserPromptSubmit", session, i)});
        body.push_str(&rec.to_string());
        body.push('\n');
    }
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

fn prompt_numbers(events: &[Value]) -> Vec<usize> {
    events
        .iter()
        .filter(|e| e["type"] == "user.input")
        .map(|e| {
            e["payload"]["text"]
                .as_str()
                .unwrap()
                .trim_start_matches("prompt ")
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn a_drain_killed_half_way_resumes_with_every_event_once() {
    const N: usize = 10_000;
    let mut d = Daemon::new(None);
    let data = d.data_dir();
    write_spool(&data, "00000000000000000001-hook-1-0.jsonl", "s-big", N);
    d.restart();
    let mut c = d.client();
    until("the drain to be under way", LONG, || {
        let s = c.ok("stats", json!({}));
        s["spool"]["drained_events"].as_u64().unwrap() > 500
    });
    drop(c);
    d.kill9();
    d.restart();
    let mut c = d.client();
    until("the spool to drain", LONG, || spool_files(&data).is_empty());
    let got = prompt_numbers(&c.read_all("s-big"));
    assert_eq!(got.len(), N, "every event once (no duplicate, none lost)");
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "in the spool's order");
}

#[test]
fn damage_is_set_aside_and_other_users_files_refused() {
    let mut d = Daemon::new(None);
    let data = d.data_dir();
    let torn = write_spool(&data, "00000000000000000001-hook-1-0.jsonl", "s-torn", 3);
    let mut bytes = std::fs::read(&torn).unwrap();
    bytes.extend_from_slice(b"\x00\x01 garbage\n{\"v\":1,\"received_ms\":");
    std::fs::write(&torn, bytes).unwrap();
    write_spool(&data, "00000000000000000002-hook-1-0.jsonl", "s-after", 2);
    // Another user's file (root can make one): refused, left alone.
    let foreign = write_spool(&data, "00000000000000000003-hook-1-0.jsonl", "s-foreign", 1);
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
    } else {
        std::fs::remove_file(&foreign).unwrap();
        dstream_tests::skip(
            "spool::foreign_file",
            "not root: cannot make a file of another user",
        );
    }
    d.restart();
    let mut c = d.client();
    until("the readable files to drain", LONG, || {
        c.ok("stats", json!({}))["spool"]["drained_files"] == 2
    });
    assert_eq!(
        prompt_numbers(&c.read_all("s-torn")),
        vec![0, 1, 2],
        "up to the damage"
    );
    assert_eq!(
        prompt_numbers(&c.read_all("s-after")),
        vec![0, 1],
        "the next file is not blocked"
    );
    let damaged: Vec<_> = std::fs::read_dir(data.join("spool/damaged"))
        .unwrap()
        .collect();
    assert_eq!(damaged.len(), 1);
    let aside = std::fs::read(damaged[0].as_ref().unwrap().path()).unwrap();
    assert!(
        aside.starts_with(b"\x00\x01 garbage"),
        "the rest, moved aside"
    );
    let stats = c.ok("stats", json!({}));
    assert_eq!(stats["spool"]["damaged"], 1, "{stats}");
    if root {
        assert_eq!(stats["spool"]["refused"], 1, "{stats}");
        assert!(foreign.exists(), "another user's file is left alone");
        assert!(
            c.try_call("read", json!({"session_id": "s-foreign", "from_lsn": 1}))
                .unwrap()
                .is_err()
        );
    }
}

#[test]
fn a_full_spool_loses_events_loudly_and_the_daemon_reports_them() {
    let mut d = Daemon::new(None);
    let (socket, data) = (d.socket(), d.data_dir());
    let config = data.parent().unwrap().join("small-spool.toml");
    std::fs::write(&config, "[daemon]\nspool_max_bytes = 600\n").unwrap();
    let env = [
        ("DSTREAM_AUTOSTART", "0"),
        ("DSTREAM_CONFIG", config.to_str().unwrap()),
    ];
    let mut lost = 0;
    for n in 0..4 {
        let out = hook(
            &socket,
            &data,
            &event("UserPromptSubmit", "s-full", n),
            &[],
            &env,
        );
        let said = String::from_utf8_lossy(&out.stderr);
        if said.contains("could NOT be spooled") {
            assert!(said.contains("spool is full"), "{said}");
            lost += 1;
        }
    }
    assert!(lost >= 1, "the bound was reached");
    d.restart();
    let mut c = d.client();
    until("the spool to drain", LONG, || spool_files(&data).is_empty());
    let events = c.read_all("s-full");
    let report = events
        .iter()
        .find(|e| e["type"] == "spool.overflow")
        .unwrap_or_else(|| panic!("no spool.overflow in {events:#?}"));
    assert_eq!(report["payload"]["lost_events"], lost);
    assert_eq!(prompt_numbers(&events).len(), 4 - lost);
    assert!(!data.join("spool/overflow.jsonl").exists(), "reported once");
    let _ = data_dir_for(&socket);
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dstream-spool-")
        .tempdir()
        .unwrap()
}

#[test]
fn a_spool_file_that_appears_while_the_daemon_runs_is_drained_at_once() {
    let d = Daemon::start();
    let data = d.data_dir();
    let mut c = d.client();
    // A hook that could not reach this daemon (another socket) spools into its data dir.
    let elsewhere = data.parent().unwrap().join("elsewhere.sock");
    let out = hook(
        &elsewhere,
        &data,
        &event("UserPromptSubmit", "s-live", 0),
        &[],
        &[("DSTREAM_AUTOSTART", "0")],
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("spooled"),
        "{out:?}"
    );
    until("the running daemon to take it in", LONG, || {
        spool_files(&data).is_empty()
            && c.try_call("read", json!({"session_id": "s-live", "from_lsn": 1}))
                .unwrap()
                .is_ok()
    });
    assert_eq!(prompt_numbers(&c.read_all("s-live")), vec![0]);
}

#[test]
fn a_spool_that_cannot_be_written_is_said_and_the_hook_still_answers() {
    if unsafe { libc::geteuid() } != 0 {
        dstream_tests::skip(
            "spool::unwritable",
            "not root: cannot hand the spool folder to another user",
        );
        return;
    }
    let dir = temp_dir();
    let (socket, data) = (dir.path().join("none.sock"), dir.path().join("data"));
    std::fs::create_dir_all(data.join("spool")).unwrap();
    std::os::unix::fs::chown(data.join("spool"), Some(65534), Some(65534)).unwrap();
    let off = [("DSTREAM_AUTOSTART", "0")];
    let out = hook(&socket, &data, &event("PreToolUse", "s-x", 1), &[], &off);
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "fails open: {out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("could NOT be spooled") && said.contains("uid 65534"),
        "{said}"
    );
    let out = hook(
        &socket,
        &data,
        &event("PreToolUse", "s-x", 2),
        &["--fail-closed"],
        &off,
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny");
    assert!(
        answer["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .contains("could NOT be spooled")
    );
}

#[test]
fn a_record_for_a_quarantined_session_waits_aside_and_the_rest_drains() {
    let mut d = Daemon::start();
    let mut c = d.client();
    for i in 0..5 {
        c.append("s-q", "t", json!({"i": i, "text": "aaaaaaaaaaaaaaaa"}));
    }
    drop(c);
    assert_eq!(d.stop().code(), Some(0));
    // A flipped character in the middle of the log: the session is quarantined at start.
    let log = d.log_path("s-q");
    let mut bytes = std::fs::read(&log).unwrap();
    let at = bytes.windows(8).position(|w| w == b"aaaaaaaa").unwrap() + 2;
    bytes[at] = b'b';
    std::fs::write(&log, bytes).unwrap();
    let data = d.data_dir();
    write_spool(&data, "00000000000000000001-hook-1-0.jsonl", "s-q", 1);
    write_spool(&data, "00000000000000000002-hook-1-0.jsonl", "s-ok", 2);
    d.restart();
    let mut c = d.client();
    until("the spool to drain", LONG, || spool_files(&data).is_empty());
    assert_eq!(
        prompt_numbers(&c.read_all("s-ok")),
        vec![0, 1],
        "the rest went on"
    );
    let aside: Vec<String> = std::fs::read_dir(data.join("spool/damaged"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(
        aside[0].contains("quarantined") && aside[0].contains("prompt 0"),
        "{}",
        aside[0]
    );
}
