//! The relay against the real Durable Streams reference servers (Rust and Node), read back with
//! the official Node client: the remote stream equals the local log, each event once, through
//! server restarts, a `kill -9` of the daemon, connections cut mid-response, a wrong token.

use std::process::Command;
use std::time::Duration;

use dstream_tests::relay::{
    Proxy, ProxyMode, RemoteServer, ServerKind, http, read_stream, wait_for,
};
use dstream_tests::{Daemon, daemon_bin};
use serde_json::{Value, json};

const PREFIX: &str = "t";
const LONG: Duration = Duration::from_secs(120);

fn relay_config(url: &str, extra: &str) -> String {
    format!(
        "[relay]\nurl = \"{url}\"\nprefix = \"{PREFIX}\"\nlinger_ms = 2\nretry_min_ms = 50\nretry_max_ms = 300\n{extra}\n"
    )
}

fn status(d: &Daemon) -> Value {
    d.client().ok("relay.status", json!({}))
}

fn stream_status(d: &Daemon, session: &str) -> Option<Value> {
    status(d)["streams"]
        .as_array()?
        .iter()
        .find(|s| s["session_id"] == session)
        .cloned()
}

/// Waits until the server acknowledged every event of `session`.
fn wait_relayed(d: &Daemon, session: &str) -> Value {
    let local = d.client().read_all(session).len() as u64;
    wait_for(&format!("{session} relayed up to {local}"), LONG, || {
        stream_status(d, session).filter(|s| s["acked_lsn"] == local && s["lag"] == 0)
    })
}

/// The remote stream holds exactly the local log: the same events, in order, each once.
fn assert_remote_equals_local(d: &Daemon, base_url: &str, session: &str) -> bool {
    let local = d.client().read_all(session);
    let remote = read_stream(&format!("{base_url}/{PREFIX}/{session}"));
    let lsns: Vec<u64> = remote
        .messages
        .iter()
        .map(|m| m["lsn"].as_u64().expect("every relayed event has its lsn"))
        .collect();
    let expected: Vec<u64> = (1..=local.len() as u64).collect();
    assert!(
        lsns == expected,
        "remote LSNs are not 1..={} once each: {} events, first duplicate or gap near {:?}",
        local.len(),
        lsns.len(),
        lsns.windows(2).find(|w| w[1] != w[0] + 1)
    );
    assert_eq!(
        remote.messages, local,
        "remote events differ from the local log"
    );
    remote.closed
}

/// Appends `n` small events to `session` through `dstream append` (one streaming client).
fn append_many(d: &Daemon, session: &str, n: usize, tag: &str) {
    let mut buf = String::new();
    for i in 0..n {
        buf.push_str(&format!(
            "{{\"type\":\"tool.output\",\"payload\":{{\"tag\":\"{tag}\",\"i\":{i},\"text\":\"line {i} of the relay test\"}}}}\n"
        ));
    }
    d.append_lines(session, &buf);
}

fn relay_round_trip(kind: ServerKind) {
    let server = RemoteServer::start(kind);
    let d = Daemon::start_with(&relay_config(
        &server.base_url(),
        "close_on_session_end = true",
    ));
    let mut c = d.client();
    for i in 0..20 {
        c.append("a", "user.input", json!({"text": format!("prompt {i}")}));
        c.append("b", "message.chunk", json!({"text": format!("chunk {i}")}));
    }
    c.append("b", "lifecycle.session.ended", json!({"reason": "exit"}));
    wait_relayed(&d, "a");
    wait_relayed(&d, "b");
    assert!(!assert_remote_equals_local(&d, &server.base_url(), "a"));
    // The session ended: its remote stream is closed, so readers know it is complete.
    wait_for("b closed", LONG, || {
        (stream_status(&d, "b")?["state"] == "closed").then_some(())
    });
    assert!(
        assert_remote_equals_local(&d, &server.base_url(), "b"),
        "the ended session's stream is closed"
    );
    // What a person sees: one line per session with its LSNs, lag and state.
    let out = Command::new(daemon_bin())
        .args(["relay", "status", "--socket"])
        .arg(d.socket())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&server.base_url()), "{text}");
    let line = |s: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(s))
            .unwrap_or_else(|| panic!("no line for {s} in:\n{text}"))
            .to_string()
    };
    assert!(line("a").contains("live"), "{text}");
    assert!(line("b").contains("closed"), "{text}");
    let stats = c.ok("stats", json!({}));
    assert_eq!(stats["relay"]["events_sent"], 41, "{stats}");
    assert_eq!(stats["relay"]["lag_events"], 0);
}

