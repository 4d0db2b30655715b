//! Concurrent writers and subscribers on one session; a subscriber that never reads; many
//! sessions ingested side by side on several pipeline threads.
#![cfg(unix)]

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use dstream_tests::serde_json::json;
use dstream_tests::{Client, Daemon, assert_contiguous, lsn_of, with_timeout};

const WRITERS: u64 = 8;
const PER_WRITER: u64 = 500;
const TOTAL: u64 = WRITERS * PER_WRITER;
const WINDOW: u64 = 25;

/// Append `range` of writer `w`'s events, `WINDOW` requests in flight; returns (lsn, id) per
/// event in send order.
fn write_range(
    c: &mut Client,
    session: &str,
    w: u64,
    range: std::ops::Range<u64>,
) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut k = range.start;
    while k < range.end {
        let end = (k + WINDOW).min(range.end);
        let ids: Vec<u64> = (k..end)
            .map(|k| c.send("append", json!({"session_id": session, "event": {"type": "w", "actor": format!("w{w}"), "payload": {"w": w, "k": k}}})))
            .collect();
        for id in ids {
            let r = c
                .wait_response(id)
                .unwrap_or_else(|e| panic!("writer {w}: append failed: {e}"));
            out.push(dstream_tests::lsn_id(&r));
        }
        k = end;
    }
    out
}

/// What a subscriber saw.
struct Seen {
    from: u64,
    lsns: Vec<u64>,
    ids: Vec<String>,
    caught_up: Vec<u64>,
    lagged: Vec<u64>,
}

