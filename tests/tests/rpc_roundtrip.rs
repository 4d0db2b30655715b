//! Round trips of every method against the real daemon.
#![cfg(unix)]

use std::collections::BTreeSet;
use std::time::Duration;

use dstream_tests::serde_json::{Value, json};
use dstream_tests::{Daemon, assert_contiguous, codes, is_ulid, lsn_of, now_ms};

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn hello_reports_server_protocol_config_and_peer_credentials() {
    let d = Daemon::start_with(
        "[store]\nfsync = \"interval\"\nfsync_interval_ms = 20\n[daemon]\nmax_frame_bytes = 1048576\n",
    );
    let mut c = d.client();
    let h = c.ok("hello", json!({}));
    assert_eq!(h["server"], "dstream", "hello: {h}");
    assert_eq!(h["protocol"], 1, "hello: {h}");
    assert!(
        h["version"].as_str().is_some_and(|v| !v.is_empty()),
        "hello.version: {h}"
    );
    assert_eq!(
        h["max_frame_bytes"], 1048576,
        "hello.max_frame_bytes follows the config: {h}"
    );
    assert_eq!(
        h["fsync"], "interval",
        "hello.fsync follows the config: {h}"
    );
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    assert_eq!(h["peer"]["uid"], uid, "peer uid: {h}");
    assert_eq!(h["peer"]["gid"], gid, "peer gid: {h}");
    assert_eq!(h["peer"]["pid"], std::process::id(), "peer pid: {h}");
}

#[test]
fn hello_defaults_without_config() {
    let d = Daemon::start();
    let h = d.client().ok("hello", json!({}));
    assert_eq!(
        h["max_frame_bytes"],
        16 * 1024 * 1024,
        "default max frame: {h}"
    );
    assert_eq!(h["fsync"], "always", "default fsync policy: {h}");
}

#[test]
fn append_and_read_round_trip() {
    let d = Daemon::start();
    let mut c = d.client();
    let before = now_ms();

    // Minimal event: only a type.
    let r1 = c.ok(
        "append",
        json!({"session_id": "s1", "event": {"type": "user.input"}}),
    );
    assert_eq!(r1["lsn"], 1, "{r1}");
    // Every optional field set.
    let full = json!({
        "type": "execution.tool_use",
        "actor": "claude-code",
        "payload": {"tool": "Bash", "input": {"command": "ls"}, "n": [1, 2.5, null, true], "u": "é✓"},
        "stream_id": "root-1",
        "causation_id": "cause-1",
        "correlation_id": "turn-1",
        "metadata": {"hook": "PreToolUse"}
    });
    let r2 = c.ok("append", json!({"session_id": "s1", "event": full}));
    assert_eq!(r2["lsn"], 2, "{r2}");
    let mut ids = vec![
        r1["id"].as_str().unwrap().to_string(),
        r2["id"].as_str().unwrap().to_string(),
    ];
    for i in 3..=10u64 {
        let (lsn, id) = c.append("s1", "message.chunk", json!({"i": i}));
        assert_eq!(lsn, i);
        ids.push(id);
    }
    let after = now_ms();
    for id in &ids {
        assert!(is_ulid(id), "id {id:?} is not a 26-char ULID");
    }
    assert_eq!(
        ids.iter().collect::<BTreeSet<_>>().len(),
        ids.len(),
        "ids are unique: {ids:?}"
    );

    // Another session has its own LSN sequence.
    assert_eq!(c.append("s2", "user.input", json!({})).0, 1);

    // Read everything (default from_lsn = 1).
    let r = c.ok("read", json!({"session_id": "s1"}));
    let evs = r["events"].as_array().unwrap().clone();
    assert_eq!(evs.len(), 10, "{r}");
    assert_contiguous(&evs, 1, "read s1");
    assert_eq!(r["next_lsn"], 11, "{r}");
    assert_eq!(r["up_to_date"], true, "{r}");
    for (ev, id) in evs.iter().zip(&ids) {
        assert_eq!(ev["id"], json!(id), "{ev}");
        assert_eq!(ev["session_id"], "s1", "{ev}");
        let ts = ev["timestamp"]
            .as_u64()
            .unwrap_or_else(|| panic!("timestamp: {ev}"));
        assert!(
            before <= ts && ts <= after + 1,
            "timestamp {ts} not within [{before}, {after}]"
        );
        assert!(
            ev.get("payload").is_some(),
            "payload is always present: {ev}"
        );
    }
    // Defaults: stream_id = session_id; optional fields absent when not set.
    assert_eq!(evs[0]["type"], "user.input");
    assert_eq!(
        evs[0]["stream_id"], "s1",
        "stream_id defaults to session_id: {}",
        evs[0]
    );
    for k in ["actor", "causation_id", "correlation_id", "metadata"] {
        assert!(
            evs[0].get(k).is_none_or(Value::is_null),
            "{k} must not be invented: {}",
            evs[0]
        );
    }
    // All the given fields come back as given.
    for k in [
        "type",
        "actor",
        "payload",
        "stream_id",
        "causation_id",
        "correlation_id",
        "metadata",
    ] {
        assert_eq!(evs[1][k], full[k], "field {k} of {}", evs[1]);
    }
    // Payloads come back unchanged.
    assert_eq!(evs[5]["payload"], json!({"i": 6}));

    // from_lsn + limit + next_lsn + up_to_date paging.
    let p = c.ok(
        "read",
        json!({"session_id": "s1", "from_lsn": 4, "limit": 3}),
    );
    assert_contiguous(p["events"].as_array().unwrap(), 4, "read from 4 limit 3");
    assert_eq!(p["events"].as_array().unwrap().len(), 3, "{p}");
    assert_eq!(p["next_lsn"], 7, "{p}");
    assert_eq!(p["up_to_date"], false, "{p}");
    let p = c.ok(
        "read",
        json!({"session_id": "s1", "from_lsn": 7, "limit": 100}),
    );
    assert_contiguous(p["events"].as_array().unwrap(), 7, "read from 7");
    assert_eq!(p["events"].as_array().unwrap().len(), 4, "{p}");
    assert_eq!(p["next_lsn"], 11, "{p}");
    assert_eq!(p["up_to_date"], true, "{p}");
    // Reading at the end: nothing, up to date.
    let p = c.ok("read", json!({"session_id": "s1", "from_lsn": 11}));
    assert_eq!(p["events"], json!([]), "{p}");
    assert_eq!(p["next_lsn"], 11, "{p}");
    assert_eq!(p["up_to_date"], true, "{p}");
    // limit exactly reaching the end.
    let p = c.ok(
        "read",
        json!({"session_id": "s1", "from_lsn": 9, "limit": 2}),
    );
    assert_contiguous(p["events"].as_array().unwrap(), 9, "read from 9 limit 2");
    assert_eq!(p["next_lsn"], 11, "{p}");

    // Unknown session.
    let e = c.err("read", json!({"session_id": "nope"}));
    assert_eq!(e.code, codes::SESSION_NOT_FOUND, "{e}");

    // A second connection sees the same data.
    let mut c2 = d.client();
    assert_eq!(c2.read_all("s1"), evs);
}

