//! The relay against a server that misbehaves on purpose (tests/src/hostile_server.rs, in front
//! of the real Rust reference server), then turns honest: the daemon's memory stays bounded,
//! the local log does not fill with the server's junk, every loop waits its backoff, nothing
//! counts as delivered unless the protocol says so, `relay status` says why, and once the
//! server is honest every event is on it exactly once.
#![cfg(unix)]

use std::time::{Duration, Instant};

use dstream_tests::Daemon;
use dstream_tests::hostile_server::{Body, HostileServer, Rule, Target};
use dstream_tests::relay::{RemoteServer, ServerKind, read_stream, wait_for};
use serde_json::{Value, json};

const PREFIX: &str = "h";
const LONG: Duration = Duration::from_secs(90);
const KEY: &str = "hostile test key";

fn daemon(url: &str, retry_max_ms: u64) -> Daemon {
    let config = format!(
        "[relay]\nurl = \"{url}\"\nprefix = \"{PREFIX}\"\nlinger_ms = 2\nretry_min_ms = 50\nretry_max_ms = {retry_max_ms}\napproval_key_env = \"DS_APPROVAL_KEY\"\napproval_key_id = \"phone\"\n"
    );
    let mut d = Daemon::new(Some(&config));
    d.set_env("DS_APPROVAL_KEY", KEY);
    d.restart();
    d
}

fn stream_status(d: &Daemon, session: &str) -> Option<Value> {
    d.client().ok("relay.status", json!({}))["streams"]
        .as_array()?
        .iter()
        .find(|s| s["session_id"] == session)
        .cloned()
}

fn wait_state(d: &Daemon, session: &str, state: &str, reason: &str) -> Value {
    wait_for(
        &format!("{session} {state} because of {reason:?}"),
        LONG,
        || {
            stream_status(d, session).filter(|s| {
                s["state"] == state && s["reason"].as_str().unwrap_or("").contains(reason)
            })
        },
    )
}