#[test]
fn sessions_reach_the_rust_reference_server_once_each_and_ended_ones_are_closed() {
    relay_round_trip(ServerKind::Rust);
}

#[test]
fn sessions_reach_the_node_reference_server_once_each_and_ended_ones_are_closed() {
    relay_round_trip(ServerKind::Node);
}

#[test]
fn a_backlog_from_before_the_relay_was_configured_is_caught_up_from_the_log() {
    let server = RemoteServer::start(ServerKind::Rust);
    let mut d = Daemon::new(Some(""));
    d.restart();
    append_many(&d, "old", 3000, "before");
    d.stop();
    std::fs::write(
        d.config_path().unwrap(),
        relay_config(&server.base_url(), "batch_max_events = 100"),
    )
    .unwrap();
    d.restart();
    let st = wait_relayed(&d, "old");
    assert_eq!(st["local_lsn"], 3000);
    assert_remote_equals_local(&d, &server.base_url(), "old");
    // At most 100 events per POST: the backlog went in many bounded batches.
    assert!(status(&d)["totals"]["batches"].as_u64().unwrap() >= 30);
}

#[test]
fn a_server_stopped_in_the_middle_of_a_relay_gets_everything_once_after_it_returns() {
    let mut server = RemoteServer::start(ServerKind::Rust);
    let d = Daemon::start_with(&relay_config(&server.base_url(), "batch_max_events = 200"));
    append_many(&d, "big", 10_000, "outage");
    wait_for("some of it relayed", LONG, || {
        let acked = stream_status(&d, "big")?["acked_lsn"].as_u64()?;
        (acked > 0).then_some(())
    });
    server.stop();
    // Ingest goes on while the server is down; the relay backs off and says so.
    append_many(&d, "big", 500, "during");
    let st = wait_for("backing off", LONG, || {
        stream_status(&d, "big").filter(|s| s["state"] == "backing_off")
    });
    assert!(st["reason"].as_str().unwrap().contains("connect"), "{st}");
    assert!(st["next_try_in_ms"].as_u64().is_some(), "{st}");
    assert!(st["lag"].as_u64().unwrap() > 0);
    server.start_again();
    wait_relayed(&d, "big");
    assert_remote_equals_local(&d, &server.base_url(), "big");
}

#[test]
fn a_daemon_killed_mid_batch_resends_nothing_twice_after_restart() {
    let server = RemoteServer::start(ServerKind::Rust);
    let mut d = Daemon::start_with(&relay_config(&server.base_url(), "batch_max_events = 50"));
    append_many(&d, "k", 10_000, "kill");
    wait_for("relay under way", LONG, || {
        let acked = stream_status(&d, "k")?["acked_lsn"].as_u64()?;
        (acked > 500).then_some(())
    });
    d.kill9();
    d.restart();
    wait_relayed(&d, "k");
    assert_remote_equals_local(&d, &server.base_url(), "k");
}

