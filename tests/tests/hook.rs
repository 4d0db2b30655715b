//! `dstream hook claude-code` and the OpenCode plugin, as the agents run them: without a daemon,
//! against a scripted stand-in daemon (for exact decisions and failures), and against the real
//! daemon.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use dstream_tests::serde_json::{self, Value, json};
use dstream_tests::{Daemon, HookForm, daemon_bin, hook_bin, wait_child};

/// A hook that has not exited after this long is hung (a generous bound: machines are noisy).
const HANG_GUARD: Duration = Duration::from_secs(5);

fn pre_tool_use(session: &str) -> Value {
    json!({
        "session_id": session,
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": "/tmp",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls -la", "description": "list files"},
        "tool_use_id": "toolu_01TEST"
    })
}

fn event_of(kind: &str, session: &str) -> Value {
    let mut e = pre_tool_use(session);
    e["hook_event_name"] = json!(kind);
    e
}

thread_local! {
    /// The form this test thread runs hooks in (see [`each_form`]).
    static FORM: std::cell::Cell<Option<HookForm>> = const { std::cell::Cell::new(None) };
}

/// Runs `body` once with the hooks run as `dstream hook claude-code` and once as the lean
/// `dstream-hook claude-code`: both must behave the same.
fn each_form(body: impl Fn(HookForm)) {
    for form in HookForm::BOTH {
        FORM.with(|f| f.set(Some(form)));
        body(form);
    }
    FORM.with(|f| f.set(None));
}

/// The form hooks run in here: the one [`each_form`] set, else the suite's
/// (`DSTREAM_TEST_HOOK`).
fn form() -> HookForm {
    FORM.with(|f| f.get()).unwrap_or_else(HookForm::chosen)
}

/// Runs `dstream hook claude-code` with `stdin`, extra arguments and environment; fails the test
/// if it runs longer than `guard`. Returns the output and how long it took.
fn hook_with(
    socket: &Path,
    stdin: &[u8],
    args: &[&str],
    env: &[(&str, &str)],
    guard: Duration,
) -> (Output, Duration) {
    let mut cmd = form().command();
    cmd.args(args)
        .envs(dstream_tests::client_env(socket))
        .env_remove("DSTREAM_HOOK_FAIL_CLOSED")
        .env_remove("DSTREAM_HOOK_TIMEOUT_MS")
        .env_remove("DSTREAM_HOOK_DEBUG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().expect("spawn dstream hook");
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    // The hook may stop reading early (it reads at most 64 MiB); a broken pipe is fine.
    let writer = thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_reader = thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let Some(status) = wait_child(&mut child, guard) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("dstream hook was still running after {guard:?}");
    };
    let took = started.elapsed();
    let _ = writer.join();
    (
        Output {
            status,
            stdout: out_reader.join().unwrap(),
            stderr: err_reader.join().unwrap(),
        },
        took,
    )
}

fn hook(socket: &Path, event: &Value, args: &[&str]) -> Output {
    hook_with(
        socket,
        event.to_string().as_bytes(),
        args,
        &[],
        Duration::from_secs(20),
    )
    .0
}

/// The hook's stdout as JSON, or `Null` when it printed nothing.
fn printed(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "hook exited with {}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        return Value::Null;
    }
    assert_eq!(
        text.trim_end().lines().count(),
        1,
        "hook printed more than one line: {text}"
    );
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("hook printed non-JSON ({e}): {text}"))
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dstream-hook-")
        .tempdir()
        .unwrap()
}

// ---- a scripted stand-in for the daemon ----

type Responder = dyn Fn(&Value) -> Value + Send + Sync;

/// Listens on a socket, records every frame it receives, and answers each request with what
/// `respond` returns: a full response object minus `jsonrpc`/`id`, e.g. `{"result": …}`, or
/// `Null` to never answer.
struct FakeDaemon {
    path: PathBuf,
    frames: Arc<Mutex<Vec<Value>>>,
    conns: Arc<Mutex<Vec<UnixStream>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl FakeDaemon {
    fn start(path: &Path, respond: impl Fn(&Value) -> Value + Send + Sync + 'static) -> FakeDaemon {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).expect("bind fake daemon");
        let frames = Arc::new(Mutex::new(Vec::new()));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let respond: Arc<Responder> = Arc::new(respond);
        let acceptor = {
            let (frames, conns, stop) = (frames.clone(), conns.clone(), stop.clone());
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    conns.lock().unwrap().push(stream.try_clone().unwrap());
                    let (frames, respond) = (frames.clone(), respond.clone());
                    thread::spawn(move || serve(stream, &frames, &*respond));
                }
            })
        };
        FakeDaemon {
            path: path.to_path_buf(),
            frames,
            conns,
            stop,
            acceptor: Some(acceptor),
        }
    }

    fn frames(&self) -> Vec<Value> {
        self.frames.lock().unwrap().clone()
    }

    /// Waits until at least `n` frames arrived; panics after `timeout`.
    fn wait_frames(&self, n: usize, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let frames = self.frames();
            if frames.len() >= n {
                return frames;
            }
            assert!(
                Instant::now() < deadline,
                "expected {n} frames, got {}: {frames:?}",
                frames.len()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Closes every connection and the listener, and removes the socket: the daemon is gone.
    fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = UnixStream::connect(&self.path);
        if let Some(a) = self.acceptor.take() {
            a.join().unwrap();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve(stream: UnixStream, frames: &Mutex<Vec<Value>>, respond: &Responder) {
    let mut writer = stream.try_clone().unwrap();
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let Ok(frame) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        frames.lock().unwrap().push(frame.clone());
        let mut reply = respond(&frame);
        if reply.is_null() || frame.get("id").is_none() {
            continue;
        }
        reply["jsonrpc"] = json!("2.0");
        reply["id"] = frame["id"].clone();
        let mut bytes = serde_json::to_vec(&reply).unwrap();
        bytes.push(b'\n');
        if writer.write_all(&bytes).is_err() {
            return;
        }
    }
}

fn decision(d: Value) -> impl Fn(&Value) -> Value + Send + Sync + 'static {
    move |_| json!({"result": {"events": [], "decision": d}})
}

// ---- the hook without a daemon ----

#[test]
fn without_a_daemon_and_autostart_the_hook_spools_prints_nothing_and_exits_at_once() {
    each_form(|_| {
        let dir = temp_dir();
        let missing = dir.path().join("no-such-dir").join("dstream.sock");
        let event = pre_tool_use("s-down");
        // "At once": with its own deadline an hour away, the hook still exits (hook_with fails
        // the test if it is running after HANG_GUARD) while no daemon ever shows up, so it did
        // not wait for one.
        let env = [("DSTREAM_HOOK_TIMEOUT_MS", "3600000")];
        for _ in 0..5 {
            let (out, _) = hook_with(
                &missing,
                event.to_string().as_bytes(),
                &[],
                &env,
                HANG_GUARD,
            );
            assert_eq!(printed(&out), Value::Null);
            // Autostart is off here: the event waits in the spool, and stderr says where.
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(
                said.contains("autostart is off") && said.contains("spooled in"),
                "{said}"
            );
            assert!(!missing.exists(), "no daemon appeared meanwhile");
        }
        let spooled = std::fs::read_dir(dstream_tests::data_dir_for(&missing).join("spool"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".jsonl")
            })
            .count();
        assert_eq!(spooled, 5, "each run spooled its event");
        // A socket file nobody listens on (a daemon that died): refused, just as quiet and quick.
        let stale = dir.path().join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        let (out, _) = hook_with(&stale, event.to_string().as_bytes(), &[], &env, HANG_GUARD);
        assert_eq!(printed(&out), Value::Null);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("spooled in"),
            "{out:?}"
        );
    });
}

