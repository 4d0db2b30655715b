//! Resources follow active sessions, not history: thousands of sessions under a small
//! descriptor limit all take appends and read back, with a fixed number of threads, before and
//! after a restart.
#![cfg(target_os = "linux")]

use dstream_tests::serde_json::json;
use dstream_tests::{Client, Daemon, lsn_of};

const SESSIONS: usize = 3000;
const FD_LIMIT: u64 = 256;
/// Connections loading sessions at once, and requests in flight on each.
const CONNECTIONS: usize = 4;
const WINDOW: usize = 64;

/// Threads the daemon runs however many sessions (daemon/src), besides the tokio workers and
/// pipeline threads counted below: the main thread, the commit, config-watch and search-index
/// threads and the watcher's inotify thread (5); one thread per bundled Lua plugin (3); up to 8 WAL checkpoint threads while a
/// checkpoint runs (store/commit.rs); and tokio's blocking pool, which grows with blocking
/// calls at once, not with sessions (this test's reads come one at a time): 8 is room to spare.
const FIXED_THREADS: u64 = 5 + 3 + 8 + 8;

/// Tokio's worker threads: one per core the daemon may use (`available_parallelism`, as tokio
/// counts them), unless `TOKIO_WORKER_THREADS`, which the daemon inherits, says otherwise.
fn tokio_workers() -> u64 {
    match std::env::var("TOKIO_WORKER_THREADS") {
        Ok(n) => n.parse().expect("TOKIO_WORKER_THREADS is a number"),
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
    }
}

/// The pipeline's threads by default: one per two cores, at most 4 (pipeline/route.rs).
fn pipeline_threads() -> u64 {
    (std::thread::available_parallelism().map_or(1, |n| n.get()) / 2).clamp(1, 4) as u64
}

/// Fails the test if the daemon runs more threads than its workers and fixed threads.
fn assert_thread_count(d: &Daemon, when: &str) {
    let limit = tokio_workers() + pipeline_threads() + FIXED_THREADS;
    let names = d.thread_names();
    assert!(
        names.len() as u64 <= limit,
        "{} threads {when} (at most {limit}: {} tokio workers, {} pipeline threads and \
         {FIXED_THREADS} others): {names:?}",
        names.len(),
        tokio_workers(),
        pipeline_threads()
    );
}

fn session(i: usize) -> String {
    format!("many-{i:05}")
}

/// Appends one event to every session in `ids`, pipelined over a few connections at once (so
/// that many distinct sessions are in flight together), and returns the LSNs given.
fn append_each(d: &Daemon, ids: &[String], round: u32) -> Vec<u64> {
    let per = ids.len().div_ceil(CONNECTIONS);
    let handles: Vec<_> = ids
        .chunks(per)
        .map(|part| {
            let part = part.to_vec();
            let mut c = d.client();
            std::thread::spawn(move || {
                let mut lsns = Vec::with_capacity(part.len());
                for chunk in part.chunks(WINDOW) {
                    let sent: Vec<u64> = chunk
                        .iter()
                        .map(|s| {
                            c.send(
                                "append",
                                json!({"session_id": s, "event": {"type": "user.input", "payload": {"round": round, "s": s}}}),
                            )
                        })
                        .collect();
                    for id in sent {
                        let r = c
                            .wait_response(id)
                            .unwrap_or_else(|e| panic!("append refused: {e}"));
                        lsns.push(r["lsn"].as_u64().unwrap());
                    }
                }
                lsns
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect()
}

fn check_all_readable(c: &mut Client, ids: &[String], rounds: u32) {
    for s in ids {
        let events = c.read_all(s);
        assert_eq!(events.len(), rounds as usize, "{s}: {events:?}");
        for (i, e) in events.iter().enumerate() {
            assert_eq!(lsn_of(e), i as u64 + 1, "{s}");
            assert_eq!(e["payload"]["s"], json!(s));
            assert_eq!(e["payload"]["round"], json!(i as u32 + 1));
        }
    }
}

#[test]
fn thousands_of_sessions_under_a_small_descriptor_limit() {
    // The default store.max_open_files (128), with more distinct sessions in flight at once
    // than the descriptor limit leaves room for.
    let mut d = Daemon::new(None);
    d.limit_open_files(FD_LIMIT);
    d.restart();
    let ids: Vec<String> = (0..SESSIONS).map(session).collect();
    let mut c = d.client();

    let lsns = append_each(&d, &ids, 1);
    assert!(
        lsns.iter().all(|&l| l == 1),
        "each new session starts at lsn 1"
    );
    check_all_readable(&mut c, &ids, 1);
    let listed = c.ok("sessions.list", json!({}))["sessions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(listed, SESSIONS);

    assert_thread_count(&d, &format!("after writing {SESSIONS} sessions"));
    let fds = d.open_fds();
    assert!(
        fds < FD_LIMIT as usize,
        "{fds} descriptors open under a limit of {FD_LIMIT}"
    );

    // A restart over all of them: every session still readable and appendable, LSNs go on.
    drop(c);
    assert_eq!(d.stop().code(), Some(0));
    d.restart();
    let mut c = d.client();
    let lsns = append_each(&d, &ids, 2);
    assert!(
        lsns.iter().all(|&l| l == 2),
        "LSNs continue after the restart"
    );
    check_all_readable(&mut c, &ids, 2);
    assert_thread_count(&d, "after the restart");
}

/// A subscriber that stops reading while large events are appended holds only a bounded
/// amount of the daemon's memory (its outbound queue and the live stream are bounded in bytes);
/// when it reads again it is told it lagged, and still gets every event once, in order.
#[test]
fn a_stalled_subscriber_of_large_events_costs_bounded_memory() {
    const EVENTS: u64 = 240;
    const EVENT_BYTES: usize = 512 * 1024;
    let d = Daemon::start_with(
        "[store]\nfsync = \"never\"\n[subscriptions]\noutbound_bytes = 1048576\nlive_buffer_bytes = 4194304\n",
    );
    let mut stalled = d.client();
    let r = stalled.ok("subscribe", json!({"session_id": "big", "from_lsn": 1}));
    let sub = r["subscription"].as_str().unwrap().to_string();

    let mut w = d.client();
    let text = "x".repeat(EVENT_BYTES);
    for i in 0..EVENTS {
        w.append("big", "blob", json!({"i": i, "text": text}));
    }
    let rss = w.ok("stats", json!({}))["rss_bytes"].as_u64().unwrap();
    let appended = EVENTS as usize * EVENT_BYTES;
    assert!(
        rss < 96 << 20,
        "daemon RSS is {} MiB with a stalled subscriber after {} MiB of events",
        rss >> 20,
        appended >> 20
    );

    let mut next = 1;
    let mut lagged = 0;
    while next <= EVENTS {
        let n = stalled
            .next_notification(std::time::Duration::from_secs(30))
            .unwrap_or_else(|| panic!("no notification while waiting for lsn {next}"));
        let p = &n["params"];
        assert_eq!(p["subscription"], json!(sub), "{n}");
        match n["method"].as_str().unwrap() {
            "event" => {
                assert_eq!(lsn_of(&p["event"]), next, "each event once, in order");
                assert_eq!(p["event"]["payload"]["i"], json!(next - 1));
                next += 1;
            }
            "lagged" => lagged += 1,
            "caught_up" | "heartbeat" => {}
            other => panic!("unexpected notification {other}: {n}"),
        }
    }
    assert!(lagged > 0, "the stalled subscriber must be told it lagged");
}
