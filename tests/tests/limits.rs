//! Limits at the protocol level: how deeply an event may nest (every accepted event reads back
//! identical through `read`, `subscribe` and `query`; deeper ones get a clear error), and how
//! much memory idle connections keep after big frames.
#![cfg(unix)]

use std::time::Duration;

use dstream_sdk::event::MAX_NESTING_DEPTH;
use dstream_tests::serde_json::{self, Map, Value, json};
use dstream_tests::{Client, Daemon, codes};

/// A small deterministic PRNG (SplitMix64), so a failure replays the same way.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// Characters that stress a JSON scanner: brackets and quotes inside strings, escapes,
/// control characters, multi-byte UTF-8 (2, 3 and 4 bytes).
const TRICKY: &[char] = &[
    '[', ']', '{', '}', '"', '\\', ',', ':', '\n', '\t', '\u{1}', '\u{1f}', 'é', 'ß', '€', '字',
    '😀', '𝄞', '\u{2028}', '\u{feff}', 'a', 'z', '0', ' ', '/',
];

/// Bytes `c` takes inside a serialized JSON string (serde_json's escaping).
fn json_cost(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\t' | '\r' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

fn tricky_string(rng: &mut Rng, cost: usize) -> String {
    let mut s = String::new();
    let mut used = 0;
    while used < cost {
        let c = if rng.chance(50) {
            // Filler letters that spell no secret-looking word (`token`, `key: x`, `sk-`):
            // every stored event is redacted, and this test is about framing, not redaction.
            char::from(b"fgjmqx"[rng.below(6)])
        } else {
            TRICKY[rng.below(TRICKY.len())]
        };
        if used + json_cost(c) > cost {
            break;
        }
        used += json_cost(c);
        s.push(c);
    }
    s
}

fn scalar(rng: &mut Rng) -> Value {
    match rng.below(8) {
        0 => Value::Null,
        1 => json!(rng.chance(50)),
        2 => json!(rng.next()),
        3 => json!(-(rng.below(1 << 40) as i64)),
        // Exactly representable, so they survive any parse/print round trip.
        4 => json!([0.5, -1.25, 2.0, 1024.0, 65536.5][rng.below(5)]),
        _ => {
            let n = rng.below(24);
            json!(tricky_string(rng, n))
        }
    }
}

/// A random value whose arrays and objects nest exactly `depth` levels (0: a scalar).
fn value_of_depth(rng: &mut Rng, depth: usize) -> Value {
    if depth == 0 {
        return scalar(rng);
    }
    let children = 1 + rng.below(3);
    let spine = rng.below(children);
    let items: Vec<Value> = (0..children)
        .map(|i| {
            let d = if i == spine {
                depth - 1
            } else {
                rng.below(depth.min(4))
            };
            value_of_depth(rng, d)
        })
        .collect();
    if rng.chance(50) {
        Value::Array(items)
    } else {
        let mut m = Map::new();
        for (i, v) in items.into_iter().enumerate() {
            let n = rng.below(6);
            m.insert(format!("{i}{}", tricky_string(rng, n)), v);
        }
        Value::Object(m)
    }
}

fn object_of_depth(rng: &mut Rng, depth: usize) -> Value {
    let depth = depth.max(1);
    let mut v = value_of_depth(rng, depth - 1);
    if rng.chance(30) {
        v = value_of_depth(rng, depth - 1);
    }
    json!({ "m": v })
}

/// Nesting depth of a parsed value, to check the generator hits its target.
fn depth_of(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth_of).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth_of).max().unwrap_or(0),
        _ => 0,
    }
}

/// An append request frame: its length is what counts against `max_frame_bytes`.
fn append_frame(id: u64, session: &str, event: &Value) -> Vec<u8> {
    let mut f = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": "append",
        "params": {"session_id": session, "event": event}}))
    .unwrap();
    f.push(b'\n');
    f
}