#[test]
fn a_restart_resends_the_batch_queued_behind_the_one_in_flight_as_it_was_cut() {
    let server = RemoteServer::start(ServerKind::Rust);
    let mut d = Daemon::new(Some(""));
    d.restart();
    append_many(&d, "q", 300, "queued");
    let local = d.client().read_all("q");
    d.stop();
    // The daemon stopped with batch 0 (LSNs 1..=100) in flight and batch 1 (101..=150, cut
    // shorter than batch_max_events) queued behind it, both already on the server: the
    // ledger still names them, as acks are written lazily.
    let path = format!("/v1/stream/{PREFIX}/q");
    let content = [("content-type", "application/json")];
    let put = http(&server.addr(), "PUT", &path, &content, b"").unwrap();
    assert!(put.status == 201, "PUT answered {}", put.status);
    for (seq, range) in [("0", 0..100), ("1", 100..150)] {
        let body = serde_json::to_vec(&local[range]).unwrap();
        let headers = [
            content[0],
            ("producer-id", "dstream:t"),
            ("producer-epoch", "7"),
            ("producer-seq", seq),
        ];
        let r = http(&server.addr(), "POST", &path, &headers, &body).unwrap();
        assert!(r.status == 200, "POST {seq} answered {}", r.status);
    }
    let ledger = json!({
        "target": format!("{}/{PREFIX}", server.base_url()),
        "created": true,
        "epoch": 7,
        "next_seq": 0,
        "acked_lsn": 0,
        "inflight": {"seq": 0, "first_lsn": 1, "last_lsn": 100},
        "queued": [{"seq": 1, "first_lsn": 101, "last_lsn": 150}],
    });
    std::fs::create_dir_all(d.data_dir().join("relay")).unwrap();
    std::fs::write(d.data_dir().join("relay/q.json"), ledger.to_string()).unwrap();
    std::fs::write(
        d.config_path().unwrap(),
        relay_config(&server.base_url(), "batch_max_events = 100"),
    )
    .unwrap();
    d.restart();
    // Both are answered 204; cutting 101..=200 under seq 1 instead would lose 151..=200.
    wait_relayed(&d, "q");
    assert_remote_equals_local(&d, &server.base_url(), "q");
}

#[test]
fn connections_cut_mid_response_cause_no_duplicate_and_no_gap() {
    let server = RemoteServer::start(ServerKind::Rust);
    let proxy = Proxy::start(
        server.addr(),
        ProxyMode {
            cut_connections: 12,
            required_token: None,
        },
    );
    let d = Daemon::start_with(&relay_config(&proxy.base_url(), "batch_max_events = 100"));
    append_many(&d, "cut", 2000, "cut");
    wait_relayed(&d, "cut");
    assert!(
        proxy.cuts.load(std::sync::atomic::Ordering::Relaxed) >= 12,
        "the proxy cut connections"
    );
    assert!(status(&d)["totals"]["retries"].as_u64().unwrap() >= 1);
    assert_remote_equals_local(&d, &server.base_url(), "cut");
}

#[test]
fn a_wrong_token_is_reported_and_retried_only_after_the_config_changes() {
    use std::sync::atomic::Ordering::Relaxed;
    let server = RemoteServer::start(ServerKind::Rust);
    let proxy = Proxy::start(
        server.addr(),
        ProxyMode {
            cut_connections: 0,
            required_token: Some("right-token".into()),
        },
    );
    let config = |var: &str| relay_config(&proxy.base_url(), &format!("token_env = \"{var}\""));
    let mut d = Daemon::new(Some(&config("DS_TOKEN_OLD")));
    d.set_env("DS_TOKEN_OLD", "wrong-token");
    d.set_env("DS_TOKEN_NEW", "right-token");
    d.restart();
    d.client().append("s", "user.input", json!({"text": "hi"}));
    let st = wait_for("failed with 401", LONG, || {
        stream_status(&d, "s").filter(|s| s["state"] == "failed")
    });
    let reason = st["reason"].as_str().unwrap();
    assert!(
        reason.contains("401") && reason.contains("token_env"),
        "{reason}"
    );
    // The whole relay says so: the credentials are wrong for every stream, and a second
    // session does not knock again.
    let top = status(&d)["error"].as_str().unwrap_or_default().to_string();
    assert!(top.contains("401"), "{top}");
    let knocks = proxy.unauthorized.load(Relaxed);
    d.client()
        .append("s2", "user.input", json!({"text": "another session"}));
    wait_for("s2 failed too", LONG, || {
        stream_status(&d, "s2").filter(|s| s["state"] == "failed")
    });
    assert_eq!(proxy.unauthorized.load(Relaxed), knocks, "s2 sent nothing");
    assert!(
        !d.stderr().contains("wrong-token"),
        "the token never reaches the logs"
    );
    // No retry loop against a server that refuses the credentials.
    let refused = proxy.unauthorized.load(Relaxed);
    std::thread::sleep(Duration::from_millis(800));
    d.client()
        .append("s", "user.input", json!({"text": "still there?"}));
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        proxy.unauthorized.load(Relaxed),
        refused,
        "retried without a config change"
    );
    // The fix: point token_env at the right variable; the watcher reloads the config.
    std::fs::write(d.config_path().unwrap(), config("DS_TOKEN_NEW")).unwrap();
    wait_relayed(&d, "s");
    assert_remote_equals_local(&d, &server.base_url(), "s");
}

