//! The OTLP receiver's throughput: Claude Code's `api_request` log records, as OTLP/HTTP JSON
//! (the heavier of its two encodings to decode) in batches like an exporter's, POSTed over a few
//! keep-alive connections at once to a fresh daemon (fsync=always). Each answer comes once its
//! records are stored, so the rate is records received, mapped and durable per second.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::http::HttpConn;
use crate::rpc::Rpc;

/// Records per POST, and connections posting at once.
pub const BATCH: usize = 100;
pub const CONNECTIONS: usize = 4;
/// Sessions the records are spread over.
const SESSIONS: usize = 16;

/// One export request of `BATCH` records, the `k`-th of connection `conn`.
fn export(conn: usize, k: usize) -> Vec<u8> {
    let records: Vec<_> = (0..BATCH)
        .map(|i| {
            let seq = (k * BATCH + i) as i64;
            let session = format!("otlp-bench-{:02}", (conn + i) % SESSIONS);
            let attr = |key: &str, value: serde_json::Value| json!({"key": key, "value": value});
            json!({
                "timeUnixNano": "1795000000000000000",
                "body": {"stringValue": "claude_code.api_request"},
                "attributes": [
                    attr("event.name", json!({"stringValue": "api_request"})),
                    attr("session.id", json!({"stringValue": session})),
                    attr("event.sequence", json!({"intValue": seq.to_string()})),
                    attr("event.timestamp", json!({"stringValue": format!("2026-11-25T10:{:02}:{:02}.{:03}Z", conn, seq / 1000 % 60, seq % 1000)})),
                    attr("prompt.id", json!({"stringValue": format!("p{conn}-{k}")})),
                    attr("model", json!({"stringValue": "claude-sonnet-4-5"})),
                    attr("input_tokens", json!({"intValue": "1200"})),
                    attr("output_tokens", json!({"intValue": "80"})),
                    attr("cache_read_tokens", json!({"intValue": "9000"})),
                    attr("cache_creation_tokens", json!({"intValue": "300"})),
                    attr("cost_usd", json!({"doubleValue": 0.0123})),
                    attr("duration_ms", json!({"intValue": "2100"})),
                    attr("request_id", json!({"stringValue": format!("req_{conn}_{seq}")})),
                ],
            })
        })
        .collect();
    serde_json::to_vec(&json!({"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "claude-code"}}]},
        "scopeLogs": [{"scope": {"name": "com.anthropic.claude_code.events"}, "logRecords": records}],
    }]}))
    .expect("JSON")
}

/// Posts `total` records to the daemon at `socket` (whose data dir holds the token); returns
/// records per second.
pub fn ingest(socket: &Path, data_dir: &Path, total: usize) -> Result<f64> {
    let mut rpc = Rpc::connect(socket)?;
    let stats = rpc.call("stats", "{}")?;
    let addr = stats["http"]["listen"]
        .as_str()
        .with_context(|| format!("the daemon has no HTTP listener: {}", stats["http"]))?
        .to_string();
    let token = std::fs::read_to_string(data_dir.join("http.token"))?
        .trim()
        .to_string();
    let per_conn = total / BATCH / CONNECTIONS;
    let bodies: Vec<Vec<Vec<u8>>> = (0..CONNECTIONS)
        .map(|c| (0..per_conn).map(|k| export(c, k)).collect())
        .collect();
    let t0 = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = bodies
            .iter()
            .map(|mine| {
                let (addr, token) = (&addr, &token);
                s.spawn(move || -> Result<()> {
                    let mut conn = HttpConn::connect(addr)?;
                    conn.always_send(format!("Authorization: Bearer {token}"));
                    for body in mine {
                        let r = conn.request("POST", "/v1/logs", Some("application/json"), body)?;
                        if r.status != 200 {
                            bail!(
                                "POST /v1/logs: {} {}",
                                r.status,
                                String::from_utf8_lossy(&r.body)
                            );
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("poster thread"))
            .collect()
    });
    let elapsed = t0.elapsed();
    for r in results {
        r?;
    }
    let sent = per_conn * CONNECTIONS * BATCH;
    let stats = rpc.call("stats", "{}")?;
    let received = stats["http"]["otlp_records"].as_u64().unwrap_or(0) as usize;
    if received != sent {
        bail!("sent {sent} records, the daemon counted {received}");
    }
    Ok(sent as f64 / elapsed.as_secs_f64())
}