#[test]
fn fail_closed_denies_tool_calls_when_the_daemon_is_down() {
    each_form(|_| {
        let dir = temp_dir();
        let missing = dir.path().join("dstream.sock");
        let out = hook(&missing, &pre_tool_use("s1"), &["--fail-closed"]);
        let answer = printed(&out);
        assert_eq!(answer["hookSpecificOutput"]["hookEventName"], "PreToolUse");
        assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny");
        let reason = answer["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap();
        assert!(
            reason.contains("not running") && reason.contains("fail-closed"),
            "{reason}"
        );

        // The environment variable does the same; PermissionRequest gets its own format.
        let (out, _) = hook_with(
            &missing,
            event_of("PermissionRequest", "s1").to_string().as_bytes(),
            &[],
            &[("DSTREAM_HOOK_FAIL_CLOSED", "1")],
            HANG_GUARD,
        );
        let answer = printed(&out);
        assert_eq!(
            answer["hookSpecificOutput"]["hookEventName"],
            "PermissionRequest"
        );
        assert_eq!(answer["hookSpecificOutput"]["decision"]["behavior"], "deny");
        assert!(answer["hookSpecificOutput"]["decision"]["message"].is_string());

        // Events that take no decision are never blocked.
        for kind in ["PostToolUse", "Stop", "UserPromptSubmit", "SessionStart"] {
            let out = hook(&missing, &event_of(kind, "s1"), &["--fail-closed"]);
            assert_eq!(printed(&out), Value::Null, "{kind}");
        }
    });
}

#[test]
fn bad_input_never_crashes_the_hook() {
    each_form(|_| {
        let dir = temp_dir();
        let missing = dir.path().join("dstream.sock");
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let mut big = vec![b'{'; 1 << 20];
        big.extend_from_slice(b"\xff\xfe");
        let inputs: Vec<&[u8]> = vec![
            b"",
            b"not json at all",
            b"\xff\xfe\x00\x01",
            b"{\"hook_event_name\": \"PreToolUse\", \"tool_input\": {",
            b"[1, 2, 3]",
            b"null",
            deep.as_bytes(),
            &big,
        ];
        for input in &inputs {
            for args in [&[][..], &["--fail-closed"][..]] {
                let (out, _) = hook_with(&missing, input, args, &[], HANG_GUARD);
                let answer = printed(&out);
                let head = String::from_utf8_lossy(&input[..input.len().min(40)]).into_owned();
                if args.is_empty() {
                    assert_eq!(answer, Value::Null, "{head:?}");
                } else if head.contains("PreToolUse") {
                    // Cut-short JSON still names its event: failing closed denies it.
                    assert_eq!(
                        answer["hookSpecificOutput"]["permissionDecision"], "deny",
                        "{head:?}"
                    );
                } else {
                    assert_eq!(answer, Value::Null, "{head:?}");
                }
            }
        }
    });
}

#[test]
fn usage_errors_do_not_exit_with_the_blocking_code() {
    // Claude Code reads exit code 2 from a hook as "block the tool call".
    for args in [
        &["hook", "no-such-agent"][..],
        &["hook", "claude-code", "--bogus"],
        &["hook"],
    ] {
        let out = Command::new(daemon_bin())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty());
    }
    let help = Command::new(daemon_bin())
        .args(["hook", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "--fail-closed",
        "DSTREAM_HOOK_TIMEOUT_MS",
        "DSTREAM_SOCKET",
        "permissionDecision",
    ] {
        assert!(text.contains(needle), "help lacks {needle}: {text}");
    }
    // The lean binary: the same codes, the same help, its own name.
    for args in [
        &["no-such-agent"][..],
        &["claude-code", "--bogus"],
        &["claude-code", "extra"],
        &["claude-code", "--fail-closed", "--fail-closed"],
        &["claude-code", "--socket"],
        &[],
    ] {
        let out = Command::new(hook_bin())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Usage: dstream-hook"),
            "{args:?}: {out:?}"
        );
    }
    let help = Command::new(hook_bin()).arg("--help").output().unwrap();
    assert!(help.status.success());
    let lean = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "--fail-closed",
        "DSTREAM_HOOK_TIMEOUT_MS",
        "DSTREAM_SOCKET",
        "permissionDecision",
    ] {
        assert!(lean.contains(needle), "help lacks {needle}: {lean}");
    }
    let version = Command::new(hook_bin()).arg("--version").output().unwrap();
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("dstream-hook {}", env!("CARGO_PKG_VERSION"))
    );
}

// ---- the hook against a scripted daemon ----

#[test]
fn the_hook_sends_ingest_and_answers_in_claude_codes_format() {
    each_form(|_| {
        let dir = temp_dir();
        let sock = dir.path().join("fake.sock");
        let event = pre_tool_use("sess-fmt-1");

        // allow, with an edited input
        let fake = FakeDaemon::start(
            &sock,
            decision(
                json!({"action": "allow", "reason": "safe", "decided_by": "rule:ls",
            "updated_input": {"command": "ls"}}),
            ),
        );
        let answer = printed(&hook(&sock, &event, &[]));
        assert_eq!(
            answer,
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
            "permissionDecisionReason": "safe", "updatedInput": {"command": "ls"}}})
        );
        let frames = fake.frames();
        assert_eq!(frames.len(), 1, "{frames:?}");
        assert_eq!(frames[0]["jsonrpc"], "2.0");
        assert_eq!(frames[0]["method"], "ingest");
        let mut params = frames[0]["params"].clone();
        // The hook's deadline: after it, the daemon records the call as bypassed.
        let reply_by = params
            .as_object_mut()
            .unwrap()
            .remove("reply_by_ms")
            .and_then(|v| v.as_u64());
        assert!(reply_by.is_some_and(|t| t > 1_700_000_000_000), "{params}");
        assert_eq!(
            params,
            json!({"source": "claude-code", "event": event, "session_id": "sess-fmt-1"})
        );
        let answer = printed(&hook(&sock, &event_of("PermissionRequest", "s"), &[]));
        assert_eq!(
            answer,
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow", "updatedInput": {"command": "ls"}}}})
        );
        // Events that take no decision print nothing, whatever the daemon says.
        assert_eq!(
            printed(&hook(&sock, &event_of("PostToolUse", "s"), &[])),
            Value::Null
        );
        fake.stop();

        // deny
        let fake = FakeDaemon::start(
            &sock,
            decision(json!({"action": "deny", "reason": "no rm", "decided_by": "rule:rm"})),
        );
        assert_eq!(
            printed(&hook(&sock, &event, &[])),
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
            "permissionDecisionReason": "no rm"}})
        );
        assert_eq!(
            printed(&hook(&sock, &event_of("PermissionRequest", "s"), &[])),
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "no rm"}}})
        );
        fake.stop();

        // ask, and no decision: Claude Code goes on as usual.
        for reply in [
            json!({"result": {"events": [], "decision": {"action": "ask"}}}),
            json!({"result": {"events": [{"lsn": 1, "id": "01JDQ3V9S6X4M2B1K0ZP7T8W5R",
            "type": "execution.tool_use", "session_id": "s"}]}}),
        ] {
            let fake = FakeDaemon::start(&sock, move |_| reply.clone());
            for kind in ["PreToolUse", "PermissionRequest"] {
                assert_eq!(
                    printed(&hook(&sock, &event_of(kind, "s"), &[])),
                    Value::Null
                );
            }
            fake.stop();
        }

        // An error reply fails open, or closed with --fail-closed.
        let fake = FakeDaemon::start(
            &sock,
            |_| json!({"error": {"code": -32603, "message": "pipeline exploded"}}),
        );
        let out = hook(&sock, &event, &[]);
        assert_eq!(printed(&out), Value::Null);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("pipeline exploded"),
            "an error reply is worth one line on stderr"
        );
        let answer = printed(&hook(&sock, &event, &["--fail-closed"]));
        assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny");
        assert!(
            answer["hookSpecificOutput"]["permissionDecisionReason"]
                .as_str()
                .unwrap()
                .contains("pipeline exploded")
        );
        fake.stop();
    });
}

