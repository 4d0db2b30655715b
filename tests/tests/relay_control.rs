//! Remote approvals and remote stops through the relay's control stream on the real Rust
//! reference server, signed by `scripts/sign-decision.mjs`: a signed approval reaches a waiting
//! `dstream hook`; unsigned, mis-signed, replayed, late and foreign messages are refused and
//! recorded; a signed abort rejects what is pending and blocks the next tool call.
#![cfg(unix)]

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use dstream_tests::relay::{RemoteServer, ServerKind, http, read_stream, wait_for};
use dstream_tests::{Client, Daemon, spawn_hook, wait_child};
use serde_json::{Value, json};

const KEY: &str = "correct horse battery staple";
const LONG: Duration = Duration::from_secs(60);

fn daemon(server: &RemoteServer, policy: &str) -> Daemon {
    let config = format!(
        "{policy}\n[relay]\nurl = \"{}\"\nprefix = \"m\"\nlinger_ms = 2\nretry_min_ms = 50\nretry_max_ms = 300\napproval_key_env = \"DS_APPROVAL_KEY\"\napproval_key_id = \"phone\"\n",
        server.base_url()
    );
    let mut d = Daemon::new(Some(&config));
    d.set_env("DS_APPROVAL_KEY", KEY);
    d.restart();
    d
}

fn control_url(server: &RemoteServer, session: &str) -> String {
    format!("{}/m/{session}.control", server.base_url())
}

/// Waits until the relay has created the session's control stream (it follows it from then on).
fn wait_control_stream(server: &RemoteServer, session: &str) {
    wait_for("the control stream", LONG, || {
        let r = http(
            &server.addr(),
            "HEAD",
            &format!("/v1/stream/m/{session}.control"),
            &[],
            b"",
        )
        .ok()?;
        (r.status == 200).then_some(())
    });
}

/// `scripts/sign-decision.mjs` with `args`, posting to the control stream when `post`.
fn sign(args: &[&str], key: &str, post: Option<&str>) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/sign-decision.mjs");
    let mut cmd = Command::new("node");
    cmd.arg(script).args(args).env("DSTREAM_APPROVAL_KEY", key);
    if let Some(url) = post {
        cmd.args(["--post", url]);
    }
    let out = cmd.output().expect("run node");
    assert!(
        out.status.success(),
        "sign-decision.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("sign-decision.mjs prints the message")
}

fn post_raw(server: &RemoteServer, session: &str, body: &Value) {
    let r = http(
        &server.addr(),
        "POST",
        &format!("/v1/stream/m/{session}.control"),
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
    .unwrap();
    assert!(r.status < 300, "POST to the control stream: {}", r.status);
}

fn events_of(c: &mut Client, session: &str, ty: &str) -> Vec<Value> {
    c.read_all(session)
        .into_iter()
        .filter(|e| e["type"] == ty)
        .collect()
}

fn pre_tool_use(session: &str, call: &str, command: &str) -> Value {
    dstream_tests::claude_pre_tool_use(session, call, command)
}

/// What the hook printed (`Value::Null` for nothing) once it exited.
fn hook_output(mut child: Child) -> Value {
    let status = wait_child(&mut child, LONG).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("the hook did not exit")
    });
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text.trim()).unwrap_or_else(|_| panic!("hook printed {text:?}"))
}

fn pending_in(c: &mut Client, session: &str) -> Value {
    wait_for("a pending checkpoint", LONG, || {
        let list = c.ok(
            "checkpoint.list",
            json!({"state": "pending", "session_id": session}),
        );
        list["checkpoints"].as_array()?.first().cloned()
    })
}

#[test]
fn a_signed_remote_approval_reaches_a_waiting_hook_and_the_tool_runs() {
    let server = RemoteServer::start(ServerKind::Rust);
    let d = daemon(
        &server,
        "[[checkpoints.rules]]\ntool = \"Bash\"\naction = \"ask\"\n",
    );
    let hook = spawn_hook(&d.socket(), &pre_tool_use("r1", "call-1", "cargo test"));
    let mut c = d.client();
    let pending = pending_in(&mut c, "r1");
    let id = pending["id"].as_str().unwrap().to_string();
    // The relayed stream carries the request, so the remote client knows what to decide.
    wait_for("the request on the remote stream", LONG, || {
        read_stream(&format!("{}/m/r1", server.base_url()))
            .messages
            .iter()
            .any(|m| m["type"] == "checkpoint.requested" && m["payload"]["checkpoint_id"] == id)
            .then_some(())
    });
    wait_control_stream(&server, "r1");
    sign(
        &[
            "--session",
            "r1",
            "--approve",
            &id,
            "--key-id",
            "phone",
            "--reason",
            "ok from my phone",
        ],
        KEY,
        Some(&control_url(&server, "r1")),
    );
    let out = hook_output(hook);
    assert_eq!(
        out["hookSpecificOutput"]["permissionDecision"], "allow",
        "{out}"
    );
    let approved = events_of(&mut c, "r1", "checkpoint.approved");
    assert_eq!(approved.len(), 1, "{approved:?}");
    assert_eq!(approved[0]["payload"]["decided_by"], "remote:phone");
    assert_eq!(approved[0]["payload"]["note"], "ok from my phone");
}

