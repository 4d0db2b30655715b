//! The search index: events with text shaped like an agent's (prompts, shell commands, tool
//! output) whose words follow a Zipf-like law, as real text does, so that a one-word query
//! may match a handful of events or half of them. Measured: how fast the index catches up
//! from the logs, how fast appends go with and without it, and how long `search` takes.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::procs::DstreamSetup;
use crate::rpc::{Rpc, pipelined};
use crate::stats::pcts;
use crate::{Metrics, dir_bytes, leak, sync_disk, tempdir};

/// Sessions the events are spread over.
const SESSIONS: u64 = 16;
/// Queries timed of each kind.
const QUERIES: usize = 300;
const NO_INDEX: &str = "fsync = \"never\"\n[search]\nenabled = false";
const WITH_INDEX: &str = "fsync = \"never\"";
/// The paced load: the rate the index must keep up with, and for how long.
const PACED_RATE: u64 = 20_000;
const PACED_SECS: u64 = 10;
const PACED_WITH: &str = "fsync = \"interval\"\nfsync_interval_ms = 20";
const PACED_WITHOUT: &str =
    "fsync = \"interval\"\nfsync_interval_ms = 20\n[search]\nenabled = false";

/// Every search measurement, over `n` events, into `m` (keys `search/…`).
pub fn run(bin: &Path, tmp_root: &Path, n: u64, m: &mut Metrics) -> Result<()> {
    let setup = |dir: &tempfile::TempDir| DstreamSetup {
        bin: bin.into(),
        dir: dir.path().into(),
        nofile: None,
    };
    let dir = tempdir(tmp_root, "dstream-search-")?;
    let s = setup(&dir);
    eprintln!("bench: dstream: bulk load of {n} text events, search off (fsync=never)");
    let (d, _) = s.start(NO_INDEX)?;
    let off = load(&s.socket(), n, SESSIONS);
    d.stop()?;
    let off = off?;
    eprintln!("bench:   {off:.0} events/s");
    m.insert("search/append_off", off);
    let log_bytes = dir_bytes(&s.data_dir().join("sessions"));
    sync_disk();

    eprintln!("bench: dstream: search on: the index catches up from the logs");
    let (d, _) = s.start(WITH_INDEX)?;
    let took = wait_caught_up(&s.socket(), n, Duration::from_secs(1800));
    let took = match took {
        Ok(t) => t,
        Err(e) => {
            d.stop()?;
            return Err(e);
        }
    };
    let index_bytes = dir_bytes(&s.data_dir().join("search"));
    eprintln!(
        "bench:   {n} events in {took:?} ({:.0}/s); index {index_bytes} bytes, logs {log_bytes} bytes",
        n as f64 / took.as_secs_f64()
    );
    m.insert("search/catchup", n as f64 / took.as_secs_f64());
    m.insert(
        "search/size_ratio",
        index_bytes as f64 / log_bytes.max(1) as f64,
    );

    let mut rng = Rng::new(42);
    let uniform: Vec<String> = (0..QUERIES)
        .map(|_| word(rng.next() % VOCABULARY))
        .collect();
    let common: Vec<String> = (0..QUERIES).map(|i| word(i as u64 % 10)).collect();
    let timed = time_queries(&s.socket(), &uniform)
        .and_then(|u| Ok((u, time_queries(&s.socket(), &common)?)));
    d.stop()?;
    let ((mut lat, hits), (mut lat_common, _)) = timed?;
    let (p, pc) = (pcts(&mut lat, 1e6), pcts(&mut lat_common, 1e6));
    eprintln!(
        "bench:   search, uniform words: p50 {:?} ms p99 {:?} ms ({hits} hits); 10 commonest words: p50 {:?} ms p99 {:?} ms",
        p.p50, p.p99, pc.p50, pc.p99
    );
    p.p50.map(|v| m.insert("search/p50", v));
    p.p99.map(|v| m.insert("search/p99", v));
    pc.p50.map(|v| m.insert("search/common_p50", v));
    pc.p99.map(|v| m.insert("search/common_p99", v));
    // A restart on the full index: its checks at open (quick_check, FTS5 integrity-check)
    // come before the first new event is indexed.
    sync_disk();
    let (d, _) = s.start(WITH_INDEX)?;
    let reopened = wait_caught_up(&s.socket(), n, Duration::from_secs(600));
    d.stop()?;
    let reopened = reopened?;
    eprintln!("bench:   restart: the index was open and caught up after {reopened:?}");
    m.insert("search/reopen_ms", reopened.as_secs_f64() * 1e3);
    drop(dir);
    sync_disk();

    // The goal's own load: 20,000 events/s, with the index and without; fsync=interval as a
    // user would run it.
    for (key, store) in [("on", PACED_WITH), ("off", PACED_WITHOUT)] {
        let dir = tempdir(tmp_root, "dstream-search-paced-")?;
        let s = setup(&dir);
        eprintln!("bench: dstream: {PACED_RATE} events/s for {PACED_SECS} s, search {key}");
        let (d, _) = s.start(store)?;
        let r =
            paced(&s.socket(), PACED_RATE, PACED_SECS, SESSIONS).and_then(|(rate, lat, behind)| {
                let n = lat.len() as u64;
                let drained = if key == "on" {
                    Some(wait_caught_up(&s.socket(), n, Duration::from_secs(600))?)
                } else {
                    None
                };
                Ok((rate, lat, behind, drained))
            });
        d.stop()?;
        let (rate, mut lat, behind, drained) = r?;
        let p = pcts(&mut lat, 1e3);
        eprintln!(
            "bench:   {rate:.0} events/s, append p50 {:?} µs p99 {:?} µs; index at most {behind} events behind, caught up {drained:?} after the last append",
            p.p50, p.p99
        );
        m.insert(leak(format!("search/paced_{key}_rate")), rate);
        p.p50
            .map(|v| m.insert(leak(format!("search/paced_{key}_p50")), v));
        p.p99
            .map(|v| m.insert(leak(format!("search/paced_{key}_p99")), v));
        if let Some(t) = drained {
            m.insert("search/paced_behind", behind as f64);
            m.insert("search/paced_drain_ms", t.as_secs_f64() * 1e3);
        }
        drop(dir);
        sync_disk();
    }

    let dir = tempdir(tmp_root, "dstream-search-live-")?;
    let s = setup(&dir);
    eprintln!("bench: dstream: bulk load of {n} text events, search on (fsync=never)");
    let (d, _) = s.start(WITH_INDEX)?;
    let t0 = Instant::now();
    let on = load(&s.socket(), n, SESSIONS).and_then(|rate| {
        let loaded = t0.elapsed();
        let drained = wait_caught_up(&s.socket(), n, Duration::from_secs(1800))?;
        Ok((rate, loaded, drained))
    });
    d.stop()?;
    let (on, loaded, drained) = on?;
    eprintln!(
        "bench:   {on:.0} events/s; the index caught up {drained:?} after the last append ({:.0} events/s indexed over the whole load)",
        n as f64 / (loaded + drained).as_secs_f64()
    );
    m.insert("search/append_on", on);
    m.insert(
        "search/live_rate",
        n as f64 / (loaded + drained).as_secs_f64(),
    );
    m.insert("search/drain_ms", drained.as_secs_f64() * 1e3);
    drop(dir);
    sync_disk();
    Ok(())
}