#[test]
fn a_token_from_an_owner_only_file_is_sent_like_one_from_a_variable() {
    use std::os::unix::fs::PermissionsExt;
    let server = RemoteServer::start(ServerKind::Rust);
    let proxy = Proxy::start(
        server.addr(),
        ProxyMode {
            cut_connections: 0,
            required_token: Some("file-token".into()),
        },
    );
    let mut d = Daemon::new(Some(""));
    let token = d.dir().join("relay-token");
    std::fs::write(&token, "file-token\n").unwrap();
    // Readable by others: refused, the relay does not start, and status says which file.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(
        d.config_path().unwrap(),
        relay_config(
            &proxy.base_url(),
            &format!("token_file = \"{}\"", token.display()),
        ),
    )
    .unwrap();
    d.restart();
    d.client().append("f", "user.input", json!({"text": "hi"}));
    let error = status(&d)["error"].as_str().unwrap_or_default().to_string();
    assert!(
        error.contains("relay.token_file")
            && error.contains(&token.display().to_string())
            && error.contains("0644"),
        "{error}"
    );
    // Made owner-only and read again on `relay retry`: relayed, with the file's token.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new(daemon_bin())
        .args(["relay", "retry", "--socket"])
        .arg(d.socket())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    wait_relayed(&d, "f");
    assert_remote_equals_local(&d, &server.base_url(), "f");
    assert!(
        !d.stderr().contains("file-token"),
        "the token never reaches the logs"
    );
}

#[test]
fn a_lost_ledger_resyncs_from_the_remote_stream_instead_of_sending_twice() {
    let server = RemoteServer::start(ServerKind::Rust);
    let mut d = Daemon::start_with(&relay_config(&server.base_url(), ""));
    append_many(&d, "l", 300, "first");
    wait_relayed(&d, "l");
    d.stop();
    std::fs::remove_file(d.data_dir().join("relay/l.json")).unwrap();
    d.restart();
    append_many(&d, "l", 200, "second");
    wait_relayed(&d, "l");
    assert_remote_equals_local(&d, &server.base_url(), "l");
    // The remote stream was there already: dstream read it rather than PUT over it.
    let head = http(
        &server.addr(),
        "HEAD",
        &format!("/v1/stream/{PREFIX}/l"),
        &[],
        b"",
    );
    assert_eq!(head.map(|r| r.status).unwrap_or(0), 200);
}

