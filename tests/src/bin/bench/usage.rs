//! `dstream usage --by day` over a million `usage.request` events: from the search index's
//! hourly sums, against reading every log (`scan`), on the same daemon. The events are
//! Claude Code telemetry as the receiver stores it, over 64 sessions and two models, loaded
//! pipelined with fsync=never.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::load::check_reply;
use crate::rpc::Rpc;

const SESSIONS: u64 = 64;
const WINDOW: u64 = 256;
/// Timed `usage` calls from the index (the log scan is timed a few times: it is slow).
pub const INDEX_RUNS: usize = 20;
pub const SCAN_RUNS: usize = 3;

/// Appends `total` usage events over one pipelined connection; events/s.
pub fn load(socket: &Path, total: u64) -> Result<f64> {
    let w = UnixStream::connect(socket)?;
    w.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut r = BufReader::with_capacity(1 << 20, w.try_clone()?);
    let (mut out, mut line) = (String::new(), String::new());
    let t0 = Instant::now();
    let mut seq = 1;
    while seq <= total {
        let to = (seq + WINDOW - 1).min(total);
        out.clear();
        for i in seq..=to {
            let model = if i % 3 == 0 {
                "claude-haiku-4-5"
            } else {
                "claude-sonnet-4-5"
            };
            let _ = writeln!(
                out,
                "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"append\",\"params\":{{\"session_id\":\"usage-{:02}\",\"event\":{{\"type\":\"usage.request\",\"actor\":\"claude-code\",\"payload\":{{\"model\":\"{model}\",\"input_tokens\":1200,\"output_tokens\":80,\"cache_read_input_tokens\":9000,\"cache_creation_input_tokens\":300,\"cost_usd\":0.0123,\"cost_usd_micros\":12300,\"request_id\":\"req_{i}\",\"prompt_id\":\"p{}\",\"duration_ms\":2100}},\"metadata\":{{\"source\":\"otlp\"}}}}}}}}",
                i % SESSIONS,
                i / 10
            );
        }
        (&w).write_all(out.as_bytes())?;
        for _ in seq..=to {
            line.clear();
            if r.read_line(&mut line)? == 0 {
                bail!("the daemon closed the connection during the load");
            }
            if let Err(e) = check_reply(&line) {
                bail!("an append failed: {e}");
            }
        }
        seq = to + 1;
    }
    Ok(total as f64 / t0.elapsed().as_secs_f64())
}

/// Waits until the search index holds every event (what `usage` from the index needs).
pub fn wait_indexed(socket: &Path) -> Result<Duration> {
    let mut rpc = Rpc::connect(socket)?;
    let t0 = Instant::now();
    loop {
        let stats = rpc.call("stats", "{}")?;
        if stats["search"]["behind_by"] == 0 {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > Duration::from_secs(900) {
            bail!("the search index did not catch up: {}", stats["search"]);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `usage --by day` `runs` times, from the index or (`scan`) the logs: each call's ns, and the
/// total cost it gave (to check both say the same).
pub fn time_usage(socket: &Path, scan: bool, runs: usize) -> Result<(Vec<u64>, u64)> {
    let mut rpc = Rpc::connect(socket)?;
    let params = format!("{{\"by\":\"day\",\"scan\":{scan}}}");
    let (mut lat, mut total) = (Vec::with_capacity(runs), 0);
    for _ in 0..runs {
        let t0 = Instant::now();
        let r = rpc.call("usage", &params)?;
        lat.push(t0.elapsed().as_nanos() as u64);
        let want = if scan { "logs" } else { "index" };
        if r["source"] != want {
            bail!("usage came from {} where {want} was expected", r["source"]);
        }
        total = r["total"]["cost_usd_micros"].as_u64().unwrap_or(0);
    }
    Ok((lat, total))
}