#[test]
fn unsigned_mis_signed_replayed_late_unknown_and_foreign_decisions_are_refused_and_recorded() {
    let server = RemoteServer::start(ServerKind::Rust);
    let d = daemon(&server, "");
    let mut c = d.client();
    let ck = c.ok(
        "checkpoint.request",
        json!({"session_id": "r2", "key": "deploy", "summary": "deploy to prod"}),
    );
    let id = ck["id"].as_str().unwrap().to_string();
    let other = c.ok(
        "checkpoint.request",
        json!({"session_id": "r2-other", "key": "k", "summary": "elsewhere"}),
    );
    let other_id = other["id"].as_str().unwrap().to_string();
    wait_control_stream(&server, "r2");
    let url = control_url(&server, "r2");
    let approve = |extra: &[&str], key: &str| {
        let mut args = vec!["--session", "r2", "--approve", &id, "--key-id", "phone"];
        args.extend_from_slice(extra);
        sign(&args, key, None)
    };

    // 1. Unsigned.
    let mut unsigned = approve(&[], KEY);
    unsigned.as_object_mut().unwrap().remove("sig");
    post_raw(&server, "r2", &unsigned);
    // 2. Signed with another key.
    post_raw(&server, "r2", &approve(&[], "not the key"));
    // 3. Signed, but the decision was altered in transit.
    let mut altered = approve(&[], KEY);
    altered["decision"] = json!("reject");
    post_raw(&server, "r2", &altered);
    // 4. Signed long ago.
    let old = (dstream_tests::now_ms() - 3_600_000).to_string();
    post_raw(&server, "r2", &approve(&["--ts", &old], KEY));
    // 5. Signed for a checkpoint of another session.
    post_raw(
        &server,
        "r2",
        &sign(
            &[
                "--session",
                "r2",
                "--approve",
                &other_id,
                "--key-id",
                "phone",
            ],
            KEY,
            None,
        ),
    );
    // 5b. Signed, for a checkpoint nobody opened.
    post_raw(
        &server,
        "r2",
        &sign(
            &[
                "--session",
                "r2",
                "--approve",
                "ck_000000000000000000000000",
                "--key-id",
                "phone",
            ],
            KEY,
            None,
        ),
    );
    // 6. Valid: applied.
    let good = approve(&["--nonce", "once-only"], KEY);
    post_raw(&server, "r2", &good);
    // 7. The same message again: a replay.
    post_raw(&server, "r2", &good);
    // 8. A fresh, valid reject after the approval: too late.
    sign(
        &["--session", "r2", "--reject", &id, "--key-id", "phone"],
        KEY,
        Some(&url),
    );

    // Refusals are recorded in bulk (a count and the reasons, never the messages).
    let reasons = wait_for("eight refusals recorded", LONG, || {
        let records = events_of(&mut c, "r2", "relay.control_rejected");
        let total: u64 = records
            .iter()
            .map(|e| e["payload"]["count"].as_u64().unwrap())
            .sum();
        (total >= 8).then_some(records)
    });
    let mut counted = Vec::new();
    for record in &reasons {
        assert!(
            !record["payload"].to_string().contains("\"sig\""),
            "a refused message is not copied into the log: {record}"
        );
        for r in record["payload"]["reasons"].as_array().unwrap() {
            counted.push((
                r["reason"].as_str().unwrap().to_string(),
                r["count"].as_u64().unwrap(),
            ));
        }
    }
    let expect = [
        ("unsigned", 1),
        ("does not verify", 2),
        ("approval_max_age_ms", 1),
        ("another session", 1),
        ("unknown checkpoint", 1),
        ("replayed", 1),
        ("too late", 1),
    ];
    for (want, n) in expect {
        let got: u64 = counted
            .iter()
            .filter(|(r, _)| r.contains(want))
            .map(|(_, k)| k)
            .sum();
        assert_eq!(got, n, "{want:?} refused {got} times; all: {counted:#?}");
    }
    assert_eq!(
        counted.iter().map(|(_, k)| k).sum::<u64>(),
        8,
        "{counted:#?}"
    );
    // Only the valid one was applied, once; the other session's checkpoint is untouched.
    let approved = events_of(&mut c, "r2", "checkpoint.approved");
    assert_eq!(approved.len(), 1);
    assert_eq!(approved[0]["payload"]["decided_by"], "remote:phone");
    let list = c.ok("checkpoint.list", json!({"session_id": "r2-other"}));
    assert_eq!(list["checkpoints"][0]["state"], "pending", "{list}");
}

