//! The built-in mapping plugins on payloads captured from the real agents
//! (`tests/fixtures/<source>/*.jsonl`, see its README), through the real daemon, as snapshots
//! (insta; `cargo insta review` or `INSTA_UPDATE=always` to accept a change on purpose).
//!
//! Each fixture run is ingested line by line; the events of every session it touched are
//! read back in order. Ids and timestamps differ per run, so ids are replaced by their
//! position (`#3` is the third stored event of the run) — which keeps what matters: a tool
//! result's `causation_id` must point at its request.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use dstream_tests::{Client, Daemon};
use serde_json::{Value, json};

fn fixtures(source: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(source);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

/// Ingests every line of `file` and returns the stored events of the sessions it touched,
/// session by session in order of first appearance, with stable stand-ins for ids.
fn run(c: &mut Client, source: &str, lines: &[Value]) -> Value {
    let mut sessions: Vec<String> = Vec::new();
    let mut replies = Vec::new();
    for raw in lines {
        let r = c.ok("ingest", json!({"source": source, "event": raw}));
        for e in r["events"].as_array().unwrap() {
            let s = e["session_id"].as_str().unwrap().to_string();
            if !sessions.contains(&s) {
                sessions.push(s);
            }
        }
        if let Some(d) = r.get("decision") {
            replies.push(d.clone());
        }
    }
    let mut ids: HashMap<String, String> = HashMap::new();
    let mut out = serde_json::Map::new();
    let mut all = Vec::new();
    for s in &sessions {
        let events = c.read_all(s);
        for e in &events {
            let n = ids.len() + 1;
            ids.insert(e["id"].as_str().unwrap().to_string(), format!("#{n}"));
        }
        all.push((s.clone(), events));
    }
    for (s, events) in all {
        let events: Vec<Value> = events
            .into_iter()
            .map(|mut e| {
                let o = e.as_object_mut().unwrap();
                o.remove("timestamp");
                o.remove("session_id");
                // `raw` is the input line: asserted equal separately, not snapshotted again.
                o.remove("raw");
                for key in ["id", "causation_id"] {
                    if let Some(Value::String(id)) = o.get(key) {
                        let stable = ids.get(id).cloned().unwrap_or_else(|| "#?".into());
                        o.insert(key.into(), Value::String(stable));
                    }
                }
                e
            })
            .collect();
        out.insert(s, Value::Array(events));
    }
    if !replies.is_empty() {
        out.insert("decisions".into(), Value::Array(replies));
    }
    Value::Object(out)
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

fn snapshot_source(source: &str) {
    let d = Daemon::start();
    let mut c = d.client();
    for file in fixtures(source) {
        let lines = read_lines(&file);
        let stored = run(&mut c, source, &lines);
        // Every stored event keeps its source event in `raw`.
        let name = file.file_stem().unwrap().to_string_lossy().to_string();
        insta::assert_json_snapshot!(format!("{source}__{name}"), stored);
    }
    let list = c.ok("plugins.list", json!({}));
    let mapper = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["sources"].as_array().unwrap().contains(&json!(source)))
        .unwrap_or_else(|| panic!("no plugin maps {source}"));
    assert_eq!(mapper["errors"], 0, "{mapper}");
    assert_eq!(mapper["origin"], "builtin");
}

#[test]
fn claude_code_hook_events_map_to_the_taxonomy() {
    snapshot_source("claude-code");
}

#[test]
fn every_stored_event_keeps_the_hook_event_as_raw() {
    let d = Daemon::start();
    let mut c = d.client();
    for file in fixtures("claude-code") {
        for raw in read_lines(&file) {
            let r = c.ok("ingest", json!({"source": "claude-code", "event": raw}));
            let events = r["events"].as_array().unwrap();
            assert!(!events.is_empty(), "{raw}: nothing stored");
            for e in events {
                let stored = c.ok(
                    "read",
                    json!({"session_id": e["session_id"], "from_lsn": e["lsn"], "limit": 1}),
                );
                assert_eq!(stored["events"][0]["raw"], raw, "{}", file.display());
            }
        }
    }
}

#[test]
fn unknown_and_malformed_hook_events_are_kept() {
    let d = Daemon::start();
    let mut c = d.client();
    let cases = [
        json!({"session_id": "cc-1", "hook_event_name": "SomeFutureHook", "x": 1}),
        json!({"session_id": "cc-1"}),
        json!({"session_id": "cc-1", "hook_event_name": 42, "tool_input": "not a table"}),
        json!({"session_id": "cc-1", "hook_event_name": "PreToolUse", "tool_input": [1, 2]}),
        json!({"session_id": "cc-1", "hook_event_name": "PostToolBatch", "tool_calls": "nope"}),
        json!({"session_id": "../escape", "hook_event_name": "Stop"}),
        json!([1, 2, 3]),
        json!("just a string"),
    ];
    let mut stored = Vec::new();
    for raw in &cases {
        let r = c.ok("ingest", json!({"source": "claude-code", "event": raw}));
        let events = r["events"].as_array().unwrap().clone();
        assert!(!events.is_empty(), "{raw}: nothing stored");
        for e in events {
            let got = c.ok(
                "read",
                json!({"session_id": e["session_id"], "from_lsn": e["lsn"], "limit": 1}),
            );
            let mut ev = got["events"][0].clone();
            assert_eq!(&ev["raw"], raw);
            let o = ev.as_object_mut().unwrap();
            for k in ["id", "timestamp", "raw", "lsn"] {
                o.remove(k);
            }
            if let Some(Value::String(err)) = o.get_mut("payload").and_then(|p| p.get_mut("error"))
            {
                // Lua's messages name the plugin file and line: keep only the gist.
                *err = err.split(": ").last().unwrap_or("").to_string();
            }
            stored.push(ev);
        }
    }
    insta::assert_json_snapshot!("claude-code__unknown_and_malformed", stored);
}