/// Subscribe from `from` and collect events until `last` arrived; checks exactly-once, in order,
/// as they arrive.
fn subscribe_until(
    c: &mut Client,
    session: &str,
    from: u64,
    last: u64,
    subscribed: Option<Arc<Barrier>>,
) -> Seen {
    let r = c.ok(
        "subscribe",
        json!({"session_id": session, "from_lsn": from}),
    );
    let sub = r["subscription"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    if let Some(b) = subscribed {
        b.wait();
    }
    collect_until(c, &sub, from, last)
}

fn collect_until(c: &mut Client, sub: &str, from: u64, last: u64) -> Seen {
    let mut seen = Seen {
        from,
        lsns: Vec::new(),
        ids: Vec::new(),
        caught_up: Vec::new(),
        lagged: Vec::new(),
    };
    let mut expect = from;
    let deadline = Instant::now() + Duration::from_secs(90);
    while expect <= last {
        assert!(
            Instant::now() < deadline,
            "subscriber from {from}: only reached lsn {} of {last}",
            expect - 1
        );
        let n = c.next_notification(Duration::from_secs(30)).unwrap_or_else(|| {
            panic!("subscriber from {from}: no notification for 30 s while waiting for lsn {expect} (of {last})")
        });
        let p = &n["params"];
        assert_eq!(
            p["subscription"], sub,
            "notification for another subscription: {n}"
        );
        match n["method"].as_str() {
            Some("event") => {
                let lsn = lsn_of(&p["event"]);
                assert_eq!(
                    lsn, expect,
                    "subscriber from {from}: got lsn {lsn}, expected {expect} (exactly once, in order)"
                );
                seen.lsns.push(lsn);
                seen.ids
                    .push(p["event"]["id"].as_str().unwrap().to_string());
                expect += 1;
            }
            Some("caught_up") => {
                let l = p["lsn"].as_u64().unwrap_or_else(|| panic!("{n}"));
                assert_eq!(
                    l,
                    expect - 1,
                    "subscriber from {from}: caught_up must report the last delivered lsn: {n}"
                );
                seen.caught_up.push(l);
            }
            Some("lagged") => {
                let l = p["last_sent_lsn"].as_u64().unwrap_or_else(|| panic!("{n}"));
                assert_eq!(
                    l,
                    expect - 1,
                    "subscriber from {from}: lagged must report the last delivered lsn: {n}"
                );
                seen.lagged.push(l);
            }
            Some("heartbeat") => {}
            _ => panic!("unexpected notification: {n}"),
        }
    }
    // A subscriber that was still replaying when the writers finished may get its caught_up
    // only after the last event; it must come, and nothing else but heartbeats/lag notices.
    while seen.caught_up.is_empty() {
        let n = c.next_notification(Duration::from_secs(15)).unwrap_or_else(|| {
            panic!("subscriber from {from}: got every event up to {last} but no caught_up within 15 s")
        });
        match n["method"].as_str() {
            Some("caught_up") => {
                assert_eq!(n["params"]["lsn"], last, "subscriber from {from}: {n}");
                seen.caught_up.push(last);
            }
            Some("heartbeat") | Some("lagged") => {}
            _ => panic!("subscriber from {from}: unexpected notification after lsn {last}: {n}"),
        }
    }
    seen
}

#[test]
fn eight_writers_one_session_with_subscribers_joining_mid_stream() {
    let d = Daemon::start();
    let socket: PathBuf = d.socket();
    const S: &str = "conc";

    let phase1_done = Arc::new(Barrier::new(WRITERS as usize + 1));
    let resume = Arc::new(Barrier::new(WRITERS as usize + 1));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let socket = socket.clone();
            let (p1, resume) = (phase1_done.clone(), resume.clone());
            thread::spawn(move || {
                let mut c = Client::connect(&socket);
                let mut acks = write_range(&mut c, S, w, 0..PER_WRITER / 2);
                p1.wait();
                resume.wait();
                acks.extend(write_range(&mut c, S, w, PER_WRITER / 2..PER_WRITER));
                acks
            })
        })
        .collect();

    // Half the events are in; start subscribers (from the start, from the middle, from the end)
    // and let the writers go on while they replay.
    with_timeout("phase 1 of the writers", Duration::from_secs(60), {
        let p1 = phase1_done.clone();
        move || p1.wait()
    });
    let mut probe = d.client();
    let mid_last = probe.ok("sessions.get", json!({"session_id": S}))["last_lsn"]
        .as_u64()
        .unwrap();
    assert_eq!(mid_last, TOTAL / 2);
    let froms = [1, 1, mid_last / 2, mid_last / 2 + 1, mid_last + 1];
    let subscribed = Arc::new(Barrier::new(froms.len() + 1));
    let mut subs: Vec<_> = froms
        .iter()
        .map(|&from| {
            let socket = socket.clone();
            let b = subscribed.clone();
            thread::spawn(move || {
                subscribe_until(&mut Client::connect(&socket), S, from, TOTAL, Some(b))
            })
        })
        .collect();
    with_timeout("subscribing", Duration::from_secs(30), {
        let b = subscribed.clone();
        move || b.wait()
    });
    resume.wait();
    // One more that joins once the writers are running again (past the middle).
    let deadline = Instant::now() + Duration::from_secs(30);
    while probe.ok("sessions.get", json!({"session_id": S}))["last_lsn"]
        .as_u64()
        .unwrap()
        <= mid_last
    {
        assert!(Instant::now() < deadline, "the writers did not go on");
        thread::sleep(Duration::from_millis(1));
    }
    subs.push({
        let socket = socket.clone();
        thread::spawn(move || subscribe_until(&mut Client::connect(&socket), S, 1, TOTAL, None))
    });

    let acks: Vec<Vec<(u64, String)>> = writers
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect();
    let seen: Vec<Seen> = subs
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect();

    // Final state: 1..=TOTAL contiguous, each writer's events in its send order.
    let events = probe.read_all(S);
    assert_eq!(events.len() as u64, TOTAL);
    assert_contiguous(&events, 1, "final read");
    for (w, acks) in acks.iter().enumerate() {
        assert_eq!(acks.len() as u64, PER_WRITER);
        for (k, (lsn, id)) in acks.iter().enumerate() {
            let ev = &events[*lsn as usize - 1];
            assert_eq!(
                ev["id"],
                id.as_str(),
                "writer {w} event {k}: acknowledged id differs from stored: {ev}"
            );
            assert_eq!(
                ev["payload"],
                json!({"w": w, "k": k}),
                "writer {w} event {k} stored at lsn {lsn}: {ev}"
            );
        }
        assert!(
            acks.windows(2).all(|p| p[0].0 < p[1].0),
            "writer {w}: LSNs must follow the writer's send order"
        );
    }
    let ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    for s in &seen {
        assert_eq!(
            s.lsns.len() as u64,
            TOTAL - s.from + 1,
            "subscriber from {}",
            s.from
        );
        assert_eq!(
            &ids[s.from as usize - 1..],
            s.ids.as_slice(),
            "subscriber from {}: ids differ from read",
            s.from
        );
        assert!(
            !s.caught_up.is_empty(),
            "subscriber from {} never got caught_up",
            s.from
        );
    }
    let st = probe.ok("stats", json!({}));
    assert_eq!(st["appends"], TOTAL, "{st}");
}