#[test]
fn a_signed_abort_rejects_what_is_pending_and_blocks_the_next_tool_call() {
    let server = RemoteServer::start(ServerKind::Rust);
    let mut d = daemon(&server, "");
    let mut c = d.client();
    let ck = c.ok(
        "checkpoint.request",
        json!({"session_id": "r3", "key": "k", "summary": "held"}),
    );
    let id = ck["id"].as_str().unwrap().to_string();
    wait_control_stream(&server, "r3");
    sign(
        &[
            "--session",
            "r3",
            "--abort",
            "--key-id",
            "phone",
            "--reason",
            "stop everything",
        ],
        KEY,
        Some(&control_url(&server, "r3")),
    );
    let aborted = wait_for("agent.aborted", LONG, || {
        events_of(&mut c, "r3", "agent.aborted").into_iter().next()
    });
    assert_eq!(aborted["payload"]["decided_by"], "remote:phone");
    assert_eq!(aborted["payload"]["rejected_checkpoints"], json!([id]));
    let rejected = events_of(&mut c, "r3", "checkpoint.rejected");
    assert_eq!(rejected[0]["payload"]["note"], "stopped remotely");

    // The stop survives a restart, and the next tool call is denied.
    d.stop();
    d.restart();
    let out = hook_output(spawn_hook(&d.socket(), &pre_tool_use("r3", "c2", "ls")));
    assert_eq!(
        out["hookSpecificOutput"]["permissionDecision"], "deny",
        "{out}"
    );
    let why = out["hookSpecificOutput"]["permissionDecisionReason"]
        .as_str()
        .unwrap();
    assert!(
        why.contains("stopped remotely") && why.contains("stop everything"),
        "{why}"
    );
    // And Claude Code ends its turn there.
    assert_eq!(out["continue"], false, "{out}");
    assert!(
        out["stopReason"]
            .as_str()
            .unwrap()
            .contains("stop everything")
    );

    // A new prompt from the person lifts it: calls run as policy says again.
    let prompt = json!({
        "session_id": "r3", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp/project",
        "hook_event_name": "UserPromptSubmit", "prompt": "carry on",
    });
    hook_output(spawn_hook(&d.socket(), &prompt));
    let out = hook_output(spawn_hook(&d.socket(), &pre_tool_use("r3", "c3", "ls")));
    assert_eq!(out, Value::Null, "no decision: the agent goes on as usual");
}

/// The real Claude Code (offline, against the mock model): its Bash call waits on a checkpoint;
/// a signed approval from the control stream lets it run, and a signed abort in another
/// session rejects its waiting call, which then never runs.
#[test]
fn claude_code_runs_a_remotely_approved_call_and_not_a_remotely_stopped_one() {
    use dstream_tests::agents::{self, AgentEnv};
    let paths = agents::ensure_installed();
    let server = RemoteServer::start(ServerKind::Rust);
    let d = daemon(
        &server,
        "[[checkpoints.rules]]\ntool = \"Bash\"\naction = \"ask\"\ntimeout_ms = 120000\n",
    );
    let mut c = d.client();
    for (case, approve) in [("approved", true), ("stopped", false)] {
        let probe = AgentEnv::new();
        let marker = probe.project.join(format!("marker-{case}"));
        let command = format!("touch {}", marker.display());
        let run = agents::spawn_claude_bash(&paths, &probe, &d.socket(), &command, "Done.");
        let pending = wait_for(
            "Claude Code's call to wait",
            Duration::from_secs(90),
            || {
                let list = c.ok("checkpoint.list", json!({"state": "pending"}));
                list["checkpoints"].as_array()?.first().cloned()
            },
        );
        let (id, session) = (
            pending["id"].as_str().unwrap().to_string(),
            pending["session_id"].as_str().unwrap().to_string(),
        );
        assert!(!marker.exists(), "the call ran before anyone decided");
        wait_control_stream(&server, &session);
        let url = control_url(&server, &session);
        if approve {
            sign(
                &["--session", &session, "--approve", &id, "--key-id", "phone"],
                KEY,
                Some(&url),
            );
        } else {
            sign(
                &[
                    "--session",
                    &session,
                    "--abort",
                    "--key-id",
                    "phone",
                    "--reason",
                    "enough",
                ],
                KEY,
                Some(&url),
            );
        }
        let out = run.join().unwrap();
        out.assert_success(&format!("claude run, case {case}"));
        assert_eq!(
            marker.exists(),
            approve,
            "case {case}: ran = {}",
            marker.exists()
        );
        let decided = c.ok("checkpoint.list", json!({"session_id": session}));
        let decision = &decided["checkpoints"][0]["decision"];
        assert_eq!(decision["decided_by"], "remote:phone", "{decided}");
        if !approve {
            assert_eq!(decision["note"], "stopped remotely", "{decided}");
            assert_eq!(events_of(&mut c, &session, "agent.aborted").len(), 1);
        }
    }
}