#[test]
fn session_ids_that_the_daemon_would_refuse_are_not_passed_on() {
    each_form(|_| {
        let dir = temp_dir();
        let sock = dir.path().join("fake.sock");
        let fake = FakeDaemon::start(&sock, |_| json!({"result": {"events": []}}));
        let event = pre_tool_use("../../etc/passwd");
        assert_eq!(printed(&hook(&sock, &event, &[])), Value::Null);
        let frames = fake.wait_frames(1, HANG_GUARD);
        assert!(
            frames[0]["params"].get("session_id").is_none(),
            "{}",
            frames[0]
        );
        assert_eq!(frames[0]["params"]["event"], event);
        // Text that is not JSON goes as a JSON string.
        let (out, _) = hook_with(&sock, b"oops {", &[], &[], HANG_GUARD);
        assert_eq!(printed(&out), Value::Null);
        let frames = fake.wait_frames(2, HANG_GUARD);
        assert_eq!(frames[1]["params"]["event"], "oops {");
        fake.stop();
    });
}

#[test]
fn a_daemon_that_never_answers_is_cut_off_by_the_deadline() {
    each_form(|_| {
        let dir = temp_dir();
        let sock = dir.path().join("fake.sock");
        let fake = FakeDaemon::start(&sock, |_| Value::Null);
        let env = [("DSTREAM_HOOK_TIMEOUT_MS", "300")];
        let event = pre_tool_use("s-slow").to_string();
        let (out, took) = hook_with(&sock, event.as_bytes(), &[], &env, HANG_GUARD);
        assert_eq!(printed(&out), Value::Null);
        assert!(took >= Duration::from_millis(300), "{took:?}");
        let (out, _) = hook_with(
            &sock,
            event.as_bytes(),
            &["--fail-closed"],
            &env,
            HANG_GUARD,
        );
        let answer = printed(&out);
        assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny");
        assert!(
            answer["hookSpecificOutput"]["permissionDecisionReason"]
                .as_str()
                .unwrap()
                .contains("timed out")
        );
        fake.stop();
    });
}

/// Runs a `PreToolUse` of `session` through the hook with `--fail-closed` and the deadline
/// `timeout_ms`: what it printed, and how long it took.
fn pre_tool_use_failing_closed(sock: &Path, session: &str, timeout_ms: &str) -> (Value, Duration) {
    let env = [("DSTREAM_HOOK_TIMEOUT_MS", timeout_ms)];
    let event = pre_tool_use(session).to_string();
    let (out, took) = hook_with(sock, event.as_bytes(), &["--fail-closed"], &env, HANG_GUARD);
    (printed(&out), took)
}

#[test]
fn a_daemon_that_trickles_its_reply_is_cut_off_by_the_deadline() {
    // Each byte arrives well within any one read's patience; the line never ends. The hook
    // must count the whole reply against its deadline, not each read.
    each_form(|_| {
        let dir = temp_dir();
        let sock = dir.path().join("trickle.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let server = thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = String::new();
            BufReader::new(conn.try_clone().unwrap())
                .read_line(&mut request)
                .unwrap();
            let deadline = Instant::now() + HANG_GUARD;
            while Instant::now() < deadline && conn.write_all(b" ").is_ok() {
                thread::sleep(Duration::from_millis(20));
            }
        });
        let (answer, took) = pre_tool_use_failing_closed(&sock, "s-trickle", "300");
        assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny");
        let reason = answer["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap();
        assert!(
            reason.contains("timed out waiting for the daemon's reply"),
            "{reason}"
        );
        assert!(took >= Duration::from_millis(300), "{took:?}");
        server.join().unwrap();
    });
}

#[test]
fn a_daemon_whose_accept_queue_is_full_is_given_up_on_after_a_second() {
    each_form(|_| {
        let dir = temp_dir();
        let sock = dir.path().join("full.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        // Connections nobody accepts, until the next one waits in connect: the queue is full.
        let held = Arc::new(Mutex::new(Vec::new()));
        let filler = {
            let (held, sock) = (held.clone(), sock.clone());
            thread::spawn(move || {
                while let Ok(c) = UnixStream::connect(&sock) {
                    held.lock().unwrap().push(c);
                }
            })
        };
        let mut last = (0, Instant::now());
        while last.1.elapsed() < Duration::from_millis(300) {
            let n = held.lock().unwrap().len();
            if n != last.0 {
                last = (n, Instant::now());
            }
            thread::sleep(Duration::from_millis(10));
        }
        let (answer, took) = pre_tool_use_failing_closed(&sock, "s-full", "20000");
        let reason = answer["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap();
        assert!(
            reason.contains("timed out connecting to the daemon"),
            "{reason}"
        );
        assert!(took >= Duration::from_secs(1), "{took:?}");
        drop(listener);
        let _ = std::fs::remove_file(&sock);
        filler.join().unwrap();
    });
}

#[test]
fn a_stdin_that_never_ends_is_cut_off_too() {
    each_form(|_| {
        let dir = temp_dir();
        let sock = dir.path().join("none.sock");
        let mut child = form()
            .command()
            .envs(dstream_tests::client_env(&sock))
            .env("DSTREAM_HOOK_TIMEOUT_MS", "300")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"{\"hook_event_name\":").unwrap();
        let status = wait_child(&mut child, HANG_GUARD).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("the hook waited for stdin past its deadline")
        });
        assert!(status.success());
        drop(stdin);
    });
}