/// Distinct words in the corpus.
pub const VOCABULARY: u64 = 50_000;
const SYLLABLES: [&str; 16] = [
    "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pu", "ga", "be", "do", "fi", "hu", "ja",
];

/// The word of rank `rank` (0 is the most frequent), spelt from syllables: unique per rank.
pub fn word(rank: u64) -> String {
    let mut w = String::new();
    let mut n = rank;
    loop {
        w.push_str(SYLLABLES[(n % 16) as usize]);
        n /= 16;
        if n == 0 {
            break;
        }
    }
    if w.len() < 4 {
        w.push_str("ri");
    }
    w
}

/// A small deterministic generator (splitmix64), so every run indexes the same corpus.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A rank drawn log-uniformly (P(rank) ~ 1/rank): Zipf's law, near enough.
    pub fn zipf(&mut self) -> u64 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((VOCABULARY as f64).powf(u) as u64).saturating_sub(1)
    }
    pub fn words(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| word(self.zipf()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Appends event `seq` as an `append` request: a prompt, a shell command or its output.
fn push_request(out: &mut String, id: u64, sessions: u64, seq: u64) {
    let mut rng = Rng::new(seq);
    let session = seq % sessions;
    let event = match seq % 3 {
        0 => format!(
            r#"{{"type":"user.input","payload":{{"text":"{}"}}}}"#,
            rng.words(12)
        ),
        1 => format!(
            r#"{{"type":"execution.tool_use","payload":{{"tool":"Bash","tool_use_id":"toolu_{seq}","input":{{"command":"grep -rn {} src/{}/{}.rs"}}}}}}"#,
            word(rng.zipf()),
            word(rng.zipf()),
            word(rng.zipf())
        ),
        _ => format!(
            r#"{{"type":"execution.tool_result","payload":{{"tool":"Bash","ok":true,"output":{{"stdout":"{}","stderr":""}}}}}}"#,
            rng.words(24)
        ),
    };
    let _ = writeln!(
        out,
        r#"{{"jsonrpc":"2.0","id":{id},"method":"append","params":{{"session_id":"search-{session}","event":{event}}}}}"#
    );
}

/// Appends `n` text events over `sessions` sessions, pipelined; returns events/s.
pub fn load(socket: &Path, n: u64, sessions: u64) -> Result<f64> {
    let make = |i: u64, out: &mut String| push_request(out, i, sessions, i);
    let check = |_: u64, v: &serde_json::Value| {
        if v.get("result").is_some() {
            Ok(())
        } else {
            Err(v.to_string())
        }
    };
    let (secs, errors, first) = pipelined(socket, n, 2, 256, &make, &check)?;
    if errors > 0 {
        bail!("{errors} appends failed; first: {first:?}");
    }
    Ok(n as f64 / secs)
}

/// The `search` entry of `stats`.
pub fn search_stats(rpc: &mut Rpc) -> Result<serde_json::Value> {
    Ok(rpc.call("stats", "{}")?["search"].clone())
}

/// Waits until the index holds `events` events and none are behind; returns how long it took.
pub fn wait_caught_up(socket: &Path, events: u64, timeout: Duration) -> Result<Duration> {
    let t0 = Instant::now();
    let mut rpc = Rpc::connect(socket)?;
    loop {
        let s = search_stats(&mut rpc)?;
        if s["behind_by"] == 0 && s["indexed_events"].as_u64() >= Some(events) {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > timeout {
            bail!("the index did not catch up within {timeout:?}: {s}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Times `search` for each word (limit 20); returns the latencies (ns) and the hits seen.
pub fn time_queries(socket: &Path, words: &[String]) -> Result<(Vec<u64>, u64)> {
    let mut rpc = Rpc::connect(socket)?;
    let mut lat = Vec::with_capacity(words.len());
    let mut hits = 0;
    for w in words {
        let params = format!(r#"{{"query":"{w}","limit":20}}"#);
        let t0 = Instant::now();
        let r = rpc.call("search", &params)?;
        lat.push(t0.elapsed().as_nanos() as u64);
        hits += r["hits"].as_array().map_or(0, |h| h.len() as u64);
    }
    Ok((lat, hits))
}

/// Appends at `rate` events/s for `secs` over `conns` connections (each sends its share in
/// 10 ms ticks, pipelined, and reads the replies), while another thread samples how far the
/// index is behind. Returns the achieved rate, each append's latency (ns, from its tick's send
/// to its reply) and the most events the index was ever behind.
pub fn paced(socket: &Path, rate: u64, secs: u64, sessions: u64) -> Result<(f64, Vec<u64>, u64)> {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const CONNS: u64 = 4;
    const TICK: Duration = Duration::from_millis(10);
    let per_tick = (rate / CONNS / 100).max(1);
    let ticks = secs * 100;
    let done = AtomicBool::new(false);
    let max_behind = AtomicU64::new(0);
    let t0 = Instant::now();
    let results = std::thread::scope(|s| {
        let monitor = s.spawn(|| -> Result<()> {
            let mut rpc = Rpc::connect(socket)?;
            while !done.load(Ordering::Relaxed) {
                let behind = search_stats(&mut rpc)?["behind_by"].as_u64().unwrap_or(0);
                max_behind.fetch_max(behind, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(())
        });
        let workers: Vec<_> = (0..CONNS)
            .map(|c| {
                s.spawn(move || -> Result<Vec<u64>> {
                    let w = UnixStream::connect(socket)?;
                    w.set_read_timeout(Some(Duration::from_secs(60)))?;
                    let mut r = BufReader::new(w.try_clone()?);
                    let (mut out, mut line) = (String::new(), String::new());
                    let mut lat = Vec::with_capacity((ticks * per_tick) as usize);
                    for tick in 0..ticks {
                        if let Some(wait) =
                            (t0 + TICK * tick as u32).checked_duration_since(Instant::now())
                        {
                            std::thread::sleep(wait);
                        }
                        out.clear();
                        for k in 0..per_tick {
                            let seq = (tick * per_tick + k) * CONNS + c;
                            push_request(&mut out, seq, sessions, seq);
                        }
                        let sent = Instant::now();
                        (&w).write_all(out.as_bytes())?;
                        for _ in 0..per_tick {
                            line.clear();
                            if r.read_line(&mut line)? == 0 {
                                bail!("the daemon closed the connection");
                            }
                            if !line.contains("\"result\"") {
                                bail!("append failed: {line}");
                            }
                            lat.push(sent.elapsed().as_nanos() as u64);
                        }
                    }
                    Ok(lat)
                })
            })
            .collect();
        let lat: Result<Vec<Vec<u64>>> = workers
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a worker panicked"))?)
            .collect();
        done.store(true, Ordering::Relaxed);
        let monitored = monitor
            .join()
            .map_err(|_| anyhow::anyhow!("the monitor panicked"));
        lat.and_then(|l| monitored?.map(|()| l))
    })?;
    let lat: Vec<u64> = results.into_iter().flatten().collect();
    let achieved = lat.len() as f64 / t0.elapsed().as_secs_f64();
    Ok((achieved, lat, max_behind.load(Ordering::Relaxed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_unique_per_rank_and_ranks_follow_zipf() {
        let mut seen = std::collections::HashSet::new();
        for r in 0..5000 {
            assert!(seen.insert(word(r)), "{r}");
        }
        let mut rng = Rng::new(1);
        let draws: Vec<u64> = (0..10_000).map(|_| rng.zipf()).collect();
        assert!(draws.iter().all(|&r| r < VOCABULARY));
        let top = draws.iter().filter(|&&r| r == 0).count();
        assert!(top > 300 && top < 1500, "{top}");
    }
}
