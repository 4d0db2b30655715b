//! A local client cannot crash or starve the daemon (issue 18, items 4, 8, 10, 11), and what a
//! writer can append every reader can read. Each test replays an attack on a real daemon and
//! checks the safe outcome: the daemon up, other clients served, memory within the configured
//! bounds (RSS from /proc), poison refused with a clear error and readers still working.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dstream_tests::serde_json::{self, Value, json};
use dstream_tests::{
    Client, Daemon, claude_pre_tool_use, codes, daemon_bin, lsn_of, seal_line, spawn_hook,
    wait_child,
};

const INVALID_PARAMS: i64 = codes::INVALID_PARAMS;
const OVERLOADED: i64 = -32008;
const TOO_MANY_CONNECTIONS: i64 = -32014;
const CONNECTION_LIMIT: i64 = -32015;
const MIB: u64 = 1 << 20;

/// The memory the daemon holds (`RssAnon`): heap, stacks and buffers. Code pages are left
/// out: the daemon drops them from its resident set once start-up is over, and whatever runs
/// next maps them back from the page cache, which would count as growth here.
fn held_memory(d: &Daemon) -> u64 {
    d.proc_status("RssAnon") * 1024
}

/// Waits (up to 20 s) until `cond` holds, polling.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends a raw request line with a numeric id and returns its response (result or error).
fn raw_call(
    c: &mut Client,
    id: u64,
    line_without_id: &str,
) -> Result<Value, dstream_tests::RpcError> {
    let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},{line_without_id}}}\n");
    c.send_raw(line.as_bytes());
    c.wait_response(id)
}

/// `dstream <args> --socket S`: (exit code, stdout, stderr), failing the test past 20 s.
fn dstream(d: &Daemon, args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(daemon_bin())
        .args(args)
        .arg("--socket")
        .arg(d.socket())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).map(|_| s)
    });
    let status = wait_child(&mut child, Duration::from_secs(20)).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("dstream {args:?} hung");
    });
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (
        status.code().unwrap_or(-1),
        reader.join().unwrap().unwrap(),
        err,
    )
}

/// Item 8: numbers beyond an f64 and lone surrogate escapes are refused wherever client JSON
/// is stored, naming where; readers (tail, query, read, subscribe) keep working, also over an
/// old log that already holds such an event.
#[test]
fn unreadable_json_is_refused_with_its_path_and_readers_keep_working() {
    let mut d = Daemon::start_with("[store]\nfsync = \"never\"\n");
    let mut c = d.client();
    c.append("p", "user.input", json!({"ok": 1}));
    let cases = [
        (
            r#""method":"append","params":{"session_id":"p","event":{"type":"x","payload":{"n":1e999999}}}"#,
            "event.payload.n",
        ),
        (
            r#""method":"append","params":{"session_id":"p","event":{"type":"x","metadata":{"m":["ok","\ud800"]}}}"#,
            "event.metadata.m[1]",
        ),
        (
            r#""method":"append","params":{"session_id":"p","event":{"type":"x","raw":{"r":"a\udc00b"}}}"#,
            "event.raw.r",
        ),
        (
            r#""method":"checkpoint.request","params":{"session_id":"p","key":"k","input":{"cmd":"\ud83d"}}"#,
            "input.cmd",
        ),
        (
            r#""method":"checkpoint.resolve","params":{"id":"ck_x","decision":"approve","input":{"v":1e309}}"#,
            "input.v",
        ),
    ];
    for (i, (request, path)) in cases.iter().enumerate() {
        let e = raw_call(&mut c, 1000 + i as u64, request).expect_err(request);
        assert_eq!(e.code, INVALID_PARAMS, "{request}: {e}");
        assert!(e.message.starts_with(path), "{request}: {e}");
        assert!(e.message.contains("readers could not parse"), "{e}");
    }
    // A valid surrogate pair and a tiny number are fine.
    raw_call(
        &mut c,
        2000,
        r#""method":"append","params":{"session_id":"p","event":{"type":"x","payload":{"s":"\ud83d\ude00","n":1e-400}}}"#,
    )
    .unwrap();
    assert_eq!(c.read_all("p").len(), 2, "nothing refused was stored");
    // An agent's event is repaired instead (a tool call in it must still be decided): the
    // number is kept as its digits.
    raw_call(
        &mut c,
        3000,
        r#""method":"ingest","params":{"source":"claude-code","session_id":"q","event":{"hook_event_name":"Stop","x":-1E400}}"#,
    )
    .unwrap();
    let stored = c.read_all("q");
    assert!(
        stored.iter().any(|e| e["raw"]["x"] == "-1E400"),
        "{stored:?}"
    );

    // An old log that already holds such an event: planted in place of a stored one (same
    // length, so the index still holds), with its checksum.
    c.append("old", "x", json!({"n": "AAAAAA", "s": "BBBBBB"}));
    c.append("old", "after", json!({}));
    drop(c);
    assert_eq!(d.stop().code(), Some(0));
    let log = std::fs::read(d.log_path("old")).unwrap();
    let end = log.iter().position(|&b| b == b'\n').unwrap();
    let line = String::from_utf8(log[..end].to_vec()).unwrap();
    let body = &line[..line.find(",\"crc\":\"").unwrap()];
    let poisoned = body
        .replace(r#""AAAAAA""#, "1e999999")
        .replace(r#""BBBBBB""#, r#""\ud800""#);
    assert_eq!(poisoned.len(), body.len());
    let mut planted = seal_line(poisoned.as_bytes());
    planted.extend_from_slice(&log[end + 1..]);
    std::fs::write(d.log_path("old"), planted).unwrap();
    d.restart();

    let mut c = d.client();
    let events = c.read_all("old");
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0]["payload"],
        json!({"n": "1e999999", "s": "\u{fffd}"})
    );
    let q = c.ok("query", json!({}));
    assert_eq!(q["events"].as_array().unwrap().len(), 5, "{q}");
    c.ok("subscribe", json!({"session_id": "old"}));
    let first = c.next_notification(Duration::from_secs(10)).unwrap();
    assert_eq!(first["params"]["event"]["payload"]["n"], "1e999999");
    for session in ["old", "p"] {
        let (code, out, err) = dstream(&d, &["tail", session]);
        assert_eq!(code, 0, "tail {session}: {err}");
        assert_eq!(out.lines().count(), 2, "{out}");
    }
    let (code, _, err) = dstream(&d, &["query", "--json"]);
    assert_eq!(code, 0, "query: {err}");
}

