//! `query --text`: the search index finds the events across sessions, the other filters of
//! `query` (type, actor, lineage, time) apply to what it found, and the answer is in `query`'s
//! order (session, then LSN).
#![cfg(unix)]

use std::time::Duration;

use dstream_tests::Daemon;
use dstream_tests::relay::wait_for;
use serde_json::{Value, json};

#[test]
fn query_finds_text_across_sessions_with_its_other_filters() {
    let d = Daemon::start();
    let mut c = d.client();
    let put = |c: &mut dstream_tests::Client, s: &str, t: &str, actor: &str, text: &str| {
        c.ok(
            "append",
            json!({"session_id": s, "event": {"type": t, "actor": actor, "payload": {"text": text}}}),
        );
    };
    put(&mut c, "b", "user.input", "user", "feed the zebra");
    put(
        &mut c,
        "a",
        "message.chunk",
        "claude",
        "a zebra has stripes",
    );
    put(&mut c, "a", "user.input", "user", "nothing here");
    put(&mut c, "a", "user.input", "user", "one more zebra");
    let found = |c: &mut dstream_tests::Client, extra: Value| -> Vec<(String, u64)> {
        let mut p = json!({"text": "zebra"});
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c.ok("query", p)["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["session_id"].as_str().unwrap().to_string(),
                    e["lsn"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let all = wait_for("the index", Duration::from_secs(20), || {
        let f = found(&mut c, json!({}));
        (f.len() == 3).then_some(f)
    });
    let key = |s: &str, l: u64| (s.to_string(), l);
    assert_eq!(all, [key("a", 1), key("a", 3), key("b", 1)]);
    assert_eq!(
        found(&mut c, json!({"type_prefix": "user."})),
        [key("a", 3), key("b", 1)]
    );
    assert_eq!(found(&mut c, json!({"actor": "claude"})), [key("a", 1)]);
    assert_eq!(found(&mut c, json!({"session_id": "b"})), [key("b", 1)]);
    let limited = c.ok("query", json!({"text": "zebra", "limit": 2}));
    assert_eq!(limited["truncated"], true);
    // Through the CLI, and a query that is not search syntax.
    let out = d.cli(&["query", "--text", "zebra", "--type", "message.", "--json"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("stripes"));
    let bad = d.cli(&["query", "--text", "(zebra"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("invalid search query"),
        "{bad:?}"
    );
}
