//! `fork`: a new session whose events 1..=k are its parent's, byte for byte, and whose own
//! events follow from k + 1; it lasts through restarts and a `kill -9` right after it.
#![cfg(unix)]

use std::process::Output;
use std::time::Duration;

use dstream_tests::serde_json::{Value, json};
use dstream_tests::{Client, Daemon, codes, lsn_of};

fn fill(c: &mut Client, session: &str, n: u64) {
    for i in 1..=n {
        c.append(
            session,
            "user.input",
            json!({"i": i, "s": "ünï \"q\"\n", "big": "x".repeat((i as usize * 37) % 300)}),
        );
    }
}

fn fork(c: &mut Client, parent: &str, at: u64, new: Option<&str>) -> Value {
    let mut p = json!({"session_id": parent, "at_lsn": at});
    if let Some(n) = new {
        p["new_session_id"] = json!(n);
    }
    c.ok("fork", p)
}

/// Events from a subscription from lsn 1 until it reports being caught up.
fn subscribe_all(c: &mut Client, session: &str) -> Vec<Value> {
    c.ok("subscribe", json!({"session_id": session, "from_lsn": 1}));
    let mut out = Vec::new();
    loop {
        let n = c
            .next_notification(Duration::from_secs(20))
            .expect("a notification");
        match n["method"].as_str() {
            Some("event") => out.push(n["params"]["event"].clone()),
            Some("caught_up") => return out,
            _ => {}
        }
    }
}

#[test]
fn a_fork_reads_its_parents_prefix_then_its_own_events() {
    let mut d = Daemon::start();
    let mut c = d.client();
    fill(&mut c, "p", 20);
    let parent = c.read_all("p");
    let r = fork(&mut c, "p", 12, Some("f"));
    assert_eq!(r["session_id"], "f", "{r}");
    assert_eq!(r["forked_from"], "p");
    assert_eq!(r["fork_lsn"], 12);
    let (lsn, _) = c.append("f", "user.input", json!({"own": 1}));
    assert_eq!(lsn, 13, "the fork's first own event follows the fork point");
    let f = c.read_all("f");
    assert_eq!(f.len(), 13);
    assert_eq!(
        &f[..12],
        &parent[..12],
        "events 1..=12 are the parent's, as stored"
    );
    assert_eq!(f[12]["payload"], json!({"own": 1}));
    assert_eq!(f[12]["session_id"], "f");
    // The parent goes on unchanged.
    assert_eq!(c.append("p", "user.input", json!({})).0, 21);
    assert_eq!(c.read_all("p")[..20], parent[..]);

    let mut s = d.client();
    assert_eq!(
        subscribe_all(&mut s, "f"),
        f,
        "a subscription from 1 sees the same"
    );

    let info = c.ok("sessions.get", json!({"session_id": "f"}));
    let pinfo = c.ok("sessions.get", json!({"session_id": "p"}));
    assert_eq!(info["forked_from"], "p", "{info}");
    assert_eq!(info["fork_lsn"], 12);
    assert_eq!(
        info["stream_id"], pinfo["stream_id"],
        "a fork shares its parent's lineage"
    );
    assert_eq!(info["last_lsn"], 13);
    assert!(pinfo.get("forked_from").is_none(), "{pinfo}");
    let list = c.ok("sessions.list", json!({}));
    let listed = list["sessions"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|s| s["session_id"] == "f" && s["fork_lsn"] == 12),
        "{list}"
    );

    // A fork of a fork.
    let g = fork(&mut c, "f", 13, Some("g"));
    assert_eq!(g["forked_from"], "f");
    assert_eq!(c.append("g", "user.input", json!({"g": 1})).0, 14);
    let gs = c.read_all("g");
    assert_eq!(&gs[..13], &f[..]);
    // Forking at the first event, with the default name.
    let h = fork(&mut c, "p", 1, None);
    let h_id = h["session_id"].as_str().unwrap().to_string();
    assert!(h_id.starts_with("p.fork-"), "{h}");
    assert_eq!(c.read_all(&h_id), parent[..1]);

    // On disk a log's own lines leave their session out (its name says it); the copied
    // prefix says whose each event is, so a fork of a fork still tells them apart.
    let lines = dstream_tests::verify_log_file(&d.log_path("g"));
    let said: Vec<Option<&str>> = lines.iter().map(|l| l["session_id"].as_str()).collect();
    let mut want = vec![Some("p"); 12];
    want.extend([Some("f"), None]);
    assert_eq!(said, want);
    // And a restart (which reads the logs back) changes nothing.
    drop(c);
    d.stop();
    d.restart();
    let mut c = d.client();
    assert_eq!(c.read_all("f"), f);
    assert_eq!(c.read_all("g"), gs);
    assert_eq!(c.read_all("p")[..20], parent[..]);
}