#[test]
fn events_bigger_than_the_daemons_frame_limit_are_cut_to_fit() {
    each_form(|_| {
        let dir = temp_dir();
        let sock = dir.path().join("fake.sock");
        let limit = 64 * 1024;
        // The stand-in refuses frames over `limit`, as the daemon does, and tells its limit.
        let fake = FakeDaemon::start(&sock, move |frame| {
            let size = serde_json::to_vec(frame).unwrap().len();
            match frame["method"].as_str() {
                Some("hello") => json!({"result": {"server": "fake", "version": "0", "protocol": 1,
                "max_frame_bytes": limit, "fsync": "always", "peer": {"uid": null, "gid": null, "pid": null}}}),
                _ if size > limit => {
                    json!({"error": {"code": -32003, "message": "frame too large"}})
                }
                _ => json!({"result": {"events": [], "decision": {"action": "allow",
                "updated_input": {"command": "edited"}}}}),
            }
        });
        let mut event = pre_tool_use("s-big");
        event["tool_input"]["command"] = json!("x".repeat(300_000));
        let answer = printed(&hook(&sock, &event, &[]));
        let frames = fake.frames();
        let methods: Vec<_> = frames
            .iter()
            .map(|f| f["method"].as_str().unwrap())
            .collect();
        assert_eq!(methods, ["ingest", "hello", "ingest"]);
        let sent = &frames[2]["params"]["event"];
        assert!(serde_json::to_vec(&frames[2]).unwrap().len() <= limit);
        assert_eq!(sent["tool_use_id"], "toolu_01TEST");
        assert!(
            sent["tool_input"]["command"]
                .as_str()
                .unwrap()
                .ends_with("bytes cut]")
        );
        // Allowed, but the edit of a cut input is not applied.
        assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "allow");
        assert!(
            answer["hookSpecificOutput"].get("updatedInput").is_none(),
            "{answer}"
        );
        fake.stop();
    });
}

// ---- the hook against the real daemon ----

/// Waits until `session` has at least one event; returns its events.
fn events_of(d: &Daemon, session: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = d.client();
        match c.call("read", json!({"session_id": session, "from_lsn": 1})) {
            Ok(r) if !r["events"].as_array().unwrap().is_empty() => {
                return c.read_all(session);
            }
            _ if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            other => panic!("no events in {session}: {other:?}"),
        }
    }
}

/// True when a stored event came from `raw` (kept verbatim in `raw`, as the design asks).
fn came_from(stored: &Value, raw: &Value) -> bool {
    &stored["raw"] == raw
}

#[test]
fn hook_events_land_in_the_session_log() {
    each_form(|_| {
        let d = Daemon::start();
        let session = "hook-e2e-1";
        let kinds = [
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "PostToolUse",
            "Stop",
        ];
        for kind in kinds {
            let event = event_of(kind, session);
            let answer = printed(&hook(&d.socket(), &event, &[]));
            if !answer.is_null() {
                assert_eq!(
                    kind, "PreToolUse",
                    "only a tool call gets an answer: {answer}"
                );
                assert_eq!(answer["hookSpecificOutput"]["hookEventName"], "PreToolUse");
                let decided = answer["hookSpecificOutput"]["permissionDecision"].as_str();
                assert!(matches!(decided, Some("allow" | "deny")), "{answer}");
            }
        }
        let stored = events_of(&d, session);
        for kind in kinds {
            let raw = event_of(kind, session);
            assert!(
                stored.iter().any(|e| came_from(e, &raw)),
                "no stored event for {kind} in {stored:#?}"
            );
        }
        for e in &stored {
            assert_eq!(e["session_id"], session);
        }
    });
}

/// A policy for the real daemon: a stand-in mapping for `source` that turns tool calls into
/// requested `execution.tool_use` events, and a `decide` that denies `rm…` and allows `ls`.
/// Named after the built-in mapping so that it replaces it for this daemon only.
fn write_test_policy(d: &Daemon, source: &str, map_body: &str) {
    let dir = d.plugin_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!(
        r#"
        local M = {{ name = "{source}", api = 1, sources = {{ "{source}" }} }}
        function M.map(raw, emit, ctx)
          {map_body}
        end
        function M.decide(request)
          local input = request.payload and request.payload.input or {{}}
          local cmd = input.command or ""
          if cmd:find("^rm") then return {{ action = "deny", reason = "no rm (test policy)" }} end
          if cmd == "ls" then return "allow" end
          return nil
        end
        return M
        "#
    );
    std::fs::write(dir.join(format!("{source}.lua")), text).unwrap();
    let reloaded = d.client().ok("plugins.reload", json!({}));
    assert!(
        reloaded["errors"].as_array().is_none_or(|e| e.is_empty()),
        "{reloaded}"
    );
}

#[test]
fn real_daemon_decisions_reach_claude_code_in_its_format() {
    each_form(|_| {
        let d = Daemon::start();
        write_test_policy(
            &d,
            "claude-code",
            r#"if raw.hook_event_name == "PreToolUse" or raw.hook_event_name == "PermissionRequest" then
            emit({ type = "execution.tool_use", session_id = raw.session_id,
                   payload = { phase = "requested", tool = raw.tool_name, input = raw.tool_input,
                               tool_use_id = raw.tool_use_id } })
          end"#,
        );
        let session = "hook-e2e-decide";
        let call = |kind: &str, command: &str| {
            let mut e = event_of(kind, session);
            e["tool_input"]["command"] = json!(command);
            printed(&hook(&d.socket(), &e, &[]))
        };
        assert_eq!(
            call("PreToolUse", "rm -rf /"),
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
            "permissionDecisionReason": "no rm (test policy)"}})
        );
        assert_eq!(
            call("PreToolUse", "ls"),
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
            "permissionDecisionReason": "allowed by plugin:claude-code (dstream)"}})
        );
        assert_eq!(call("PreToolUse", "cat notes.txt"), Value::Null);
        assert_eq!(
            call("PermissionRequest", "rm x"),
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "no rm (test policy)"}}})
        );
        assert_eq!(
            call("PermissionRequest", "ls"),
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow"}}})
        );
        let stored = events_of(&d, session);
        let of = |t: &str| stored.iter().filter(|e| e["type"] == t).collect::<Vec<_>>();
        assert_eq!(of("execution.tool_use").len(), 5, "{stored:#?}");
        // Each decision is recorded beside its call, naming the plugin that made it.
        let (denied, allowed) = (of("checkpoint.rejected"), of("checkpoint.approved"));
        assert_eq!((denied.len(), allowed.len()), (2, 2), "{stored:#?}");
        assert!(
            denied
                .iter()
                .chain(&allowed)
                .all(|e| e["payload"]["auto"] == true
                    && e["payload"]["decided_by"] == "plugin:claude-code")
        );
        assert_eq!(stored.len(), 9, "{stored:#?}");
    });
}

// ---- the OpenCode plugin ----

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The plugin loaded by a Node process that plays OpenCode (scripts/opencode/test/driver.mjs).
struct OpenCode {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

fn node() -> String {
    std::env::var("DSTREAM_TEST_NODE").unwrap_or_else(|_| "node".into())
}

impl OpenCode {
    /// The plugin talking to `socket`, with autostart off, spooling into the data directory of
    /// `socket` ([`dstream_tests::data_dir_for`]), and `env` added.
    fn start(socket: &Path, env: &[(&str, &str)]) -> OpenCode {
        OpenCode::start_without(socket, env, &[])
    }