/// A random event: payload of `depth`, random metadata and sometimes raw, padded with a tricky
/// filler string in the metadata until its append frame is `size` bytes (or a bit less).
fn random_event(rng: &mut Rng, depth: usize, size: usize) -> Value {
    let payload = value_of_depth(rng, depth);
    let metadata_depth = 1 + rng.below(MAX_NESTING_DEPTH);
    let metadata = object_of_depth(rng, metadata_depth);
    let mut event = json!({
        "type": format!("limits.d{depth}"),
        "payload": payload,
        "metadata": metadata,
    });
    if rng.chance(50) {
        let raw_depth = rng.below(MAX_NESTING_DEPTH + 1);
        event["raw"] = value_of_depth(rng, raw_depth);
    }
    let bare = append_frame(u64::MAX, "s", &event).len();
    // `,"fill":""` costs 10 bytes.
    if let Some(room) = size.checked_sub(bare + 10) {
        event["metadata"]["fill"] = json!(tricky_string(rng, room));
    }
    event
}

/// Payloads that are just under, and just over, the limit, as raw JSON text (serde_json could
/// not even build the deeper ones): brackets of both kinds, with tricky keys.
fn deep_text(depth: usize, object_first: bool) -> String {
    let mut open = String::new();
    let mut close = String::new();
    for i in 0..depth {
        if (i % 2 == 0) == object_first {
            open.push_str(r#"{"k\"[{":"#);
            close.insert(0, '}');
        } else {
            open.push_str(r#"["]}\\",1,"#);
            close.insert(0, ']');
        }
    }
    format!("{open}\"leaf\"{close}")
}

/// Appends `events` to `session` (pipelined on `w`) and checks each one reads back identical
/// through `read` (on `w`), a subscription started beforehand (on `s`), and `query`.
fn append_and_read_back(w: &mut Client, s: &mut Client, session: &str, events: &[Value]) {
    let sub = s.ok("subscribe", json!({"session_id": session, "from_lsn": 1}));
    let sub = sub["subscription"].as_str().unwrap().to_string();

    for (i, event) in events.iter().enumerate() {
        let r = w.ok("append", json!({"session_id": session, "event": event}));
        assert_eq!(r["lsn"], i as u64 + 1, "append #{i}: {r}");
    }

    let check = |via: &str, got: &[Value]| {
        assert_eq!(got.len(), events.len(), "{via}: number of events");
        for (i, (got, sent)) in got.iter().zip(events).enumerate() {
            assert_eq!(got["lsn"], i as u64 + 1, "{via}: lsn of #{i}");
            for field in ["type", "payload", "metadata", "raw"] {
                assert!(
                    got.get(field) == sent.get(field),
                    "{via}: event #{i} ({}): {field} differs from what was appended",
                    sent["type"]
                );
            }
        }
    };

    check("read", &w.read_all(session));

    let r = w.ok(
        "query",
        json!({"session_id": session, "limit": events.len() + 10}),
    );
    assert_eq!(r["truncated"], json!(false), "query truncated");
    check("query", r["events"].as_array().expect("query events"));

    let mut live = Vec::new();
    while live.len() < events.len() {
        let n = s
            .next_notification(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("subscribe: only {} events arrived", live.len()));
        assert_eq!(n["params"]["subscription"], sub.as_str(), "{}", n["method"]);
        match n["method"].as_str() {
            Some("event") => live.push(n["params"]["event"].clone()),
            Some("caught_up" | "heartbeat" | "lagged") => {}
            other => panic!("unexpected notification {other:?}"),
        }
    }
    check("subscribe", &live);
    s.ok("unsubscribe", json!({"subscription": sub}));
}

const SMALL_FRAME: usize = 64 * 1024;

#[test]
fn every_depth_up_to_the_limit_round_trips_at_every_size() {
    let d = Daemon::start_with(&format!(
        "[daemon]\nmax_frame_bytes = {SMALL_FRAME}\n[store]\nfsync = \"never\"\n"
    ));
    let (mut w, mut s) = (d.client(), d.client());
    let mut rng = Rng(0x5eed_0001);
    let mut events = Vec::new();
    let mut largest = 0;
    for depth in 0..=MAX_NESTING_DEPTH {
        // Every third event fills its frame to within a few bytes of the limit.
        let size = match depth % 3 {
            0 => SMALL_FRAME - 1 - rng.below(8),
            1 => rng.below(SMALL_FRAME),
            _ => rng.below(2048),
        };
        let event = random_event(&mut rng, depth, size);
        assert_eq!(
            depth_of(&event["payload"]),
            depth,
            "generated payload depth"
        );
        for field in ["metadata", "raw"] {
            assert!(
                depth_of(&event[field]) <= MAX_NESTING_DEPTH,
                "generated {field} depth"
            );
        }
        let frame = append_frame(u64::MAX, "s", &event);
        assert!(
            frame.len() <= SMALL_FRAME,
            "generator overshot: frame of {} bytes for depth {depth}",
            frame.len()
        );
        largest = largest.max(frame.len());
        events.push(event);
    }
    assert!(
        largest > SMALL_FRAME - 64,
        "some frames come near the limit ({largest} bytes)"
    );
    append_and_read_back(&mut w, &mut s, "depths", &events);

    // The limit exactly, in hand-written JSON with escapes, in each field.
    let mut c = d.client();
    let at_limit = deep_text(MAX_NESTING_DEPTH, true);
    let v: Value = serde_json::from_str(&at_limit).unwrap();
    for field in ["payload", "metadata", "raw"] {
        let frame = format!(
            r#"{{"jsonrpc":"2.0","id":"{field}","method":"append","params":{{"session_id":"edge","event":{{"type":"t","{field}":{at_limit}}}}}}}"#
        );
        c.send_raw(format!("{frame}\n").as_bytes());
        let r = c.try_response_frame(&json!(field)).expect("reply");
        assert!(
            r.get("result").is_some(),
            "{field} at depth 96 accepted: {r}"
        );
    }
    let evs = c.read_all("edge");
    for (e, field) in evs.iter().zip(["payload", "metadata", "raw"]) {
        assert_eq!(e[field], v, "{field} at depth 96 reads back identical");
    }
}

#[test]
fn an_event_of_15_mib_round_trips() {
    let d = Daemon::start_with("[store]\nfsync = \"never\"\n");
    let (mut w, mut s) = (d.client(), d.client());
    let mut rng = Rng(0x5eed_0002);
    let events = vec![
        random_event(&mut rng, MAX_NESTING_DEPTH, 15 << 20),
        random_event(&mut rng, 3, 1000),
    ];
    assert!(append_frame(1, "huge", &events[0]).len() > (15 << 20) - 64);
    append_and_read_back(&mut w, &mut s, "huge", &events);
}

#[test]
fn deeper_events_are_refused_clearly_and_the_connection_keeps_working() {
    let d = Daemon::start_with(&format!("[daemon]\nmax_frame_bytes = {SMALL_FRAME}\n"));
    let mut c = d.client();
    let mut id = 0u64;
    for depth in MAX_NESTING_DEPTH + 1..=200 {
        for field in ["payload", "metadata", "raw"] {
            id += 1;
            // Metadata must be an object; the others start with either kind.
            let text = deep_text(depth, field == "metadata" || depth % 2 == 0);
            let frame = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"append","params":{{"session_id":"deep","event":{{"type":"t","{field}":{text}}}}}}}"#
            );
            c.send_raw(format!("{frame}\n").as_bytes());
            let e = c
                .wait_response(id)
                .expect_err("an event nesting deeper than the limit must be refused");
            assert_eq!(
                e.code,
                codes::INVALID_PARAMS,
                "depth {depth} in {field}: {e}"
            );
            // Framed as `{"params":{"event":{<field>: ...}}}`: three levels more.
            let frame_depth = depth + 3;
            if frame_depth <= MAX_NESTING_DEPTH + 8 {
                let want = format!(
                    "event.{field} nests {depth} levels of arrays and objects; the limit is {MAX_NESTING_DEPTH}"
                );
                assert!(e.message.contains(&want), "{e}\nwanted: {want}");
            } else {
                let want = format!(
                    "request nests {frame_depth} levels of arrays and objects; the limit is {}",
                    MAX_NESTING_DEPTH + 8
                );
                assert!(e.message.contains(&want), "{e}\nwanted: {want}");
                assert!(!e.message.contains("recursion"), "{e}");
            }
        }
        assert_eq!(
            c.call("hello", json!({})).map(|_| ()),
            Ok(()),
            "the connection works after depth {depth}"
        );
    }
    // Too deep to be a request at all, id in the middle: still answered with the id.
    let frame = format!(
        r#"{{"jsonrpc":"2.0","method":"hello","id":"x","params":{}}}"#,
        deep_text(300, false)
    );
    c.send_raw(format!("{frame}\n").as_bytes());
    let r = c.try_response_frame(&json!("x")).expect("reply to x");
    assert_eq!(r["error"]["code"], codes::INVALID_PARAMS, "{r}");

    let e = c.err("read", json!({"session_id": "deep"}));
    assert_eq!(e.code, codes::SESSION_NOT_FOUND, "nothing was stored: {e}");
    let (lsn, _) = c.append("deep", "t", json!([[[]]]));
    assert_eq!(lsn, 1);
}

