//! Durable Streams reads of local sessions (`GET /v1/stream/{session}` on the daemon's HTTP
//! listener), followed with the official `@durable-streams/client` as it follows a relayed
//! session: catch-up, live by SSE and by long-poll, a reconnect from the last offset without
//! gaps or duplicates, and the close once the session is archived. Then what the protocol says
//! about HEAD, `offset=now`, ETags, writes and bad requests.
#![cfg(unix)]

use std::process::{Child, Command, Stdio};

use dstream_tests::relay::{http, node_dir};
use dstream_tests::{Client, Daemon};
use serde_json::{Value, json};

const CONFIG: &str = "[http]\nlisten = \"0\"\n";

struct Listener {
    addr: String,
    token: String,
}

fn listener(d: &Daemon) -> Listener {
    let stats = d.client().ok("stats", json!({}));
    let addr = stats["http"]["listen"].as_str().unwrap().to_string();
    let token = std::fs::read_to_string(d.data_dir().join("http.token"))
        .unwrap()
        .trim()
        .to_string();
    Listener { addr, token }
}

fn append(c: &mut Client, session: &str, n: usize) {
    for i in 0..n {
        c.ok(
            "append",
            json!({"session_id": session, "event": {"type": "test.step", "payload": {"i": i}}}),
        );
    }
}

fn offset(lsn: u64) -> String {
    format!("{lsn:020}")
}

/// The official client following `session` from `from`, until it has `want` messages.
fn follow(l: &Listener, session: &str, live: &str, from: &str, want: usize) -> Child {
    let dir = node_dir();
    Command::new("node")
        .arg(dir.join("follow-local.mjs"))
        .arg(format!("http://{}/v1/stream/{session}", l.addr))
        .arg(&l.token)
        .arg(live)
        .arg(from)
        .arg(want.to_string())
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node")
}

/// What the client saw: its batches, in order.
fn batches(child: Child) -> Vec<Value> {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let batches: Vec<Value> = text
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!(
                    "the client printed {l:?} ({e}); stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
        })
        .collect();
    assert!(
        out.status.success() && batches.iter().all(|b| b.get("error").is_none()),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    batches
}

fn lsns(batches: &[Value]) -> Vec<u64> {
    batches
        .iter()
        .flat_map(|b| b["lsns"].as_array().unwrap().clone())
        .map(|v| v.as_u64().unwrap())
        .collect()
}

#[test]
fn the_official_client_follows_a_local_session_without_gaps_or_duplicates() {
    let d = Daemon::start_with(CONFIG);
    let l = listener(&d);
    let mut c = d.client();
    append(&mut c, "s", 1500);

    // Catch-up, across pages: every event once, in order, as `read` returns them.
    let seen = batches(follow(&l, "s", "false", "-1", usize::MAX));
    assert_eq!(lsns(&seen), (1..=1500).collect::<Vec<_>>());
    let ids: Vec<Value> = seen
        .iter()
        .flat_map(|b| b["ids"].as_array().unwrap().clone())
        .collect();
    let stored: Vec<Value> = c.read_all("s").iter().map(|e| e["id"].clone()).collect();
    assert_eq!(ids, stored, "the messages are the stored events");
    let last = seen.last().unwrap();
    assert_eq!(last["offset"], offset(1500));
    assert_eq!(last["upToDate"], true);

    // Live by SSE from there, while events arrive; then a reconnect from an offset inside
    // them by long-poll reads exactly the rest.
    let sse = follow(&l, "s", "sse", &offset(1500), 300);
    append(&mut c, "s", 300);
    assert_eq!(lsns(&batches(sse)), (1501..=1800).collect::<Vec<_>>());
    let again = batches(follow(&l, "s", "long-poll", &offset(1700), 100));
    assert_eq!(lsns(&again), (1701..=1800).collect::<Vec<_>>());

    // A reader from the start pages through a session longer than one response.
    let lines: String = (0..12_000)
        .map(|i| format!("{{\"type\":\"test.bulk\",\"payload\":{{\"i\":{i}}}}}\n"))
        .collect();
    d.append_lines("long", &lines);
    let seen = batches(follow(&l, "long", "long-poll", "-1", 12_000));
    assert!(seen.len() >= 2, "more than one response: {}", seen.len());
    assert_eq!(lsns(&seen), (1..=12_000).collect::<Vec<_>>());

    // A long-poll at the tail waits for the next event.
    let waiting = follow(&l, "s", "long-poll", &offset(1800), 5);
    append(&mut c, "s", 5);
    assert_eq!(lsns(&batches(waiting)), (1801..=1805).collect::<Vec<_>>());

    // An ended session stays open; an archived one closes, for a live reader and a late one.
    c.ok(
        "append",
        json!({"session_id": "s", "event": {"type": "lifecycle.session.ended"}}),
    );
    let live = follow(&l, "s", "sse", &offset(1806), usize::MAX);
    c.ok(
        "append",
        json!({"session_id": "s", "event": {"type": "lifecycle.session.archived",
            "payload": {"continues_in": "s~1"}}}),
    );
    let seen = batches(live);
    assert_eq!(lsns(&seen), [1807]);
    assert_eq!(seen.last().unwrap()["closed"], true, "{seen:?}");
    for mode in ["false", "long-poll", "sse"] {
        let seen = batches(follow(&l, "s", mode, &offset(1807), usize::MAX));
        assert_eq!(
            seen.last().map(|b| &b["closed"]),
            Some(&json!(true)),
            "{mode}: {seen:?}"
        );
    }
}