    /// [`OpenCode::start`] with the variables `unset` removed from its environment.
    fn start_without(socket: &Path, env: &[(&str, &str)], unset: &[&str]) -> OpenCode {
        let root = repo_root();
        let mut cmd = Command::new(node());
        cmd.arg(root.join("scripts/opencode/test/driver.mjs"))
            .arg(root.join("scripts/opencode/dstream.js"))
            .envs(dstream_tests::client_env(socket))
            // The dstream the plugin runs (`dstream start`), and no configuration of the user's.
            .env("DSTREAM_BIN", daemon_bin())
            .env(
                "XDG_CONFIG_HOME",
                socket.parent().unwrap().join("no-such-config"),
            )
            .env_remove("DSTREAM_CONFIG")
            .env_remove("DSTREAM_HOOK_FAIL_CLOSED")
            .env_remove("DSTREAM_HOOK_TIMEOUT_MS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        for k in unset {
            cmd.env_remove(k);
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "these tests run the OpenCode plugin with Node.js, which could not be started \
                 ({e}); install node, or point DSTREAM_TEST_NODE at it"
            )
        });
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut oc = OpenCode {
            child,
            stdin,
            stdout,
        };
        let ready = oc.answer();
        assert_eq!(ready["ready"], true, "{ready}");
        assert_eq!(
            ready["exports"],
            json!(["DstreamPlugin"]),
            "OpenCode calls every export as a plugin: the file must export only the plugin"
        );
        oc
    }

    fn answer(&mut self) -> Value {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).unwrap();
        assert!(n > 0, "the Node driver ended");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    fn send(&mut self, cmd: Value) -> Value {
        let stdin = self.stdin.as_mut().expect("OpenCode has exited");
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
        let (stdout, child) = (&mut self.stdout, &mut self.child);
        // A plugin that hangs OpenCode fails the test instead of hanging it: past the
        // deadline the driver is killed, which ends the read.
        let line = thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut line = String::new();
                stdout.read_line(&mut line).map(|_| line)
            });
            let deadline = Instant::now() + Duration::from_secs(60);
            while !reader.is_finished() {
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = reader.join();
                    panic!("the plugin did not answer {cmd}");
                }
                thread::sleep(Duration::from_millis(5));
            }
            reader.join().unwrap().unwrap()
        });
        assert!(!line.is_empty(), "the Node driver ended");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    fn event(&mut self, event: Value) {
        let a = self.send(json!({"op": "event", "event": event}));
        assert_eq!(a["ok"], true, "{a}");
    }

    fn before(&mut self, input: Value, args: Value) -> Value {
        self.send(json!({"op": "before", "input": input, "output": {"args": args}}))
    }
}

impl OpenCode {
    /// Ends OpenCode the ordinary way (its input ends, the process exits by itself), which
    /// runs the plugin's "exit" listener.
    fn exit(mut self) {
        drop(self.stdin.take());
        let status = wait_child(&mut self.child, Duration::from_secs(30))
            .expect("the Node driver exits once its input ends");
        assert!(status.success(), "{status}");
    }
}

impl Drop for OpenCode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bus_event(kind: &str, session: &str, n: u64) -> Value {
    json!({"type": kind, "properties": {"sessionID": session, "n": n}})
}

fn tool_input(session: &str, call: &str) -> Value {
    json!({"tool": "bash", "sessionID": session, "callID": call})
}

#[test]
fn opencode_plugin_gates_tool_calls_by_the_daemons_decision() {
    let dir = temp_dir();
    let sock = dir.path().join("fake.sock");
    let fake = FakeDaemon::start(&sock, |frame| {
        let event = &frame["params"]["event"];
        let command = event["output"]["args"]["command"].as_str().unwrap_or("");
        let d = match (event["hook"].as_str(), command) {
            (Some("tool.execute.before"), c) if c.starts_with("rm") => {
                json!({"action": "deny", "reason": "no rm here", "decided_by": "rule:rm"})
            }
            (Some("tool.execute.before"), "ls") => {
                json!({"action": "allow", "updated_input": {"command": "ls -la", "timeout": 5}})
            }
            (Some("tool.execute.before"), _) => json!({"action": "ask"}),
            _ => Value::Null,
        };
        json!({"result": {"events": [], "decision": d}})
    });
    let mut oc = OpenCode::start(&sock, &[]);

    oc.event(bus_event("session.created", "ses_1", 1));
    let denied = oc.before(tool_input("ses_1", "c1"), json!({"command": "rm -rf /"}));
    assert_eq!(denied["ok"], false, "{denied}");
    assert_eq!(denied["error"], "no rm here");

    let edited = oc.before(
        tool_input("ses_1", "c2"),
        json!({"command": "ls", "description": "dropped by the edit"}),
    );
    assert_eq!(edited["ok"], true, "{edited}");
    assert_eq!(
        edited["output"]["args"],
        json!({"command": "ls -la", "timeout": 5})
    );

    let asked = oc.before(tool_input("ses_1", "c3"), json!({"command": "cat x"}));
    assert_eq!(asked["output"]["args"], json!({"command": "cat x"}));
    let after = oc.send(json!({"op": "after", "input": tool_input("ses_1", "c3"),
        "output": {"title": "cat", "output": "hello", "metadata": {}}}));
    assert_eq!(after["ok"], true);

    let frames = fake.wait_frames(5, HANG_GUARD);
    for f in &frames {
        assert_eq!(f["method"], "ingest");
        assert_eq!(f["params"]["source"], "opencode");
        assert_eq!(f["params"]["session_id"], "ses_1", "{f}");
    }
    assert_eq!(
        frames[0]["params"]["event"],
        json!({"hook": "event", "event": bus_event("session.created", "ses_1", 1)})
    );
    assert_eq!(frames[1]["params"]["event"]["hook"], "tool.execute.before");
    assert_eq!(
        frames[1]["params"]["event"]["input"],
        tool_input("ses_1", "c1")
    );
    assert_eq!(frames[4]["params"]["event"]["hook"], "tool.execute.after");
    assert_eq!(frames[4]["params"]["event"]["output"]["output"], "hello");
    fake.stop();
}