#[test]
fn a_relay_plugin_keeps_events_back_or_changes_them_before_they_leave() {
    let server = RemoteServer::start(ServerKind::Rust);
    let mut d = Daemon::new(Some(&relay_config(&server.base_url(), "")));
    std::fs::create_dir_all(d.plugin_dir()).unwrap();
    std::fs::write(
        d.plugin_dir().join("relay-guard.lua"),
        r#"
local M = { name = "relay-guard", api = 1 }
function M.relay(e)
  if e.type == "note.private" then return nil end
  if e.payload and e.payload.text then
    e.payload.text = string.gsub(e.payload.text, "hunter2", "[hidden]")
  end
  e.lsn = nil -- the relay puts it back: resyncs need it
  return e
end
return M
"#,
    )
    .unwrap();
    d.restart();
    let mut c = d.client();
    c.append("g", "user.input", json!({"text": "the code is hunter2"}));
    c.append("g", "note.private", json!({"text": "for my eyes only"}));
    c.append("g", "user.input", json!({"text": "bye"}));
    wait_relayed(&d, "g");
    let remote = read_stream(&format!("{}/{PREFIX}/g", server.base_url())).messages;
    let lsns: Vec<u64> = remote.iter().map(|m| m["lsn"].as_u64().unwrap()).collect();
    assert_eq!(lsns, [1, 3], "the private note stayed local");
    assert_eq!(remote[0]["payload"]["text"], "the code is [hidden]");
    // Only what leaves is changed: the local log keeps the event as stored.
    assert_eq!(c.read_all("g")[0]["payload"]["text"], "the code is hunter2");
}

#[test]
fn a_stale_ledger_is_fenced_and_resyncs_before_claiming_a_new_epoch() {
    let server = RemoteServer::start(ServerKind::Rust);
    let mut d = Daemon::start_with(&relay_config(&server.base_url(), ""));
    append_many(&d, "f", 100, "one");
    wait_relayed(&d, "f");
    d.stop();
    let ledger = d.data_dir().join("relay/f.json");
    let stale = std::fs::read(&ledger).unwrap();
    // The ledger is lost: the relay resyncs and claims a newer epoch on the server.
    std::fs::remove_file(&ledger).unwrap();
    d.restart();
    append_many(&d, "f", 100, "two");
    wait_relayed(&d, "f");
    d.stop();
    // An old copy of the ledger comes back (a restored backup): its epoch is fenced (403), and
    // the relay must find events 101..200 on the server rather than send them again.
    std::fs::write(&ledger, stale).unwrap();
    d.restart();
    append_many(&d, "f", 100, "three");
    wait_relayed(&d, "f");
    assert!(d.stderr().contains("fenced"), "the 403 path was taken");
    assert_remote_equals_local(&d, &server.base_url(), "f");
}

#[test]
fn a_backlog_over_more_sessions_than_tasks_is_relayed_in_turn() {
    let server = RemoteServer::start(ServerKind::Rust);
    let mut d = Daemon::new(Some(""));
    d.restart();
    // More sessions than the relay runs tasks for (256): the rest wait their turn.
    let sessions: Vec<String> = (0..300).map(|i| format!("many-{i:03}")).collect();
    let mut c = d.client();
    for s in &sessions {
        for i in 0..3 {
            c.append(s, "user.input", json!({"text": format!("{s} {i}")}));
        }
    }
    d.stop();
    std::fs::write(
        d.config_path().unwrap(),
        relay_config(&server.base_url(), ""),
    )
    .unwrap();
    d.restart();
    wait_for("every session relayed", LONG, || {
        let st = status(&d);
        let done = st["streams"]
            .as_array()?
            .iter()
            .filter(|s| s["acked_lsn"] == 3)
            .count();
        (done == sessions.len()).then_some(())
    });
    for s in &sessions {
        let r = http(
            &server.addr(),
            "GET",
            &format!("/v1/stream/{PREFIX}/{s}?offset=-1"),
            &[],
            b"",
        )
        .unwrap();
        let got: Vec<Value> = serde_json::from_slice(&r.body).unwrap();
        let lsns: Vec<u64> = got.iter().map(|m| m["lsn"].as_u64().unwrap()).collect();
        assert_eq!(lsns, [1, 2, 3], "{s}");
    }
    assert_remote_equals_local(&d, &server.base_url(), &sessions[299]);
}