#[test]
fn reads_answer_as_the_protocol_says_and_refuse_the_rest() {
    let d = Daemon::start_with(CONFIG);
    let l = listener(&d);
    let mut c = d.client();
    append(&mut c, "r", 3);
    let auth = format!("Bearer {}", l.token);
    let get = |path: &str, extra: &[(&str, &str)]| {
        let mut h = vec![("authorization", auth.as_str())];
        h.extend_from_slice(extra);
        http(&l.addr, "GET", path, &h, b"").unwrap()
    };

    let r = http(
        &l.addr,
        "HEAD",
        "/v1/stream/r",
        &[("authorization", &auth)],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("stream-next-offset"), Some(offset(3).as_str()));
    assert_eq!(r.header("content-type"), Some("application/json"));

    let r = get("/v1/stream/r?offset=-1", &[]);
    assert_eq!(r.status, 200);
    let events: Vec<Value> = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(events.len(), 3);
    assert_eq!(r.header("stream-up-to-date"), Some("true"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let etag = r.header("etag").unwrap().to_string();
    let again = get("/v1/stream/r?offset=-1", &[("if-none-match", &etag)]);
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());

    let now = get("/v1/stream/r?offset=now", &[]);
    assert_eq!((now.status, &now.body[..]), (200, &b"[]"[..]));
    assert_eq!(now.header("stream-next-offset"), Some(offset(3).as_str()));
    assert!(now.header("etag").is_none());
    let at_end = get(&format!("/v1/stream/r?offset={}", offset(3)), &[]);
    assert_eq!((at_end.status, &at_end.body[..]), (200, &b"[]"[..]));

    for (what, path, want) in [
        ("an unknown session", "/v1/stream/nobody".to_string(), 404),
        (
            "an invalid session id",
            "/v1/stream/a%2F..".to_string(),
            400,
        ),
        (
            "a made-up offset",
            "/v1/stream/r?offset=abc".to_string(),
            400,
        ),
        (
            "an offset beyond the end",
            format!("/v1/stream/r?offset={}", offset(99)),
            400,
        ),
        (
            "an unknown live mode",
            "/v1/stream/r?live=ws".to_string(),
            400,
        ),
    ] {
        assert_eq!(get(&path, &[]).status, want, "{what}");
    }
    for method in ["POST", "PUT", "DELETE"] {
        let r = http(
            &l.addr,
            method,
            "/v1/stream/r",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            b"[{}]",
        )
        .unwrap();
        assert_eq!(r.status, 405, "{method}");
    }
    let r = http(&l.addr, "GET", "/v1/stream/r", &[], b"").unwrap();
    assert_eq!(r.status, 401, "no token");
    assert_eq!(c.read_all("r").len(), 3, "nothing written");
}

#[test]
fn live_readers_past_max_connections_wait_and_never_grow_the_daemon() {
    use std::io::{Read, Write};
    let d = Daemon::start_with("[http]\nlisten = \"0\"\nmax_connections = 2\n");
    let l = listener(&d);
    append(&mut d.client(), "mc", 1);
    // Two live readers hold both connections (each waits on a long-poll at the tail).
    let long_poll = |addr: &str, token: &str| {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let req = format!(
            "GET /v1/stream/mc?offset=now&live=long-poll HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {token}\r\n\r\n"
        );
        s.write_all(req.as_bytes()).unwrap();
        s
    };
    let first = long_poll(&l.addr, &l.token);
    let _second = long_poll(&l.addr, &l.token);
    // A third client is not served while they hold them...
    let mut third = std::net::TcpStream::connect(&l.addr).unwrap();
    let req = format!(
        "GET /v1/stream/mc?offset=-1 HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {}\r\nconnection: close\r\n\r\n",
        l.addr, l.token
    );
    third.write_all(req.as_bytes()).unwrap();
    third
        .set_read_timeout(Some(std::time::Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        third.read(&mut buf).is_err(),
        "answered past [http] max_connections"
    );
    // ...and is, as soon as one of them leaves.
    drop(first);
    third
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut answer = String::new();
    third.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The socket is not held up by them.
    assert_eq!(d.client().read_all("mc").len(), 1);
}