#[test]
fn pipelined_appends_get_lsns_in_send_order() {
    let d = Daemon::start();
    let mut c = d.client();
    let ids: Vec<u64> = (0..50)
        .map(|i| {
            c.send(
                "append",
                json!({"session_id": "p", "event": {"type": "t", "payload": {"i": i}}}),
            )
        })
        .collect();
    // Replies may be read in any order; each carries its own id.
    for (i, id) in ids.iter().enumerate().rev() {
        let r = c
            .wait_response(*id)
            .unwrap_or_else(|e| panic!("append {i}: {e}"));
        assert_eq!(r["lsn"], i as u64 + 1, "request #{i}: {r}");
    }
    let evs = c.read_all("p");
    for (i, ev) in evs.iter().enumerate() {
        assert_eq!(ev["payload"]["i"], i, "{ev}");
    }
}

#[test]
fn subscribe_replays_catches_up_streams_live_and_unsubscribes() {
    let d = Daemon::start_with("[subscriptions]\nheartbeat_ms = 200\n");
    let mut w = d.client();
    let mut s = d.client();
    for i in 1..=3 {
        w.append("sub", "t", json!({"i": i}));
    }

    let r = s.ok("subscribe", json!({"session_id": "sub", "from_lsn": 2}));
    let sub = r["subscription"]
        .as_str()
        .unwrap_or_else(|| panic!("subscribe result: {r}"))
        .to_string();

    let n = next_non_heartbeat(&mut s);
    assert_eq!(n["method"], "event", "{n}");
    assert_eq!(n["params"]["subscription"], sub.as_str(), "{n}");
    assert_eq!(n["params"]["event"]["lsn"], 2, "{n}");
    assert_eq!(n["params"]["event"]["payload"], json!({"i": 2}), "{n}");
    let n = next_non_heartbeat(&mut s);
    assert_eq!(
        (n["method"].as_str(), lsn_of(&n["params"]["event"])),
        (Some("event"), 3),
        "{n}"
    );
    let n = next_non_heartbeat(&mut s);
    assert_eq!(n["method"], "caught_up", "{n}");
    assert_eq!(n["params"]["lsn"], 3, "{n}");
    assert_eq!(n["params"]["subscription"], sub.as_str(), "{n}");

    // Live.
    let (lsn4, id4) = w.append("sub", "t", json!({"i": 4}));
    let n = next_non_heartbeat(&mut s);
    assert_eq!(n["method"], "event", "{n}");
    assert_eq!(n["params"]["event"]["lsn"], lsn4, "{n}");
    assert_eq!(n["params"]["event"]["id"], id4.as_str(), "{n}");
    // The live event equals what read returns.
    let stored = w.ok(
        "read",
        json!({"session_id": "sub", "from_lsn": 4, "limit": 1}),
    );
    assert_eq!(n["params"]["event"], stored["events"][0]);

    // A heartbeat arrives while idle, carrying the last LSN.
    let hb = s
        .next_notification(WAIT)
        .expect("a heartbeat within 10 s (heartbeat_ms = 200)");
    assert_eq!(
        hb["method"], "heartbeat",
        "only heartbeats while idle: {hb}"
    );
    assert_eq!(hb["params"]["subscription"], sub.as_str(), "{hb}");
    assert_eq!(hb["params"]["lsn"], 4, "{hb}");

    // Unsubscribe: no more traffic for that subscription.
    s.ok("unsubscribe", json!({"subscription": sub}));
    let leftovers = s.drain_buffered_notifications();
    w.append("sub", "t", json!({"i": 5}));
    w.append("sub", "t", json!({"i": 6}));
    // Barrier: a new subscription on the same connection from lsn 6.
    let r = s.ok("subscribe", json!({"session_id": "sub", "from_lsn": 6}));
    let sub2 = r["subscription"].as_str().unwrap().to_string();
    assert_ne!(sub2, sub, "a new subscription gets a new id");
    let mut got = Vec::new();
    loop {
        let n = s
            .next_notification(WAIT)
            .expect("replay of the second subscription");
        assert_ne!(
            n["params"]["subscription"],
            sub.as_str(),
            "notification for an unsubscribed subscription: {n}"
        );
        if n["method"] == "caught_up" {
            assert_eq!(n["params"]["lsn"], 6, "{n}");
            break;
        }
        if n["method"] == "event" {
            got.push(lsn_of(&n["params"]["event"]));
        }
    }
    assert_eq!(got, vec![6]);
    for n in leftovers {
        assert!(
            n["method"] == "heartbeat",
            "only heartbeats may have been in flight: {n}"
        );
    }
}