#[test]
fn a_native_relay_filter_keeps_events_back_or_masks_them_in_process_and_isolated() {
    let server = RemoteServer::start(ServerKind::Rust);
    for (mode, extra) in [
        ("in-process", ""),
        (
            "isolated",
            "[plugins.native.relay_guard]\nisolation = \"process\"\n",
        ),
    ] {
        let mut d = Daemon::new(Some(&format!(
            "{extra}\n{}",
            relay_config(&server.base_url(), "")
        )));
        std::fs::create_dir_all(d.plugin_dir()).unwrap();
        dstream_tests::build_c_plugin(
            "tests/native/relay_guard.c",
            &d.plugin_dir().join("relay_guard.so"),
            &[],
        );
        d.restart();
        let mut c = d.client();
        let session = format!("native-{mode}");
        c.append(
            &session,
            "user.input",
            json!({"text": "the code is hunter2"}),
        );
        c.append(
            &session,
            "note.private",
            json!({"text": "for my eyes only"}),
        );
        c.append(&session, "user.input", json!({"text": "bye"}));
        wait_relayed(&d, &session);
        let remote = read_stream(&format!("{}/{PREFIX}/{session}", server.base_url())).messages;
        let lsns: Vec<u64> = remote.iter().map(|m| m["lsn"].as_u64().unwrap()).collect();
        assert_eq!(lsns, [1, 3], "{mode}: the private note stayed local");
        assert_eq!(
            remote[0]["payload"]["text"], "the code is *******",
            "{mode}"
        );
        assert_eq!(
            remote[1],
            c.read_all(&session)[2],
            "{mode}: unchanged when it says nothing"
        );
    }
}

#[test]
fn with_close_on_session_end_off_a_resumed_session_keeps_relaying() {
    let server = RemoteServer::start(ServerKind::Rust);
    let d = Daemon::start_with(&relay_config(
        &server.base_url(),
        "close_on_session_end = false",
    ));
    let mut c = d.client();
    c.append("r", "user.input", json!({"text": "first run"}));
    c.append("r", "lifecycle.session.ended", json!({"reason": "exit"}));
    wait_relayed(&d, "r");
    // `claude --resume`: the same session goes on.
    c.append(
        "r",
        "lifecycle.session.resumed",
        json!({"source": "resume"}),
    );
    c.append("r", "user.input", json!({"text": "second run"}));
    let st = wait_relayed(&d, "r");
    assert_eq!(st["state"], "live", "{st}");
    assert!(
        !assert_remote_equals_local(&d, &server.base_url(), "r"),
        "the stream stays open"
    );
}

#[test]
fn under_fsync_interval_only_synced_events_leave_the_machine() {
    let server = RemoteServer::start(ServerKind::Rust);
    // A long interval: events stay committed but unsynced for a while after the first one
    // (whose lease is synced at once).
    let d = Daemon::start_with(&format!(
        "[store]\nfsync = \"interval\"\nfsync_interval_ms = 1500\n{}",
        relay_config(&server.base_url(), "")
    ));
    let mut c = d.client();
    c.append("iv", "message.chunk", json!({"i": 0}));
    wait_for("the first event relayed", LONG, || {
        stream_status(&d, "iv").filter(|s| s["acked_lsn"].as_u64() >= Some(1))
    });
    for i in 1..30 {
        c.append("iv", "message.chunk", json!({"i": i}));
    }
    // Read the remote first, then the durable LSN (which only grows): a remote stream never
    // holds an event that a power failure could still take from the local log.
    let remote = read_stream(&format!("{}/{PREFIX}/iv", server.base_url()))
        .messages
        .len() as u64;
    let info = c.ok("sessions.get", json!({"session_id": "iv"}));
    let durable = info["durable_lsn"].as_u64().unwrap();
    assert!(
        remote <= durable,
        "the server holds {remote} events, only {durable} are synced: {info}"
    );
    // And once the interval's sync ran, all of them go.
    wait_relayed(&d, "iv");
    assert_remote_equals_local(&d, &server.base_url(), "iv");
}

