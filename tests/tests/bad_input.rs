//! Bad input gets a JSON-RPC error, the connection keeps working, other clients are unaffected,
//! and nothing is written outside `data/sessions`.
#![cfg(unix)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use dstream_tests::serde_json::{Value, json};
use dstream_tests::{Client, Daemon, codes, files_under, lsn_of};

const MAX_FRAME: usize = 65536;

struct Probe {
    d: Daemon,
    a: Client,
    b: Client,
    a_lsn: u64,
    b_lsn: u64,
}

impl Probe {
    /// After a bad input on A: A still answers a valid request, and B works too.
    fn both_still_work(&mut self, after: &str) {
        let r = self.a.call(
            "append",
            json!({"session_id": "ok-a", "event": {"type": "after", "payload": {"after": after}}}),
        );
        let r =
            r.unwrap_or_else(|e| panic!("valid append on the same connection after {after}: {e}"));
        self.a_lsn += 1;
        assert_eq!(r["lsn"], self.a_lsn, "after {after}: {r}");
        let h = self.b.call("hello", json!({}));
        assert!(h.is_ok(), "second connection after {after}: {h:?}");
        let r = self.b.call(
            "append",
            json!({"session_id": "ok-b", "event": {"type": "after"}}),
        );
        let r = r.unwrap_or_else(|e| panic!("second connection append after {after}: {e}"));
        self.b_lsn += 1;
        assert_eq!(r["lsn"], self.b_lsn, "after {after}: {r}");
    }

    /// Send raw bytes on A and return the error response frame (any id).
    fn raw_error(&mut self, what: &str, bytes: &[u8], code: i64) -> Value {
        self.a.send_raw(bytes);
        let frame = self.a.any_response();
        let err = frame
            .get("error")
            .unwrap_or_else(|| panic!("{what}: expected an error, got {frame}"));
        assert_eq!(err["code"], code, "{what}: {frame}");
        assert!(
            err["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: error without a message: {frame}"
        );
        frame
    }
}

fn probe() -> Probe {
    let d = Daemon::start_with(&format!("[daemon]\nmax_frame_bytes = {MAX_FRAME}\n"));
    let a = d.client();
    let b = d.client();
    let mut p = Probe {
        d,
        a,
        b,
        a_lsn: 0,
        b_lsn: 0,
    };
    p.both_still_work("nothing");
    p
}

#[test]
fn malformed_frames_get_errors_and_the_connection_keeps_working() {
    let mut p = probe();

    // The id is whatever can be read from the frame, even when the rest is not valid: a
    // salvaged top-level "id" lets a client route the error to its caller.
    let cases: &[(&str, &[u8], i64, Value)] = &[
        ("truncated JSON", b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\n", codes::PARSE_ERROR, json!(1)),
        ("not JSON at all", b"hello there\n", codes::PARSE_ERROR, Value::Null),
        ("trailing garbage", b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\"} x\n", codes::PARSE_ERROR, json!(1)),
        (
            "invalid UTF-8",
            b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"hello\",\"params\":{\"x\":\"\xff\xfe\xc3\"}}\n",
            codes::PARSE_ERROR,
            json!(2),
        ),
        ("invalid JSON, string id", b"{\"id\":\"s-1\",\"jsonrpc\":\"2.0\",\"method\":\"hello\",}\n", codes::PARSE_ERROR, json!("s-1")),
        ("invalid JSON, id cut short", b"{\"jsonrpc\":\"2.0\",\"id\":12\n", codes::PARSE_ERROR, Value::Null),
        ("invalid JSON, id not top-level", b"{\"params\":{\"id\":5},\"method\":\n", codes::PARSE_ERROR, Value::Null),
        ("a number", b"42\n", codes::INVALID_REQUEST, Value::Null),
        ("a string", b"\"hello\"\n", codes::INVALID_REQUEST, Value::Null),
        ("null", b"null\n", codes::INVALID_REQUEST, Value::Null),
        ("an object without method or id", b"{\"foo\":1}\n", codes::INVALID_REQUEST, Value::Null),
        ("a request without method", b"{\"jsonrpc\":\"2.0\",\"id\":7}\n", codes::INVALID_REQUEST, json!(7)),
        ("method not a string", b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":5}\n", codes::INVALID_REQUEST, json!(8)),
    ];
    for (what, bytes, code, id) in cases {
        let frame = p.raw_error(what, bytes, *code);
        assert_eq!(
            &frame["id"], id,
            "{what}: the id of the error reply: {frame}"
        );
        p.both_still_work(what);
    }

    // An empty line is not a request either; whatever the daemon does, it must keep working.
    p.a.send_raw(b"\n");
    p.both_still_work("an empty line");
}

#[test]
fn oversize_frame_is_discarded_and_the_next_request_is_answered() {
    let mut p = probe();

    // Just under the limit: accepted.
    let payload = "a".repeat(MAX_FRAME - 1024);
    let r = p.a.call(
        "append",
        json!({"session_id": "big", "event": {"type": "t", "payload": {"x": payload}}}),
    );
    assert_eq!(
        r.expect("a frame under max_frame_bytes is accepted")["lsn"],
        1
    );

    // Over the limit (3x), then a valid request in the same write.
    let payload = "b".repeat(3 * MAX_FRAME);
    let mut bytes = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 4242, "method": "append",
        "params": {"session_id": "big", "event": {"type": "t", "payload": {"x": payload}}}}))
    .unwrap();
    bytes.push(b'\n');
    bytes.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":4243,\"method\":\"hello\"}\n");
    p.a.send_raw(&bytes);
    let hello = p.a.wait_response(4243);
    assert!(
        hello.is_ok(),
        "request after an oversize frame on the same connection: {hello:?}"
    );
    let first = p.a.any_response();
    assert_eq!(
        first["error"]["code"],
        codes::FRAME_TOO_LARGE,
        "oversize frame: {first}"
    );
    p.both_still_work("an oversize frame");

    // Over the limit without any newline yet, then the newline and a valid request later.
    p.a.send_raw(&vec![b'c'; 2 * MAX_FRAME]);
    std::thread::sleep(Duration::from_millis(50));
    p.a.send_raw(b"ccc\n");
    let frame = p.a.any_response();
    assert_eq!(
        frame["error"]["code"],
        codes::FRAME_TOO_LARGE,
        "oversize garbage frame: {frame}"
    );
    p.both_still_work("an oversize frame sent in pieces");

    // The error reply to an oversize frame carries the id read from its first bytes, so a
    // client waiting on that id gets an answer instead of hanging.
    let payload = "d".repeat(2 * MAX_FRAME);
    let mut bytes = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 77, "method": "append",
        "params": {"session_id": "big", "event": {"type": "t", "payload": {"x": payload}}}}))
    .unwrap();
    assert!(bytes.starts_with(b"{\"id\":77,"), "the id leads the frame");
    bytes.push(b'\n');
    p.a.send_raw(&bytes);
    let r = p.a.wait_response(77);
    let e = r.expect_err("an oversize append must be refused");
    assert_eq!(e.code, codes::FRAME_TOO_LARGE, "{e}");
    assert!(
        e.message.contains(&MAX_FRAME.to_string()),
        "names the limit: {e}"
    );
    p.both_still_work("an oversize frame with an id");

    // Same with a string id after "jsonrpc", as the SDK sends it, and a frame of
    // nested garbage whose every byte would be a string escape or a bracket.
    let mut bytes = br#"{"jsonrpc":"2.0","id":"big-1","method":"append","params":{"x":""#.to_vec();
    bytes.extend(std::iter::repeat_n(b"\\\"[{".as_slice(), MAX_FRAME).flatten());
    bytes.extend_from_slice(b"\"}}\n");
    p.a.send_raw(&bytes);
    let frame =
        p.a.try_response_frame(&json!("big-1"))
            .expect("reply to big-1");
    assert_eq!(frame["error"]["code"], codes::FRAME_TOO_LARGE, "{frame}");
    p.both_still_work("an oversize frame with a string id");

    // An id only found past the kept prefix cannot be read: the reply's id is null.
    let mut bytes = serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "append",
        "params": {"session_id": "big", "event": {"type": "t", "payload": {"x": payload}}}}))
    .unwrap();
    bytes.pop();
    bytes.extend_from_slice(b",\"id\":78}\n");
    p.a.send_raw(&bytes);
    let frame = p.a.null_id_response();
    assert_eq!(frame["error"]["code"], codes::FRAME_TOO_LARGE, "{frame}");
    p.both_still_work("an oversize frame with its id at the end");

    // The discarded appends did not happen.
    let evs = p.a.read_all("big");
    assert_eq!(evs.len(), 1, "only the accepted append is stored");
}