fn next_non_heartbeat(c: &mut dstream_tests::Client) -> Value {
    loop {
        let n = c.next_notification(WAIT).expect("a notification");
        if n["method"] != "heartbeat" {
            return n;
        }
    }
}

#[test]
fn subscribe_to_a_session_that_does_not_exist_yet() {
    let d = Daemon::start();
    let mut s = d.client();
    let r = s.ok("subscribe", json!({"session_id": "future", "from_lsn": 1}));
    let sub = r["subscription"].as_str().unwrap().to_string();
    let n = next_non_heartbeat(&mut s);
    assert_eq!(n["method"], "caught_up", "{n}");
    assert_eq!(n["params"]["lsn"], 0, "{n}");
    assert_eq!(n["params"]["subscription"], sub.as_str());

    let mut w = d.client();
    let (lsn, id) = w.append("future", "first", json!({}));
    assert_eq!(lsn, 1);
    let n = next_non_heartbeat(&mut s);
    assert_eq!(n["method"], "event", "{n}");
    assert_eq!(n["params"]["event"]["lsn"], 1, "{n}");
    assert_eq!(n["params"]["event"]["id"], id.as_str(), "{n}");
}

#[test]
fn sessions_list_and_get() {
    let d = Daemon::start();
    let mut c = d.client();
    assert_eq!(
        c.ok("sessions.list", json!({}))["sessions"],
        json!([]),
        "fresh daemon has no sessions"
    );

    let t0 = now_ms();
    for i in 0..3 {
        c.append("alpha", "t", json!({"i": i}));
    }
    c.append_event("beta", json!({"type": "t", "stream_id": "alpha"}));
    let t1 = now_ms();

    let list = c.ok("sessions.list", json!({}));
    let sessions = list["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(sessions.len(), 2, "{list}");
    let names: BTreeSet<&str> = sessions
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["alpha", "beta"]));

    let alpha_events = c.read_all("alpha");
    for s in sessions {
        let name = s["session_id"].as_str().unwrap();
        let got = c.ok("sessions.get", json!({"session_id": name}));
        assert_eq!(&got, s, "sessions.get agrees with sessions.list");
        let first = s["first_ts"].as_u64().unwrap();
        let last = s["last_ts"].as_u64().unwrap();
        assert!(
            t0 <= first && first <= last && last <= t1 + 1,
            "timestamps of {s}"
        );
        let file_len = std::fs::metadata(d.log_path(name)).unwrap().len();
        assert_eq!(s["bytes"], file_len, "bytes = size of the log file: {s}");
    }
    let alpha = c.ok("sessions.get", json!({"session_id": "alpha"}));
    assert_eq!(alpha["last_lsn"], 3, "{alpha}");
    assert_eq!(alpha["stream_id"], "alpha", "{alpha}");
    assert_eq!(alpha["first_ts"], alpha_events[0]["timestamp"], "{alpha}");
    assert_eq!(alpha["last_ts"], alpha_events[2]["timestamp"], "{alpha}");
    let beta = c.ok("sessions.get", json!({"session_id": "beta"}));
    assert_eq!(beta["last_lsn"], 1, "{beta}");
    assert_eq!(
        beta["stream_id"], "alpha",
        "a child session reports its lineage root: {beta}"
    );

    // Updated after more appends.
    c.append("alpha", "t", json!({}));
    assert_eq!(
        c.ok("sessions.get", json!({"session_id": "alpha"}))["last_lsn"],
        4
    );

    let e = c.err("sessions.get", json!({"session_id": "gamma"}));
    assert_eq!(e.code, codes::SESSION_NOT_FOUND, "{e}");
}

