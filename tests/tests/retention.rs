//! `[retention] delete_after` and `gc`: sessions go by the age of their last event (never a
//! file's modification time), leave a tombstone that reads answer with SESSION_GONE, and are
//! kept while a checkpoint is pending; a deletion cut short is finished at the next start.
#![cfg(unix)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use dstream_tests::serde_json::{Value, json};
use dstream_tests::{Daemon, codes};

const CONFIG: &str = "[retention]\ndelete_after = \"2s\"\n";

fn dstream(d: &Daemon, args: &[&str]) -> Output {
    d.cli(args)
}

/// Sets a file's access and modification times to a day ago.
fn backdate(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as libc::time_t;
    let t = libc::timespec {
        tv_sec: now - 86_400,
        tv_nsec: 0,
    };
    // SAFETY: a valid C path and two timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat {}", path.display());
}

fn ids(list: &Value) -> Vec<String> {
    let mut v: Vec<String> = list
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn gc_goes_by_the_last_events_time_keeps_pending_checkpoints_and_leaves_tombstones() {
    let mut d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    c.append("old", "user.input", json!({"n": 1}));
    c.append("old", "user.input", json!({"n": 2}));
    let cp = c.ok(
        "checkpoint.request",
        json!({"session_id": "held", "key": "k1", "summary": "deploy"}),
    );
    assert_eq!(cp["state"], "pending", "{cp}");
    std::thread::sleep(Duration::from_millis(2500));
    // New events in a log whose file looks a day old: kept.
    c.append("fresh", "user.input", json!({}));
    backdate(&d.log_path("fresh"));
    backdate(&d.log_path("old"));

    let dry = c.ok("gc", json!({"dry_run": true}));
    assert_eq!(ids(&dry["deleted"]), ["old"], "{dry}");
    assert_eq!(ids(&dry["kept"]), ["held"], "{dry}");
    assert!(
        dry["kept"][0]["kept_because"]
            .as_str()
            .unwrap()
            .contains("pending checkpoint"),
        "{dry}"
    );
    let old_info = c.ok("sessions.get", json!({"session_id": "old"}));
    assert_eq!(dry["deleted"][0]["bytes"], old_info["bytes"]);
    assert_eq!(dry["deleted"][0]["last_ts"], old_info["last_ts"]);
    assert_eq!(dry["total_bytes"], old_info["bytes"]);
    assert_eq!(c.read_all("old").len(), 2, "a dry run deletes nothing");

    let out = dstream(&d, &["gc", "--dry-run"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("old") && text.contains("would delete 1 session"),
        "{text}"
    );
    assert!(text.contains("kept held"), "{text}");

    let done = c.ok("gc", json!({}));
    assert_eq!(ids(&done["deleted"]), ["old"], "{done}");
    for (method, params) in [
        ("read", json!({"session_id": "old"})),
        ("sessions.get", json!({"session_id": "old"})),
        ("subscribe", json!({"session_id": "old"})),
        (
            "append",
            json!({"session_id": "old", "event": {"type": "user.input"}}),
        ),
    ] {
        let e = c.err(method, params);
        assert_eq!(e.code, codes::SESSION_GONE, "{method}: {e}");
        let data = e.data.clone().unwrap_or_else(|| panic!("{method}: {e}"));
        assert!(
            data["reason"].as_str().unwrap().contains("retention"),
            "{e}"
        );
        assert!(data["deleted_at_ms"].as_u64().unwrap() > 0, "{e}");
    }
    assert!(!d.log_path("old").exists());
    assert!(d.sessions_dir().join("old.gone").exists());
    assert_eq!(c.read_all("fresh").len(), 1);
    assert_eq!(c.read_all("held").len(), 1);

    let out = dstream(&d, &["sessions", "--all"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("GONE old"), "{text}");
    let out = dstream(&d, &["sessions"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("old"));

    // Gone for good, through a kill -9 and a restart.
    d.kill9();
    d.restart();
    let mut c = d.client();
    assert_eq!(
        c.err("read", json!({"session_id": "old"})).code,
        codes::SESSION_GONE
    );
    let all = c.ok("sessions.list", json!({"all": true}));
    assert_eq!(ids(&all["gone"]), ["old"], "{all}");
    assert_eq!(all["gone"][0]["last_lsn"], 2);
}

#[test]
fn a_deletion_cut_short_is_finished_at_start() {
    let mut d = Daemon::start_with("");
    let mut c = d.client();
    c.append("half", "user.input", json!({}));
    c.append("whole", "user.input", json!({}));
    d.kill9();
    // What a kill -9 between the tombstone and the removal leaves.
    std::fs::write(
        d.sessions_dir().join("half.gone"),
        br#"{"session_id":"half","deleted_at_ms":1,"reason":"retention: test","last_lsn":1,"last_ts":1,"bytes_freed":10}"#,
    )
    .unwrap();
    d.restart();
    let mut c = d.client();
    assert!(!d.log_path("half").exists(), "the deletion was finished");
    let e = c.err("read", json!({"session_id": "half"}));
    assert_eq!(e.code, codes::SESSION_GONE, "{e}");
    assert_eq!(c.read_all("whole").len(), 1);
}

#[test]
fn the_daemon_applies_delete_after_by_itself_and_off_refuses_gc() {
    let d = Daemon::start_with("[retention]\ndelete_after = \"1s\"\nevery = \"1s\"\n");
    let mut c = d.client();
    c.append("brief", "user.input", json!({}));
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        match c.call("read", json!({"session_id": "brief"})) {
            Err(e) if e.code == codes::SESSION_GONE => break,
            _ if std::time::Instant::now() > deadline => panic!("never deleted"),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
    let off = Daemon::start_with("");
    let e = off.client().err("gc", json!({"dry_run": true}));
    assert_eq!(e.code, codes::INVALID_PARAMS);
    assert!(e.message.contains("delete_after"), "{e}");
}

/// A spooled event for a deleted session (a hook wrote it while no daemon ran) is kept aside
/// with the reason, and the rest of the spool is drained: it never holds the spool up.
#[test]
fn a_spooled_event_for_a_deleted_session_is_set_aside_not_retried_for_ever() {
    let mut d = Daemon::start_with("");
    let mut c = d.client();
    c.append("old", "user.input", json!({}));
    d.stop();
    std::fs::write(
        d.sessions_dir().join("old.gone"),
        br#"{"session_id":"old","deleted_at_ms":1,"reason":"retention: test","last_lsn":1,"last_ts":1,"bytes_freed":10}"#,
    )
    .unwrap();
    let spool = d.data_dir().join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    for (name, session) in [
        ("00000000000000000001-hook-1-0.jsonl", "old"),
        ("00000000000000000002-hook-1-0.jsonl", "new"),
    ] {
        let rec = json!({"v": 1, "received_ms": 1_700_000_000_000u64, "source": "claude-code",
            "session_id": session, "event": {"session_id": session,
            "hook_event_name": "UserPromptSubmit", "prompt": "hi", "cwd": "/tmp"}});
        std::fs::write(spool.join(name), format!("{rec}\n")).unwrap();
    }
    d.restart();
    let mut c = d.client();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while c.call("read", json!({"session_id": "new"})).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the spool was held up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        c.err("read", json!({"session_id": "old"})).code,
        codes::SESSION_GONE
    );
    let aside: Vec<_> = std::fs::read_dir(spool.join("damaged"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(
        aside
            .iter()
            .any(|t| t.contains("was deleted") && t.contains("UserPromptSubmit")),
        "{aside:?}"
    );
}
