//! `usage` from the search index's hourly sums says exactly what reading every log says, for
//! every grouping, with and without a session, and over whole hours; anything else (a range
//! cut inside an hour, an index that is behind) is read from the logs.
#![cfg(unix)]

use dstream_tests::{Client, Daemon};
use serde_json::{Value, json};

const HOUR_MS: u64 = 3_600_000;

fn append(c: &mut Client, session: &str, event: Value) {
    c.ok("append", json!({"session_id": session, "event": event}));
}

fn request(model: &str, usd: f64, source: &str, actor: &str) -> Value {
    json!({"type": "usage.request", "actor": actor,
        "payload": {"model": model, "cost_usd": usd, "cost_usd_micros": (usd * 1e6).round() as u64,
            "input_tokens": 100, "output_tokens": 7, "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 30},
        "metadata": {"source": source}})
}

/// Three lineages: `p` with telemetry for itself and its subagent (and the same call imported
/// from a transcript), `q` with only a transcript and a reported total that differs, `r` with
/// only a reported total.
fn spend(c: &mut Client) {
    append(
        c,
        "p",
        json!({"type": "lifecycle.session.created", "raw": {"cwd": "/work/a"}}),
    );
    append(c, "p", request("sonnet", 0.25, "otlp", "claude-code"));
    let mut sub = request("haiku", 0.5, "otlp", "claude-code");
    sub["stream_id"] = json!("p");
    append(c, "p-agent-1", sub);
    append(
        c,
        "p",
        request("sonnet", 0.25, "claude-code-transcript", "claude-code"),
    );
    append(
        c,
        "q",
        json!({"type": "x", "payload": {"directory": "/work/b"}}),
    );
    append(c, "q", request("sonnet", 0.1, "opencode", "opencode"));
    append(
        c,
        "q",
        json!({"type": "usage.session", "payload": {"total_cost_usd": 0.2}}),
    );
    append(
        c,
        "r",
        json!({"type": "usage.session", "payload": {"total_cost_usd": 0.3}}),
    );
}

fn usage(c: &mut Client, params: Value) -> Value {
    let mut r = c.ok("usage", params);
    let source = r["source"].take();
    json!({"source": source, "result": r})
}

#[test]
fn the_index_and_the_logs_sum_the_same() {
    let d = Daemon::start();
    let mut c = d.client();
    // Asked right away: the daemon waits for the index to take in what was committed.
    spend(&mut c);
    let hour = dstream_tests::now_ms() / HOUR_MS * HOUR_MS;
    let mut compared = 0;
    for by in [
        "day", "week", "month", "session", "model", "project", "agent",
    ] {
        for session in [None, Some("p"), Some("p-agent-1"), Some("q")] {
            for (since, until) in [(None, None), (Some(hour - HOUR_MS), Some(hour + HOUR_MS))] {
                let mut p = json!({"by": by});
                if let Some(s) = session {
                    p["session_id"] = json!(s);
                }
                if let Some(s) = since {
                    p["since_ms"] = json!(s);
                }
                if let Some(u) = until {
                    p["until_ms"] = json!(u);
                }
                let indexed = usage(&mut c, p.clone());
                p["scan"] = json!(true);
                let scanned = usage(&mut c, p.clone());
                assert_eq!(indexed["source"], "index", "{p}");
                assert_eq!(scanned["source"], "logs", "{p}");
                assert_eq!(indexed["result"], scanned["result"], "{p}");
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 56);
    // What the figures are, so that equal cannot mean equally wrong.
    let all = usage(&mut c, json!({"by": "session"}))["result"].clone();
    let keys: Vec<(&str, u64)> = all["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap(),
                r["cost_usd_micros"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(keys, [("p", 750_000), ("q", 100_000)], "{all}");
    let mismatched: Vec<&str> = all["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(mismatched, ["q", "r"], "{all}");
    let projects = usage(&mut c, json!({"by": "project"}))["result"]["rows"].clone();
    assert_eq!(projects[0]["key"], "/work/a", "{projects}");

    // A range cut inside an hour is read from the logs, and so says the same.
    let cut = usage(&mut c, json!({"by": "day", "since_ms": hour + 1}));
    assert_eq!(cut["source"], "logs");
    // `--since 2h` starts at the top of its hour, where the index answers.
    let out = d.cli(&["usage", "--since", "2h", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["source"], "index", "{report}");
    assert_eq!(report["total"]["cost_usd_micros"], 850_000, "{report}");
}