/// Item 4: frames that never finish are charged to the budget for clients (its frames' half):
/// past it they are discarded (-32008 once they end), RSS stays bounded, and other clients are
/// served all along. A `query` reply stops at 32 MiB (`truncated`).
#[test]
fn unfinished_frames_and_big_queries_stay_within_the_budget() {
    const BUDGET: u64 = 64 * MIB; // 32 MiB for frames still arriving
    let d = Daemon::start_with(&format!(
        "[daemon]\nmax_client_memory_bytes = {BUDGET}\nidle_timeout_ms = 120000\n[store]\nfsync = \"never\"\n"
    ));
    let mut c = d.client();
    c.append("s", "x", json!({}));
    let before = held_memory(&d);

    // 12 connections × 7 MiB of a frame that does not end: 84 MiB if all were buffered.
    let chunk = vec![b'a'; 1 << 20];
    let mut attackers: Vec<Client> = (0..12).map(|_| d.client()).collect();
    for (i, a) in attackers.iter_mut().enumerate() {
        a.send_raw(
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"append\",\"params\":{{\"x\":\"")
                .as_bytes(),
        );
        for _ in 0..7 {
            a.send_raw(&chunk);
        }
    }
    let stats = c.ok("stats", json!({}));
    let held = stats["client_memory_bytes"].as_u64().unwrap();
    assert!(
        held <= BUDGET / 2,
        "{held} bytes held for unfinished frames"
    );
    let grown = held_memory(&d).saturating_sub(before);
    assert!(
        grown <= BUDGET / 2 + 24 * MIB,
        "held memory grew {} MiB with 84 MiB of unfinished frames under a {} MiB budget",
        grown / MIB,
        BUDGET / MIB
    );
    // Others are served meanwhile.
    let (lsn, _) = c.append("s", "x", json!({"still": "served"}));
    assert_eq!(lsn, 2);
    // Ending the frames: those the budget could not hold were discarded with -32008.
    let mut overloaded = 0;
    for (i, a) in attackers.iter_mut().enumerate() {
        a.send_raw(b"\"}}\n");
        let e = a.wait_response(i as u64).expect_err("an incomplete append");
        if e.code == OVERLOADED {
            assert!(e.message.contains("max_client_memory_bytes"), "{e}");
            overloaded += 1;
        }
    }
    assert!(overloaded > 0, "some frames must have been refused");
    drop(attackers);
    wait_until("the frames' charges are given back", || {
        // The stats request itself is charged while it runs.
        c.ok("stats", json!({}))["client_memory_bytes"].as_u64() < Some(1024)
    });

    // 36 MiB of events; a query answers at most 32 MiB of them.
    let text = "q".repeat(MIB as usize);
    for i in 0..36 {
        c.append("big", "blob", json!({"i": i, "t": text}));
    }
    let q = c.ok("query", json!({"session_id": "big"}));
    let n = q["events"].as_array().unwrap().len();
    assert_eq!(q["truncated"], json!(true));
    assert!((30..=33).contains(&n), "{n} events of 1 MiB in one reply");
    assert!(d.is_running());
}

