//! The relay against the Rust reference server on loopback: how fast a backlog goes out, how
//! much memory that takes, and how long an appended event takes to reach a remote live reader.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use dstream_sdk::NewEvent;
use dstream_sdk::blocking::Client;
use serde_json::{Value, json};

use super::http::HttpConn;

/// Waits until the relay acknowledged `events` events of `session`, sampling the daemon's RSS;
/// returns the time taken and the peak RSS in MB.
pub fn catch_up(
    socket: &Path,
    pid: u32,
    session: &str,
    events: u64,
    timeout: Duration,
) -> Result<(Duration, f64)> {
    let client = Client::connect(socket)?;
    let t0 = Instant::now();
    let mut peak: f64 = 0.0;
    loop {
        if let Some(rss) = super::procs::rss_mb(pid) {
            peak = peak.max(rss);
        }
        let status = client.call_raw("relay.status", json!({}))?;
        let acked = status["streams"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["session_id"] == session))
            .and_then(|s| s["acked_lsn"].as_u64())
            .unwrap_or(0);
        if acked >= events {
            return Ok((t0.elapsed(), peak));
        }
        if let Some(reason) = status["streams"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["state"] == "failed"))
        {
            bail!("the relay failed: {reason}");
        }
        if t0.elapsed() > timeout {
            bail!("the relay acknowledged {acked} of {events} events within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Appends `n` events one at a time (a few ms apart, as an agent would) to `session` and
/// measures, per event, the time until a long-poll reader of its remote stream has it.
/// Returns the latencies in ns.
pub fn live_latency(
    socket: &Path,
    addr: &str,
    stream_path: &str,
    session: &str,
    n: u64,
) -> Result<Vec<u64>> {
    let client = Client::connect(socket)?;
    // The first event creates the remote stream; the reader starts at its tail.
    client.append(session, NewEvent::new("bench.warmup"))?;
    let mut c = HttpConn::connect(addr)?;
    let mut offset = loop {
        let r = c.request("HEAD", stream_path, None, b"")?;
        if r.status == 200
            && let Some(o) = r.header("stream-next-offset")
        {
            break o.to_string();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (tx, rx) = mpsc::channel::<(u64, Instant)>();
    let addr = addr.to_string();
    let path = stream_path.to_string();
    let reader = std::thread::spawn(move || -> Result<()> {
        let mut c = HttpConn::connect(&addr)?;
        let mut seen = 0;
        while seen < n {
            let r = c.request(
                "GET",
                &format!("{path}?offset={offset}&live=long-poll"),
                None,
                b"",
            )?;
            let now = Instant::now();
            if let Some(o) = r.header("stream-next-offset") {
                offset = o.to_string();
            }
            if r.status != 200 {
                continue;
            }
            let messages: Vec<Value> = serde_json::from_slice(&r.body).context("remote read")?;
            for m in messages {
                if let Some(i) = m["payload"]["i"].as_u64() {
                    seen += 1;
                    let _ = tx.send((i, now));
                }
            }
        }
        Ok(())
    });
    let mut sent = Vec::with_capacity(n as usize);
    for i in 0..n {
        sent.push(Instant::now());
        client.append(
            session,
            NewEvent::new("bench.live").payload(json!({ "i": i })),
        )?;
        std::thread::sleep(Duration::from_millis(3));
    }
    let mut lat = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let (i, at) = rx
            .recv_timeout(Duration::from_secs(30))
            .context("the remote reader stopped receiving")?;
        lat.push(at.duration_since(sent[i as usize]).as_nanos() as u64);
    }
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("reader panicked"))??;
    Ok(lat)
}
