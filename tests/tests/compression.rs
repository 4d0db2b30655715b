//! Compression of finished sessions: a compressed session reads back byte-identical through
//! `read` and `subscribe`, seeks anywhere, takes appends at the right LSN, survives restarts
//! and a `kill -9` in the middle of a compression, and takes less disk.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dstream_tests::{Client, Daemon, daemon_bin};
use serde_json::{Value, json};

/// Enough for hundreds of the archive's 32 KiB frames (the test is about crossing them, not
/// about scale: 200,000 took a minute of the suite).
const N: usize = 50_000;

/// Appends `n` events to `session` through `dstream append` (one streaming client).
fn append_many(d: &Daemon, session: &str, from: usize, n: usize) {
    let mut buf = String::new();
    for i in from..from + n {
        buf.push_str(&format!(
            "{{\"type\":\"tool.output\",\"payload\":{{\"i\":{i},\"text\":\"line {i} of a long session, padded: {}\"}}}}\n",
            "x".repeat(i % 97)
        ));
    }
    d.append_lines(session, &buf);
}

fn compress(d: &Daemon, session: &str) -> Value {
    let out = d.cli(&["compress", session, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every event of `session` through a subscription from `from`, up to `last`.
fn subscribe_all(c: &mut Client, session: &str, from: u64, last: u64) -> Vec<Value> {
    let r = c.ok(
        "subscribe",
        json!({"session_id": session, "from_lsn": from}),
    );
    assert!(r["subscription"].is_string(), "{r}");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while out
        .last()
        .map_or(from - 1, |e: &Value| e["lsn"].as_u64().unwrap())
        < last
    {
        assert!(
            Instant::now() < deadline,
            "subscription stalled at {}",
            out.len()
        );
        let n = c
            .next_notification(Duration::from_secs(30))
            .expect("a notification");
        if n["method"] == "event" {
            out.push(n["params"]["event"].clone());
        }
    }
    out
}

/// Bytes the file takes on disk (holes excluded).
fn on_disk(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .map(|m| m.blocks() * 512)
        .unwrap_or(0)
}

#[test]
fn a_compressed_session_reads_back_identical_and_goes_on() {
    // Synced every 20 ms rather than per append, and no search index filling beside it on
    // the test machine's few cores: the test is about what follows.
    let mut d = Daemon::start_with(
        "[retention]\ncompress_after = \"off\"\n[store]\nfsync = \"interval\"\n[search]\nenabled = false\n",
    );
    let t = Instant::now();
    append_many(&d, "big", 0, N);
    eprintln!("appended {N} in {:?}", t.elapsed());
    let mut c = d.client();
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.ok("sessions.get", json!({"session_id": "big"}))["durable_lsn"] != json!(N) {
        assert!(Instant::now() < deadline, "the session was never synced");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = c.read_all("big");
    assert_eq!(before.len(), N);
    let log = d.log_path("big");
    let disk_before = on_disk(&log);

    let r = compress(&d, "big");
    assert_eq!(r["compressed"], true, "{r}");
    assert_eq!(r["upto_lsn"], N as u64);
    let zst = log.with_extension("zst");
    let archive = on_disk(&zst);
    assert!(
        archive * 5 < disk_before,
        "the archive ({archive} bytes) is far smaller than the log was ({disk_before})"
    );
    if r["freed"] == true {
        assert!(
            on_disk(&log) < disk_before / 10,
            "the log's compressed part was given back: {} of {disk_before} bytes left",
            on_disk(&log)
        );
    } else {
        dstream_tests::skip(
            "compression::freed",
            "this file system cannot punch holes: the log keeps its size",
        );
    }
    assert_eq!(compress(&d, "big")["compressed"], false, "nothing new");

    // Byte-identical through read and subscribe; seeks anywhere.
    let t = Instant::now();
    assert_eq!(c.read_all("big"), before);
    eprintln!("read all in {:?}", t.elapsed());
    let t = Instant::now();
    assert_eq!(subscribe_all(&mut c, "big", 1, N as u64), before);
    eprintln!("subscribed in {:?}", t.elapsed());
    for k in [1usize, 2, 511, 4096, 17_777, 37_501, N - 1, N] {
        let page = c.ok(
            "read",
            json!({"session_id": "big", "from_lsn": k, "limit": 3}),
        );
        let got = page["events"].as_array().unwrap();
        let want = &before[k - 1..(k + 2).min(N)];
        assert_eq!(got.as_slice(), want, "seek to {k}");
    }
    let q = c.ok(
        "query",
        json!({"session_id": "big", "type_prefix": "tool.", "limit": 5}),
    );
    assert_eq!(q["events"].as_array().unwrap().as_slice(), &before[..5]);

    // A resumed session: appends go on at the next LSN, readable across the boundary.
    let (lsn, _) = c.append("big", "user.input", json!({"text": "back again"}));
    assert_eq!(lsn, N as u64 + 1);
    let around = c.read_from("big", N as u64 - 1);
    assert_eq!(around.len(), 3);
    assert_eq!(around[2]["payload"]["text"], "back again");

    // A restart reads the same, and appends continue above.
    drop(c);
    assert_eq!(d.stop().code(), Some(0));
    d.restart();
    let mut c = d.client();
    let all = c.read_all("big");
    assert_eq!(&all[..N], &before[..]);
    assert_eq!(all.len(), N + 1);
    assert_eq!(c.append("big", "t", json!({})).0, N as u64 + 2);

    // Compressed again, further: the old frames stay, the new events join them.
    let again = compress(&d, "big");
    assert_eq!(again["upto_lsn"], N as u64 + 2, "{again}");
    assert_eq!(c.read_all("big").len(), N + 2);
}

#[test]
fn a_kill_during_compression_leaves_one_whole_form() {
    let mut d =
        Daemon::start_with("[retention]\ncompress_after = \"off\"\n[search]\nenabled = false\n");
    append_many(&d, "k", 0, 60_000);
    let mut c = d.client();
    let before = c.read_all("k");
    drop(c);
    // Kill the daemon at some point of its compression: before, during or after.
    let mut child = Command::new(daemon_bin())
        .args(["compress", "k", "--socket"])
        .arg(d.socket())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(30));
    d.kill9();
    let _ = child.wait();
    d.restart();
    let mut c = d.client();
    assert_eq!(
        c.read_all("k"),
        before,
        "every event once, whatever the form"
    );
    assert_eq!(c.append("k", "t", json!({})).0, 60_001);
    let r = compress(&d, "k");
    assert_eq!(r["upto_lsn"], 60_001, "{r}");
    d.kill9();
    d.restart();
    let mut c = d.client();
    let all = c.read_all("k");
    assert_eq!(&all[..60_000], &before[..]);
    assert_eq!(all.len(), 60_001);
}

#[test]
fn a_finished_idle_session_is_compressed_by_itself() {
    let d = Daemon::start_with("[retention]\ncompress_after = \"1s\"\n");
    let mut c = d.client();
    for i in 0..50 {
        c.append("done", "message.chunk", json!({"i": i}));
    }
    c.append("done", "lifecycle.session.ended", json!({}));
    for i in 0..50 {
        c.append("open", "message.chunk", json!({"i": i}));
    }
    let zst = d.log_path("done").with_extension("zst");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !zst.exists() {
        assert!(
            Instant::now() < deadline,
            "the ended session was not compressed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !d.log_path("open").with_extension("zst").exists(),
        "a session that has not ended is left as it is"
    );
    // Announced first: the last event says so and names where a resumed session goes on.
    let done = c.read_all("done");
    assert_eq!(done.len(), 52);
    assert_eq!(done[51]["type"], "lifecycle.session.archived");
    assert_eq!(done[51]["payload"]["continues_in"], "done~1");
}