/// Item 10: awaits that time out, or whose connection goes away, leave nothing behind; an
/// ingest of tiny objects is charged for its parse and refused before it is parsed.
#[test]
fn abandoned_awaits_and_amplifying_ingests_cost_bounded_memory() {
    let d = Daemon::start_with("[store]\nfsync = \"never\"\n");
    let mut c = d.client();
    let ck = c.ok(
        "checkpoint.request",
        json!({"session_id": "w", "key": "k", "timeout_ms": 600000}),
    );
    let id = ck["id"].as_str().unwrap().to_string();
    // Warm up the allocator and task pools before measuring.
    for _ in 0..2000 {
        c.send("checkpoint.await", json!({"id": id, "timeout_ms": 1}));
    }
    for _ in 0..2000 {
        c.any_response();
    }
    let before = held_memory(&d);
    // 30,000 awaits that time out, 1,000 in flight at a time...
    for _ in 0..30 {
        for _ in 0..1000 {
            c.send("checkpoint.await", json!({"id": id, "timeout_ms": 1}));
        }
        for _ in 0..1000 {
            let r = c.any_response();
            assert_eq!(r["result"]["state"], "pending", "{r}");
        }
    }
    // ...and 10,000 without a timeout whose connections close.
    for _ in 0..10 {
        let mut w = d.client();
        for _ in 0..1000 {
            w.send("checkpoint.await", json!({"id": id}));
        }
        w.ok("hello", json!({})); // all 1,000 are waiting
    }
    let grown = held_memory(&d).saturating_sub(before);
    assert!(
        grown < 8 * MIB,
        "held memory grew {} KiB over 40,000 abandoned awaits (main: ~600 bytes each)",
        grown / 1024
    );
    // The checkpoint still answers its live waiters.
    let mut waiter = d.client();
    let pending = waiter.send("checkpoint.await", json!({"id": id}));
    c.ok(
        "checkpoint.resolve",
        json!({"id": id, "decision": "approve"}),
    );
    let decided = waiter.wait_response(pending).unwrap();
    assert_eq!(decided["state"], "approved");

    // 8 MiB of `{}`: ~2.8 million values; parsed, ~1.4 GB. Refused before the parse.
    let hwm = d.proc_status("VmHWM") * 1024;
    let tiny = format!("[{}{{}}]", "{},".repeat((8 << 20) / 3));
    let e = raw_call(
        &mut c,
        7,
        &format!(
            r#""method":"ingest","params":{{"source":"claude-code","session_id":"i","event":{{"hook_event_name":"Stop","x":{tiny}}}}}"#
        ),
    )
    .expect_err("an ingest of 2.8 million values");
    assert_eq!(e.code, INVALID_PARAMS, "{e}");
    assert!(e.message.contains("JSON values"), "{e}");
    let peak = d.proc_status("VmHWM") * 1024;
    assert!(
        peak.saturating_sub(hwm) < 64 * MIB,
        "peak RSS grew {} MiB on a refused 8 MiB ingest",
        peak.saturating_sub(hwm) / MIB
    );
    // A normal ingest still goes through.
    let r = c.ok(
        "ingest",
        json!({"source": "claude-code", "session_id": "i", "event": {"hook_event_name": "Stop", "x": [1, 2, 3]}}),
    );
    assert!(!r["events"].as_array().unwrap().is_empty(), "{r}");
}