/// `dstream relay retry`, as a person would run it.
fn relay_retry(d: &Daemon) {
    let out = d.cli(&["relay", "retry"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Once the server is honest: every event of `session` reaches it, exactly once.
fn assert_delivered_exactly_once(d: &Daemon, upstream: &RemoteServer, session: &str) {
    let local = d.client().read_all(session);
    let n = local.len() as u64;
    wait_for(&format!("{session} relayed up to {n}"), LONG, || {
        stream_status(d, session).filter(|s| s["acked_lsn"] == n && s["lag"] == 0)
    });
    let remote = read_stream(&format!("{}/{PREFIX}/{session}", upstream.base_url()));
    let lsns: Vec<u64> = remote
        .messages
        .iter()
        .map(|m| m["lsn"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = local
        .iter()
        .filter(|e| e["type"] != "relay.control_rejected")
        .map(|e| e["lsn"].as_u64().unwrap())
        .collect();
    assert_eq!(
        lsns, expected,
        "the remote stream holds each relayable event once"
    );
}

fn append(d: &Daemon, session: &str, n: usize) {
    let mut c = d.client();
    for i in 0..n {
        c.append(
            session,
            "message.chunk",
            json!({"text": format!("chunk {i}")}),
        );
    }
}

/// A pending checkpoint keeps the session's control stream followed.
fn hold_checkpoint(d: &Daemon, session: &str) {
    d.client().ok(
        "checkpoint.request",
        json!({"session_id": session, "key": "k", "summary": "held"}),
    );
}

#[test]
fn huge_and_endless_bodies_do_not_grow_the_daemons_memory() {
    let upstream = RemoteServer::start(ServerKind::Rust);
    let hostile = HostileServer::start(&upstream.addr());
    let gib = 1u64 << 30;
    hostile.set(vec![
        // Error bodies of a GiB on every append.
        Rule::reply(
            Target::Append,
            500,
            &[],
            Body::Repeat {
                head: Vec::new(),
                unit: b"x".to_vec(),
                total: gib,
                chunked: false,
            },
        ),
        // Control pages that never end: `[[],[],…` without a length.
        Rule::reply(
            Target::ControlRead,
            200,
            &[("stream-next-offset", "{n}")],
            Body::Repeat {
                head: b"[".to_vec(),
                unit: b"[],".to_vec(),
                total: gib,
                chunked: true,
            },
        ),
    ]);
    let d = daemon(&hostile.base_url(), 300);
    let sessions = ["m1", "m2", "m3", "m4"];
    for s in sessions {
        hold_checkpoint(&d, s);
        append(&d, s, 5);
    }
    let counts = &hostile.counts;
    wait_for("each kind of huge answer several times", LONG, || {
        (counts.appends.load(std::sync::atomic::Ordering::Relaxed) >= 8
            && counts
                .control_reads
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 8)
            .then_some(())
    });
    // A bounded reader reads at most relay.max_page_bytes (4 MiB) of a page and 4 KiB of an
    // error body; reading them whole took the daemon past 1.9 GB.
    let peak_kb = d.proc_status("VmHWM");
    eprintln!(
        "huge bodies: peak RSS {peak_kb} kB after {} appends and {} control reads",
        counts.appends.load(std::sync::atomic::Ordering::Relaxed),
        counts
            .control_reads
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(
        peak_kb < 200 * 1024,
        "peak RSS {peak_kb} kB while the server sent {} bytes",
        counts
            .body_bytes_sent
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    let st = stream_status(&d, "m1").unwrap();
    assert_ne!(st["state"], "live", "{st}");

    hostile.honest();
    relay_retry(&d);
    for s in sessions {
        append(&d, s, 2);
        assert_delivered_exactly_once(&d, &upstream, s);
    }
}

#[test]
fn junk_on_the_control_stream_costs_the_local_log_a_count_not_a_copy() {
    use std::sync::atomic::Ordering::Relaxed;
    let upstream = RemoteServer::start(ServerKind::Rust);
    let hostile = HostileServer::start(&upstream.addr());
    // 1,000 junk messages a page, answered at once, each page with a new offset.
    let junk = br#"{"type":"decision","session_id":"j","checkpoint_id":"ck","decision":"approve","key_id":"phone","ts":1,"nonce":"n","sig":"AAAA"}"#;
    hostile.set(vec![Rule::reply(
        Target::ControlRead,
        200,
        &[("stream-next-offset", "{n}")],
        Body::Page {
            message: junk.to_vec(),
            count: 1000,
        },
    )]);
    let d = daemon(&hostile.base_url(), 300);
    hold_checkpoint(&d, "j");
    append(&d, "j", 3);
    let t0 = Instant::now();
    let start = hostile.counts.control_reads.load(Relaxed);
    wait_for("twelve junk pages served", LONG, || {
        (hostile.counts.control_reads.load(Relaxed) >= start + 12).then_some(())
    });
    let elapsed = t0.elapsed();
    let pages = hostile.counts.control_reads.load(Relaxed) - start;
    // Every page brought only refusals, so each next read waited the backoff (from 200 ms,
    // doubling to retry_max_ms = 300 ms, each wait at least half its base): 11 waits between
    // 12 reads take at least 100 + 10 × 150 ms. The server cannot make the relay spin (before,
    // such pages were read back to back, and recorded as 1,300 local events a second).
    assert!(
        elapsed >= Duration::from_millis(100 + 150 * 10),
        "{pages} pages in {elapsed:?}"
    );
    // Wait for the refusals to be written (at most one record per 10 s, plus one per page).
    let mut c = d.client();
    let records = wait_for("refusals recorded", LONG, || {
        let r: Vec<Value> = c
            .read_all("j")
            .into_iter()
            .filter(|e| e["type"] == "relay.control_rejected")
            .collect();
        (!r.is_empty()).then_some(r)
    });
    let refused: u64 = records
        .iter()
        .map(|r| r["payload"]["count"].as_u64().unwrap())
        .sum();
    assert!(refused >= 1000, "{records:?}");
    let bound = 2 + t0.elapsed().as_secs() / 10;
    eprintln!(
        "junk control pages: {pages} pages of 1,000 messages in {elapsed:?}; {} messages refused, {} records",
        refused,
        records.len()
    );
    assert!(
        (records.len() as u64) <= bound,
        "{} refusal records in {:?} (at most one per 10 s)",
        records.len(),
        t0.elapsed()
    );
    for r in &records {
        let text = r["payload"].to_string();
        assert!(
            text.len() < 4096,
            "a record holds a count, reasons and a short sample: {text}"
        );
    }
    // The refusals stay local: never sent back to the server.
    assert_delivered_exactly_once(&d, &upstream, "j");
    let remote = read_stream(&format!("{}/{PREFIX}/j", upstream.base_url()));
    assert!(
        remote
            .messages
            .iter()
            .all(|m| m["type"] != "relay.control_rejected"),
        "refusals are not relayed"
    );

    // One message over the page bound (a 10 MB reason): skipped, counted, not copied.
    let big = format!(
        r#"{{"type":"decision","session_id":"j","reason":"{}"}}"#,
        "r".repeat(10 << 20)
    );
    hostile.set(vec![Rule::reply(
        Target::ControlRead,
        200,
        &[("stream-next-offset", "{n}")],
        Body::Text(format!("[{big}]").into_bytes()),
    )]);
    let before = records.len();
    let log = d.log_path("j");
    wait_for("the oversize page refused", LONG, || {
        let r: Vec<Value> = c
            .read_all("j")
            .into_iter()
            .filter(|e| {
                e["type"] == "relay.control_rejected"
                    && e["payload"].to_string().contains("max_page_bytes")
            })
            .collect();
        (!r.is_empty()).then_some(())
    });
    assert!(
        std::fs::metadata(&log).unwrap().len() < 256 * 1024,
        "the session log stays small"
    );
    assert!(c.read_all("j").len() > before);
}

#[test]
fn redirects_are_not_followed_and_nothing_counts_as_delivered() {
    let upstream = RemoteServer::start(ServerKind::Rust);
    let hostile = HostileServer::start(&upstream.addr());
    // An http→https style redirect (to another origin): followed, a POST became a GET whose
    // 200 was counted as stored.
    let elsewhere = format!("{}/{PREFIX}/r", upstream.base_url());
    hostile.set(vec![Rule::reply(
        Target::Append,
        301,
        &[("location", &elsewhere)],
        Body::Text(Vec::new()),
    )]);
    let d = daemon(&hostile.base_url(), 300);
    append(&d, "r", 4);
    let st = wait_state(&d, "r", "failed", "redirect");
    assert_eq!(st["acked_lsn"], 0, "{st}");
    assert!(st["lag"].as_u64().unwrap() >= 4, "{st}");
    let remote = read_stream(&format!("{}/{PREFIX}/r", upstream.base_url()));
    assert!(remote.messages.is_empty(), "nothing reached the server");

    hostile.honest();
    relay_retry(&d);
    assert_delivered_exactly_once(&d, &upstream, "r");
}

#[test]
fn the_same_trouble_on_every_batch_is_asked_again_only_after_a_backoff() {
    use std::sync::atomic::Ordering::Relaxed;
    let upstream = RemoteServer::start(ServerKind::Rust);
    let hostile = HostileServer::start(&upstream.addr());
    // A control long-poll answered at once with 204, from the start: a long-poll that went
    // through to the real server would hold the control reads up to its 30 s timeout when
    // the rule changed under it.
    let quick_empty_polls = || {
        Rule::reply(
            Target::ControlRead,
            204,
            &[("stream-next-offset", "0000000000000000_0000000000000000")],
            Body::Text(Vec::new()),
        )
    };
    // A 409 sequence gap on every append: each used to trigger a resync and an immediate
    // resend (10,957 of each in 10 s).
    hostile.set(vec![
        Rule::reply(
            Target::Append,
            409,
            &[
                ("producer-expected-seq", "7"),
                ("producer-received-seq", "0"),
            ],
            Body::Text(Vec::new()),
        ),
        quick_empty_polls(),
    ]);
    let d = daemon(&hostile.base_url(), 300);
    append(&d, "g", 3);
    let t0 = Instant::now();
    let start = hostile.counts.appends.load(Relaxed);
    wait_for("ten appends refused", LONG, || {
        (hostile.counts.appends.load(Relaxed) >= start + 10).then_some(())
    });
    eprintln!(
        "409 on every append: 10 appends and {} resync reads in {:?}",
        hostile.counts.tail_reads.load(Relaxed),
        t0.elapsed()
    );
    // The first resync is at once; each later one waits at least half the backoff (50 ms,
    // doubling to 300 ms): ten appends have at least eight waits between them.
    assert!(
        t0.elapsed() >= Duration::from_millis(25 + 50 + 100 + 150 * 5),
        "{:?}",
        t0.elapsed()
    );
    wait_state(&d, "g", "backing_off", "expecting another batch");
    let warnings = d.stderr().matches("the server expected batch").count();
    assert!(
        warnings <= 2,
        "repeated warnings are rate-limited: {warnings}"
    );

    // A stream that vanishes after every create: the same.
    hostile.set(vec![
        Rule::reply(Target::Append, 404, &[], Body::Text(Vec::new())),
        quick_empty_polls(),
    ]);
    wait_state(&d, "g", "backing_off", "vanishing");

    // The control long-poll answered at once with 204: read again only after a backoff.
    hostile.set(vec![quick_empty_polls()]);
    hold_checkpoint(&d, "g");
    let start = hostile.counts.control_reads.load(Relaxed);
    let t1 = Instant::now();
    wait_for("ten quick empty polls", LONG, || {
        (hostile.counts.control_reads.load(Relaxed) >= start + 10).then_some(())
    });
    // Ten reads after the first: at least nine waits of at least half their base (200 ms
    // doubling to 300 ms).
    assert!(
        t1.elapsed() >= Duration::from_millis(100 + 150 * 8),
        "{:?}",
        t1.elapsed()
    );

    hostile.honest();
    relay_retry(&d);
    assert_delivered_exactly_once(&d, &upstream, "g");
}

#[test]
fn retry_after_is_capped_and_relay_retry_ends_the_wait() {
    let upstream = RemoteServer::start(ServerKind::Rust);
    let hostile = HostileServer::start(&upstream.addr());
    hostile.set(vec![Rule::reply(
        Target::Append,
        503,
        &[("retry-after", "999999999")],
        Body::Text(b"busy".to_vec()),
    )]);
    // A long retry_max_ms: only `relay retry` can make the next try come soon.
    let d = daemon(&hostile.base_url(), 600_000);
    append(&d, "w", 3);
    let st = wait_state(&d, "w", "backing_off", "503");
    let next = st["next_try_in_ms"].as_u64().unwrap();
    assert!(
        next <= 600_000,
        "Retry-After is capped at retry_max_ms: {st}"
    );
    hostile.honest();
    relay_retry(&d);
    // Well before the backoff would have ended.
    assert_delivered_exactly_once(&d, &upstream, "w");
}

#[test]
fn offsets_that_are_not_offsets_are_not_kept() {
    let upstream = RemoteServer::start(ServerKind::Rust);
    let hostile = HostileServer::start(&upstream.addr());
    // The append reaches the server, but its answer carries an offset no server may send:
    // not counted as delivered (the resend is answered 204: a duplicate, so still once).
    hostile.set(vec![Rule {
        target: Target::Append,
        answer: dstream_tests::hostile_server::Answer::ForwardWith {
            headers: vec![("stream-next-offset".into(), "../../etc".into())],
        },
    }]);
    let d = daemon(&hostile.base_url(), 300);
    append(&d, "o", 3);
    wait_state(&d, "o", "backing_off", "Stream-Next-Offset");
    hostile.honest();
    relay_retry(&d);
    assert_delivered_exactly_once(&d, &upstream, "o");

    // A well-formed but bogus offset is kept, and the next resync starts from it: the server
    // refuses it (400), and the relay reads the stream from its start instead of sticking.
    hostile.set(vec![Rule {
        target: Target::Append,
        answer: dstream_tests::hostile_server::Answer::ForwardWith {
            headers: vec![("stream-next-offset".into(), "zzzz-bogus".into())],
        },
    }]);
    append(&d, "o", 2);
    let n = d.client().read_all("o").len() as u64;
    wait_for("the bogus offset kept", LONG, || {
        stream_status(&d, "o").filter(|s| s["acked_lsn"] == n)
    });
    // A fence forces a resync from the kept offset.
    hostile.set(vec![Rule::reply(
        Target::Append,
        403,
        &[("producer-epoch", "99999999999999")],
        Body::Text(Vec::new()),
    )]);
    append(&d, "o", 1);
    wait_for("a resync after the fence", LONG, || {
        (hostile
            .counts
            .tail_reads
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0)
        .then_some(())
    });
    hostile.honest();
    relay_retry(&d);
    append(&d, "o", 1);
    assert_delivered_exactly_once(&d, &upstream, "o");
}