#[test]
fn unknown_method_and_wrong_param_types() {
    let mut p = probe();
    let e = p.a.err("no.such.method", json!({}));
    assert_eq!(e.code, codes::METHOD_NOT_FOUND, "{e}");
    p.both_still_work("unknown method");

    let bad: &[(&str, Value)] = &[
        ("append", json!({"session_id": 5, "event": {"type": "t"}})),
        (
            "append",
            json!({"session_id": "s", "event": {"payload": {}}}),
        ),
        ("append", json!({"session_id": "s", "event": {"type": 5}})),
        ("append", json!({"session_id": "s", "event": "t"})),
        ("append", json!({"session_id": "s"})),
        ("append", json!({"event": {"type": "t"}})),
        (
            "append",
            json!({"session_id": "s", "event": {"type": "t", "stream_id": 3}}),
        ),
        ("read", json!({"session_id": "ok-a", "from_lsn": "1"})),
        ("read", json!({"session_id": "ok-a", "limit": "ten"})),
        ("read", json!({"session_id": "ok-a", "from_lsn": -1})),
        ("read", json!({"session_id": ["ok-a"]})),
        ("subscribe", json!({"session_id": "ok-a", "from_lsn": "x"})),
        ("subscribe", json!({"session_id": 1})),
        ("unsubscribe", json!({"subscription": 7})),
        ("sessions.get", json!({"session_id": 1})),
        ("sessions.get", json!({})),
        ("query", json!({"since_ms": "yesterday"})),
        ("query", json!({"limit": "all"})),
    ];
    for (method, params) in bad {
        let e = p.a.err(method, params.clone());
        assert_eq!(e.code, codes::INVALID_PARAMS, "{method} {params}: {e}");
        assert!(!e.message.is_empty());
        p.both_still_work(&format!("{method} {params}"));
    }
    // Nothing was stored by the rejected appends.
    let e = p.a.err("read", json!({"session_id": "s"}));
    assert_eq!(
        e.code,
        codes::SESSION_NOT_FOUND,
        "rejected appends must not create session s: {e}"
    );
}

