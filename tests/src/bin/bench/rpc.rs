//! dstream-only scenarios over the Unix socket: plain calls, pipelined bulk load,
//! append-to-subscriber latency, and timed reads.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::load::{RpcAppender, check_reply, push_append_request, push_event};

/// A blocking JSON-line client for one request at a time.
pub struct Rpc {
    w: UnixStream,
    r: BufReader<UnixStream>,
    next_id: u64,
    line: String,
}

impl Rpc {
    pub fn connect(socket: &Path) -> Result<Self> {
        let w = UnixStream::connect(socket)
            .with_context(|| format!("connecting to {}", socket.display()))?;
        w.set_read_timeout(Some(Duration::from_secs(60)))?;
        let r = BufReader::with_capacity(1 << 20, w.try_clone()?);
        Ok(Rpc {
            w,
            r,
            next_id: 1,
            line: String::new(),
        })
    }

    /// Sends a request and returns the raw response line (no subscriptions on this connection,
    /// so the next line is the answer).
    pub fn call_raw(&mut self, method: &str, params: &str) -> Result<&str> {
        let id = self.next_id;
        self.next_id += 1;
        let req = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\",\"params\":{params}}}\n"
        );
        self.w.write_all(req.as_bytes())?;
        self.line.clear();
        if self.r.read_line(&mut self.line)? == 0 {
            bail!("daemon closed the connection during {method}");
        }
        Ok(&self.line)
    }

    /// Like `call_raw`, parsed; an RPC error becomes an Err.
    pub fn call(&mut self, method: &str, params: &str) -> Result<Value> {
        let line = self.call_raw(method, params)?;
        let v: Value =
            serde_json::from_str(line).with_context(|| format!("bad {method} response"))?;
        if let Some(e) = v.get("error") {
            bail!("{method} failed: {e}");
        }
        Ok(v["result"].clone())
    }
}

