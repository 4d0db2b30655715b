//! Checkpoints through the real daemon: tool calls held until a person decides, through
//! `dstream hook claude-code`, the `checkpoint.*` methods and the `dstream pending|approve|
//! reject` commands; deadlines and their defaults; restarts (clean and `kill -9`) with a hook
//! waiting; "always allow" against a deny rule.
#![cfg(unix)]

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use dstream_tests::serde_json::{Value, json};
use dstream_tests::tmux::Tmux;
use dstream_tests::{Client, Daemon, daemon_bin, spawn_hook, wait_child};

/// Bash calls wait for a person; `rm` is refused outright.
const POLICY: &str = r#"
[[checkpoints.rules]]
tool = "Bash"
action = "ask"
[[checkpoints.rules]]
tool = "Bash"
input = "rm *"
action = "deny"
"#;

fn pre_tool_use(session: &str, call: &str, command: &str) -> Value {
    dstream_tests::claude_pre_tool_use(session, call, command)
}

/// What a hook printed, once it exited (0, always).
fn hook_output(mut child: Child, within: Duration) -> Value {
    let status = wait_child(&mut child, within).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("the hook did not exit within {within:?}")
    });
    let out = child.wait_with_output().unwrap();
    assert!(status.success(), "hook exit {status}");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json_line(&text).unwrap_or_else(|| {
        panic!(
            "the hook printed no JSON: stdout {text:?}, stderr {:?}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn serde_json_line(text: &str) -> Option<Value> {
    dstream_tests::serde_json::from_str(text.trim()).ok()
}

/// The dstream CLI as a person runs it: from another terminal, not from under the agent (this
/// test runs hooks, so the daemon knows it as an agent and refuses its children's decisions).
fn dstream(d: &Daemon, args: &[&str]) -> Output {
    d.cli_as_person(args)
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

/// A session's events once `n` deliveries are recorded: a delivery is written just after the
/// waiting client was handed the decision, so it may trail the client's exit a little.
fn read_delivered(c: &mut Client, session: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = c.read_all(session);
        if of_type(&events, "checkpoint.delivered").len() >= n || Instant::now() > deadline {
            return events;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `cond` until it holds; fails the test with `what` if it does not within 10 s.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Tool calls of `session` stored as waiting on checkpoint `id`: each one's hook was answered
/// with the pending checkpoint and waits on it. (No method counts a checkpoint's waiters;
/// this record of each call's answer is the nearest thing the daemon shows.)
fn calls_waiting_on(c: &mut Client, session: &str, id: &Value) -> usize {
    c.read_all(session)
        .iter()
        .filter(|e| {
            let d = &e["metadata"]["decision"];
            e["type"] == "execution.tool_use" && d["action"] == "ask" && d["checkpoint_id"] == *id
        })
        .count()
}

/// The daemon's open connections, as its `stats` counts them (`c`'s own included).
fn connections(c: &mut Client) -> u64 {
    c.ok("stats", json!({}))["connections"].as_u64().unwrap()
}

/// Unix sockets process `pid` holds open now.
fn sockets_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter(|target| target.to_string_lossy().starts_with("socket:"))
                .count()
        })
        .unwrap_or(0)
}

fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn permission(out: &Value) -> (&str, &str) {
    let o = &out["hookSpecificOutput"];
    (
        o["permissionDecision"].as_str().unwrap_or(""),
        o["permissionDecisionReason"].as_str().unwrap_or(""),
    )
}

#[test]
fn a_held_tool_call_waits_for_approve_reject_or_an_edit() {
    let d = Daemon::start_with(POLICY);
    let mut c = d.client();

    // Approve with a note and an edited command, from the CLI.
    let hook = spawn_hook(&d.socket(), &pre_tool_use("s-edit", "toolu_e", "ls"));
    let cp = c.pending_in("s-edit");
    assert_eq!(cp["summary"], "Bash: ls");
    assert_eq!(cp["tool"], "Bash");
    assert_eq!(cp["input"]["command"], "ls");
    assert_eq!(cp["cwd"], "/tmp/project");
    assert_eq!(cp["rule"], "rules[0]");
    assert!(cp["deadline_ms"].as_u64().unwrap() > cp["created_ms"].as_u64().unwrap());
    let edit = d.dir().join("edit.json");
    std::fs::write(&edit, r#"{"command": "ls -la", "description": "edited"}"#).unwrap();
    let out = dstream(
        &d,
        &[
            "approve",
            cp["id"].as_str().unwrap(),
            "--note",
            "with details",
            "--edit",
            edit.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let printed = hook_output(hook, Duration::from_secs(10));
    let (decision, reason) = permission(&printed);
    assert_eq!(decision, "allow");
    assert!(reason.contains("with details"), "{reason}");
    assert_eq!(
        printed["hookSpecificOutput"]["updatedInput"]["command"],
        "ls -la"
    );

    // Reject, with a note the agent reads.
    let hook = spawn_hook(
        &d.socket(),
        &pre_tool_use("s-rej", "toolu_r", "make deploy"),
    );
    let cp = c.pending_in("s-rej");
    let out = dstream(
        &d,
        &["reject", cp["id"].as_str().unwrap(), "--note", "not today"],
    );
    assert!(out.status.success(), "{out:?}");
    let printed = hook_output(hook, Duration::from_secs(10));
    let (decision, reason) = permission(&printed);
    assert_eq!(decision, "deny");
    assert!(reason.contains("not today"), "{reason}");

    // The log tells the whole story, decided_by from the OS, the delivery recorded.
    let events = read_delivered(&mut c, "s-edit", 1);
    assert_eq!(
        types(&events),
        [
            "execution.tool_use",
            "checkpoint.requested",
            "checkpoint.approved",
            "checkpoint.delivered"
        ]
    );
    let (call, req, dec) = (&events[0], &events[1], &events[2]);
    assert_eq!(req["causation_id"], call["id"]);
    assert_eq!(dec["causation_id"], req["id"]);
    assert_eq!(req["payload"]["input"]["command"], "ls");
    assert_eq!(dec["payload"]["decided_by"], format!("user:{}", whoami()));
    assert_eq!(dec["payload"]["input"]["command"], "ls -la");
    assert_eq!(dec["payload"]["note"], "with details");
    assert_eq!(call["metadata"]["decision"]["action"], "ask");
    let rejected = c.read_all("s-rej");
    assert_eq!(of_type(&rejected, "checkpoint.rejected").len(), 1);

    // `dstream pending` has nothing left.
    let out = dstream(&d, &["pending"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "no pending checkpoints"
    );
}

#[test]
fn checkpoints_in_many_sessions_are_decided_independently() {
    let d = Daemon::start_with(POLICY);
    let mut c = d.client();
    let hooks: Vec<(String, Child)> = (0..6)
        .map(|i| {
            let s = format!("many-{i}");
            let h = spawn_hook(
                &d.socket(),
                &pre_tool_use(&s, "toolu_1", &format!("echo {i}")),
            );
            (s, h)
        })
        .collect();
    let ids: Vec<String> = hooks
        .iter()
        .map(|(s, _)| c.pending_in(s)["id"].as_str().unwrap().to_string())
        .collect();
    let all = c.ok("checkpoint.list", json!({"state": "pending"}));
    assert_eq!(all["checkpoints"].as_array().unwrap().len(), 6);
    assert_eq!(c.ok("stats", json!({}))["pending_checkpoints"], 6);
    // Same tool_use_id in different sessions: different checkpoints.
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), 6);
    // Decide them from several clients at once, odd ones rejected.
    let threads: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let socket = d.socket();
            let id = id.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&socket);
                let decision = if i % 2 == 0 { "approve" } else { "reject" };
                c.ok(
                    "checkpoint.resolve",
                    json!({"id": id, "decision": decision}),
                )
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for (i, (_, hook)) in hooks.into_iter().enumerate() {
        let printed = hook_output(hook, Duration::from_secs(10));
        let want = if i % 2 == 0 { "allow" } else { "deny" };
        assert_eq!(permission(&printed).0, want, "session many-{i}");
    }
    assert_eq!(c.ok("stats", json!({}))["pending_checkpoints"], 0);
}

#[test]
fn the_first_decision_wins_and_a_second_is_told_which_it_was() {
    let d = Daemon::start_with("");
    let mut c = d.client();
    let cp = c.ok(
        "checkpoint.request",
        json!({"session_id": "dbl", "key": "deploy-42", "summary": "deploy 42",
               "options": ["approve", "reject", {"id": "approve_once", "label": "Once", "action": "allow"}]}),
    );
    let id = cp["id"].as_str().unwrap();
    assert_eq!(cp["state"], "pending");
    // A name the checkpoint does not offer is refused, and lists the ones it does.
    let e = c.err("checkpoint.resolve", json!({"id": id, "decision": "maybe"}));
    assert!(e.message.contains("approve_once"), "{e}");
    // Nobody can claim to be someone else.
    let e = c.err(
        "checkpoint.resolve",
        json!({"id": id, "decision": "approve", "decided_by": "alice"}),
    );
    assert_eq!(e.code, -32602, "{e}");

    let first = c.ok(
        "checkpoint.resolve",
        json!({"id": id, "decision": "approve_once", "note": "once only"}),
    );
    assert_eq!(first["state"], "approved");
    assert_eq!(first["decision"]["decision"], "approve_once");
    assert_eq!(
        first["decision"]["decided_by"],
        format!("user:{}", whoami())
    );
    let e = c.err(
        "checkpoint.resolve",
        json!({"id": id, "decision": "reject"}),
    );
    assert_eq!(e.code, -32011, "{e}");
    assert!(
        e.message.contains("approve_once") && e.message.contains("once only"),
        "the error names the first decision: {e}"
    );
    // The same key is the same checkpoint, already decided; nothing new is requested.
    let again = c.ok(
        "checkpoint.request",
        json!({"session_id": "dbl", "key": "deploy-42"}),
    );
    assert_eq!(again["id"], cp["id"]);
    assert_eq!(again["state"], "approved");
    let waited = c.ok("checkpoint.await", json!({"id": id}));
    assert_eq!(waited["decision"]["decision"], "approve_once");
    let events = c.read_all("dbl");
    assert_eq!(of_type(&events, "checkpoint.requested").len(), 1);
    assert_eq!(of_type(&events, "checkpoint.approved").len(), 1);
    assert!(of_type(&events, "checkpoint.rejected").is_empty());
    // Unknown ids say so.
    let e = c.err("checkpoint.await", json!({"id": "ck_nothing"}));
    assert_eq!(e.code, -32010, "{e}");
}

#[test]
fn a_retried_hook_gets_the_same_checkpoint() {
    let d = Daemon::start_with(POLICY);
    let mut c = d.client();
    let event = pre_tool_use("retry", "toolu_same", "echo once");
    let mut first = spawn_hook(&d.socket(), &event);
    let cp = c.pending_in("retry");
    let mut second = spawn_hook(&d.socket(), &event);
    // Both hooks wait on one checkpoint: the second call is answered with the same pending
    // checkpoint (its record says so), and neither hook has exited; one decision answers both.
    wait_until("the retried call waits on the same checkpoint", || {
        calls_waiting_on(&mut c, "retry", &cp["id"]) == 2
    });
    for hook in [&mut first, &mut second] {
        assert!(
            hook.try_wait().unwrap().is_none(),
            "a hook exited before the decision"
        );
    }
    let list = c.ok("checkpoint.list", json!({"session_id": "retry"}));
    assert_eq!(list["checkpoints"].as_array().unwrap().len(), 1);
    c.ok(
        "checkpoint.resolve",
        json!({"id": cp["id"], "decision": "approve"}),
    );
    assert_eq!(
        permission(&hook_output(first, Duration::from_secs(10))).0,
        "allow"
    );
    assert_eq!(
        permission(&hook_output(second, Duration::from_secs(10))).0,
        "allow"
    );
    let events = read_delivered(&mut c, "retry", 1);
    assert_eq!(of_type(&events, "checkpoint.requested").len(), 1);
    assert_eq!(of_type(&events, "checkpoint.approved").len(), 1);
    assert_eq!(of_type(&events, "checkpoint.delivered").len(), 1);
    // A late retry of the same call is answered at once with the decision.
    let late = spawn_hook(&d.socket(), &event);
    assert_eq!(
        permission(&hook_output(late, Duration::from_secs(10))).0,
        "allow"
    );
}

#[test]
fn deadlines_apply_each_default() {
    let d = Daemon::start_with(
        r#"
[[checkpoints.rules]]
tool = "Bash"
action = "ask"
timeout_ms = 400
on_timeout = "allow"
[[checkpoints.rules]]
tool = "Write"
action = "ask"
timeout_ms = 400
"#,
    );
    let mut c = d.client();
    // A rule's own default: allow.
    let hook = spawn_hook(&d.socket(), &pre_tool_use("late-allow", "toolu_a", "ls"));
    let (decision, reason) = {
        let out = hook_output(hook, Duration::from_secs(10));
        let p = permission(&out);
        (p.0.to_string(), p.1.to_string())
    };
    assert_eq!(decision, "allow");
    assert!(reason.contains("default"), "{reason}");
    // The configured default (deny) for the rule that names none.
    let mut write = pre_tool_use("late-deny", "toolu_w", "");
    write["tool_name"] = json!("Write");
    write["tool_input"] = json!({"file_path": "/tmp/x", "content": "y"});
    let out = hook_output(spawn_hook(&d.socket(), &write), Duration::from_secs(10));
    assert_eq!(permission(&out).0, "deny");
    // An SDK caller's own timeout and default.
    let cp = c.ok(
        "checkpoint.request",
        json!({"session_id": "late-sdk", "key": "k", "timeout_ms": 200, "on_timeout": "deny"}),
    );
    let waited = c.ok("checkpoint.await", json!({"id": cp["id"]}));
    assert_eq!(waited["state"], "expired");
    assert_eq!(waited["decision"]["action"], "deny");
    assert_eq!(waited["decision"]["decided_by"], "timeout");
    for (session, action) in [
        ("late-allow", "allow"),
        ("late-deny", "deny"),
        ("late-sdk", "deny"),
    ] {
        let events = c.read_all(session);
        let expired = of_type(&events, "checkpoint.expired");
        assert_eq!(expired.len(), 1, "{session}: {:?}", types(&events));
        assert_eq!(expired[0]["payload"]["action"], action, "{session}");
        assert_eq!(expired[0]["payload"]["decided_by"], "timeout");
    }
    // Too late to decide.
    let e = c.err(
        "checkpoint.resolve",
        json!({"id": cp["id"], "decision": "approve"}),
    );
    assert_eq!(e.code, -32011, "{e}");
    assert!(e.message.contains("expired"), "{e}");
}

#[test]
fn a_waiting_hook_survives_a_daemon_killed_and_restarted() {
    let mut d = Daemon::start_with(POLICY);
    let mut hook = spawn_hook(&d.socket(), &pre_tool_use("crash", "toolu_k", "make test"));
    let id = {
        let mut c = d.client();
        c.pending_in("crash")["id"].as_str().unwrap().to_string()
    };
    d.kill9();
    // The hook keeps waiting for the same checkpoint while the daemon is gone: it has let go
    // of the dead connection (it holds no socket between attempts to reconnect) and runs on.
    wait_until("the hook lets go of the dead connection", || {
        sockets_of(hook.id()) == 0
    });
    assert!(
        hook.try_wait().unwrap().is_none(),
        "the hook gave up while the daemon was down"
    );
    d.restart();
    let mut c = d.client();
    let list = c.ok("checkpoint.list", json!({"state": "pending"}));
    let ids: Vec<&str> = list["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()], "rebuilt from the log");
    assert_eq!(list["checkpoints"][0]["input"]["command"], "make test");
    // Once the hook has reconnected (the daemon counts its connection next to this client's),
    // approve: that same process prints it.
    wait_until("the hook reconnects", || connections(&mut c) == 2);
    let out = dstream(&d, &["approve", &id]);
    assert!(out.status.success(), "{out:?}");
    let printed = hook_output(hook, Duration::from_secs(15));
    assert_eq!(permission(&printed).0, "allow");
    let events = read_delivered(&mut c, "crash", 1);
    assert_eq!(
        types(&events),
        [
            "execution.tool_use",
            "checkpoint.requested",
            "checkpoint.approved",
            "checkpoint.delivered"
        ]
    );
    // Nothing is decided twice, also across a clean restart.
    d.stop();
    d.restart();
    let mut c = d.client();
    let e = c.err(
        "checkpoint.resolve",
        json!({"id": id, "decision": "reject"}),
    );
    assert_eq!(e.code, -32011, "{e}");
    let list = c.ok("checkpoint.list", json!({"state": "pending"}));
    assert!(list["checkpoints"].as_array().unwrap().is_empty());
}

#[test]
fn a_deadline_that_passes_while_the_daemon_is_down_applies_at_start() {
    let mut d = Daemon::start_with("");
    let mut c = d.client();
    let cp = c.ok(
        "checkpoint.request",
        json!({"session_id": "down", "key": "k1", "timeout_ms": 300, "on_timeout": "allow",
               "tool": "Bash", "input": {"command": "ls"}}),
    );
    let keep = c.ok(
        "checkpoint.request",
        json!({"session_id": "down", "key": "k2", "timeout_ms": 600000}),
    );
    drop(c);
    d.kill9();
    // The deadline passes while the daemon is down.
    let deadline = cp["deadline_ms"].as_u64().unwrap();
    wait_until("the first deadline passes", || {
        dstream_tests::now_ms() > deadline
    });
    d.restart();
    let mut c = d.client();
    let waited = c.ok(
        "checkpoint.await",
        json!({"id": cp["id"], "timeout_ms": 5000}),
    );
    assert_eq!(waited["state"], "expired");
    assert_eq!(waited["decision"]["action"], "allow");
    let still = c.ok("checkpoint.list", json!({"state": "pending"}));
    let still = still["checkpoints"].as_array().unwrap();
    assert_eq!(still.len(), 1);
    assert_eq!(still[0]["id"], keep["id"]);
    // Awaiting with a short timeout returns it, still pending.
    let w = c.ok(
        "checkpoint.await",
        json!({"id": keep["id"], "timeout_ms": 50}),
    );
    assert_eq!(w["state"], "pending");
    let events = c.read_all("down");
    assert_eq!(of_type(&events, "checkpoint.expired").len(), 1);
}

#[test]
fn always_allow_covers_the_session_but_never_a_deny_rule() {
    let d = Daemon::start_with(POLICY);
    let mut c = d.client();
    let hook = spawn_hook(&d.socket(), &pre_tool_use("grant", "toolu_1", "ls"));
    let cp = c.pending_in("grant");
    let options: Vec<&str> = cp["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert!(options.contains(&"approve_session"), "{options:?}");
    let out = dstream(
        &d,
        &[
            "approve",
            cp["id"].as_str().unwrap(),
            "--option",
            "approve_session",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        permission(&hook_output(hook, Duration::from_secs(10))).0,
        "allow"
    );

    // The next Bash call in the session runs without asking, and says why.
    let out = hook_output(
        spawn_hook(&d.socket(), &pre_tool_use("grant", "toolu_2", "cat README")),
        Duration::from_secs(10),
    );
    let (decision, reason) = permission(&out);
    assert_eq!(decision, "allow");
    assert!(reason.contains(cp["id"].as_str().unwrap()), "{reason}");
    // A deny rule still denies.
    let out = hook_output(
        spawn_hook(
            &d.socket(),
            &pre_tool_use("grant", "toolu_3", "rm -rf build"),
        ),
        Duration::from_secs(10),
    );
    assert_eq!(permission(&out).0, "deny");
    // Another session still asks.
    let other = spawn_hook(&d.socket(), &pre_tool_use("grant-other", "toolu_1", "ls"));
    let cp2 = c.pending_in("grant-other");
    c.ok(
        "checkpoint.resolve",
        json!({"id": cp2["id"], "decision": "reject"}),
    );
    assert_eq!(
        permission(&hook_output(other, Duration::from_secs(10))).0,
        "deny"
    );

    let events = c.read_all("grant");
    let approved = of_type(&events, "checkpoint.approved");
    assert_eq!(approved.len(), 2, "{:?}", types(&events));
    assert_eq!(approved[0]["payload"]["scope"], "session");
    assert_eq!(approved[1]["payload"]["auto"], true);
    assert_eq!(
        approved[1]["payload"]["grant"], cp["id"],
        "the automatic approval names the grant"
    );
    let rejected = of_type(&events, "checkpoint.rejected");
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0]["payload"]["rule"], "rules[1]");
}

#[test]
fn a_permission_prompt_after_a_decided_call_gets_the_same_answer() {
    let d = Daemon::start_with(POLICY);
    let mut c = d.client();
    let hook = spawn_hook(&d.socket(), &pre_tool_use("perm", "toolu_p", "ls /"));
    let cp = c.pending_in("perm");
    c.ok(
        "checkpoint.resolve",
        json!({"id": cp["id"], "decision": "approve"}),
    );
    assert_eq!(
        permission(&hook_output(hook, Duration::from_secs(10))).0,
        "allow"
    );
    // Claude Code's PermissionRequest carries no tool_use_id: it is matched by tool and input.
    let prompt = json!({
        "session_id": "perm", "cwd": "/tmp/project", "hook_event_name": "PermissionRequest",
        "tool_name": "Bash", "tool_input": {"command": "ls /", "description": "test"},
        "permission_suggestions": [],
    });
    let out = hook_output(spawn_hook(&d.socket(), &prompt), Duration::from_secs(10));
    assert_eq!(
        out["hookSpecificOutput"]["decision"]["behavior"], "allow",
        "{out}"
    );
    let events = c.read_all("perm");
    assert_eq!(of_type(&events, "checkpoint.requested").len(), 1);
}

// ---- the OpenCode plugin, through the real daemon ----

/// The OpenCode plugin in a Node process playing OpenCode (scripts/opencode/test/driver.mjs);
/// commands are written and answers read separately, so a test can decide while it waits.
struct OpenCode {
    child: Child,
    stdin: std::process::ChildStdin,
    answers: std::sync::mpsc::Receiver<Value>,
}

impl OpenCode {
    fn start(socket: &Path) -> OpenCode {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let mut child = Command::new(std::env::var("DSTREAM_TEST_NODE").unwrap_or("node".into()))
            .arg(root.join("scripts/opencode/test/driver.mjs"))
            .arg(root.join("scripts/opencode/dstream.js"))
            .envs(dstream_tests::client_env(socket))
            .env_remove("DSTREAM_HOOK_FAIL_CLOSED")
            .env_remove("DSTREAM_HOOK_TIMEOUT_MS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("these tests run the OpenCode plugin with Node.js");
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, answers) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in stdout.lines().map_while(Result::ok) {
                if let Ok(v) = dstream_tests::serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        });
        let mut oc = OpenCode {
            child,
            stdin,
            answers,
        };
        assert_eq!(oc.answer()["ready"], true);
        oc
    }

    fn before(&mut self, session: &str, call: &str, command: &str) {
        let cmd = json!({"op": "before",
            "input": {"tool": "bash", "sessionID": session, "callID": call},
            "output": {"args": {"command": command, "description": "test"}}});
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn answer(&mut self) -> Value {
        self.answers
            .recv_timeout(Duration::from_secs(30))
            .expect("the plugin did not answer")
    }
}

impl Drop for OpenCode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_opencode_plugin_waits_for_the_decision_and_applies_it() {
    let mut d = Daemon::start_with(POLICY);
    let mut oc = OpenCode::start(&d.socket());
    let mut c = d.client();

    // Approved with an edited command: the arguments OpenCode runs are the edited ones.
    oc.before("ses_oc", "call_1", "ls");
    let cp = c.pending_in("ses_oc");
    assert_eq!(cp["tool"], "bash");
    assert_eq!(cp["key"], "call_1");
    c.ok(
        "checkpoint.resolve",
        json!({"id": cp["id"], "decision": "approve", "input": {"command": "ls -la"}}),
    );
    let a = oc.answer();
    assert_eq!(a["ok"], true, "{a}");
    assert_eq!(a["output"]["args"], json!({"command": "ls -la"}));

    // Rejected: the plugin throws with the note, and OpenCode refuses the tool.
    oc.before("ses_oc", "call_2", "make deploy");
    let cp = c.pending_in("ses_oc");
    c.ok(
        "checkpoint.resolve",
        json!({"id": cp["id"], "decision": "reject", "note": "not from here"}),
    );
    let a = oc.answer();
    assert_eq!(a["ok"], false, "{a}");
    assert!(
        a["error"].as_str().unwrap().contains("not from here"),
        "{a}"
    );

    // The daemon is killed while the plugin waits; once it is back, the same wait is answered.
    oc.before("ses_oc", "call_3", "cargo test");
    let id = c.pending_in("ses_oc")["id"].clone();
    drop(c);
    d.kill9();
    d.restart();
    let mut c = d.client();
    // Decided once the plugin is back (the daemon counts its connection next to this client's).
    wait_until("the plugin reconnects", || connections(&mut c) == 2);
    c.ok(
        "checkpoint.resolve",
        json!({"id": id, "decision": "approve"}),
    );
    let a = oc.answer();
    assert_eq!(a["ok"], true, "{a}");
    assert_eq!(a["output"]["args"]["command"], "cargo test");
    let events = read_delivered(&mut c, "ses_oc", 3);
    assert_eq!(of_type(&events, "checkpoint.requested").len(), 3);
    assert_eq!(of_type(&events, "checkpoint.delivered").len(), 3);
}

// ---- dstream inbox, driven in tmux ----

#[test]
fn the_inbox_shows_a_waiting_call_and_a_key_decides_it() {
    let d = Daemon::start_with(POLICY);
    let inbox = format!(
        "{} inbox --socket {}",
        daemon_bin().display(),
        d.socket().display()
    );
    let tmux = Tmux::start(&inbox);
    tmux.wait_for("0 pending");

    let hook = spawn_hook(
        &d.socket(),
        &pre_tool_use("inbox-1", "toolu_i1", "echo from-the-inbox"),
    );
    let screen = tmux.wait_for("Bash: echo from-the-inbox");
    assert!(
        screen.contains("inbox-1"),
        "the session is shown:\n{screen}"
    );
    assert!(
        screen.contains("/tmp/project"),
        "the cwd is shown:\n{screen}"
    );
    tmux.keys(&["a"]);
    let printed = hook_output(hook, Duration::from_secs(15));
    assert_eq!(permission(&printed).0, "allow", "{printed}");
    tmux.wait_for("approved by");

    // A note, then a rejection: the agent reads the note.
    let hook = spawn_hook(
        &d.socket(),
        &pre_tool_use("inbox-2", "toolu_i2", "git clean -fd"),
    );
    tmux.wait_for("Bash: git clean -fd");
    tmux.keys(&["n"]);
    tmux.keys(&["-l", "keep the build dir"]);
    tmux.keys(&["Enter"]);
    tmux.keys(&["r"]);
    let printed = hook_output(hook, Duration::from_secs(15));
    let (decision, reason) = permission(&printed);
    assert_eq!(decision, "deny", "{printed}");
    assert!(reason.contains("keep the build dir"), "{reason}");

    let mut c = d.client();
    let approved = c.read_all("inbox-1");
    let approved = of_type(&approved, "checkpoint.approved");
    assert_eq!(
        approved[0]["payload"]["decided_by"],
        format!("user:{}", whoami())
    );
    tmux.keys(&["q"]);
}

#[test]
fn an_sdk_checkpoint_request_is_redacted_before_it_is_stored() {
    let d = Daemon::start();
    let mut c = d.client();
    let secret = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";
    let cp = c.ok(
        "checkpoint.request",
        json!({"session_id": "sdk-secret", "key": "k", "tool": "Bash",
               "input": {"command": format!("ANTHROPIC_API_KEY={secret} ./deploy")}}),
    );
    assert!(!cp.to_string().contains(secret), "{cp}");
    let listed = c.ok("checkpoint.list", json!({"session_id": "sdk-secret"}));
    assert!(!listed.to_string().contains(secret), "{listed}");
    let log = std::fs::read_to_string(d.log_path("sdk-secret")).unwrap();
    assert!(!log.contains(secret), "the secret reached the log: {log}");
    assert!(
        log.contains("./deploy"),
        "the rest of the input is kept: {log}"
    );
}

#[test]
fn a_deny_rule_holds_for_a_simple_command_inside_a_shell_line() {
    let d = Daemon::start_with(
        "[[checkpoints.rules]]\ntool = \"Bash\"\ninput = \"rm -rf *\"\naction = \"deny\"\n",
    );
    let out = hook_output(
        spawn_hook(
            &d.socket(),
            &pre_tool_use("shell-1", "toolu_1", "true && /bin/rm -fr build"),
        ),
        Duration::from_secs(10),
    );
    let (decision, reason) = permission(&out);
    assert_eq!(decision, "deny", "{out}");
    assert!(reason.contains("rules[0]"), "{reason}");
    // A line that cannot be parsed is held to the strictest rule, and says why.
    let out = hook_output(
        spawn_hook(
            &d.socket(),
            &pre_tool_use("shell-1", "toolu_2", "echo 'unterminated"),
        ),
        Duration::from_secs(10),
    );
    let (decision, reason) = permission(&out);
    assert_eq!(decision, "deny", "{out}");
    assert!(reason.contains("could not be parsed"), "{reason}");
}