/// 20 connections each send one ~8 MiB frame and stay open: the daemon must not keep each
/// one's frame buffer (that was 20 x 8+ MiB resident).
#[test]
fn idle_connections_do_not_keep_their_biggest_frame() {
    const CONNECTIONS: usize = 20;
    const FRAME: usize = 8 << 20;
    let d = Daemon::start_with("[store]\nfsync = \"never\"\n");
    let mut stats = d.client();
    let before = stats.ok("stats", json!({}))["rss_bytes"].as_u64();
    let Some(before) = before else {
        dstream_tests::skip(
            "idle_connections_do_not_keep_their_biggest_frame",
            "the OS does not report rss_bytes",
        );
        return;
    };
    let filler = "x".repeat(FRAME);
    let mut idle = Vec::new();
    let mut halfway = 0;
    for i in 0..CONNECTIONS {
        let mut c = d.client();
        let (lsn, _) = c.append("big", "t", json!({ "i": i, "x": filler }));
        assert_eq!(lsn, i as u64 + 1);
        idle.push(c);
        if i + 1 == CONNECTIONS / 2 {
            halfway = stats.ok("stats", json!({}))["rss_bytes"].as_u64().unwrap();
        }
    }
    let after = stats.ok("stats", json!({}))["rss_bytes"].as_u64().unwrap();
    eprintln!(
        "rss: {} MiB at the start, {} MiB after {} big frames, {} MiB after {CONNECTIONS}",
        before >> 20,
        halfway >> 20,
        CONNECTIONS / 2,
        after >> 20
    );
    // Freed buffers stay with the allocator, so the first few frames raise the RSS; after
    // that, buffers are reused. Kept buffers would add 8 MiB a connection.
    assert!(
        after.saturating_sub(halfway) < 3 * FRAME as u64,
        "rss grew from {} to {} MiB over the last {} connections: frame buffers are kept",
        halfway >> 20,
        after >> 20,
        CONNECTIONS / 2
    );
    assert!(
        after < 100 << 20,
        "rss {} MiB after {CONNECTIONS} connections sent one {} MiB frame each (started at {} \
         MiB): frame buffers are kept",
        after >> 20,
        FRAME >> 20,
        before >> 20
    );
    // The connections are still usable.
    for c in &mut idle {
        assert!(c.call("hello", json!({})).is_ok());
    }
}