/// Appends `total` events to one session as fast as possible: `conns` connections, each
/// writing windows of `window` requests before reading their replies. Returns (events/s, errors).
pub fn bulk_load(
    socket: &Path,
    session: &str,
    total: u64,
    conns: usize,
    window: u64,
) -> Result<(f64, u64, Option<String>)> {
    let next = AtomicU64::new(1);
    let done = AtomicU64::new(0);
    let t0 = Instant::now();
    let results: Vec<Result<(u64, Option<String>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..conns)
            .map(|_| {
                let (next, done) = (&next, &done);
                s.spawn(move || -> Result<(u64, Option<String>)> {
                    let w = UnixStream::connect(socket)?;
                    w.set_read_timeout(Some(Duration::from_secs(120)))?;
                    let mut r = BufReader::with_capacity(1 << 20, w.try_clone()?);
                    let (mut out, mut line) =
                        (String::with_capacity(window as usize * 400), String::new());
                    let (mut errors, mut first_error) = (0u64, None);
                    loop {
                        let from = next.fetch_add(window, Ordering::Relaxed);
                        if from > total {
                            return Ok((errors, first_error));
                        }
                        let to = (from + window - 1).min(total);
                        out.clear();
                        for seq in from..=to {
                            push_append_request(&mut out, seq, session, seq, None);
                        }
                        (&w).write_all(out.as_bytes())?;
                        for _ in from..=to {
                            line.clear();
                            if r.read_line(&mut line)? == 0 {
                                bail!("daemon closed the connection during the bulk load");
                            }
                            if let Err(e) = check_reply(&line) {
                                errors += 1;
                                first_error.get_or_insert(e);
                            }
                        }
                        let before = done.fetch_add(to - from + 1, Ordering::Relaxed);
                        let tenth = (total / 10).max(1);
                        if (before + to - from + 1) / tenth > before / tenth {
                            eprintln!(
                                "bench:   bulk load {} / {total} ({:.0} events/s)",
                                before + to - from + 1,
                                (before + to - from + 1) as f64 / t0.elapsed().as_secs_f64()
                            );
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bulk loader panicked"))
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let (mut errors, mut first) = (0, None);
    for r in results {
        let (e, f) = r?;
        errors += e;
        first = first.or(f);
    }
    Ok((total as f64 / secs, errors, first))
}

pub struct SubLatency {
    pub lat_ns: Vec<u64>,
    pub appended: u64,
    pub received: u64,
    pub lagged: u64,
    pub errors: u64,
}

/// One connection subscribes to `lat`; another appends (closed loop, C=1) events that carry
/// their send time (ns since a shared Instant). Latency = receive time − send time.
pub fn subscriber_latency(
    socket: &Path,
    warmup: Duration,
    measure: Duration,
) -> Result<SubLatency> {
    // Seed the session so that subscribing from LSN 1 needs no special case for a missing log.
    let mut seed = Rpc::connect(socket)?;
    let mut params = String::from("{\"session_id\":\"lat\",\"event\":");
    push_event(&mut params, 0, None);
    params.push('}');
    seed.call("append", &params)?;

    let sub = UnixStream::connect(socket)?;
    // A bounded wait: if events stop arriving the subscriber gives up instead of hanging.
    sub.set_read_timeout(Some(Duration::from_secs(10)))?;
    (&sub).write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"subscribe\",\"params\":{\"session_id\":\"lat\",\"from_lsn\":1}}\n")?;
    let mut r = BufReader::with_capacity(1 << 20, sub.try_clone()?);
    let mut line = String::new();
    let sub_deadline = Instant::now() + Duration::from_secs(10);
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 || Instant::now() > sub_deadline {
            bail!("no subscribe response");
        }
        let v: Value = serde_json::from_str(&line).context("bad frame from the daemon")?;
        if v["id"] == 1 {
            if let Some(e) = v.get("error") {
                bail!("subscribe failed: {e}");
            }
            break;
        }
    }

    let base = Instant::now();
    let t_measure_ns = (Duration::from_millis(20) + warmup).as_nanos() as u64;
    let last_seq = AtomicU64::new(u64::MAX);
    let mut appender = RpcAppender::connect(socket, "lat")?;
    std::thread::scope(|s| {
        let last_seq = &last_seq;
        let receiver = s.spawn(move || {
            let (mut lat, mut received, mut lagged) = (Vec::new(), 0u64, 0u64);
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => break, // closed or 10 s without a frame
                    Ok(_) => {}
                }
                let now = base.elapsed().as_nanos() as u64;
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if v["method"] == "lagged" {
                    lagged += 1;
                }
                if v["method"] != "event" {
                    continue; // caught_up, heartbeat
                }
                let payload = &v["params"]["event"]["payload"];
                let Some(seq) = payload["seq"].as_u64() else {
                    continue;
                };
                // Timed events carry `t`; the seed and the closing sentinel do not.
                if let Some(t) = payload["t"].as_u64() {
                    received += 1;
                    if t >= t_measure_ns {
                        lat.push(now.saturating_sub(t));
                    }
                }
                if seq > last_seq.load(Ordering::Acquire) {
                    break;
                }
            }
            (lat, received, lagged)
        });

        let t_end = base + Duration::from_millis(20) + warmup + measure;
        std::thread::sleep(Duration::from_millis(20));
        let (mut seq, mut errors) = (0u64, 0u64);
        let mut out = String::new();
        let mut line = String::new();
        while Instant::now() < t_end {
            seq += 1;
            out.clear();
            let t = base.elapsed().as_nanos() as u64;
            push_append_request(&mut out, seq, "lat", seq, Some(t));
            if appender.raw_roundtrip(&out, &mut line).is_err() {
                errors += 1;
                break;
            }
            if check_reply(&line).is_err() {
                errors += 1;
            }
        }
        last_seq.store(seq, Ordering::Release);
        // A sentinel after the last timed event, so the subscriber knows when to stop even if
        // it saw that event before `last_seq` was published.
        out.clear();
        push_append_request(&mut out, seq + 1, "lat", seq + 1, None);
        if appender.raw_roundtrip(&out, &mut line).is_err() || check_reply(&line).is_err() {
            errors += 1;
        }
        let (lat_ns, received, lagged) = receiver.join().expect("subscriber panicked");
        Ok(SubLatency {
            lat_ns,
            appended: seq,
            received,
            lagged,
            errors,
        })
    })
}

pub struct ReadTimes {
    /// The first tail read after a restart (cold index/page state for the daemon), ns.
    pub first_tail_ns: u64,
    pub tail_ns: Vec<u64>,
    pub seek_ns: Vec<u64>,
}

/// Times `read` of the last 100 events of `session` (which holds `total` events) `repeats`
/// times, and `repeats` reads of one event at pseudo-random LSNs. Checks what came back.
pub fn time_reads(socket: &Path, session: &str, total: u64, repeats: usize) -> Result<ReadTimes> {
    let mut rpc = Rpc::connect(socket)?;
    let from = total.saturating_sub(99).max(1);
    let tail_params = format!("{{\"session_id\":\"{session}\",\"from_lsn\":{from},\"limit\":100}}");
    let mut tail_ns = Vec::new();
    let mut first_tail_ns = 0;
    for i in 0..=repeats {
        let t0 = Instant::now();
        let line = rpc.call_raw("read", &tail_params)?;
        let ns = t0.elapsed().as_nanos() as u64;
        if i == 0 {
            check_events(line, from, (total - from + 1) as usize)?;
            first_tail_ns = ns;
        } else {
            tail_ns.push(ns);
        }
    }
    let mut seek_ns = Vec::new();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64; // xorshift64: deterministic, no dependency
    for _ in 0..repeats {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let lsn = 1 + rng % total;
        let params = format!("{{\"session_id\":\"{session}\",\"from_lsn\":{lsn},\"limit\":1}}");
        let t0 = Instant::now();
        let line = rpc.call_raw("read", &params)?;
        seek_ns.push(t0.elapsed().as_nanos() as u64);
        check_events(line, lsn, 1)?;
    }
    Ok(ReadTimes {
        first_tail_ns,
        tail_ns,
        seek_ns,
    })
}

/// The events of `session` (LSNs 1..=`total`) as JSON-array bodies of `batch` events each,
/// exactly as `read` returns them: the bytes the relay sends for them (no relay filters).
pub fn event_bodies(socket: &Path, session: &str, total: u64, batch: u64) -> Result<Vec<Vec<u8>>> {
    #[derive(serde::Deserialize)]
    struct Page<'a> {
        #[serde(borrow)]
        events: &'a serde_json::value::RawValue,
    }
    #[derive(serde::Deserialize)]
    struct Response<'a> {
        #[serde(borrow)]
        result: Page<'a>,
    }
    let mut rpc = Rpc::connect(socket)?;
    let mut bodies = Vec::new();
    let mut from = 1;
    while from <= total {
        let limit = batch.min(total - from + 1);
        let params =
            format!("{{\"session_id\":\"{session}\",\"from_lsn\":{from},\"limit\":{limit}}}");
        let line = rpc.call_raw("read", &params)?;
        check_events(line, from, limit as usize)?;
        let r: Response = serde_json::from_str(line).context("bad read response")?;
        bodies.push(r.result.events.get().as_bytes().to_vec());
        from += limit;
    }
    Ok(bodies)
}