#[test]
fn opencode_plugin_fails_open_and_queues_while_the_daemon_is_away() {
    let dir = temp_dir();
    let sock = dir.path().join("later.sock");
    let mut oc = OpenCode::start(&sock, &[("DSTREAM_HOOK_TIMEOUT_MS", "20000")]);
    // No daemon, and none can be started (autostart is off): events wait, and tool calls go
    // ahead at once instead of waiting out their deadline for a daemon that is not coming.
    for n in 1..=3 {
        oc.event(bus_event("message.updated", "ses_q", n));
    }
    let a = oc.before(tool_input("ses_q", "c1"), json!({"command": "ls"}));
    assert_eq!(a["ok"], true, "{a}");
    assert_eq!(a["output"]["args"], json!({"command": "ls"}));
    assert!(a["ms"].as_u64().unwrap() < 10_000, "{a}");

    // The daemon arrives: everything queued is delivered, in order.
    let fake = FakeDaemon::start(&sock, |_| json!({"result": {"events": []}}));
    oc.event(bus_event("message.updated", "ses_q", 4));
    let frames = fake.wait_frames(5, Duration::from_secs(15));
    let ns: Vec<_> = frames
        .iter()
        .map(|f| f["params"]["event"]["event"]["properties"]["n"].clone())
        .collect();
    assert_eq!(
        ns,
        [json!(1), json!(2), json!(3), Value::Null, json!(4)],
        "{frames:#?}"
    );
    assert_eq!(frames[3]["params"]["event"]["hook"], "tool.execute.before");
    fake.stop();

    // Gone again, with fail-closed: the tool call is refused.
    drop(oc);
    let mut oc = OpenCode::start(
        &sock,
        &[
            ("DSTREAM_HOOK_TIMEOUT_MS", "20000"),
            ("DSTREAM_HOOK_FAIL_CLOSED", "1"),
        ],
    );
    let a = oc.before(tool_input("ses_q", "c2"), json!({"command": "ls"}));
    assert_eq!(a["ok"], false, "{a}");
    assert!(a["ms"].as_u64().unwrap() < 10_000, "{a}");
    assert!(
        a["error"]
            .as_str()
            .unwrap()
            .contains("DSTREAM_HOOK_FAIL_CLOSED"),
        "{a}"
    );
}

/// The spool files of `data_dir`, oldest first.
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