#[test]
fn unsafe_session_ids_are_rejected_and_create_no_files() {
    let mut p = probe();
    let root = p.d.dir().to_path_buf();
    let outside = root.parent().unwrap().to_path_buf();
    let escape = format!("dstream-escape-{}", std::process::id());
    let before: BTreeSet<PathBuf> = files_under(&root).into_iter().collect();

    let long = "a".repeat(129);
    let escape_id = format!("../../{escape}");
    let ids: Vec<&str> = vec![
        "../x",
        "a/b",
        "",
        &long,
        "..",
        "/abs",
        &escape_id,
        "x/../../y",
    ];
    for id in &ids {
        for method in ["append", "read", "subscribe", "sessions.get"] {
            let params = if method == "append" {
                json!({"session_id": id, "event": {"type": "t"}})
            } else {
                json!({"session_id": id})
            };
            let e = p.a.err(method, params);
            assert_eq!(
                e.code,
                codes::INVALID_SESSION_ID,
                "{method} session_id {id:?}: {e}"
            );
        }
        p.both_still_work(&format!("session id {id:?}"));
    }
    // 128 characters is still fine.
    let ok128 = "b".repeat(128);
    let (lsn, _) = p.a.append(&ok128, "t", json!({}));
    assert_eq!(lsn, 1);
    assert!(
        p.d.log_path(&ok128).is_file(),
        "a 128-char session id is stored as its own log"
    );

    let after: BTreeSet<PathBuf> = files_under(&root).into_iter().collect();
    let sessions = p.d.sessions_dir();
    // The search index's own files (its WAL appears with the first event it indexes).
    let index = p.d.data_dir().join("search");
    for f in after.difference(&before) {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        if f.parent() == Some(index.as_path()) {
            continue;
        }
        assert!(
            f.parent() == Some(sessions.as_path())
                && (name.starts_with("ok-a.")
                    || name.starts_with("ok-b.")
                    || name.starts_with(&ok128)),
            "unexpected new file {} (only the valid sessions' files may appear)",
            f.display()
        );
    }
    for name in [
        "x",
        "x.jsonl",
        "y",
        "y.jsonl",
        "b",
        "b.jsonl",
        "abs",
        "abs.jsonl",
    ] {
        for dir in [
            root.clone(),
            p.d.data_dir(),
            sessions.clone(),
            root.join("run"),
        ] {
            assert!(
                !dir.join(name).exists(),
                "{} must not exist",
                dir.join(name).display()
            );
        }
    }
    for suffix in ["", ".jsonl", ".idx"] {
        let f = outside.join(format!("{escape}{suffix}"));
        assert!(
            !f.exists(),
            "{} was created outside the data dir",
            f.display()
        );
    }
}

#[test]
fn framing_split_and_coalesced_writes() {
    let d = Daemon::start();
    let mut c = d.client();
    // One request split across writes with pauses.
    let req = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"append\",\"params\":{\"session_id\":\"f\",\"event\":{\"type\":\"t\",\"payload\":{\"s\":\"\xc3\xa9\"}}}}\n";
    // Split inside a multi-byte UTF-8 character, too.
    let cut = req.iter().position(|b| *b == 0xa9).unwrap();
    for chunk in [&req[..10], &req[10..cut], &req[cut..]] {
        c.send_raw(chunk);
        std::thread::sleep(Duration::from_millis(30));
    }
    assert_eq!(c.wait_response(1).expect("split request")["lsn"], 1);
    // Several requests in one write.
    c.send_raw(
        b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"hello\"}\n{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"append\",\"params\":{\"session_id\":\"f\",\"event\":{\"type\":\"t\"}}}\n{\"jsonrpc\":\"2.0\",\"id\":\"str-id\",\"method\":\"read\",\"params\":{\"session_id\":\"f\",\"limit\":1}}\n",
    );
    assert!(c.wait_response(2).is_ok());
    assert_eq!(c.wait_response(3).expect("second append")["lsn"], 2);
    // String ids are echoed as strings.
    let frame = c
        .try_response_frame(&json!("str-id"))
        .expect("response to a string id");
    let evs = frame["result"]["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{frame}"));
    // (A pipelined read need not see the append before it; only the first event is asked for.)
    assert_eq!(evs.iter().map(lsn_of).collect::<Vec<_>>(), vec![1]);
    assert_eq!(evs[0]["payload"]["s"], "é");
    // CRLF line endings are not required to work, but must not break the connection.
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"hello\"}\r\n");
    let _ = c.any_response();
    assert!(c.call("hello", json!({})).is_ok());
}