/// A fork is a session of its own, relayed without waiting for its first append: on a server
/// that has forks (both reference servers do) as a fork of its parent's stream at an offset
/// the server gave for it, so the shared events are not sent again, even when a relay filter
/// kept some of them local.
#[test]
fn a_fork_is_relayed_as_a_remote_fork_of_its_parents_stream() {
    for kind in [ServerKind::Rust, ServerKind::Node] {
        let server = RemoteServer::start(kind);
        let mut d = Daemon::new(Some(&relay_config(&server.base_url(), "")));
        std::fs::create_dir_all(d.plugin_dir()).unwrap();
        std::fs::write(
            d.plugin_dir().join("keep-notes.lua"),
            "local M = { name = \"keep-notes\", api = 1 }\n\
             function M.relay(e) if e.type == \"note.private\" then return nil end return e end\n\
             return M\n",
        )
        .unwrap();
        d.restart();
        let mut c = d.client();
        for i in 0..10 {
            c.append("par", "user.input", json!({"i": i}));
            if i == 2 {
                // Kept local by the relay: the parent's remote stream has fewer messages
                // than LSNs.
                c.append("par", "note.private", json!({}));
            }
            if i == 5 {
                // A batch ends at the fork point (LSN 7): the fork can start right there.
                wait_relayed(&d, "par");
            }
        }
        wait_relayed(&d, "par");
        c.ok(
            "fork",
            json!({"session_id": "par", "at_lsn": 7, "new_session_id": "kid"}),
        );
        let st = wait_relayed(&d, "kid");
        eprintln!(
            "DEBUG {:?}",
            read_stream(&format!("{}/{PREFIX}/kid", server.base_url()))
                .messages
                .iter()
                .map(|m| m["lsn"].clone())
                .collect::<Vec<_>>()
        );
        assert_eq!(st["acked_lsn"], 7, "{kind:?}: {st}");
        assert_eq!(
            st["bytes_sent"], 0,
            "{kind:?}: the shared events were not sent again: {st}"
        );
        let base = server.base_url();
        let kid = read_stream(&format!("{base}/{PREFIX}/kid"));
        let lsns: Vec<u64> = kid
            .messages
            .iter()
            .map(|m| m["lsn"].as_u64().unwrap())
            .collect();
        assert_eq!(
            lsns,
            [1, 2, 3, 5, 6, 7],
            "{kind:?}: the parent's messages up to the fork"
        );
        c.append("kid", "user.input", json!({"own": true}));
        wait_relayed(&d, "kid");
        let kid = read_stream(&format!("{base}/{PREFIX}/kid"));
        let last = kid.messages.last().unwrap();
        assert_eq!(
            (&last["lsn"], &last["payload"]["own"]),
            (&json!(8), &json!(true)),
            "{kind:?}: then its own"
        );
        assert_eq!(kid.messages.len(), 7, "{kind:?}");
        let par = read_stream(&format!("{base}/{PREFIX}/par"));
        assert_eq!(par.messages.len(), 10, "{kind:?}: the parent is untouched");

        // A fork point inside a batch: the fork starts at the last offset before it and
        // sends the rest itself.
        c.ok(
            "fork",
            json!({"session_id": "par", "at_lsn": 10, "new_session_id": "kid2"}),
        );
        wait_relayed(&d, "kid2");
        let kid2 = read_stream(&format!("{base}/{PREFIX}/kid2"));
        let lsns: Vec<u64> = kid2
            .messages
            .iter()
            .map(|m| m["lsn"].as_u64().unwrap())
            .collect();
        assert_eq!(lsns, [1, 2, 3, 5, 6, 7, 8, 9, 10], "{kind:?}");
    }
}