fn spool_records(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The `n` of a stored OpenCode bus event (its raw event's `properties.n`).
fn n_of(stored: &Value) -> Option<u64> {
    stored["raw"]["event"]["properties"]["n"].as_u64()
}

/// Waits until `session` holds one event for each of `raws` (compared by `raw`); returns
/// them in the same order. No raw event may be stored twice.
fn stored_once(d: &Daemon, session: &str, raws: &[Value]) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stored = events_of(d, session);
        let found: Vec<Vec<&Value>> = raws
            .iter()
            .map(|raw| stored.iter().filter(|e| came_from(e, raw)).collect())
            .collect();
        for (raw, f) in raws.iter().zip(&found) {
            assert!(f.len() <= 1, "stored {} times: {raw}", f.len());
        }
        if found.iter().all(|f| f.len() == 1) {
            return found.into_iter().map(|f| f[0].clone()).collect();
        }
        assert!(
            Instant::now() < deadline,
            "not every event landed: {stored:#?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

fn until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn opencode_plugin_spools_what_it_could_not_send_when_opencode_exits() {
    use std::os::unix::fs::PermissionsExt;
    let mut d = Daemon::new(None);
    let (sock, data) = (d.socket(), d.data_dir());
    let session = "ses_exit";
    let mut oc = OpenCode::start(&sock, &[("DSTREAM_HOOK_FAIL_CLOSED", "1")]);
    let mut raws = Vec::new();
    for n in 1..=3 {
        let e = bus_event("message.updated", session, n);
        oc.event(e.clone());
        raws.push(json!({"hook": "event", "event": e}));
    }
    // No daemon and autostart off: refused at once (fail-closed), not after 30 s.
    let input = tool_input(session, "c1");
    let denied = oc.before(input.clone(), json!({"command": "ls"}));
    assert_eq!(denied["ok"], false, "{denied}");
    assert!(denied["ms"].as_u64().unwrap() < 10_000, "{denied}");
    raws.push(json!({"hook": "tool.execute.before", "input": input,
        "output": {"args": {"command": "ls"}}}));
    let e = bus_event("message.updated", session, 4);
    oc.event(e.clone());
    raws.push(json!({"hook": "event", "event": e}));
    assert!(
        spool_files(&data).is_empty(),
        "nothing is spooled before the exit"
    );
    let pid = oc.child.id();
    oc.exit();

    // One whole file, named as the hook names its own, owner-only, the events in order.
    let files = spool_files(&data);
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_str().unwrap().to_owned();
    let (ns, rest) = name.split_at(20);
    assert!(ns.bytes().all(|b| b.is_ascii_digit()), "{name}");
    assert_eq!(rest, format!("-opencode-{pid}-0.jsonl"), "{name}");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&files[0]), 0o600);
    assert_eq!(mode(&data.join("spool")), 0o700);
    let records = spool_records(&files[0]);
    assert_eq!(records.len(), 5, "{records:#?}");
    for (r, raw) in records.iter().zip(&raws) {
        assert_eq!(r["v"], 1, "{r}");
        assert_eq!(r["source"], "opencode", "{r}");
        assert_eq!(r["session_id"], session, "{r}");
        assert!(r["received_ms"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(&r["event"], raw);
    }
    assert_eq!(records[3]["answered"], "deny", "the refused call says so");
    assert!(
        records
            .iter()
            .filter(|r| r.get("answered").is_some())
            .count()
            == 1
    );

    // A daemon drains it: each event stored once, marked as spooled.
    d.restart();
    until("the spool to drain", Duration::from_secs(30), || {
        spool_files(&data).is_empty()
    });
    for e in stored_once(&d, session, &raws) {
        assert_eq!(e["metadata"]["spooled"], true, "{e}");
    }
}

#[test]
fn opencode_plugin_spools_the_oldest_events_past_its_queue_budget() {
    let mut d = Daemon::new(None);
    let (sock, data) = (d.socket(), d.data_dir());
    let session = "ses_big";
    let mut oc = OpenCode::start(&sock, &[]);
    // Six events of about 1 MiB while there is no daemon: the queue holds 4 MiB, so the
    // fifth and sixth each push the oldest waiting one out, into the spool.
    let filler = "x".repeat(1_000_000);
    let mut raws = Vec::new();
    for n in 1..=6 {
        let e = json!({"type": "message.part.updated",
            "properties": {"sessionID": session, "n": n, "text": filler}});
        oc.event(e.clone());
        raws.push(json!({"hook": "event", "event": e}));
    }
    let files = spool_files(&data);
    let spooled: Vec<Vec<u64>> = files
        .iter()
        .map(|f| {
            spool_records(f)
                .iter()
                .map(|r| r["event"]["event"]["properties"]["n"].as_u64().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(spooled, [[1], [2]], "{files:?}");

    // The daemon comes: it drains the spool, and the plugin sends the rest.
    d.restart();
    let e = bus_event("message.updated", session, 7);
    oc.event(e.clone());
    raws.push(json!({"hook": "event", "event": e}));
    let stored = stored_once(&d, session, &raws);
    for e in &stored {
        let n = n_of(e).unwrap();
        assert_eq!(
            e["metadata"]["spooled"] == true,
            n <= 2,
            "{n}: {}",
            e["metadata"]
        );
    }
    let all = events_of(&d, session);
    assert!(
        all.iter().all(|e| e["raw"]["hook"] != "dstream.dropped"),
        "nothing was lost"
    );
    oc.exit();
    assert!(spool_files(&data).is_empty(), "everything was sent");
}

#[test]
fn opencode_plugin_counts_what_a_full_spool_loses() {
    // A spool bound of 1000 bytes (learnt from `dstream start`): past it the plugin notes the
    // events in overflow.jsonl, and the daemon, once back, gets the count.
    let dir = temp_dir();
    let sock = dir.path().join("later.sock");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[daemon]\nspool_max_bytes = 1000\n").unwrap();
    let mut oc = OpenCode::start(&sock, &[("DSTREAM_CONFIG", config.to_str().unwrap())]);
    let filler = "x".repeat(1_500_000);
    // The first event makes the plugin run `dstream start`; wait until it has answered.
    oc.event(bus_event("message.updated", "ses_full", 0));
    let quick = oc.before(tool_input("ses_full", "c0"), json!({"command": "ls"}));
    assert_eq!(quick["ok"], true, "{quick}");
    for n in 1..=3 {
        oc.event(json!({"type": "message.part.updated",
            "properties": {"sessionID": "ses_full", "n": n, "text": filler}}));
    }
    let data = dstream_tests::data_dir_for(&sock);
    assert!(spool_files(&data).is_empty());
    let overflow = std::fs::read_to_string(data.join("spool/overflow.jsonl")).unwrap();
    let notes: Vec<Value> = overflow
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The third big event pushed out the three oldest: event 0, the tool call, event 1.
    assert_eq!(notes.len(), 3, "{overflow}");
    for note in &notes {
        assert_eq!(note["source"], "opencode");
        assert_eq!(note["session_id"], "ses_full");
        assert!(note["at_ms"].as_u64().unwrap() > 0, "{note}");
    }
    assert!(
        notes[2]["bytes"].as_u64().unwrap() > 1_500_000,
        "{overflow}"
    );
    let fake = FakeDaemon::start(&sock, |_| json!({"result": {"events": []}}));
    oc.event(bus_event("message.updated", "ses_full", 4));
    let frames = fake.wait_frames(4, Duration::from_secs(15));
    let notice = &frames[0]["params"];
    assert_eq!(notice["event"]["hook"], "dstream.dropped", "{notice}");
    assert_eq!(notice["event"]["count"], 3);
    let ns: Vec<_> = frames[1..]
        .iter()
        .map(|f| f["params"]["event"]["event"]["properties"]["n"].clone())
        .collect();
    assert_eq!(ns, [json!(2), json!(3), json!(4)]);
    assert_eq!(notice["event"]["sessionID"], "ses_full");
    assert_eq!(notice["session_id"], "ses_full");
    fake.stop();
}

/// Kills a daemon the plugin started (by the pid in its data directory's lock file).
struct Autostarted(PathBuf);

impl Drop for Autostarted {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(self.0.join("LOCK"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[test]
fn opencode_plugin_starts_a_daemon_when_none_answers() {
    let dir = temp_dir();
    let sock = dir.path().join("run").join("dstream.sock");
    let data = dstream_tests::data_dir_for(&sock);
    let _daemon = Autostarted(data.clone());
    let mut oc = OpenCode::start_without(&sock, &[], &["DSTREAM_AUTOSTART"]);
    let session = "ses_auto";
    let first = bus_event("session.created", session, 1);
    oc.event(first.clone());
    let input = tool_input(session, "c1");
    let allowed = oc.before(input.clone(), json!({"command": "ls"}));
    assert_eq!(allowed["ok"], true, "{allowed}");
    let e = bus_event("message.updated", session, 2);
    oc.event(e.clone());
    let raws = [
        json!({"hook": "event", "event": first}),
        json!({"hook": "tool.execute.before", "input": input,
            "output": {"args": {"command": "ls"}}}),
        json!({"hook": "event", "event": e}),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut c) = dstream_tests::Client::connect_timeout(&sock, Duration::from_secs(2))
            && let Ok(r) = c.call("read", json!({"session_id": session, "from_lsn": 1}))
            && !r["events"].as_array().unwrap().is_empty()
        {
            let stored = c.read_all(session);
            let found: Vec<usize> = raws
                .iter()
                .map(|raw| stored.iter().filter(|s| came_from(s, raw)).count())
                .collect();
            if found == [1, 1, 1] {
                assert!(stored.iter().all(|s| s["metadata"]["spooled"] != true));
                break;
            }
            assert!(found.iter().all(|&n| n <= 1), "{stored:#?}");
        }
        assert!(Instant::now() < deadline, "the events did not arrive");
        thread::sleep(Duration::from_millis(50));
    }
    oc.exit();
    assert!(spool_files(&data).is_empty(), "nothing had to be spooled");
}

#[test]
fn opencode_plugin_events_land_and_survive_a_daemon_restart() {
    let mut d = Daemon::start();
    let mut oc = OpenCode::start(&d.socket(), &[]);
    let session = "ses_e2e_oc";
    oc.event(bus_event("session.created", session, 1));
    let before = oc.before(tool_input(session, "call-1"), json!({"command": "ls"}));
    assert_eq!(before["ok"], true, "{before}");
    oc.event(bus_event("message.updated", session, 2));

    d.stop();
    // Sent while the daemon is down: held, then delivered after the restart.
    oc.event(bus_event("message.updated", session, 3));
    d.restart();
    oc.event(bus_event("message.updated", session, 4));
    let after_restart = oc.before(tool_input(session, "call-2"), json!({"command": "pwd"}));
    assert_eq!(after_restart["ok"], true, "{after_restart}");

    let deadline = Instant::now() + Duration::from_secs(15);
    let mut stored;
    loop {
        stored = events_of(&d, session);
        let raws: Vec<&Value> = stored.iter().map(|e| &e["raw"]).collect();
        let has = |n: u64| raws.iter().any(|r| r["event"]["properties"]["n"] == n);
        let calls = raws
            .iter()
            .filter(|r| r["hook"] == "tool.execute.before")
            .count();
        if (1..=4).all(has) && calls == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every event landed: {stored:#?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert!(stored.iter().all(|e| e["session_id"] == session));
}

#[test]
fn opencode_plugin_obeys_a_real_daemon_decision() {
    let d = Daemon::start();
    write_test_policy(
        &d,
        "opencode",
        r#"if raw.hook == "tool.execute.before" then
            emit({ type = "execution.tool_use", session_id = raw.input.sessionID,
                   payload = { phase = "requested", tool = raw.input.tool,
                               input = raw.output.args, tool_use_id = raw.input.callID } })
          end"#,
    );
    let mut oc = OpenCode::start(&d.socket(), &[]);
    let session = "ses_e2e_decide";
    let denied = oc.before(tool_input(session, "c1"), json!({"command": "rm -rf /"}));
    assert_eq!(denied["ok"], false, "{denied}");
    assert_eq!(denied["error"], "no rm (test policy)");
    let allowed = oc.before(tool_input(session, "c2"), json!({"command": "ls"}));
    assert_eq!(allowed["ok"], true, "{allowed}");
    assert_eq!(allowed["output"]["args"], json!({"command": "ls"}));
    let stored = events_of(&d, session);
    let types: Vec<&str> = stored.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "execution.tool_use",
            "checkpoint.rejected",
            "execution.tool_use",
            "checkpoint.approved"
        ],
        "{stored:#?}"
    );
    assert_eq!(stored[0]["payload"]["tool_use_id"], "c1");
    assert_eq!(stored[1]["causation_id"], stored[0]["id"]);
}

// ---- the real agents, installed with `dstream install` ----
//
// The pinned agent CLIs (tests/agents/, installed into a cache by the harness) run offline
// against the mock model, with dstream installed into their project the way a person would.

use dstream_tests::agents::{self, AgentEnv};
use dstream_tests::mock_model::{MockModel, Reply, Script};

const FINAL: &str = "The command ran.";
/// What the test policy answers when it refuses a command.
const REFUSAL: &str = "blocked by the dstream test policy";

/// `dstream install <agent> --project <the agent's project>`, with the agent's HOME.
fn install_into(env: &AgentEnv, agent: &str) {
    let out = Command::new(daemon_bin())
        .args(["install", agent, "--project"])
        .arg(&env.project)
        .env("HOME", &env.home)
        .env("XDG_CONFIG_HOME", &env.xdg_config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dstream install {agent}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A decide-only plugin: denies any command that mentions "forbidden".
fn write_refusing_policy(d: &Daemon) {
    let dir = d.plugin_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("test-policy.lua"),
        format!(
            r#"
            local M = {{ name = "test-policy", api = 1 }}
            function M.decide(request)
              local input = request.payload and request.payload.input or {{}}
              if tostring(input.command or ""):find("forbidden") then
                return {{ action = "deny", reason = "{REFUSAL}" }}
              end
              return nil
            end
            return M
            "#
        ),
    )
    .unwrap();
    let reloaded = d.client().ok("plugins.reload", json!({}));
    assert!(
        reloaded["errors"].as_array().is_none_or(|e| e.is_empty()),
        "{reloaded}"
    );
}

/// Every event the daemon stored, across its sessions.
fn all_events(d: &Daemon) -> Vec<Value> {
    let mut c = d.client();
    let list = c.ok("sessions.list", json!({}));
    let mut out = Vec::new();
    for s in list["sessions"].as_array().unwrap() {
        out.extend(c.read_all(s["session_id"].as_str().unwrap()));
    }
    out
}

/// Everything the model was sent back as tool results, as text.
fn tool_results(mock: &MockModel) -> String {
    mock.model_calls()
        .iter()
        .filter(|r| r.has_tool_result())
        .map(|r| r.body_str())
        .collect()
}

#[test]
fn claude_code_reports_every_turn_and_obeys_a_deny() {
    let paths = agents::ensure_installed();
    let d = Daemon::start();
    write_refusing_policy(&d);
    let env = AgentEnv::new();
    install_into(&env, "claude-code");

    // An allowed tool call: every hook of the turn reaches the log.
    let mock = MockModel::anthropic(Script::tool_then_text(
        Reply::bash("echo hello-from-dstream"),
        FINAL,
    ));
    let mut cmd = agents::claude_command(&paths, &env, &mock, "Run echo hello-from-dstream", &[]);
    cmd.envs(dstream_tests::client_env(d.socket()));
    let out = agents::run(&env, cmd, agents::RUN_TIMEOUT);
    out.assert_success("claude -p");
    assert!(
        !out.stderr.contains("Invalid key") && !out.stderr.contains("Settings Error"),
        "Claude Code refused the installed settings: {}",
        out.stderr
    );
    assert!(tool_results(&mock).contains("hello-from-dstream"));
    let stored = all_events(&d);
    let hooks: Vec<&str> = stored
        .iter()
        .filter_map(|e| e["raw"]["hook_event_name"].as_str())
        .collect();
    for hook in [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "Stop",
    ] {
        assert!(
            hooks.contains(&hook),
            "no {hook} stored; stored hooks: {hooks:?}"
        );
    }
    assert!(
        stored
            .iter()
            .all(|e| e["type"] != "unmapped" && e["type"] != "plugin.error"),
        "{stored:#?}"
    );

    // A refused tool call: Claude Code does not run it, and the model is told why.
    let mock = MockModel::anthropic(Script::tool_then_text(
        Reply::bash("echo $((6*7))-forbidden"),
        FINAL,
    ));
    let mut cmd = agents::claude_command(&paths, &env, &mock, "Run the forbidden echo", &[]);
    cmd.envs(dstream_tests::client_env(d.socket()));
    let out = agents::run(&env, cmd, agents::RUN_TIMEOUT);
    out.assert_success("claude -p");
    let results = tool_results(&mock);
    assert!(
        results.contains(REFUSAL),
        "the model was not told: {results}"
    );
    assert!(
        !results.contains("42-forbidden"),
        "the command ran: {results}"
    );
}

#[test]
fn opencode_reports_through_the_installed_plugin_and_obeys_a_deny() {
    let paths = agents::ensure_installed();
    let d = Daemon::start();
    write_refusing_policy(&d);
    // A stand-in mapping for OpenCode tool calls, so that `decide` is asked about them.
    write_test_policy(
        &d,
        "opencode",
        r#"if raw.hook == "tool.execute.before" then
            emit({ type = "execution.tool_use", session_id = raw.input.sessionID,
                   payload = { phase = "requested", tool = raw.input.tool,
                               input = raw.output.args, tool_use_id = raw.input.callID } })
          else
            emit({ type = "opencode.raw" })
          end"#,
    );
    let env = AgentEnv::new();
    install_into(&env, "opencode");
    assert!(env.project.join(".opencode/plugins/dstream.js").is_file());

    let mock = MockModel::openai(Script::tool_then_text(
        Reply::opencode_bash("echo hello-from-dstream"),
        FINAL,
    ));
    let mut cmd = agents::opencode_command(&paths, &env, &mock, "Run echo hello-from-dstream", &[]);
    cmd.envs(dstream_tests::client_env(d.socket()));
    let out = agents::run(&env, cmd, agents::RUN_TIMEOUT);
    out.assert_success("opencode run");
    assert!(tool_results(&mock).contains("hello-from-dstream"));
    let stored = all_events(&d);
    let raws: Vec<&Value> = stored.iter().map(|e| &e["raw"]).collect();
    let before = raws
        .iter()
        .find(|r| r["hook"] == "tool.execute.before")
        .unwrap_or_else(|| panic!("no tool.execute.before stored: {stored:#?}"));
    assert_eq!(
        before["output"]["args"]["command"],
        "echo hello-from-dstream"
    );
    assert!(raws.iter().any(|r| r["hook"] == "tool.execute.after"));
    let bus: Vec<&str> = raws
        .iter()
        .filter(|r| r["hook"] == "event")
        .filter_map(|r| r["event"]["type"].as_str())
        .collect();
    assert!(bus.contains(&"session.created"), "bus events: {bus:?}");
    assert!(bus.contains(&"message.updated"), "bus events: {bus:?}");

    let mock = MockModel::openai(Script::tool_then_text(
        Reply::opencode_bash("echo $((6*7))-forbidden"),
        FINAL,
    ));
    let mut cmd = agents::opencode_command(&paths, &env, &mock, "Run the forbidden echo", &[]);
    cmd.envs(dstream_tests::client_env(d.socket()));
    let out = agents::run(&env, cmd, agents::RUN_TIMEOUT);
    out.assert_success("opencode run");
    let results = tool_results(&mock);
    assert!(
        results.contains(REFUSAL),
        "the model was not told: {results}"
    );
    assert!(
        !results.contains("42-forbidden"),
        "the command ran: {results}"
    );
}