#[test]
fn bad_forks_are_refused_clearly() {
    let d = Daemon::start();
    let mut c = d.client();
    fill(&mut c, "p", 3);
    fill(&mut c, "q", 1);
    let cases = [
        (
            json!({"session_id": "p", "at_lsn": 4}),
            codes::INVALID_PARAMS,
            "1..=3",
        ),
        (
            json!({"session_id": "p", "at_lsn": 0}),
            codes::INVALID_PARAMS,
            "lsn 0",
        ),
        (
            json!({"session_id": "nope", "at_lsn": 1}),
            codes::SESSION_NOT_FOUND,
            "nope",
        ),
        (
            json!({"session_id": "p", "at_lsn": 1, "new_session_id": "q"}),
            codes::SESSION_EXISTS,
            "q already exists",
        ),
        (
            json!({"session_id": "p", "at_lsn": 1, "new_session_id": "../x"}),
            codes::INVALID_SESSION_ID,
            "new_session_id",
        ),
    ];
    for (params, code, says) in cases {
        let e = c.err("fork", params.clone());
        assert_eq!(e.code, code, "{params}: {e}");
        assert!(e.message.contains(says), "{params}: {e}");
    }
    assert_eq!(
        c.read_all("q").len(),
        1,
        "a refused fork leaves the target alone"
    );
    assert!(
        !d.sessions_dir().join(".x.jsonl.forking").exists(),
        "no temporary file is left"
    );
}

#[test]
fn a_fork_survives_kill9_right_after_it_returns_and_a_restart() {
    let mut d = Daemon::start();
    let mut c = d.client();
    fill(&mut c, "p", 50);
    let parent = c.read_all("p");
    fork(&mut c, "p", 30, Some("f"));
    d.kill9();
    d.restart();
    let mut c = d.client();
    assert_eq!(c.read_all("f"), parent[..30]);
    let info = c.ok("sessions.get", json!({"session_id": "f"}));
    assert_eq!(
        (info["forked_from"].clone(), info["fork_lsn"].clone()),
        (json!("p"), json!(30))
    );
    assert_eq!(c.append("f", "user.input", json!({"after": "kill"})).0, 31);
    d.stop();
    d.restart();
    let mut c = d.client();
    let f = c.read_all("f");
    assert_eq!(f.len(), 31);
    assert_eq!(f[..30], parent[..30]);
    assert_eq!(lsn_of(&f[30]), 31);
}

#[test]
fn an_unfinished_fork_is_cleaned_up_at_start() {
    let mut d = Daemon::start();
    let mut c = d.client();
    fill(&mut c, "p", 2);
    d.stop();
    let dir = d.sessions_dir();
    std::fs::write(dir.join(".x.jsonl.forking"), b"half").unwrap();
    std::fs::write(
        dir.join("x.fork"),
        br#"{"forked_from":"p","fork_lsn":1,"forked_at_ms":1}"#,
    )
    .unwrap();
    d.restart();
    let mut c = d.client();
    assert!(!dir.join(".x.jsonl.forking").exists());
    assert!(!dir.join("x.fork").exists());
    assert_eq!(
        c.err("sessions.get", json!({"session_id": "x"})).code,
        codes::SESSION_NOT_FOUND
    );
    fork(&mut c, "p", 1, Some("x"));
    assert_eq!(c.read_all("x").len(), 1);
}

fn dstream(d: &Daemon, args: &[&str]) -> Output {
    d.cli(args)
}

#[test]
fn the_fork_command_and_sessions_show_it() {
    let d = Daemon::start();
    let mut c = d.client();
    fill(&mut c, "p", 5);
    let out = dstream(&d, &["fork", "p", "--at", "3", "--as", "c"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("c forked from p at lsn 3"), "{text}");
    let out = dstream(&d, &["sessions"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FORK c: of p at lsn 3"), "{text}");
    let out = dstream(&d, &["fork", "p", "--at", "9"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("its events are 1..=5"), "{err}");
}

/// A compressed parent (its log's first part a hole, its records in the archive) forks the
/// same: before, across and after the archive's end.
#[test]
fn a_compressed_session_forks_like_any_other() {
    let mut d = Daemon::start_with("[retention]\ncompress_after = \"off\"\n");
    let mut c = d.client();
    fill(&mut c, "z", 300);
    let r = c.ok("compress", json!({"session_id": "z"}));
    assert_eq!(r["upto_lsn"], 300, "{r}");
    fill(&mut c, "z", 20);
    let parent = c.read_all("z");
    for (at, name) in [(150u64, "z-in"), (300, "z-edge"), (310, "z-tail")] {
        fork(&mut c, "z", at, Some(name));
        let f = c.read_all(name);
        assert_eq!(f.as_slice(), &parent[..at as usize], "fork at {at}");
        assert_eq!(c.append(name, "t", json!({})).0, at + 1);
    }
    drop(c);
    assert_eq!(d.stop().code(), Some(0));
    d.restart();
    let mut c = d.client();
    assert_eq!(&c.read_all("z-in")[..150], &parent[..150]);
    assert_eq!(c.read_all("z-tail").len(), 311);
}