/// Item 11: a flood of idle sockets never locks out a hook (the newcomer takes the place of
/// the oldest connection that never sent a frame), connections that are all busy make the
/// newcomer get a clear refusal, and the connection cap fits the open-file limit.
#[test]
fn a_flood_of_idle_connections_never_locks_out_a_hook() {
    // At 256 descriptors, 512 connections would not fit: the daemon serves 64 (256 - 128 - 64).
    let mut d = Daemon::new(Some("[daemon]\nidle_timeout_ms = 120000\n"));
    d.limit_open_files(256);
    d.restart();
    let flood: Vec<UnixStream> = (0..400)
        .map(|_| UnixStream::connect(d.socket()).unwrap())
        .collect();
    let mut c = d.client();
    c.ok("hello", json!({}));
    let hook = spawn_hook(&d.socket(), &claude_pre_tool_use("h", "call-1", "ls"));
    let mut hook = hook;
    let status = wait_child(&mut hook, Duration::from_secs(20)).expect("the hook hung");
    assert!(status.success());
    let events = c.read_all("h");
    assert!(
        events.iter().any(|e| e["type"] == "execution.tool_use"),
        "the hook's event was stored: {events:?}"
    );
    // The oldest idle sockets were told why they were closed.
    let mut first = &flood[0];
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reply = String::new();
    first.read_to_string(&mut reply).unwrap();
    assert!(reply.contains(&TOO_MANY_CONNECTIONS.to_string()), "{reply}");
    assert!(reply.contains("max_connections"), "{reply}");
    assert!(d.open_fds() < 256);
    drop(flood);
    let stderr = d.stderr();
    assert!(
        stderr.contains("lowered to fit the open-file limit"),
        "{stderr}"
    );
    assert!(!stderr.contains("accept failed"), "{stderr}");

    // Every connection busy (each holds a subscription), all of this process: another
    // connection of the same process is refused, clearly; a hook takes the oldest's place.
    let d = Daemon::start_with("[daemon]\nmax_connections = 4\n");
    let mut busy: Vec<Client> = (0..4).map(|_| d.client()).collect();
    for b in &mut busy {
        b.ok("subscribe", json!({"session_id": "b"}));
    }
    let mut refused = UnixStream::connect(d.socket()).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reply = String::new();
    refused.read_to_string(&mut reply).unwrap();
    let v: Value = serde_json::from_str(reply.trim()).unwrap();
    assert_eq!(v["error"]["code"], TOO_MANY_CONNECTIONS, "{v}");
    let mut hook = spawn_hook(&d.socket(), &claude_pre_tool_use("h2", "call-2", "ls"));
    assert!(
        wait_child(&mut hook, Duration::from_secs(20))
            .expect("the hook hung")
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut told = None;
    while let Ok(v) = busy[0].read_frame_until(deadline) {
        if v.get("error").is_some() {
            told = Some(v);
            break;
        }
    }
    assert!(
        told.as_ref()
            .is_some_and(|v| v["error"]["code"] == TOO_MANY_CONNECTIONS),
        "the oldest connection of the busiest process made room: {told:?}"
    );
    drop(busy.remove(0));
    let mut c = busy.pop().unwrap();
    drop(busy);
    let events = c.read_all("h2");
    assert!(
        events.iter().any(|e| e["type"] == "execution.tool_use"),
        "{events:?}"
    );
    wait_until("a freed slot serves a new client", || {
        Client::connect(&d.socket())
            .try_call("hello", json!({}))
            .is_ok_and(|r| r.is_ok())
    });
}

/// Item 11: a connection that does not finish a frame within `idle_timeout_ms` is closed; one
/// that did (a subscriber) may stay silent; subscriptions per connection are capped.
#[test]
fn idle_timeout_and_subscription_cap() {
    let d = Daemon::start_with(
        "[daemon]\nidle_timeout_ms = 300\nmax_subscriptions_per_connection = 8\n",
    );
    let mut sub = d.client();
    sub.ok("subscribe", json!({"session_id": "t"}));
    let mut silent = UnixStream::connect(d.socket()).unwrap();
    let mut half = UnixStream::connect(d.socket()).unwrap();
    half.write_all(br#"{"jsonrpc":"2.0","id":1,"method":"hel"#)
        .unwrap();
    for s in [&mut silent, &mut half] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest)
            .expect("closed by the daemon, not a read timeout");
    }
    // The subscriber, silent as long, is still served.
    let mut w = d.client();
    w.append("t", "x", json!({}));
    let n = loop {
        let n = sub
            .next_notification(Duration::from_secs(10))
            .expect("a notification");
        if n["method"] == "event" {
            break n;
        }
    };
    assert_eq!(lsn_of(&n["params"]["event"]), 1);

    let mut many = d.client();
    let mut subs: Vec<String> = (0..8)
        .map(|_| {
            many.ok("subscribe", json!({"session_id": "t"}))["subscription"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let e = many.err("subscribe", json!({"session_id": "t"}));
    assert_eq!(e.code, CONNECTION_LIMIT, "{e}");
    assert!(
        e.message.contains("max_subscriptions_per_connection"),
        "{e}"
    );
    many.ok("unsubscribe", json!({"subscription": subs.pop().unwrap()}));
    many.ok("subscribe", json!({"session_id": "t"}));
}