#[test]
fn a_subscriber_that_never_reads_does_not_stall_writers() {
    const N: u64 = 20_000;
    const S: &str = "slow";
    let d = Daemon::start_with(
        "[store]\nfsync = \"never\"\n[subscriptions]\nlive_buffer_bytes = 65536\n",
    );
    let socket = d.socket();

    // The stuck subscriber: subscribes, then does not read the socket at all.
    let mut stuck = d.client();
    let r = stuck.ok("subscribe", json!({"session_id": S, "from_lsn": 1}));
    let sub = r["subscription"].as_str().unwrap().to_string();

    let pad = "x".repeat(1000);
    let writer = {
        let socket = socket.clone();
        thread::spawn(move || {
            let mut c = Client::connect(&socket);
            c.timeout = Duration::from_secs(60);
            let mut next = 1;
            while next <= N {
                let end = (next + 100).min(N + 1);
                let ids: Vec<u64> = (next..end)
                    .map(|i| c.send("append", json!({"session_id": S, "event": {"type": "bulk", "payload": {"i": i, "pad": pad}}})))
                    .collect();
                for (i, id) in (next..end).zip(ids) {
                    let r = c
                        .wait_response(id)
                        .unwrap_or_else(|e| panic!("append {i}: {e}"));
                    assert_eq!(r["lsn"], i, "{r}");
                }
                next = end;
            }
        })
    };
    with_timeout(
        "20,000 appends with a stuck subscriber",
        Duration::from_secs(60),
        move || {
            writer
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        },
    );

    // Other clients are fine too.
    let mut other = d.client();
    assert!(other.call("hello", json!({})).is_ok());
    assert_eq!(
        other.ok("sessions.get", json!({"session_id": S}))["last_lsn"],
        N
    );

    // Now the stuck subscriber reads: everything arrives exactly once, in order, with a lag notice.
    let seen = with_timeout(
        "the slow subscriber catching up",
        Duration::from_secs(90),
        move || {
            let seen = collect_until(&mut stuck, &sub, 1, N);
            (seen, stuck)
        },
    );
    let (seen, _stuck) = seen;
    assert_eq!(seen.lsns.len() as u64, N);
    assert!(
        !seen.lagged.is_empty(),
        "a subscriber 20,000 events behind with a 64 KiB live buffer must be told it lagged (caught_up: {:?})",
        seen.caught_up
    );
    let st = other.ok("stats", json!({}));
    assert!(
        st["lagged"].as_u64().is_some_and(|n| n >= 1),
        "stats.lagged counts the lag: {st}"
    );
    // Spot-check content.
    let last = other.ok("read", json!({"session_id": S, "from_lsn": N, "limit": 1}));
    assert_eq!(
        last["events"][0]["payload"]["i"], N,
        "{}",
        last["events"][0]["lsn"]
    );
}

/// Sessions ingested side by side on several pipeline threads: each session's events are
/// stored in the order its client sent them, whether or not the client named the session (the
/// daemon then reads it from the event), and every tool result names its request as its cause.
#[test]
fn many_sessions_ingested_on_several_pipeline_threads_keep_their_order_and_joins() {
    const SESSIONS: usize = 12;
    const CALLS: usize = 40;
    let d = Daemon::start_with("[plugins]\npipeline_threads = 3\n");
    let pipes = d
        .thread_names()
        .into_iter()
        .filter(|n| n.starts_with("dstream-pipe-"))
        .count();
    assert_eq!(pipes, 3, "{:?}", d.thread_names());
    let barrier = Arc::new(Barrier::new(SESSIONS));
    let sessions: Vec<_> = (0..SESSIONS)
        .map(|s| {
            let mut c = d.client();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let session = format!("pipes-{s}");
                barrier.wait();
                // Every call's request and result, all in flight at once on one connection;
                // every other ingest leaves the session for the daemon to read from the event.
                let ids: Vec<u64> = (0..CALLS)
                    .flat_map(|i| {
                        let call = format!("toolu_{s}_{i}");
                        let pre = dstream_tests::claude_pre_tool_use(&session, &call, "ls");
                        let mut post = pre.clone();
                        post["hook_event_name"] = json!("PostToolUse");
                        post["tool_response"] = json!({"stdout": format!("out {i}"), "stderr": ""});
                        [pre, post]
                    })
                    .enumerate()
                    .map(|(n, event)| {
                        let mut params = json!({"source": "claude-code", "event": event});
                        if n % 2 == 0 {
                            params["session_id"] = json!(session);
                        }
                        c.send("ingest", params)
                    })
                    .collect();
                for id in ids {
                    c.wait_response(id).unwrap();
                }
                session
            })
        })
        .collect();
    let mut c = d.client();
    for s in sessions {
        let session = s.join().unwrap();
        let events = c.ok("read", json!({"session_id": session, "limit": 1000}))["events"]
            .as_array()
            .unwrap()
            .clone();
        let calls: Vec<&dstream_tests::serde_json::Value> = events
            .iter()
            .filter(|e| {
                e["type"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("execution.tool_"))
            })
            .collect();
        assert_eq!(calls.len(), 2 * CALLS, "{session}: {events:?}");
        for (i, pair) in calls.chunks(2).enumerate() {
            let call = format!("toolu_{}_{i}", &session["pipes-".len()..]);
            let (request, result) = (pair[0], pair[1]);
            assert_eq!(
                request["type"], "execution.tool_use",
                "{session} #{i}: {request}"
            );
            assert_eq!(
                request["payload"]["tool_use_id"],
                call.as_str(),
                "{session} #{i}"
            );
            assert_eq!(
                result["type"], "execution.tool_result",
                "{session} #{i}: {result}"
            );
            assert_eq!(
                result["payload"]["tool_use_id"],
                call.as_str(),
                "{session} #{i}"
            );
            assert_eq!(
                result["causation_id"], request["id"],
                "{session} #{i}: the result does not name its request"
            );
        }
    }
}
