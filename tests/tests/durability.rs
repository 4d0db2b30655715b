//! Restart persistence, crash safety under load, and recovery from torn or corrupt logs.
#![cfg(unix)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use dstream_tests::serde_json::{Value, json};
use dstream_tests::{
    Client, Daemon, ReadError, assert_contiguous, codes, files_under, line_ranges, lsn_of,
    seal_line, verify_log_file, write_file,
};

fn sorted_sessions(c: &mut Client) -> Vec<Value> {
    let list = c.ok("sessions.list", json!({}));
    let mut s = list["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .clone();
    s.sort_by_key(|s| s["session_id"].as_str().unwrap().to_string());
    s
}

/// A log whose lines carry every field (as written before a line could leave `stream_id` and
/// `timestamp` out) reads as it did, and goes on with compact lines after it: both kinds in
/// one file, across a restart, with the session's listing unchanged.
#[test]
fn a_log_of_full_lines_reads_the_same_and_takes_compact_ones_after_it() {
    let mut d = Daemon::start();
    let mut c = d.client();
    for i in 0..20 {
        c.append_event(
            "old",
            json!({"type": "execution.tool_use", "actor": "claude-code", "causation_id": format!("c{i}"),
                   "payload": {"i": i, "s": "\"q\" \n"}, "metadata": {"hook": "PreToolUse"}}),
        );
    }
    let before = c.read_all("old");
    drop(c);
    assert_eq!(d.stop().code(), Some(0));

    // Each line rewritten with every field, in the order the daemon used to write them.
    let compact = fs::read(d.log_path("old")).unwrap();
    let mut full = Vec::new();
    for e in &before {
        let f = |k: &str| serde_json::to_string(&e[k]).unwrap();
        let body = format!(
            r#"{{"lsn":{},"id":{},"type":{},"session_id":{},"stream_id":{},"causation_id":{},"actor":{},"timestamp":{},"payload":{},"metadata":{}"#,
            f("lsn"),
            f("id"),
            f("type"),
            f("session_id"),
            f("stream_id"),
            f("causation_id"),
            f("actor"),
            f("timestamp"),
            f("payload"),
            f("metadata")
        );
        full.extend_from_slice(&seal_line(body.as_bytes()));
    }
    assert!(
        full.len() > compact.len() + 20 * 40,
        "compact lines save the two fields: {} vs {} bytes",
        compact.len(),
        full.len()
    );
    fs::write(d.log_path("old"), &full).unwrap();
    let _ = fs::remove_file(d.log_path("old").with_extension("idx"));
    d.restart();

    let mut c = d.client();
    assert_eq!(c.read_all("old"), before, "full lines read as before");
    for i in 20..25 {
        c.append_event("old", json!({"type": "user.input", "payload": {"i": i}}));
    }
    let all = c.read_all("old");
    assert_eq!(&all[..20], &before[..]);
    for e in &all {
        assert_eq!(e["stream_id"], json!("old"), "{e}");
        let id = ulid::Ulid::from_string(e["id"].as_str().unwrap()).unwrap();
        assert_eq!(e["timestamp"], json!(id.timestamp_ms()), "{e}");
    }
    let listed = sorted_sessions(&mut c);
    drop(c);
    assert_eq!(d.stop().code(), Some(0));
    d.restart();
    let mut c = d.client();
    assert_eq!(
        c.read_all("old"),
        all,
        "both kinds of line, after a restart"
    );
    assert_eq!(sorted_sessions(&mut c), listed);
    assert_eq!(listed[0]["first_ts"], before[0]["timestamp"], "{listed:?}");
    let recs = verify_log_file(&d.log_path("old"));
    assert!(recs[0].get("timestamp").is_some() && recs[24].get("timestamp").is_none());
}

#[test]
fn restart_after_sigterm_keeps_every_event_identical() {
    let mut d = Daemon::start();
    let mut c = d.client();
    for i in 0..30 {
        c.append_event(
            "r1",
            json!({"type": "execution.tool_use", "actor": "claude-code", "payload": {"i": i, "s": "ünïcödé \"q\" \n"},
                   "causation_id": format!("c{i}"), "correlation_id": "turn-1", "metadata": {"hook": "PreToolUse"}}),
        );
    }
    for i in 0..5 {
        c.append_event(
            "r2",
            json!({"type": "user.input", "stream_id": "r1", "payload": {"i": i}}),
        );
    }
    let r1 = c.read_all("r1");
    let r2 = c.read_all("r2");
    let sessions = sorted_sessions(&mut c);
    // An idle subscriber is connected while the daemon stops.
    let mut idle = d.client();
    idle.ok("subscribe", json!({"session_id": "r1", "from_lsn": 31}));

    let status = d.stop();
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM must stop cleanly with exit code 0 ({status})"
    );
    assert!(
        !d.socket().exists(),
        "the socket file must be removed on a clean stop"
    );
    // Open connections were closed.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match idle.read_frame_until(deadline) {
            Ok(frame) => assert!(
                frame.get("method").is_some(),
                "unexpected frame after stop: {frame}"
            ),
            Err(ReadError::Closed) | Err(ReadError::Io(_)) => break,
            Err(ReadError::Timeout) => panic!("a connection stayed open after the daemon exited"),
        }
    }

    d.restart();
    let mut c = d.client();
    assert_eq!(c.read_all("r1"), r1, "r1 after restart");
    assert_eq!(c.read_all("r2"), r2, "r2 after restart");
    assert_eq!(
        sorted_sessions(&mut c),
        sessions,
        "sessions.list after restart"
    );
    assert_eq!(
        c.append("r1", "t", json!({})).0,
        31,
        "LSNs continue after a restart"
    );
    let r1 = c.read_all("r1");

    // The index is a cache: delete it and everything still reads the same, including seeks.
    assert_eq!(d.stop().code(), Some(0));
    let mut removed = 0;
    for f in files_under(&d.sessions_dir()) {
        if f.extension().is_some_and(|e| e == "idx") {
            fs::remove_file(&f).unwrap();
            removed += 1;
        }
    }
    d.restart();
    let mut c = d.client();
    assert_eq!(
        c.read_all("r1"),
        r1,
        "r1 after deleting the index (removed {removed} .idx files)"
    );
    let r = c.ok(
        "read",
        json!({"session_id": "r1", "from_lsn": 17, "limit": 5}),
    );
    assert_eq!(r["events"].as_array().unwrap().as_slice(), &r1[16..21]);
    assert_eq!(c.read_all("r2"), r2);

    // On disk: one line per event, each with a valid CRC32C, carrying the event's fields. A
    // line leaves out what it and its log already say: `session_id` (the log's name),
    // `stream_id` when it is the session's own, and the `id` the log named the event with
    // (from the session, the LSN and the millisecond, which the line keeps as `ts`) with the
    // `timestamp`, that millisecond.
    let mut ids = std::collections::HashSet::new();
    for s in ["r1", "r2"] {
        let recs = verify_log_file(&d.log_path(s));
        let events = c.read_all(s);
        assert_eq!(recs.len(), events.len(), "{s}: one line per event");
        let mut last_id = String::new();
        for (rec, ev) in recs.iter().zip(&events) {
            assert!(rec.get("session_id").is_none(), "{s}: {rec}");
            assert_eq!(ev["session_id"], json!(s), "{s}: {ev}");
            assert!(rec.get("id").is_none(), "{s}: {rec}");
            assert_eq!(rec["ts"], ev["timestamp"], "{s}: {rec} vs {ev}");
            assert!(ev.get("ts").is_none(), "{s}: {ev}");
            let id = ev["id"].as_str().unwrap().to_string();
            assert!(id > last_id, "{s}: ids increase: {id} after {last_id}");
            assert!(ids.insert(id.clone()), "{s}: {id} is unique");
            last_id = id;
            for k in ["lsn", "type", "payload"] {
                assert_eq!(
                    rec[k], ev[k],
                    "{s}: field {k} of the stored line {rec} vs read {ev}"
                );
            }
            // r2 is a child of r1's lineage: its stream_id is kept.
            match s {
                "r1" => assert!(rec.get("stream_id").is_none(), "{s}: {rec}"),
                _ => assert_eq!(rec["stream_id"], json!("r1"), "{s}: {rec}"),
            }
            assert_eq!(ev["stream_id"], json!("r1"), "{s}: {ev}");
            assert!(rec.get("timestamp").is_none(), "{s}: {rec}");
            let id = ulid::Ulid::from_string(ev["id"].as_str().unwrap()).unwrap();
            assert_eq!(ev["timestamp"], json!(id.timestamp_ms()), "{s}: {ev}");
        }
    }
    // An event named before its commit (an agent's, by the pipeline) keeps its id on the line,
    // and a restart reads every id back unchanged.
    c.ok(
        "ingest",
        json!({"source": "claude-code", "session_id": "r3",
               "event": {"hook_event_name": "UserPromptSubmit", "session_id": "r3", "prompt": "hi"}}),
    );
    let r3 = c.read_all("r3");
    let recs = verify_log_file(&d.log_path("r3"));
    assert_eq!(recs.len(), r3.len());
    for (rec, ev) in recs.iter().zip(&r3) {
        assert_eq!(rec["id"], ev["id"], "{rec} vs {ev}");
    }
    let before = [c.read_all("r1"), c.read_all("r2"), r3];
    drop(c);
    assert_eq!(d.stop().code(), Some(0));
    d.restart();
    let mut c = d.client();
    assert_eq!(
        [c.read_all("r1"), c.read_all("r2"), c.read_all("r3")],
        before
    );
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_event() {
    const CLIENTS: usize = 8;
    let mut d = Daemon::start_with("[store]\nfsync = \"always\"\n");
    let socket = d.socket();
    let acked = Arc::new(AtomicU64::new(0));

    let writers: Vec<_> = (0..CLIENTS)
        .map(|w| {
            let socket = socket.clone();
            let acked = acked.clone();
            thread::spawn(move || {
                let session = format!("k{}", w % 4);
                let mut c = Client::connect(&socket);
                c.timeout = Duration::from_secs(10);
                let mut mine: Vec<(u64, String)> = Vec::new();
                for k in 0u64.. {
                    let params = json!({"session_id": session, "event": {"type": "load", "payload": {"w": w, "k": k, "pad": "p".repeat(200)}}});
                    let id = match c.try_send("append", params) {
                        Ok(id) => id,
                        Err(_) => break,
                    };
                    match c.try_wait_response(id) {
                        Ok(Ok(r)) => {
                            mine.push(dstream_tests::lsn_id(&r));
                            acked.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(Err(e)) => panic!("writer {w}: append failed before the kill: {e}"),
                        Err(ReadError::Timeout) => panic!("writer {w}: no reply and no disconnect within 10 s"),
                        Err(_) => break, // the daemon died
                    }
                }
                (session, mine)
            })
        })
        .collect();

    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.load(Ordering::SeqCst) < 400 {
        assert!(
            Instant::now() < deadline,
            "only {} appends acknowledged in 60 s",
            acked.load(Ordering::SeqCst)
        );
        thread::sleep(Duration::from_millis(5));
    }
    d.kill9();
    let mut by_session: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for h in writers {
        let (s, mine) = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        by_session.entry(s).or_default().extend(mine);
    }
    let total: usize = by_session.values().map(Vec::len).sum();
    assert!(total >= 400);

    // The dead daemon left its socket file behind; a restart replaces it.
    assert!(
        socket.exists(),
        "setup: SIGKILL leaves the socket file behind"
    );
    assert!(
        UnixStream::connect(&socket).is_err(),
        "nobody listens on the stale socket"
    );
    d.restart();

    let mut c = d.client();
    let mut stored: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (s, acks) in &by_session {
        let events = c.read_all(s);
        assert_contiguous(&events, 1, s);
        for (lsn, id) in acks {
            let ev = events.get(*lsn as usize - 1).unwrap_or_else(|| {
                panic!(
                    "{s}: acknowledged lsn {lsn} (id {id}) is missing; only {} events",
                    events.len()
                )
            });
            assert_eq!(
                ev["id"],
                id.as_str(),
                "{s}: acknowledged lsn {lsn} has a different id: {ev}"
            );
        }
        stored.insert(s.clone(), events);
    }
    // Appending continues the sequence.
    for (s, events) in &stored {
        assert_eq!(
            c.append(s, "after", json!({})).0,
            events.len() as u64 + 1,
            "{s}"
        );
    }
    drop(c);
    assert_eq!(d.stop().code(), Some(0));
    for (s, events) in &stored {
        let recs = verify_log_file(&d.log_path(s));
        assert_eq!(
            recs.len(),
            events.len() + 1,
            "{s}: lines in the log vs events read"
        );
        // The log named these events: their lines keep the millisecond in place of the id.
        for (rec, ev) in recs.iter().zip(events) {
            assert_eq!(
                (lsn_of(rec), &rec["ts"]),
                (lsn_of(ev), &ev["timestamp"]),
                "{s}: log line vs read"
            );
        }
    }
}

/// The session logs are synced only at checkpoints; until then the shared write-ahead log is
/// what makes an acknowledged append durable. Simulate a power loss that took the unsynced end
/// of every log (cut after SIGKILL) and check that a restart puts every acknowledged event back.
#[test]
fn the_write_ahead_log_restores_what_the_session_logs_lost() {
    let mut d = Daemon::start();
    let mut c = d.client();
    let sessions = ["wal-a", "wal-b", "wal-c", "wal-d"];
    let mut acked: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for i in 0..40 {
        let s = sessions[i % sessions.len()];
        c.append(s, "user.input", json!({"i": i, "text": "ünï \"q\""}));
    }
    for s in sessions {
        acked.insert(s, c.read_all(s));
    }
    drop(c);
    d.kill9();

    for (n, s) in sessions.iter().enumerate() {
        let path = d.log_path(s);
        let data = fs::read(&path).unwrap();
        let lines = line_ranges(&data);
        // Keep 0..n whole lines of each log, and half of the next line for one of them.
        let keep = lines.get(n).map_or(0, |&(start, _)| start);
        let mut cut = data[..keep].to_vec();
        if n == 2 {
            let (start, end) = lines[n];
            cut.extend_from_slice(&data[start..start + (end - start) / 2]);
        }
        write_file(&path, &cut);
    }

    d.restart();
    let mut c = d.client();
    for s in sessions {
        let events = c.read_all(s);
        let n = acked[s].len();
        assert_eq!(
            events[..n.min(events.len())],
            acked[s][..],
            "{s}: every acknowledged event is back, identical"
        );
        // The half-written line was cut (and said so) before the records were restored.
        for extra in &events[n..] {
            assert_eq!(extra["type"], "log.recovered", "{s}: {extra}");
        }
        let on_disk = verify_log_file(&d.log_path(s));
        assert_eq!(on_disk.len(), events.len(), "{s}: restored on disk");
    }
    // And the sessions go on from there.
    assert_eq!(c.append("wal-a", "t", json!({})).0, 11);
}

fn bytes_contain(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

/// Some file under `dir` whose content contains `needle`.
fn quarantined_with(d: &Daemon, needle: &[u8]) -> bool {
    files_under(&d.quarantine_dir())
        .iter()
        .any(|f| bytes_contain(&fs::read(f).unwrap_or_default(), needle))
}

#[test]
fn torn_tail_is_cut_reported_and_quarantined() {
    let mut d = Daemon::start();
    let mut c = d.client();
    for i in 0..10 {
        c.append(
            "torn-a",
            "t",
            json!({"i": i, "text": "hello world, this is a line"}),
        );
    }
    for i in 0..5 {
        c.append("torn-b", "t", json!({"i": i}));
    }
    for i in 0..4 {
        c.append("fine", "t", json!({"i": i}));
    }
    let a = c.read_all("torn-a");
    let b = c.read_all("torn-b");
    let fine = c.read_all("fine");
    drop(c);
    assert_eq!(d.stop().code(), Some(0));

    // torn-a: cut the file in the middle of its last line.
    let pa = d.log_path("torn-a");
    let data = fs::read(&pa).unwrap();
    let ranges = line_ranges(&data);
    assert_eq!(ranges.len(), 10);
    let (start, end) = ranges[9];
    let cut = start + (end - start) / 2;
    let torn_a = data[start..cut].to_vec();
    write_file(&pa, &data[..cut]);
    // torn-b: a partial line without a newline at the end.
    let pb = d.log_path("torn-b");
    let torn_b = b"{\"lsn\":6,\"id\":\"01JDQ3V9S6X4M2B1K0ZP7T".to_vec();
    let mut data = fs::read(&pb).unwrap();
    data.extend_from_slice(&torn_b);
    write_file(&pb, &data);

    d.restart();
    let mut c = d.client();
    let got_a = c.read_all("torn-a");
    assert_contiguous(&got_a, 1, "torn-a");
    assert_eq!(
        got_a.len(),
        10,
        "9 intact events + log.recovered: {got_a:?}"
    );
    assert_eq!(&got_a[..9], &a[..9], "the intact events are unchanged");
    assert_eq!(got_a[9]["type"], "log.recovered", "{}", got_a[9]);
    assert_eq!(got_a[9]["session_id"], "torn-a", "{}", got_a[9]);

    let got_b = c.read_all("torn-b");
    assert_contiguous(&got_b, 1, "torn-b");
    assert_eq!(got_b.len(), 6, "{got_b:?}");
    assert_eq!(&got_b[..5], b.as_slice());
    assert_eq!(got_b[5]["type"], "log.recovered", "{}", got_b[5]);

    assert_eq!(c.read_all("fine"), fine, "an intact log is untouched");

    assert!(
        quarantined_with(&d, &torn_a),
        "the cut bytes of torn-a are kept under quarantine/"
    );
    assert!(
        quarantined_with(&d, &torn_b),
        "the cut bytes of torn-b are kept under quarantine/"
    );

    assert_eq!(
        c.append("torn-a", "t", json!({})).0,
        11,
        "appends continue after the recovered event"
    );
    assert_eq!(c.append("torn-b", "t", json!({})).0, 7);
    drop(c);
    assert_eq!(d.stop().code(), Some(0));
    for s in ["torn-a", "torn-b", "fine"] {
        verify_log_file(&d.log_path(s));
    }

    // A second restart does not report anything new.
    d.restart();
    let mut c = d.client();
    assert_eq!(c.read_all("torn-a").len(), 11);
    assert_eq!(c.read_all("fine"), fine);
}

/// Damage inside a log (or a complete last line with a bad checksum) quarantines the session:
/// `sessions.list` shows it with the reason and offset, reads return the good prefix and say
/// where it stops, appends are refused, and `repair` (RPC or CLI) moves the bad bytes aside,
/// keeps every valid record with its LSN, and reopens the session above every LSN handed out,
/// without a restart.
#[test]
fn quarantine_shows_the_damage_and_repair_reopens_the_session() {
    let mut d = Daemon::start();
    let mut c = d.client();
    let names = ["bad-crc", "bad-json", "bad-last"];
    for s in names {
        for i in 0..10 {
            c.append(
                s,
                "t",
                json!({"i": i, "text": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}),
            );
        }
    }
    for i in 0..5 {
        c.append("good", "t", json!({"i": i}));
    }
    let original: BTreeMap<&str, Vec<Value>> = names.iter().map(|s| (*s, c.read_all(s))).collect();
    let good = c.read_all("good");
    drop(c);
    assert_eq!(d.stop().code(), Some(0));

    // Flip one character inside a string of line `n`: still JSON, but the CRC is wrong.
    let flip = |s: &str, n: usize| -> (Vec<u8>, usize) {
        let p = d.log_path(s);
        let mut data = fs::read(&p).unwrap();
        let (start, end) = line_ranges(&data)[n];
        let pos = start
            + data[start..end]
                .windows(8)
                .position(|w| w == b"aaaaaaaa")
                .unwrap()
            + 4;
        data[pos] = b'b';
        write_file(&p, &data);
        (data[start..=end].to_vec(), start)
    };
    let (bad_line_crc, offset_crc) = flip("bad-crc", 2);
    let (bad_line_last, offset_last) = flip("bad-last", 9);
    // bad-json: break line 4's JSON.
    let p = d.log_path("bad-json");
    let mut data = fs::read(&p).unwrap();
    let (start, end) = line_ranges(&data)[3];
    data[start + (end - start) / 2] = 0x01;
    write_file(&p, &data);
    let offset_json = start;

    d.restart();
    let mut c = d.client();
    let expect = [
        ("bad-crc", 2u64, offset_crc),
        ("bad-json", 3, offset_json),
        ("bad-last", 9, offset_last),
    ];
    let listed = sorted_sessions(&mut c);
    for (s, last_good, offset) in expect {
        let info = listed
            .iter()
            .find(|i| i["session_id"] == s)
            .unwrap_or_else(|| panic!("{s} must stay listed: {listed:?}"));
        let q = &info["quarantined"];
        assert_eq!(q["offset"], json!(offset), "{s}: {info}");
        assert_eq!(q["last_good_lsn"], json!(last_good), "{s}: {info}");
        assert!(!q["reason"].as_str().unwrap().is_empty(), "{s}: {info}");

        let r = c.ok("read", json!({"session_id": s}));
        assert_eq!(
            r["events"].as_array().unwrap().as_slice(),
            &original[s][..last_good as usize],
            "{s}: a read returns the good prefix"
        );
        assert_eq!(
            r["quarantined"]["last_good_lsn"],
            json!(last_good),
            "{s}: {r}"
        );

        let e = c.err("append", json!({"session_id": s, "event": {"type": "t"}}));
        assert_eq!(e.code, codes::SESSION_QUARANTINED, "{s}: {e}");
        assert!(e.message.contains("dstream repair"), "{s}: {e}");
    }
    // Other sessions keep working.
    assert_eq!(c.read_all("good"), good);
    assert_eq!(c.append("good", "t", json!({})).0, 6);

    // Still quarantined after another restart: nothing starts over at lsn 1.
    drop(c);
    assert_eq!(d.stop().code(), Some(0));
    d.restart();
    let mut c = d.client();
    for s in names {
        let e = c.err("append", json!({"session_id": s, "event": {"type": "t"}}));
        assert_eq!(e.code, codes::SESSION_QUARANTINED, "{s}: {e}");
    }

    // Repair through the RPC, without a restart.
    let r = c.ok("repair", json!({"session_id": "bad-crc"}));
    assert_eq!(r["kept_records"], json!(9), "{r}");
    assert_eq!(r["lost_lsns"], json!([[3, 3]]), "{r}");
    assert_eq!(r["resumed_at"], json!(11), "{r}");
    let moved = std::path::PathBuf::from(r["moved_to"].as_str().unwrap());
    assert_eq!(moved.parent().unwrap(), d.sessions_dir(), "next to the log");
    assert_eq!(
        fs::read(&moved).unwrap(),
        bad_line_crc,
        "the bad bytes, moved aside"
    );
    let events = c.read_all("bad-crc");
    let lsns: Vec<u64> = events.iter().map(lsn_of).collect();
    assert_eq!(lsns, [1, 2, 4, 5, 6, 7, 8, 9, 10, 11]);
    assert_eq!(&events[..2], &original["bad-crc"][..2]);
    assert_eq!(&events[2..9], &original["bad-crc"][3..]);
    assert_eq!(events[9]["type"], "log.recovered");
    assert_eq!(c.append("bad-crc", "t", json!({})).0, 12);
    let e = c.err("repair", json!({"session_id": "bad-crc"}));
    assert_eq!(e.code, codes::INVALID_PARAMS, "a healthy session: {e}");

    // A complete last line with a bad checksum was never silently dropped; repair keeps the
    // nine before it and does not hand out its LSN again.
    let r = c.ok("repair", json!({"session_id": "bad-last"}));
    assert_eq!(r["lost_lsns"], json!([[10, 10]]), "{r}");
    assert_eq!(
        fs::read(r["moved_to"].as_str().unwrap()).unwrap(),
        bad_line_last
    );
    assert_eq!(c.append("bad-last", "t", json!({})).0, 12);

    // And through the CLI.
    let out = std::process::Command::new(dstream_tests::daemon_bin())
        .args(["repair", "bad-json", "--socket"])
        .arg(d.socket())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("kept 9 valid records"), "{stdout}");
    assert_eq!(c.append("bad-json", "t", json!({})).0, 12);

    // A restart keeps all of it, and the LSNs go on.
    let before = c.read_all("bad-crc");
    drop(c);
    assert_eq!(d.stop().code(), Some(0));
    d.restart();
    let mut c = d.client();
    assert_eq!(c.read_all("bad-crc"), before);
    assert_eq!(c.append("bad-crc", "t", json!({})).0, 13);
    assert!(
        sorted_sessions(&mut c)
            .iter()
            .all(|s| s.get("quarantined").is_none())
    );
}

/// A small write-ahead log fills many times over: each time the logs are synced and it starts
/// over at the top. Every acknowledged event survives a SIGKILL, and the file never grows.
#[test]
fn the_write_ahead_log_wraps_through_checkpoints_without_losing_anything() {
    let mut d = Daemon::start_with("[daemon]\nmax_frame_bytes = 65536\n[store]\nwal_bytes = 1\n");
    let wal = d.data_dir().join("wal");
    let wal_len = fs::metadata(&wal).unwrap().len();
    assert!(
        wal_len < 2 << 20,
        "the configured minimum is honoured: {wal_len}"
    );
    let mut c = d.client();
    let text = "w".repeat(6000);
    let mut acked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // ~8 MiB through a ~1.1 MiB log: several checkpoints.
    for i in 0..1500 {
        let s = format!("wrap-{}", i % 24);
        let (_, id) = c.append(&s, "t", json!({"i": i, "text": text}));
        acked.entry(s).or_default().push(id);
    }
    assert_eq!(
        fs::metadata(&wal).unwrap().len(),
        wal_len,
        "preallocated, never grown"
    );
    drop(c);
    d.kill9();
    d.restart();
    let mut c = d.client();
    for (s, ids) in &acked {
        let events = c.read_all(s);
        let got: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
        assert_eq!(got, *ids, "{s}: every acknowledged event, in order");
    }
}

fn counter(c: &mut Client, name: &str) -> u64 {
    let stats = c.call("stats", json!({})).expect("stats");
    stats[name]
        .as_u64()
        .unwrap_or_else(|| panic!("stats has no {name}: {stats}"))
}

/// Under `fsync = "always"` a client that waits for each reply has its append committed by the
/// thread that read it (no hand-over to the commit thread and back), durable before the reply:
/// every one survives a SIGKILL. A client that sends many at once still has them share syncs.
#[test]
fn a_lone_client_commits_on_the_spot_and_a_pipelining_one_shares_syncs() {
    let mut d = Daemon::start_with("[store]\nfsync = \"always\"\n");
    let mut c = Client::connect(&d.socket());
    const N: u64 = 200;

    let direct = counter(&mut c, "direct_appends");
    let mut lone = Vec::new();
    for k in 0..N {
        let r = c
            .call(
                "append",
                json!({"session_id": "lone", "event": {"type": "t", "payload": {"k": k}}}),
            )
            .expect("append");
        lone.push(r["id"].as_str().expect("id").to_string());
    }
    let direct_lone = counter(&mut c, "direct_appends") - direct;
    assert!(
        direct_lone >= N / 2,
        "only {direct_lone} of {N} appends from a client waiting for each reply were committed \
         on the spot"
    );

    // All at once, in one write: they reach the daemon together and are committed together.
    let (direct, fsyncs) = (counter(&mut c, "direct_appends"), counter(&mut c, "fsyncs"));
    let first_id = 1_000_000;
    let mut burst = Vec::new();
    for k in 0..N {
        let request = json!({"jsonrpc": "2.0", "id": first_id + k, "method": "append",
            "params": {"session_id": "burst", "event": {"type": "t", "payload": {"k": k}}}});
        burst.extend(dstream_tests::serde_json::to_vec(&request).unwrap());
        burst.push(b'\n');
    }
    c.try_send_raw(&burst).expect("send the burst");
    let mut burst_ids = Vec::new();
    for k in 0..N {
        let r = c.wait_response(first_id + k).expect("append in the burst");
        burst_ids.push(r["id"].as_str().expect("id").to_string());
    }
    let direct_burst = counter(&mut c, "direct_appends") - direct;
    let syncs_burst = counter(&mut c, "fsyncs") - fsyncs;
    assert!(
        direct_burst <= N / 10,
        "{direct_burst} of {N} pipelined appends were committed one by one on the spot"
    );
    assert!(
        syncs_burst < N,
        "{N} pipelined appends took {syncs_burst} syncs: none shared one"
    );

    d.kill9();
    d.restart();
    let mut c = Client::connect(&d.socket());
    for (session, ids) in [("lone", &lone), ("burst", &burst_ids)] {
        let events = c.read_all(session);
        let got: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
        assert_eq!(got, *ids, "{session}: every acknowledged event, in order");
    }
}