/// The read response holds `count` events starting at LSN `from`.
fn check_events(line: &str, from: u64, count: usize) -> Result<()> {
    let v: Value = serde_json::from_str(line).context("bad read response")?;
    if let Some(e) = v.get("error") {
        bail!("read from {from} failed: {e}");
    }
    let events = v["result"]["events"]
        .as_array()
        .context("read result has no events array")?;
    let first = events.first().and_then(|e| e["lsn"].as_u64());
    if events.len() != count || first != Some(from) {
        bail!(
            "read from {from}: expected {count} events from LSN {from}, got {} from {first:?}",
            events.len()
        );
    }
    Ok(())
}

/// Builds request `i` (a whole line, `"id":i`) into the buffer.
pub type MakeRequest<'a> = &'a (dyn Fn(u64, &mut String) + Sync);
/// Checks the parsed reply to request `i`.
pub type CheckReply<'a> = &'a (dyn Fn(u64, &Value) -> Result<(), String> + Sync);

/// Sends requests `0..n` over `conns` connections, each writing windows of `window` requests
/// before reading their replies, and checks every reply (matched by id, whatever the order).
/// Returns (seconds, failed checks, first failure).
pub fn pipelined(
    socket: &Path,
    n: u64,
    conns: usize,
    window: u64,
    make: MakeRequest,
    check: CheckReply,
) -> Result<(f64, u64, Option<String>)> {
    let next = AtomicU64::new(0);
    let t0 = Instant::now();
    let results: Vec<Result<(u64, Option<String>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..conns)
            .map(|_| {
                let next = &next;
                s.spawn(move || -> Result<(u64, Option<String>)> {
                    let w = UnixStream::connect(socket)?;
                    w.set_read_timeout(Some(Duration::from_secs(120)))?;
                    let mut r = BufReader::with_capacity(1 << 20, w.try_clone()?);
                    let (mut out, mut line) = (String::new(), String::new());
                    let (mut errors, mut first_error) = (0u64, None);
                    loop {
                        let from = next.fetch_add(window, Ordering::Relaxed);
                        if from >= n {
                            return Ok((errors, first_error));
                        }
                        let to = (from + window).min(n);
                        out.clear();
                        for i in from..to {
                            make(i, &mut out);
                        }
                        (&w).write_all(out.as_bytes())?;
                        for _ in from..to {
                            line.clear();
                            if r.read_line(&mut line)? == 0 {
                                bail!("daemon closed the connection");
                            }
                            let outcome = match serde_json::from_str::<Value>(&line) {
                                Ok(v) => match v["id"].as_u64() {
                                    Some(i) if (from..to).contains(&i) => check(i, &v),
                                    _ => Err(format!("unexpected reply {}", line.trim())),
                                },
                                Err(e) => Err(format!("bad reply ({e}): {}", line.trim())),
                            };
                            if let Err(e) = outcome {
                                errors += 1;
                                first_error.get_or_insert(e.chars().take(300).collect());
                            }
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("pipelined client panicked"))
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let (mut errors, mut first) = (0, None);
    for r in results {
        let (e, f) = r?;
        errors += e;
        first = first.or(f);
    }
    Ok((secs, errors, first))
}