/// A fork of a parent whose stream the server does not hold (the parent is not relayed) goes
/// as a full stream of its own.
#[test]
fn a_fork_of_an_unrelayed_parent_is_relayed_in_full() {
    let server = RemoteServer::start(ServerKind::Rust);
    let extra = "sessions = \"k*\"\n";
    let d = Daemon::start_with(&relay_config(&server.base_url(), extra));
    let mut c = d.client();
    for i in 0..10 {
        c.append("par", "user.input", json!({"i": i}));
    }
    c.ok(
        "fork",
        json!({"session_id": "par", "at_lsn": 6, "new_session_id": "kid"}),
    );
    let st = wait_relayed(&d, "kid");
    assert_eq!(st["acked_lsn"], 6, "{st}");
    assert!(st["bytes_sent"].as_u64().unwrap() > 0, "{st}");
    assert_remote_equals_local(&d, &server.base_url(), "kid");
}

/// Retention keeps a session whose tail the remote stream does not hold yet, and deletes
/// nothing remote when it deletes a relayed one.
#[test]
fn retention_keeps_an_unrelayed_tail_and_deletes_nothing_remote() {
    let mut server = RemoteServer::start(ServerKind::Rust);
    let d = Daemon::start_with(&relay_config(
        &server.base_url(),
        "[retention]\ndelete_after = \"1s\"",
    ));
    let mut c = d.client();
    c.append("sent", "user.input", json!({}));
    wait_relayed(&d, "sent");
    server.stop();
    c.append("held", "user.input", json!({}));
    std::thread::sleep(Duration::from_millis(1500));
    let r = c.ok("gc", json!({}));
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["session_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&r["deleted"]), ["sent"], "{r}");
    assert_eq!(ids(&r["kept"]), ["held"], "{r}");
    assert!(
        r["kept"][0]["kept_because"]
            .as_str()
            .unwrap()
            .contains("not relayed"),
        "{r}"
    );
    server.start_again();
    let remote = read_stream(&format!("{}/{PREFIX}/sent", server.base_url()));
    assert_eq!(remote.messages.len(), 1, "the remote stream is untouched");
}

/// A session archived by retention closes its remote stream, and announces (in its last event
/// there) the stream it continues in; resumed, it goes on in that stream, from the next LSN.
#[test]
fn an_archived_session_closes_its_stream_and_goes_on_in_the_one_it_announced() {
    let server = RemoteServer::start(ServerKind::Rust);
    let config = relay_config(&server.base_url(), "") + "[retention]\ncompress_after = \"1s\"\n";
    let d = Daemon::start_with(&config);
    let mut c = d.client();
    for i in 0..5 {
        c.append("arch", "message.chunk", json!({"i": i}));
    }
    c.append("arch", "lifecycle.session.ended", json!({}));
    wait_for("the archived session's stream to close", LONG, || {
        stream_status(&d, "arch").filter(|s| s["state"] == "closed")
    });
    let base = server.base_url();
    let first = read_stream(&format!("{base}/{PREFIX}/arch"));
    assert!(first.closed, "closed once archived");
    let last = first.messages.last().unwrap();
    assert_eq!(last["type"], "lifecycle.session.archived", "{last}");
    assert_eq!(last["payload"]["continues_in"], "arch~1");
    assert_eq!(first.messages.len(), 7);

    // Resumed: the new events go to the announced stream, from the next LSN on.
    for i in 0..3 {
        c.append("arch", "message.chunk", json!({"again": i}));
    }
    wait_for("the resumed session relayed", LONG, || {
        stream_status(&d, "arch").filter(|s| s["acked_lsn"] == 10 && s["lag"] == 0)
    });
    let next = read_stream(&format!("{base}/{PREFIX}/arch~1"));
    let lsns: Vec<u64> = next
        .messages
        .iter()
        .map(|m| m["lsn"].as_u64().unwrap())
        .collect();
    assert_eq!(lsns, vec![8, 9, 10]);
    assert!(!next.closed);
    assert_eq!(
        read_stream(&format!("{base}/{PREFIX}/arch")).messages.len(),
        7,
        "the old one stays as it was"
    );
    assert_eq!(c.read_all("arch").len(), 10);
}