#[test]
fn query_filters_each_and_combined() {
    let d = Daemon::start();
    let mut c = d.client();
    let ev = |ty: &str, actor: &str, stream: Option<&str>| {
        let mut e = json!({"type": ty, "actor": actor, "payload": {}});
        if let Some(s) = stream {
            e["stream_id"] = json!(s);
        }
        e
    };
    // Batch 1.
    c.append_event("q-root", ev("execution.tool_use", "alice", None));
    c.append_event("q-root", ev("execution.tool_result", "alice", None));
    c.append_event("q-child", ev("execution.tool_use", "bob", Some("q-root")));
    c.append_event("q-other", ev("user.input", "bob", None));
    let batch1 = all_events(&mut c);
    // Batch 2 starts 2 ms after batch 1's last timestamp, by the clock both share.
    let last1 = batch1
        .iter()
        .map(|e| e["timestamp"].as_u64().unwrap())
        .max()
        .unwrap();
    while dstream_tests::now_ms() < last1 + 2 {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Batch 2.
    c.append_event("q-child", ev("message.chunk", "bob", Some("q-root")));
    c.append_event("q-other", ev("execution.step_start", "alice", None));
    c.append_event("q-root", ev("user.input", "carol", None));
    let all = all_events(&mut c);
    assert_eq!(all.len(), 7);
    let b1_ids: BTreeSet<String> = batch1
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    let (b1, b2): (Vec<&Value>, Vec<&Value>) = all
        .iter()
        .partition(|e| b1_ids.contains(e["id"].as_str().unwrap()));
    let max1 = b1
        .iter()
        .map(|e| e["timestamp"].as_u64().unwrap())
        .max()
        .unwrap();
    let min2 = b2
        .iter()
        .map(|e| e["timestamp"].as_u64().unwrap())
        .min()
        .unwrap();
    assert!(
        min2 >= max1 + 2,
        "setup: the two batches must be at least 2 ms apart ({max1} vs {min2})"
    );

    let expect = |pred: &dyn Fn(&Value) -> bool| -> BTreeSet<String> {
        all.iter()
            .filter(|e| pred(e))
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect()
    };
    let mut check = |params: Value, want: BTreeSet<String>| {
        let r = c.ok("query", params.clone());
        let got: BTreeSet<String> = r["events"]
            .as_array()
            .unwrap_or_else(|| panic!("query {params}: {r}"))
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            got.len(),
            r["events"].as_array().unwrap().len(),
            "query {params} returned duplicates"
        );
        assert_eq!(got, want, "query {params}");
        assert_eq!(r["truncated"], false, "query {params}: {r}");
        // Returned events are full events, identical to what read returns.
        for e in r["events"].as_array().unwrap() {
            assert!(
                all.contains(e),
                "query {params} returned an event that differs from read: {e}"
            );
        }
    };

    check(json!({}), expect(&|_| true));
    check(
        json!({"session_id": "q-child"}),
        expect(&|e| e["session_id"] == "q-child"),
    );
    check(
        json!({"stream_id": "q-root"}),
        expect(&|e| e["session_id"] == "q-root" || e["session_id"] == "q-child"),
    );
    check(
        json!({"type_prefix": "execution.tool_"}),
        expect(&|e| e["type"].as_str().unwrap().starts_with("execution.tool_")),
    );
    check(
        json!({"type_prefix": "execution."}),
        expect(&|e| e["type"].as_str().unwrap().starts_with("execution.")),
    );
    check(
        json!({"type_prefix": "user.input"}),
        expect(&|e| e["type"] == "user.input"),
    );
    check(json!({"type_prefix": "nothing."}), BTreeSet::new());
    check(json!({"actor": "bob"}), expect(&|e| e["actor"] == "bob"));
    check(
        json!({"since_ms": min2 - 1}),
        b2.iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect(),
    );
    check(
        json!({"until_ms": max1 + 1}),
        b1.iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect(),
    );
    check(
        json!({"since_ms": min2 - 1, "until_ms": now_ms() + 60_000}),
        b2.iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect(),
    );
    check(
        json!({"stream_id": "q-root", "actor": "bob", "type_prefix": "execution."}),
        expect(&|e| e["session_id"] == "q-child" && e["type"] == "execution.tool_use"),
    );
    check(
        json!({"session_id": "q-root", "since_ms": min2 - 1}),
        expect(&|e| e["session_id"] == "q-root" && e["type"] == "user.input"),
    );
    check(
        json!({"session_id": "q-other", "actor": "carol"}),
        BTreeSet::new(),
    );

    // limit: cut short and say so.
    let r = c.ok("query", json!({"limit": 2}));
    assert_eq!(r["events"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(r["truncated"], true, "{r}");
    let r = c.ok("query", json!({"stream_id": "q-root", "limit": 5}));
    assert_eq!(r["events"].as_array().unwrap().len(), 5, "{r}");
    assert_eq!(
        r["truncated"], false,
        "exactly 5 match; nothing was cut: {r}"
    );
}

fn all_events(c: &mut dstream_tests::Client) -> Vec<Value> {
    let list = c.ok("sessions.list", json!({}));
    let mut out = Vec::new();
    for s in list["sessions"].as_array().unwrap() {
        out.extend(c.read_all(s["session_id"].as_str().unwrap()));
    }
    out
}

#[test]
fn stats_counts_appends_sessions_connections_and_subscriptions() {
    let d = Daemon::start();
    let mut c = d.client();
    let st = c.ok("stats", json!({}));
    assert_eq!(st["appends"], 0, "{st}");
    assert_eq!(st["sessions"], 0, "{st}");

    for i in 0..7 {
        c.append(if i % 2 == 0 { "st-a" } else { "st-b" }, "t", json!({}));
    }
    let mut s = d.client();
    s.ok("subscribe", json!({"session_id": "st-a", "from_lsn": 1}));
    // Wait for its caught_up so the subscription is surely registered.
    loop {
        let n = s.next_notification(WAIT).expect("caught_up");
        if n["method"] == "caught_up" {
            break;
        }
    }
    let st = c.ok("stats", json!({}));
    assert_eq!(st["appends"], 7, "{st}");
    assert_eq!(st["sessions"], 2, "{st}");
    assert!(
        st["connections"].as_u64().is_some_and(|n| n >= 2),
        "two clients are connected: {st}"
    );
    assert_eq!(st["subscriptions"], 1, "{st}");
    assert_eq!(st["lagged"], 0, "{st}");
    assert_eq!(st["fsync"], "always", "{st}");
    assert!(
        st["rss_bytes"].as_u64().is_some_and(|n| n > 0),
        "rss_bytes on Linux: {st}"
    );

    drop(s);
    // The subscription goes away with its connection (bounded wait for the daemon to notice).
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let st = c.ok("stats", json!({}));
        if st["subscriptions"] == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "subscription still counted after its connection closed: {st}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn parameterless_methods_accept_omitted_params() {
    let d = Daemon::start();
    let mut c = d.client();
    c.append("x", "t", json!({}));
    for (i, m) in ["hello", "stats", "sessions.list"].iter().enumerate() {
        let id = 900_000 + i as u64;
        c.send_raw(format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{m}\"}}\n").as_bytes());
        c.wait_response(id)
            .unwrap_or_else(|e| panic!("{m} without params: {e}"));
    }
}
