//! Reference-server-only scenarios: bulk load with JSON-array POSTs and timed tail reads.

use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::Value;

use crate::http::HttpConn;
use crate::load::{EVENT_BYTES, push_event};

/// Bytes one event advances a JSON stream's offset by: its text plus the stored `,`.
const WIRE_BYTES: u64 = EVENT_BYTES as u64 + 1;

fn offset_token(event_index: u64) -> String {
    format!("0000000000000000_{:016}", event_index * WIRE_BYTES)
}

/// Connects and creates `stream` (a JSON stream); returns the connection and its path.
fn create(addr: &str, stream: &str) -> Result<(HttpConn, String)> {
    let mut c = HttpConn::connect(addr)?;
    let path = format!("/{stream}");
    let r = c.request("PUT", &path, Some("application/json"), b"")?;
    if r.status != 201 && r.status != 200 {
        bail!("PUT {path}: HTTP {}", r.status);
    }
    Ok((c, path))
}

/// POSTs one JSON-array body to the stream at `path`.
fn post(c: &mut HttpConn, path: &str, body: &[u8]) -> Result<()> {
    let r = c.request("POST", path, Some("application/json"), body)?;
    if r.status != 204 && r.status != 200 {
        bail!(
            "POST {path}: HTTP {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    Ok(())
}

/// Creates `stream` and appends `total` 256-byte events in JSON-array POSTs of `batch`
/// (its fastest documented way in). Returns events/s.
pub fn bulk_load(addr: &str, stream: &str, total: u64, batch: u64) -> Result<f64> {
    let (mut c, path) = create(addr, stream)?;
    let t0 = Instant::now();
    let mut body = String::new();
    let mut seq = 1;
    while seq <= total {
        let to = (seq + batch - 1).min(total);
        body.clear();
        body.push('[');
        for s in seq..=to {
            if s > seq {
                body.push(',');
            }
            push_event(&mut body, s, None);
        }
        body.push(']');
        post(&mut c, &path, body.as_bytes())?;
        seq = to + 1;
    }
    let rate = total as f64 / t0.elapsed().as_secs_f64();
    // Every event is exactly EVENT_BYTES of JSON, so the tail offset proves the count.
    let r = c.request("HEAD", &path, None, b"")?;
    let want = offset_token(total);
    if r.header("stream-next-offset") != Some(want.as_str()) {
        bail!(
            "after the bulk load the tail is {:?}, expected {want}",
            r.header("stream-next-offset")
        );
    }
    Ok(rate)
}

/// Creates `stream` and POSTs `bodies` (JSON arrays, `events` events in all) one after the
/// other, as a client holding them in memory would. Returns events/s.
pub fn post_bodies(addr: &str, stream: &str, bodies: &[Vec<u8>], events: u64) -> Result<f64> {
    let (mut c, path) = create(addr, stream)?;
    let t0 = Instant::now();
    for body in bodies {
        post(&mut c, &path, body)?;
    }
    Ok(events as f64 / t0.elapsed().as_secs_f64())
}

/// Times `GET ?offset=` of the last 100 events (the server returns everything to the tail),
/// once cold and then `repeats` times. Returns (first ns, samples ns).
pub fn time_tail_reads(
    addr: &str,
    stream: &str,
    total: u64,
    repeats: usize,
) -> Result<(u64, Vec<u64>)> {
    let mut c = HttpConn::connect(addr)?;
    let skip = total.saturating_sub(100);
    let path = format!("/{stream}?offset={}", offset_token(skip));
    let mut samples = Vec::new();
    let mut first = 0;
    for i in 0..=repeats {
        let t0 = Instant::now();
        let r = c.request("GET", &path, None, b"")?;
        let ns = t0.elapsed().as_nanos() as u64;
        if r.status != 200 {
            bail!("GET {path}: HTTP {}", r.status);
        }
        if i == 0 {
            let events: Vec<Value> = serde_json::from_slice(&r.body)?;
            let seq = events.first().and_then(|e| e["payload"]["seq"].as_u64());
            if events.len() as u64 != total - skip || seq != Some(skip + 1) {
                bail!(
                    "GET {path}: got {} events starting at seq {seq:?}",
                    events.len()
                );
            }
            first = ns;
        } else {
            samples.push(ns);
        }
    }
    Ok((first, samples))
}
