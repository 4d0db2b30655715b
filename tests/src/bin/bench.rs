//! Benchmark driver: dstream vs the Durable Streams Rust reference server (0.1.5), same
//! machine, same run, one after the other (never concurrently).
//!
//! Run: `cargo run --release -p dstream-tests --bin bench [-- --quick] [--events N]
//! [--duration SECS] [--warmup SECS] [--rounds N] [--skip-reference] [--skip-dstream] [--only a,b]`.
//! Prints one markdown table to stdout and writes it to `<repo>/.bench-cache/last-bench.md`.
//! Progress goes to stderr.

// A crate root looks for modules next to itself, so point at the bench/ directory.
#[path = "bench/agents.rs"]
mod agents;
#[path = "bench/checkpoints.rs"]
mod checkpoints;
#[path = "bench/ffi.rs"]
mod ffi;
#[path = "bench/http.rs"]
mod http;
#[path = "bench/import.rs"]
mod import;
#[path = "bench/load.rs"]
mod load;
#[path = "bench/otlp.rs"]
mod otlp;
#[path = "bench/procs.rs"]
mod procs;
#[path = "bench/reference.rs"]
mod reference;
#[path = "bench/relay.rs"]
mod relay;
#[path = "bench/rpc.rs"]
mod rpc;
#[path = "bench/search.rs"]
mod search;
#[path = "bench/stats.rs"]
mod stats;
#[path = "bench/usage.rs"]
mod usage;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};

use load::{Appender, HttpAppender, LoadResult, RpcAppender, closed_loop, push_append_request};
use procs::{DstreamSetup, RefSetup, ctx_switches, rss_anon_mb, rss_mb, status_field};
use stats::{Better, Table, median, pcts};

const FSYNC_ALWAYS: &str = "fsync = \"always\"";
const FSYNC_INTERVAL: &str = "fsync = \"interval\"\nfsync_interval_ms = 20";
const FSYNC_NEVER: &str = "fsync = \"never\"";
/// Pipelined bulk load of the big session: connections and requests in flight per connection.
const BULK_CONNS: usize = 2;
const BULK_WINDOW: u64 = 256;
/// Events per JSON-array POST when bulk loading the reference server.
const REF_BATCH: u64 = 1000;
const READ_REPEATS: usize = 50;
const RECOVERY_RUNS: usize = 3;
/// The many-sessions scenario: sessions created, the daemon's open-file limit (soft and hard),
/// and how they are driven (connections x requests in flight per connection).
const MANY_SESSIONS: u64 = 10_000;
const MANY_NOFILE: u64 = 256;
const MANY_CONNS: usize = 4;
const MANY_WINDOW: u64 = 64;
/// Checkpoint round trips timed, and pending checkpoints held at once.
const CHECKPOINT_ROUND_TRIPS: usize = 500;
const PENDING_CHECKPOINTS: u64 = 100_000;
/// Generated Claude Code transcripts the import is timed on: sessions, and turns per session
/// (four lines each).
const IMPORT_SESSIONS: usize = 50;
const IMPORT_TURNS: usize = 50;
/// Events per relay POST in the relay benchmark, and single events timed to a live reader.
const RELAY_BATCH: u64 = 1000;
/// Runs of the relay and of its from-memory reference: both follow the reference server's
/// syncs, which move a third from one run to the next, so each row is the best of these.
const RELAY_ROUNDS: usize = 3;
const RELAY_LIVE_EVENTS: u64 = 300;
/// Timed runs of `dstream hook claude-code` (and of the one-shot C client), and rounds of
/// captured payloads ingested to measure each mapping plugin.
const HOOK_RUNS: usize = 300;
/// Claude Code telemetry records posted to the OTLP receiver (a tenth with --quick).
const OTLP_RECORDS: usize = 20_000;
const PLUGIN_ROUNDS: usize = 5;

struct Opts {
    warmup: Duration,
    measure: Duration,
    events: u64,
    skip_reference: bool,
    skip_dstream: bool,
    /// Rounds of the durable append and ingest scenarios (dstream and the reference
    /// alternated in each); their rows show the median of the rounds.
    rounds: usize,
    /// `--only a,b`: just these scenarios (the table shows the rest as not measured).
    only: Option<Vec<String>>,
}

fn parse_args() -> Result<Opts> {
    let mut o = Opts {
        warmup: Duration::from_millis(500),
        measure: Duration::from_secs(5),
        events: 1_000_000,
        skip_reference: false,
        skip_dstream: false,
        rounds: 3,
        only: None,
    };
    let mut args = std::env::args().skip(1);
    let secs = |v: Option<String>, flag: &str| -> Result<Duration> {
        let v: f64 = v
            .with_context(|| format!("{flag} needs a value"))?
            .parse()
            .with_context(|| format!("bad {flag}"))?;
        if !(0.0..=600.0).contains(&v) {
            bail!("{flag} must be between 0 and 600 seconds");
        }
        Ok(Duration::from_secs_f64(v))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => {
                o.warmup = Duration::from_millis(300);
                o.measure = Duration::from_millis(1500);
                o.events = 100_000;
                o.rounds = 1;
            }
            "--rounds" => {
                o.rounds = args
                    .next()
                    .context("--rounds needs a value")?
                    .parse()
                    .context("bad --rounds")?;
                if !(1..=20).contains(&o.rounds) {
                    bail!("--rounds must be between 1 and 20");
                }
            }
            "--events" => {
                o.events = args
                    .next()
                    .context("--events needs a value")?
                    .parse()
                    .context("bad --events")?;
                if o.events < 100 {
                    bail!("--events must be at least 100");
                }
            }
            "--duration" => o.measure = secs(args.next(), "--duration")?,
            "--warmup" => o.warmup = secs(args.next(), "--warmup")?,
            "--skip-reference" => o.skip_reference = true,
            "--skip-dstream" => o.skip_dstream = true,
            "--only" => {
                let list = args.next().context("--only needs a list of scenarios")?;
                let names: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
                if let Some(bad) = names.iter().find(|n| !SCENARIOS.contains(&n.as_str())) {
                    bail!(
                        "--only: no scenario {bad:?}; there are {}",
                        SCENARIOS.join(", ")
                    );
                }
                o.only = Some(names);
            }
            "-h" | "--help" => {
                println!(
                    "usage: bench [--quick] [--events N] [--duration SECS] [--warmup SECS] [--rounds N] [--skip-reference] [--skip-dstream] [--only {}]",
                    SCENARIOS.join(",")
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    Ok(o)
}

/// What `--only` can name.
const SCENARIOS: &[&str] = &[
    "rss",
    "appends",
    "subscriber",
    "checkpoints",
    "agents",
    "ingest",
    "otlp",
    "ffi",
    "many",
    "big",
    "search",
    "usage",
    "relay",
];

/// Measured values by metric key, one map per server.
type Metrics = HashMap<&'static str, f64>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let o = parse_args()?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("no repo root")?
        .to_path_buf();
    // Build first: `cargo run --bin bench` only builds the bench itself.
    let dstream_bin = if o.skip_dstream {
        None
    } else {
        Some(procs::build_daemon(&repo)?)
    };
    let ref_bin = if o.skip_reference {
        None
    } else {
        Some(procs::ensure_reference()?)
    };

    // Temp dirs on the real disk (fsync must be real), never tmpfs.
    let tmp_root = repo.join(".bench-cache/tmp");
    std::fs::create_dir_all(&tmp_root)?;
    let (fs_type, fs_dev) = filesystem_of(&tmp_root);
    if fs_type == "tmpfs" || fs_type == "ramfs" {
        bail!(
            "{} is on {fs_type}; fsync would be free there",
            tmp_root.display()
        );
    }

    let load_start = loadavg();
    let cpu_start = cpu_times();
    let strace = procs::have_strace();
    if !strace && ref_bin.is_some() {
        eprintln!("bench: strace not found: the reference's appends per fdatasync stay unmeasured");
    }
    let mut b = Bench {
        o: &o,
        tmp_root,
        ours: Metrics::new(),
        theirs: Metrics::new(),
        rounds: HashMap::new(),
        notes: Vec::new(),
        strace,
        many_ok: None,
    };
    let (d, r) = (dstream_bin.as_deref(), ref_bin.as_deref());
    let wants = |name: &str| {
        o.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|n| n == name))
    };
    if wants("rss") {
        if let Some(bin) = d {
            b.dstream_idle_rss(bin)?;
            b.hot_code_found(bin, &repo);
        }
        if let Some(bin) = r {
            b.reference_idle_rss(bin)?;
        }
    }
    // Each durable append scenario runs on dstream and then right away on the reference, so
    // that both see the same machine state (disk and host noise drift over a run).
    // Rounds over all of them, so that a slow spell of the disk or the host falls on one
    // round of each rather than on every run of one scenario.
    for round in (0..o.rounds).filter(|_| wants("appends")) {
        if o.rounds > 1 {
            eprintln!("bench: appends, round {} of {}", round + 1, o.rounds);
        }
        for scenario in APPEND_SCENARIOS.iter() {
            if let Some(bin) = d {
                b.dstream_appends(bin, "always", *scenario)?;
            }
            if let Some(bin) = r {
                b.reference_appends(bin, *scenario)?;
            }
        }
        // Right after the 16-session appends its ratio is taken against, in the same spell
        // of the disk.
        if let Some(bin) = d.filter(|_| wants("ingest")) {
            b.dstream_ingest(bin, &repo)?;
        }
    }
    if let Some(bin) = d {
        for scenario in APPEND_SCENARIOS.iter().filter(|_| wants("appends")) {
            b.dstream_appends(bin, "interval", *scenario)?;
        }
        if wants("subscriber") {
            b.dstream_subscriber(bin)?;
        }
        if wants("checkpoints") {
            b.dstream_checkpoints(bin)?;
        }
        if wants("agents") {
            b.dstream_agents(bin, &repo)?;
        }
        // With the append rounds, ingest runs in them (its row is read against theirs).
        for _ in (0..o.rounds).filter(|_| wants("ingest") && !wants("appends")) {
            b.dstream_ingest(bin, &repo)?;
        }
        if wants("otlp") {
            b.dstream_otlp(bin)?;
        }
        if wants("ffi") {
            b.dstream_ffi(bin, &repo)?;
        }
        if wants("many") {
            b.dstream_many(bin)?;
        }
        if wants("big") {
            b.dstream_big(bin)?;
        }
        if wants("search") {
            b.dstream_search(bin)?;
        }
        if wants("usage") {
            b.dstream_usage(bin)?;
        }
    }
    if let Some(bin) = r.filter(|_| wants("big")) {
        b.reference_big(bin)?;
    }
    if let (Some(bin), Some(ref_bin)) = (d, r.filter(|_| wants("relay"))) {
        b.dstream_relay(bin, ref_bin)?;
    }

    let (cpu_end, mut load) = (
        cpu_times(),
        format!("{load_start} at start, {} at end", loadavg()),
    );
    // Steal time: on a VM, the host taking CPUs away shows up here and makes numbers noisy.
    if let (Some((t0, s0)), Some((t1, s1))) = (cpu_start, cpu_end)
        && t1 > t0
    {
        load.push_str(&format!(
            "; CPU steal during the run {:.1}%",
            100.0 * (s1 - s0) as f64 / (t1 - t0) as f64
        ));
    }
    let out = render(&o, &load, &b, &fs_type, &fs_dev);
    println!("{out}");
    let path = repo.join(".bench-cache/last-bench.md");
    std::fs::write(&path, &out).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench: table written to {}", path.display());
    Ok(())
}

fn tempdir(root: &Path, prefix: &str) -> Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix(prefix).tempdir_in(root)?)
}

/// Flushes everything dirty so one scenario's writeback does not land in the next one.
fn sync_disk() {
    unsafe { libc::sync() };
}

/// (connections, sessions, metric key prefix) of the append scenarios; connection k appends
/// to session k % sessions.
const APPEND_SCENARIOS: [(usize, usize, &str); 4] = [
    (1, 1, "c1"),
    (16, 1, "c16s1"),
    (16, 4, "c16s4"),
    (16, 16, "c16s16"),
];

fn scenario_label(conns: usize, sessions: usize) -> String {
    let plural = if sessions == 1 { "" } else { "s" };
    format!("C={conns}, {sessions} session{plural}")
}

/// Server counters at one edge of the measured window.
#[derive(Default)]
struct Snap {
    ctx: Option<u64>,
    appends: Option<f64>,
    fsyncs: Option<f64>,
    /// Appends committed on the thread that read them (`stats` direct_appends).
    direct: Option<f64>,
}

fn delta(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(b? - a?)
}

/// The id of session `i` of the many-sessions scenario.
fn many_id(i: u64) -> String {
    format!("many-{i:05}")
}

/// Metric keys are built from a few fixed parts; leaking them keeps the map simple.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The run's state: options, where temp dirs go, and what was measured so far.
struct Bench<'a> {
    o: &'a Opts,
    tmp_root: PathBuf,
    ours: Metrics,
    theirs: Metrics,
    /// Every round's value of a metric measured in rounds (dstream: true), whose median is
    /// what `ours` / `theirs` hold.
    rounds: HashMap<(bool, &'static str), Vec<f64>>,
    notes: Vec<String>,
    /// strace is installed: the reference's fdatasync calls can be counted.
    strace: bool,
    /// The many-sessions verdict: every session appendable and readable under the low limit.
    many_ok: Option<String>,
}

impl Bench<'_> {
    /// One round's value of `key`: the metric becomes the median of the rounds so far.
    fn sample(&mut self, ours: bool, key: &'static str, value: f64) {
        let values = self.rounds.entry((ours, key)).or_default();
        values.push(value);
        let m = if ours {
            &mut self.ours
        } else {
            &mut self.theirs
        };
        m.insert(key, median(values));
    }

    /// The spread of `key` over its rounds, for the log: `[min–max over n]`.
    fn spread(&self, ours: bool, key: &str) -> String {
        match self.rounds.get(&(ours, key)) {
            Some(v) if v.len() > 1 => {
                let (lo, hi) = v
                    .iter()
                    .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                format!(" [{lo:.0}-{hi:.0} over {} rounds]", v.len())
            }
            _ => String::new(),
        }
    }

    /// `usage --by day` over a million usage events: the index's sums against a log scan.
    fn dstream_usage(&mut self, bin: &Path) -> Result<()> {
        let total = self.o.events;
        eprintln!("bench: dstream: usage --by day over {total} usage events");
        let (dir, s) = self.dstream(bin, "dstream-usage-")?;
        let (d, _) = s.start(FSYNC_NEVER)?;
        let measured = (|| -> Result<_> {
            let rate = usage::load(&s.socket(), total)?;
            let waited = usage::wait_indexed(&s.socket())?;
            eprintln!(
                "bench:   the index caught up {:.1} s after the load",
                waited.as_secs_f64()
            );
            let (mut index, by_index) = usage::time_usage(&s.socket(), false, usage::INDEX_RUNS)?;
            let (mut scan, by_scan) = usage::time_usage(&s.socket(), true, usage::SCAN_RUNS)?;
            if by_index != by_scan || by_index != total * 12_300 {
                bail!("usage disagrees: index {by_index}, logs {by_scan} µ$");
            }
            Ok((rate, pcts(&mut index, 1e6), pcts(&mut scan, 1e6)))
        })();
        d.stop()?;
        let (rate, index, scan) = measured?;
        eprintln!(
            "bench:   loaded {rate:.0} events/s; usage p50 {:?} ms from the index, {:?} ms from the logs",
            index.p50, scan.p50
        );
        index.p50.map(|v| self.ours.insert("usage/index_p50", v));
        index.p99.map(|v| self.ours.insert("usage/index_p99", v));
        scan.p50.map(|v| self.ours.insert("usage/scan_p50", v));
        drop(dir);
        sync_disk();
        Ok(())
    }

    /// The search index: catch-up rate, size, query latency, appends with and without it.
    fn dstream_search(&mut self, bin: &Path) -> Result<()> {
        search::run(bin, &self.tmp_root, self.o.events, &mut self.ours)
    }

    fn dstream(&self, bin: &Path, prefix: &str) -> Result<(tempfile::TempDir, DstreamSetup)> {
        let dir = tempdir(&self.tmp_root, prefix)?;
        let setup = DstreamSetup {
            bin: bin.into(),
            dir: dir.path().into(),
            nofile: None,
        };
        Ok((dir, setup))
    }

    fn reference(&self, bin: &Path, prefix: &str) -> Result<(tempfile::TempDir, RefSetup)> {
        let dir = tempdir(&self.tmp_root, prefix)?;
        let setup = RefSetup {
            bin: bin.into(),
            dir: dir.path().into(),
        };
        Ok((dir, setup))
    }

    fn record_load(&mut self, ours: bool, key: &str, label: &str, mut r: LoadResult) {
        let side = if ours { "dstream" } else { "reference" };
        let p = pcts(&mut r.lat_ns, 1e3);
        let rate = leak(format!("{key}/s"));
        self.sample(ours, rate, r.per_sec);
        eprintln!(
            "bench:   {side} {label}: {:.0} appends/s, p50 {:?} µs, p99 {:?} µs, errors {}{}",
            r.per_sec,
            p.p50,
            p.p99,
            r.errors,
            self.spread(ours, rate)
        );
        if let Some(v) = p.p50 {
            self.sample(ours, leak(format!("{key}/p50")), v);
        }
        if let Some(v) = p.p99 {
            self.sample(ours, leak(format!("{key}/p99")), v);
        }
        // Memory under load: the highest of the rounds.
        let m = if ours {
            &mut self.ours
        } else {
            &mut self.theirs
        };
        for (k, v) in [("rss/load", r.max_rss_mb), ("rss/load_anon", r.max_anon_mb)] {
            if let Some(v) = v {
                let top = m.get(k).map_or(v, |&old: &f64| old.max(v));
                m.insert(k, top);
            }
        }
        if r.errors > 0 {
            self.notes.push(format!(
                "{side} {label}: {} failed appends; first: {}",
                r.errors,
                r.first_error.unwrap_or_default()
            ));
        }
    }

    fn dstream_idle_rss(&mut self, bin: &Path) -> Result<()> {
        eprintln!("bench: dstream: idle RSS");
        let (_dir, s) = self.dstream(bin, "dstream-")?;
        let (d, _) = s.start(FSYNC_ALWAYS)?;
        std::thread::sleep(Duration::from_secs(1));
        if let Some(v) = rss_mb(d.pid()) {
            self.ours.insert("rss/idle", v);
        }
        if let Some(v) = rss_anon_mb(d.pid()) {
            self.ours.insert("rss/idle_anon", v);
        }
        d.stop()?;
        Ok(())
    }

    /// How many functions of `daemon/hot-code.order` the binary has: the release build packs
    /// them together (see daemon/build.rs), and a list whose names went stale (a new toolchain
    /// or dependency) packs nothing, which only the memory rows would otherwise show.
    fn hot_code_found(&mut self, bin: &Path, repo: &Path) {
        let order = repo.join("daemon/hot-code.order");
        let Ok(listed) = std::fs::read_to_string(&order) else {
            return;
        };
        let Ok(out) = Command::new("nm").arg("--defined-only").arg(bin).output() else {
            return;
        };
        let names: std::collections::HashSet<&str> = std::str::from_utf8(&out.stdout)
            .unwrap_or("")
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2))
            .collect();
        let listed: Vec<&str> = listed.lines().filter(|l| !l.is_empty()).collect();
        let found = listed.iter().filter(|n| names.contains(*n)).count();
        self.ours.insert("hotcode/found", found as f64);
        self.theirs.insert("hotcode/found", listed.len() as f64);
        if found * 10 < listed.len() * 9 {
            self.notes.push(format!(
                "only {found} of the {} functions in daemon/hot-code.order are in the binary: \
                 the list is stale (`node scripts/hot-code.mjs` writes it again)",
                listed.len()
            ));
        }
    }

    fn reference_idle_rss(&mut self, bin: &Path) -> Result<()> {
        eprintln!("bench: reference: idle RSS");
        let (_dir, s) = self.reference(bin, "ref-")?;
        let (r, _, _) = s.start()?;
        std::thread::sleep(Duration::from_secs(1));
        if let Some(v) = rss_mb(r.pid()) {
            self.theirs.insert("rss/idle", v);
        }
        if let Some(v) = rss_anon_mb(r.pid()) {
            self.theirs.insert("rss/idle_anon", v);
        }
        r.stop()?;
        Ok(())
    }

    fn dstream_appends(
        &mut self,
        bin: &Path,
        policy: &str,
        (conns, sessions, key): (usize, usize, &str),
    ) -> Result<()> {
        let store = if policy == "always" {
            FSYNC_ALWAYS
        } else {
            FSYNC_INTERVAL
        };
        let label = format!("fsync={policy} {}", scenario_label(conns, sessions));
        eprintln!("bench: dstream: appends, {label}");
        let (dir, s) = self.dstream(bin, "dstream-")?;
        let (d, _) = s.start(store)?;
        let appenders = (0..conns)
            .map(|k| {
                let session = format!("bench-{}", k % sessions);
                Ok(Box::new(RpcAppender::connect(&s.socket(), &session)?) as Box<dyn Appender>)
            })
            .collect::<Result<Vec<_>>>()?;
        let pid = d.pid();
        let rss_pid = (policy == "always" && conns == 16 && sessions == 16).then_some(pid);
        // The daemon's own counters, read at both edges of the measured window, show how well
        // appends shared fsyncs (group commit); context switches come from /proc.
        let probe_rpc = Mutex::new(rpc::Rpc::connect(&s.socket())?);
        let probe = || {
            let ctx = ctx_switches(pid);
            let stats = probe_rpc.lock().unwrap().call("stats", "{}");
            if let Err(e) = &stats {
                eprintln!("bench:   warning: `stats` failed: {e:#}");
            }
            let stats = stats.unwrap_or_default();
            Snap {
                ctx,
                appends: stats["appends"].as_f64(),
                fsyncs: stats["fsyncs"].as_f64(),
                direct: stats["direct_appends"].as_f64(),
            }
        };
        let (r, before, after) =
            closed_loop(appenders, self.o.warmup, self.o.measure, rss_pid, &probe);
        let stats = probe_rpc.lock().unwrap().call("stats", "{}");
        d.stop()?;
        let done = r.lat_ns.len() as f64;
        let (appends, fsyncs) = (
            delta(before.appends, after.appends),
            delta(before.fsyncs, after.fsyncs),
        );
        eprintln!(
            "bench:   measured window: daemon appends {appends:?} ({:?} committed directly), fsyncs {fsyncs:?}, context switches {:?}",
            delta(before.direct, after.direct),
            delta(before.ctx.map(|v| v as f64), after.ctx.map(|v| v as f64))
        );
        if let (Some(a), Some(f)) = (appends, fsyncs)
            && f > 0.0
        {
            self.sample(true, leak(format!("{policy}/{key}/perfsync")), a / f);
        }
        if let (Some(c0), Some(c1)) = (before.ctx, after.ctx)
            && done > 0.0
        {
            let per_append = (c1 - c0) as f64 / done;
            self.sample(true, leak(format!("{policy}/{key}/ctx")), per_append);
        }
        if let Ok(v) = stats
            && let (Some(a), Some(b)) = (v["appends"].as_f64(), v["bytes_written"].as_f64())
            && a > 0.0
        {
            self.ours.insert("bytes/event", b / a);
        }
        self.record_load(true, &format!("{policy}/{key}"), &label, r);
        drop(dir);
        sync_disk();
        Ok(())
    }

    fn reference_appends(
        &mut self,
        bin: &Path,
        (conns, sessions, key): (usize, usize, &str),
    ) -> Result<()> {
        let label = format!(
            "wal {}",
            scenario_label(conns, sessions).replace("session", "stream")
        );
        eprintln!("bench: reference: appends, {label}");
        let (dir, s) = self.reference(bin, "ref-")?;
        let (server, _, addr) = s.start()?;
        let appenders = self.ref_appenders(&addr, conns, sessions)?;
        let pid = server.pid();
        let rss_pid = (conns == 16 && sessions == 16).then_some(pid);
        let probe = || ctx_switches(pid);
        let (r, c0, c1) = closed_loop(appenders, self.o.warmup, self.o.measure, rss_pid, &probe);
        server.stop()?;
        let done = r.lat_ns.len() as f64;
        if let (Some(c0), Some(c1)) = (c0, c1)
            && done > 0.0
        {
            eprintln!("bench:   measured window: context switches {}", c1 - c0);
            self.sample(
                false,
                leak(format!("always/{key}/ctx")),
                (c1 - c0) as f64 / done,
            );
        }
        // The reference has one durable mode; its rows sit next to dstream's fsync=always.
        self.record_load(false, &format!("always/{key}"), &label, r);
        drop(dir);
        sync_disk();
        // Its count of syncs moves little from run to run: one traced run is enough.
        if self.strace
            && !self
                .theirs
                .contains_key(format!("always/{key}/perfsync").as_str())
        {
            self.reference_fsyncs(bin, (conns, sessions, key))?;
        }
        Ok(())
    }

    fn ref_appenders(
        &self,
        addr: &str,
        conns: usize,
        sessions: usize,
    ) -> Result<Vec<Box<dyn Appender>>> {
        (0..conns)
            .map(|k| {
                let stream = format!("bench-{}", k % sessions);
                Ok(Box::new(HttpAppender::connect(addr, &stream)?) as Box<dyn Appender>)
            })
            .collect()
    }

    /// A second, separate run of the same scenario under strace, counting the reference's
    /// fsync/fdatasync calls in the measured window (kept apart so that tracing does not
    /// touch the throughput, latency and context-switch figures).
    fn reference_fsyncs(
        &mut self,
        bin: &Path,
        (conns, sessions, key): (usize, usize, &str),
    ) -> Result<()> {
        eprintln!(
            "bench: reference: fdatasync count under strace, {}",
            scenario_label(conns, sessions)
        );
        let (dir, s) = self.reference(bin, "ref-strace-")?;
        let trace = dir.path().join("strace.out");
        let (server, _, addr) = s.start_traced(Some(&trace))?;
        let appenders = self.ref_appenders(&addr, conns, sessions)?;
        let now = || {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        let (r, t0, t1) = closed_loop(appenders, self.o.warmup, self.o.measure, None, &now);
        server.stop()?;
        let text = std::fs::read_to_string(&trace).unwrap_or_default();
        // Lines are `<tid> <epoch secs> fdatasync(…`; a call split by another thread's shows
        // once with `(` (the `<… resumed>` half has none).
        let syncs = text
            .lines()
            .filter(|l| l.contains("fdatasync(") || l.contains("fsync("))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .filter(|t| (t0..t1).contains(t))
            .count();
        let done = r.lat_ns.len();
        eprintln!(
            "bench:   traced: {:.0} appends/s, {done} appends and {syncs} fsync/fdatasync calls in the window, errors {}",
            r.per_sec, r.errors
        );
        if syncs > 0 && r.errors == 0 {
            self.theirs.insert(
                leak(format!("always/{key}/perfsync")),
                done as f64 / syncs as f64,
            );
        } else {
            self.notes.push(format!(
                "reference under strace, {}: {syncs} fsync/fdatasync calls, {} errors; not reported",
                scenario_label(conns, sessions),
                r.errors
            ));
        }
        drop(dir);
        sync_disk();
        Ok(())
    }

    /// Many sessions under a low open-file limit: create them, measure memory and threads,
    /// restart, then check that every session takes an append and reads back.
    fn dstream_many(&mut self, bin: &Path) -> Result<()> {
        let n = MANY_SESSIONS;
        eprintln!(
            "bench: dstream: {n} sessions, one append each, RLIMIT_NOFILE {MANY_NOFILE} (fsync=always)"
        );
        let (dir, mut s) = self.dstream(bin, "dstream-many-")?;
        s.nofile = Some(MANY_NOFILE);
        let (d, _) = s.start(FSYNC_ALWAYS)?;
        let limits = procs::nofile_limits(d.pid());
        let want = MANY_NOFILE.to_string();
        let limited = limits
            .as_ref()
            .is_some_and(|(soft, hard)| *soft == want && *hard == want);
        eprintln!("bench:   daemon open-file limits (soft, hard): {limits:?}");
        let make_append = |i: u64, out: &mut String| {
            push_append_request(out, i, &many_id(i), i, None);
        };
        let check_lsn = |lsn: u64| {
            move |i: u64, v: &serde_json::Value| {
                if v["result"]["lsn"].as_u64() == Some(lsn) {
                    Ok(())
                } else {
                    Err(format!("append to {}: {v}", many_id(i)))
                }
            }
        };
        let socket = s.socket();
        let pid = d.pid();
        let (r, fds_create) = with_peak_fds(pid, || {
            rpc::pipelined(
                &socket,
                n,
                MANY_CONNS,
                MANY_WINDOW,
                &make_append,
                &check_lsn(1),
            )
        });
        let (secs, mut errors, mut first) = r?;
        eprintln!("bench:   created in {secs:.2} s, errors {errors}, peak open fds {fds_create:?}");
        let m = &mut self.ours;
        m.insert("many/create", n as f64 / secs);
        fds_create.map(|v| m.insert("many/fds_create", v as f64));
        std::thread::sleep(Duration::from_millis(200));
        rss_mb(d.pid()).map(|v| m.insert("many/rss", v));
        status_field(d.pid(), "Threads").map(|v| m.insert("many/threads", v as f64));
        d.stop()?;
        sync_disk();

        let (d, ready) = s.start(FSYNC_ALWAYS)?;
        m.insert("many/restart", ready.as_secs_f64() * 1e3);
        rss_mb(d.pid()).map(|v| m.insert("many/rss_restart", v));
        status_field(d.pid(), "Threads").map(|v| m.insert("many/threads_restart", v as f64));
        eprintln!(
            "bench:   restart to ready: {:.1} ms",
            ready.as_secs_f64() * 1e3
        );

        let listed = rpc::Rpc::connect(&socket)?
            .call("sessions.list", "{}")
            .map(|v| v["sessions"].as_array().map_or(0, |a| a.len()))?;
        let pid = d.pid();
        let (r, fds_append) = with_peak_fds(pid, || {
            rpc::pipelined(
                &socket,
                n,
                MANY_CONNS,
                MANY_WINDOW,
                &make_append,
                &check_lsn(2),
            )
        });
        let (_, e, f) = r?;
        (errors, first) = (errors + e, first.or(f));
        let make_read = |i: u64, out: &mut String| {
            out.push_str(&format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"read\",\"params\":{{\"session_id\":\"{}\",\"from_lsn\":1,\"limit\":2}}}}\n",
                many_id(i)
            ));
        };
        let check_read = |i: u64, v: &serde_json::Value| {
            let events = v["result"]["events"].as_array();
            let ok = events.is_some_and(|e| {
                e.len() == 2
                    && e.iter().enumerate().all(|(k, ev)| {
                        ev["lsn"].as_u64() == Some(k as u64 + 1)
                            && ev["payload"]["seq"].as_u64() == Some(i)
                    })
            });
            if ok {
                Ok(())
            } else {
                Err(format!("read of {}: {v}", many_id(i)))
            }
        };
        let (r, fds_read) = with_peak_fds(pid, || {
            rpc::pipelined(&socket, n, MANY_CONNS, MANY_WINDOW, &make_read, &check_read)
        });
        let (_, e, f) = r?;
        (errors, first) = (errors + e, first.or(f));
        eprintln!("bench:   peak open fds: second appends {fds_append:?}, reads {fds_read:?}");
        fds_append.map(|v| m.insert("many/fds_append", v as f64));
        fds_read.map(|v| m.insert("many/fds_read", v as f64));
        rss_mb(d.pid()).map(|v| m.insert("many/rss_touched", v));
        d.stop()?;
        eprintln!(
            "bench:   sessions.list: {listed}; append+read check errors: {errors}; first: {first:?}"
        );
        let ok = limited && listed as u64 == n && errors == 0;
        let verdict = if ok {
            "yes".to_string()
        } else {
            let mut why = Vec::new();
            if !limited {
                why.push(format!("daemon limits were {limits:?}"));
            }
            if listed as u64 != n {
                why.push(format!("sessions.list gave {listed}"));
            }
            if errors > 0 {
                why.push(format!("{errors} failed appends/reads"));
            }
            format!("no ({})", why.join("; "))
        };
        if let Some(f) = first {
            self.notes.push(format!(
                "{} sessions: first failed check: {f}",
                thousands(n)
            ));
        }
        self.many_ok = Some(verdict);
        drop(dir);
        sync_disk();
        Ok(())
    }

    fn dstream_subscriber(&mut self, bin: &Path) -> Result<()> {
        eprintln!("bench: dstream: append-to-subscriber latency (fsync=always, C=1)");
        let (dir, s) = self.dstream(bin, "dstream-")?;
        let (d, _) = s.start(FSYNC_ALWAYS)?;
        let r = rpc::subscriber_latency(&s.socket(), self.o.warmup, self.o.measure);
        d.stop()?;
        let mut r = r?;
        let p = pcts(&mut r.lat_ns, 1e3);
        eprintln!(
            "bench:   appended {}, received {}, lagged {}, errors {}, p50 {:?} µs, p99 {:?} µs",
            r.appended, r.received, r.lagged, r.errors, p.p50, p.p99
        );
        p.p50.map(|v| self.ours.insert("sub/p50", v));
        p.p99.map(|v| self.ours.insert("sub/p99", v));
        if r.received != r.appended || r.errors > 0 || r.lagged > 0 {
            self.notes.push(format!(
                "dstream subscriber latency: appended {}, received {} (lagged notices {}, append errors {})",
                r.appended, r.received, r.lagged, r.errors
            ));
        }
        drop(dir);
        sync_disk();
        Ok(())
    }

    /// Ingest throughput at 16 connections over 16 sessions, with the default plugins:
    /// captured Claude Code payloads, then results whose request was never seen.
    fn dstream_ingest(&mut self, bin: &Path, repo: &Path) -> Result<()> {
        eprintln!("bench: dstream: ingest C=16");
        // Ingest throughput: 16 connections, each its own session, captured payloads.
        let (dir, s) = self.dstream(bin, "dstream-ingest-")?;
        let (d, _) = s.start(FSYNC_ALWAYS)?;
        let basic = agents::fixtures(repo, "claude-code")?;
        let original = basic
            .first()
            .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .and_then(|v| v["session_id"].as_str().map(str::to_string))
            .context("no session_id in the captured payloads")?;
        // 16 connections, each ingesting `events(k)` round robin into session `name(k)`.
        let ingesters = |name: &dyn Fn(usize) -> String,
                         events: &dyn Fn(usize, &str) -> Vec<String>| {
            (0..16)
                .map(|k| {
                    let session = name(k);
                    let events = std::sync::Arc::new(events(k, &session));
                    Ok(
                        Box::new(agents::Ingester::connect(&s.socket(), &session, events)?)
                            as Box<dyn Appender>,
                    )
                })
                .collect::<Result<Vec<_>>>()
        };
        let captured = ingesters(&|k| format!("ingest-{k}"), &|_, session| {
            basic
                .iter()
                .map(|e| e.replace(&original, session))
                .collect()
        })?;
        let (mut r, _, _) = closed_loop(captured, self.o.warmup, self.o.measure, None, &|| ());
        // Results whose requests the daemon never saw (a user who hooked only PostToolUse, a
        // restart mid-session): each must be looked up, and the logs grow meanwhile.
        let unmatched_ingesters = ingesters(&|k| format!("unmatched-{k}"), &|k, session| {
            (0..64)
                .map(|i| {
                    serde_json::json!({
                        "session_id": session, "transcript_path": "/tmp/t.jsonl",
                        "cwd": "/tmp/project", "hook_event_name": "PostToolUse",
                        "tool_name": "Bash", "tool_use_id": format!("toolu_{k}_{i}"),
                        "tool_input": {"command": "cat notes.txt"},
                        "tool_response": {"stdout": "x".repeat(160), "stderr": "", "interrupted": false},
                    })
                    .to_string()
                })
                .collect()
        })?;
        let (mut u, _, _) = closed_loop(
            unmatched_ingesters,
            self.o.warmup,
            self.o.measure,
            None,
            &|| (),
        );
        d.stop()?;
        let pu = pcts(&mut u.lat_ns, 1e3);
        eprintln!(
            "bench:   ingest of unmatched PostToolUse C=16: {:.0}/s, p50 {:?} µs, errors {}",
            u.per_sec, pu.p50, u.errors
        );
        self.sample(true, "ingest_unmatched/s", u.per_sec);
        let p = pcts(&mut r.lat_ns, 1e3);
        self.sample(true, "ingest/s", r.per_sec);
        eprintln!(
            "bench:   ingest C=16: {:.0}/s, p50 {:?} µs, errors {}{}",
            r.per_sec,
            p.p50,
            r.errors,
            self.spread(true, "ingest/s")
        );
        if let Some(v) = p.p50 {
            self.sample(true, "ingest/p50", v);
        }
        if r.errors > 0 {
            self.notes.push(format!(
                "ingest C=16: {} failed; first: {}",
                r.errors,
                r.first_error.unwrap_or_default()
            ));
        }
        drop(dir);
        sync_disk();
        Ok(())
    }

    /// The agent side: the hook per call against a one-shot C client, the hook without a
    /// daemon, each plugin's cost per event.
    fn dstream_agents(&mut self, bin: &Path, repo: &Path) -> Result<()> {
        let quick = self.o.measure < Duration::from_secs(5);
        let (runs, rounds) = if quick {
            (50, 1)
        } else {
            (HOOK_RUNS, PLUGIN_ROUNDS)
        };
        eprintln!(
            "bench: dstream: hook per call ({runs} runs, daemon up and down), plugins, ingest"
        );
        let oneshot = agents::build_oneshot(repo)?;
        let event = agents::pre_tool_use(repo)?;
        let (dir, s) = self.dstream(bin, "dstream-agents-")?;
        // A plugin folder of its own (so the user's plugins stay out of the figures).
        let plugins = s.dir.join("plugins");
        std::fs::create_dir_all(&plugins)?;
        let (d, _) = s.start(&format!(
            "{FSYNC_ALWAYS}\n[plugins]\ndir = {:?}\n[http]\nlisten = \"0\"",
            plugins.display().to_string()
        ))?;
        let socket = s.socket();
        // Claude Code's `http` hook: the same event POSTed to the listener, kept alive.
        let mut http_hook = agents::time_http_hook(&socket, &s.data_dir(), &event, runs)?;
        let p = pcts(&mut http_hook, 1e6);
        p.p50.map(|v| self.ours.insert("hook_http/p50", v));
        p.p99.map(|v| self.ours.insert("hook_http/p99", v));
        // Alternate the clients, so all meet the same machine state: `dstream hook`, the lean
        // `dstream-hook` that install points hooks at (as `cargo build` links it, and relinked
        // as a static PIE), and the C client.
        let dynamic = procs::dynamic_hook_copy(bin, &self.tmp_root)?;
        let lean = match procs::relink_hook_static(repo, bin) {
            Ok(path) => Some(path),
            Err(why) => {
                self.notes
                    .push(format!("the static-PIE lean hook is not measured: {why}"));
                None
            }
        };
        if dynamic.is_none() {
            self.notes
                .push("no dstream-hook beside the daemon: the lean hook is not measured".into());
        }
        let (mut hook, mut lean_hook, mut dynamic_hook, mut c) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            // The lean hook as linked both ways, then the full binary, then C: interleaved.
            for (lean_bin, lat) in [(&dynamic, &mut dynamic_hook), (&lean, &mut lean_hook)] {
                if let Some(lean_bin) = lean_bin {
                    lat.extend(agents::time_runs(
                        || {
                            let mut cmd = Command::new(lean_bin);
                            cmd.arg("claude-code").env("DSTREAM_SOCKET", &socket);
                            cmd
                        },
                        &event,
                        1,
                    )?);
                }
            }
            hook.extend(agents::time_runs(
                || {
                    let mut cmd = Command::new(bin);
                    cmd.args(["hook", "claude-code"])
                        .env("DSTREAM_SOCKET", &socket);
                    cmd
                },
                &event,
                1,
            )?);
            c.extend(agents::time_runs(
                || {
                    let mut cmd = Command::new(&oneshot);
                    cmd.arg(&socket);
                    cmd
                },
                &event,
                1,
            )?);
        }
        for (key, lat, ours) in [
            ("hook", &mut hook, true),
            ("hook_lean", &mut lean_hook, true),
            ("hook_lean_dynamic", &mut dynamic_hook, true),
            ("hook", &mut c, false),
        ] {
            let side = if ours {
                &mut self.ours
            } else {
                &mut self.theirs
            };
            let p = pcts(lat, 1e6);
            p.p50.map(|v| side.insert(leak(format!("{key}/p50")), v));
            p.p99.map(|v| side.insert(leak(format!("{key}/p99")), v));
        }
        // The hook as installs run it: the lean binary beside dstream when there is one.
        let lean = procs::lean_hook(bin);
        let installed_hook = || match &lean {
            Some(lean) => {
                let mut cmd = Command::new(lean);
                cmd.arg("claude-code");
                cmd
            }
            None => {
                let mut cmd = Command::new(bin);
                cmd.args(["hook", "claude-code"]);
                cmd
            }
        };
        // No daemon and autostart off: the hook writes the event to the spool, synced.
        let missing = self.tmp_root.join("no-daemon-here.sock");
        let spool_data = self.tmp_root.join("spool-bench-data");
        let mut down = agents::time_runs(
            || {
                let mut cmd = installed_hook();
                cmd.env("DSTREAM_SOCKET", &missing)
                    .env("DSTREAM_DATA_DIR", &spool_data)
                    .env("DSTREAM_AUTOSTART", "0");
                cmd
            },
            &event,
            runs,
        )?;
        let p = pcts(&mut down, 1e6);
        p.p50.map(|v| self.ours.insert("hook_down/p50", v));
        p.p99.map(|v| self.ours.insert("hook_down/p99", v));
        // No daemon, autostart on: the first event of a session after boot starts the daemon
        // (a fresh data directory each time) and is stored by it.
        let mut first = Vec::new();
        for i in 0..runs.clamp(5, 20) {
            let dir = self.tmp_root.join(format!("autostart-{i}"));
            let (socket, data) = (dir.join("run").join("dstream.sock"), dir.join("data"));
            first.extend(agents::time_runs(
                || {
                    let mut cmd = installed_hook();
                    cmd.env("DSTREAM_SOCKET", &socket)
                        .env("DSTREAM_DATA_DIR", &data)
                        .env_remove("DSTREAM_AUTOSTART");
                    cmd
                },
                &event,
                1,
            )?);
            if let Some(pid) = std::fs::read_to_string(data.join("LOCK"))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            {
                // SAFETY: a plain signal to the daemon this run started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let p = pcts(&mut first, 1e6);
        p.p50.map(|v| self.ours.insert("hook_autostart/p50", v));
        p.p99.map(|v| self.ours.insert("hook_autostart/p99", v));

        // Then a native and a Lua filter that both pass every event on, to compare what one
        // `process` call costs in each host.
        agents::add_filters(repo, &plugins)?;
        rpc::Rpc::connect(&socket)?.call("plugins.reload", "{}")?;
        for (name, micros, calls) in agents::plugin_costs(&socket, repo, rounds)? {
            eprintln!("bench:   plugin {name}: {micros:.1} µs per call over {calls} calls");
            self.ours.insert(leak(format!("plugin/{name}")), micros);
        }
        d.stop()?;
        drop(dir);
        sync_disk();

        // Import: generated Claude Code transcripts into a fresh daemon.
        let (sessions, turns) = if quick {
            (5, 25)
        } else {
            (IMPORT_SESSIONS, IMPORT_TURNS)
        };
        let (dir, s) = self.dstream(bin, "dstream-import-")?;
        let transcripts = s.dir.join("transcripts");
        let lines = import::write_transcripts(&transcripts, sessions, turns)?;
        let (d, _) = s.start(FSYNC_ALWAYS)?;
        let summary = import::import(bin, &s.socket(), &transcripts);
        d.stop()?;
        let summary = summary?;
        eprintln!(
            "bench:   import of {lines} transcript lines: {} lines/s, {} events, {} errors",
            summary["lines_per_sec"], summary["events"], summary["errors"]
        );
        if summary["lines"] != lines || summary["errors"] != 0 {
            self.notes.push(format!("import: {summary}"));
        }
        if let Some(rate) = summary["lines_per_sec"].as_f64() {
            self.ours.insert("import/lines_s", rate);
        }
        drop(dir);
        sync_disk();
        Ok(())
    }

    /// Claude Code's telemetry records into the OTLP receiver (see `otlp`).
    fn dstream_otlp(&mut self, bin: &Path) -> Result<()> {
        let quick = self.o.measure < Duration::from_secs(5);
        let total = if quick {
            OTLP_RECORDS / 10
        } else {
            OTLP_RECORDS
        };
        eprintln!("bench: dstream: {total} OTLP log records into the receiver (fsync=always)");
        let (dir, s) = self.dstream(bin, "dstream-otlp-")?;
        let (d, _) = s.start(&format!("{FSYNC_ALWAYS}\n[http]\nlisten = \"0\""))?;
        let rate = otlp::ingest(&s.socket(), &s.data_dir(), total);
        d.stop()?;
        let rate = rate?;
        eprintln!("bench:   {rate:.0} records/s");
        self.ours.insert("otlp/records_s", rate);
        drop(dir);
        sync_disk();
        Ok(())
    }

    /// Appends from C through `ds_append` at 1 and 16 threads, and the Rust SDK likewise.
    fn dstream_ffi(&mut self, bin: &Path, repo: &Path) -> Result<()> {
        let lib_dir = procs::build_ffi(repo, bin)?;
        let secs = self.o.measure.as_secs_f64();
        for threads in [1usize, 16] {
            eprintln!(
                "bench: dstream: appends from C (ds_append) and the Rust SDK, {threads} thread(s)"
            );
            let (dir, s) = self.dstream(bin, "dstream-ffi-")?;
            let (d, _) = s.start(FSYNC_ALWAYS)?;
            let c = ffi::c_appends(repo, &lib_dir, &s.socket(), threads, secs)?;
            let rust = ffi::sdk_appends(&s.socket(), threads, secs)?;
            d.stop()?;
            eprintln!("bench:   C {c:.0}/s, Rust SDK {rust:.0}/s");
            self.ours.insert(leak(format!("ffi/c{threads}")), c);
            self.ours.insert(leak(format!("ffi/sdk{threads}")), rust);
            drop(dir);
            sync_disk();
        }
        Ok(())
    }

    /// Checkpoints: one round trip decided by a program at once, and many held pending.
    fn dstream_checkpoints(&mut self, bin: &Path) -> Result<()> {
        let quick = self.o.measure < Duration::from_secs(5);
        let (trips, pending) = if quick {
            (100, PENDING_CHECKPOINTS / 10)
        } else {
            (CHECKPOINT_ROUND_TRIPS, PENDING_CHECKPOINTS)
        };
        eprintln!("bench: dstream: {trips} checkpoint round trips, then {pending} pending");
        let (dir, s) = self.dstream(bin, "dstream-cp-")?;
        let (d, _) = s.start(FSYNC_ALWAYS)?;
        let mut lat = checkpoints::round_trips(&s.socket(), trips)?;
        let p = pcts(&mut lat, 1e6);
        p.p50.map(|v| self.ours.insert("cp/p50", v));
        p.p99.map(|v| self.ours.insert("cp/p99", v));
        let before = rss_mb(d.pid());
        let took = checkpoints::open_pending(&s.socket(), pending, 16)?;
        let after = rss_mb(d.pid());
        eprintln!(
            "bench:   round trip p50 {:?} ms, p99 {:?} ms; {pending} pending in {took:?}, RSS {before:?} -> {after:?} MB",
            p.p50, p.p99
        );
        self.ours.insert("cp/pending", pending as f64);
        self.ours
            .insert("cp/open_rate", pending as f64 / took.as_secs_f64());
        if let (Some(a), Some(b)) = (before, after) {
            self.ours.insert("cp/rss", b);
            self.ours
                .insert("cp/bytes_each", (b - a) * 1048576.0 / pending as f64);
        }
        // A restart rebuilds them all from the logs.
        d.stop()?;
        let (d, ready) = s.start(FSYNC_ALWAYS)?;
        self.ours.insert("cp/restart", ready.as_secs_f64() * 1e3);
        if let Some(v) = rss_mb(d.pid()) {
            self.ours.insert("cp/rss_restart", v);
        }
        d.stop()?;
        drop(dir);
        sync_disk();
        Ok(())
    }

    /// The relay against the reference server: a backlog written while the relay was off
    /// goes out from the log (throughput, peak RSS), then single events reach a remote
    /// long-poll reader (latency).
    fn dstream_relay(&mut self, bin: &Path, ref_bin: &Path) -> Result<()> {
        let events = self.o.events;
        eprintln!("bench: dstream: relay of a {events}-event backlog to the reference server");
        let dir = tempdir(&self.tmp_root, "dstream-relay-")?;
        let s = DstreamSetup {
            bin: bin.into(),
            dir: dir.path().into(),
            nofile: None,
        };
        let (d, _) = s.start(FSYNC_NEVER)?;
        let r = rpc::bulk_load(&s.socket(), "backlog", events, BULK_CONNS, BULK_WINDOW);
        d.stop()?;
        let (_, errors, first) = r?;
        if errors > 0 {
            bail!("backlog load failed: {}", first.unwrap_or_default());
        }
        sync_disk();
        self.reference_same_bodies(&s, ref_bin, events)?;
        // Each round relays the whole backlog again, to a fresh server, from an empty ledger.
        let (mut rates, mut peak, mut latency) = (Vec::new(), 0.0f64, None);
        for round in 0..RELAY_ROUNDS {
            sync_disk();
            let relay_state = s.data_dir().join("relay");
            if relay_state.exists() {
                std::fs::remove_dir_all(&relay_state)?;
            }
            let (rdir, rs) = self.reference(ref_bin, "ref-relay-")?;
            let (server, _, addr) = rs.start()?;
            let config = format!(
                "{FSYNC_ALWAYS}\n[relay]\nurl = \"http://{addr}/v1/stream\"\nprefix = \"bench\"\nbatch_max_events = {RELAY_BATCH}\nbatch_max_bytes = 4194304"
            );
            let (d, _) = s.start(&config)?;
            let caught_up = relay::catch_up(
                &s.socket(),
                d.pid(),
                "backlog",
                events,
                Duration::from_secs(900),
            );
            // The latency to a live reader once, after the last round's catch-up.
            if round + 1 == RELAY_ROUNDS && caught_up.is_ok() {
                latency = Some(relay::live_latency(
                    &s.socket(),
                    &addr,
                    "/v1/stream/bench/live",
                    "live",
                    RELAY_LIVE_EVENTS,
                ));
            }
            d.stop()?;
            server.stop()?;
            drop(rdir);
            let (took, round_peak) = caught_up?;
            rates.push(events as f64 / took.as_secs_f64());
            peak = peak.max(round_peak);
        }
        let rate = rates.iter().copied().fold(0.0, f64::max);
        eprintln!("bench:   {rates:.0?} events/s, peak RSS {peak:.1} MB");
        self.ours.insert("relay/rate", rate);
        self.ours.insert("relay/rss", peak);
        if let Some(l) = latency {
            let mut l = l?;
            let p = pcts(&mut l, 1e6);
            eprintln!(
                "bench:   append → remote live read p50 {:?} ms p99 {:?} ms",
                p.p50, p.p99
            );
            p.p50.map(|v| self.ours.insert("relay/p50", v));
            p.p99.map(|v| self.ours.insert("relay/p99", v));
        }
        drop(dir);
        sync_disk();
        Ok(())
    }

    /// Like for like for the relay: a client POSTing the very bodies the relay will send (the
    /// stored events of `s`'s "backlog", envelope included), from memory, each time to a fresh
    /// reference server. Its rate follows the disk's sync time from one run to the next
    /// (0.4-0.95M events/s were seen on one machine in one hour), so the best of its
    /// `RELAY_ROUNDS` is the reference.
    fn reference_same_bodies(
        &mut self,
        s: &DstreamSetup,
        ref_bin: &Path,
        events: u64,
    ) -> Result<()> {
        let (d, _) = s.start(FSYNC_ALWAYS)?;
        let bodies = rpc::event_bodies(&s.socket(), "backlog", events, RELAY_BATCH);
        d.stop()?;
        let bodies = bodies?;
        let mean = bodies.iter().map(|b| b.len()).sum::<usize>() as f64 / events as f64;
        let mut rates = Vec::new();
        for _ in 0..RELAY_ROUNDS {
            sync_disk();
            let (_dir, ms) = self.reference(ref_bin, "ref-relay-memory-")?;
            let (server, _, addr) = ms.start()?;
            let rate = reference::post_bodies(&addr, "v1/stream/bench/backlog", &bodies, events);
            server.stop()?;
            rates.push(rate?);
        }
        let best = rates.iter().copied().fold(0.0, f64::max);
        eprintln!(
            "bench:   the same bodies POSTed from memory: {rates:.0?} events/s ({mean:.0} B per event)"
        );
        self.theirs.insert("relay/same_bodies", best);
        self.ours.insert("relay/event_bytes", mean);
        sync_disk();
        Ok(())
    }

    /// Bulk load of one big session, then restart (recovery) times, then timed reads.
    fn dstream_big(&mut self, bin: &Path) -> Result<()> {
        let (o, m) = (self.o, &mut self.ours);
        eprintln!(
            "bench: dstream: bulk load of {} events into one session (fsync=never, pipelined)",
            o.events
        );
        let (dir, s) = {
            let dir = tempdir(&self.tmp_root, "dstream-big-")?;
            let s = DstreamSetup {
                bin: bin.into(),
                dir: dir.path().into(),
                nofile: None,
            };
            (dir, s)
        };
        let (d, _) = s.start(FSYNC_NEVER)?;
        let r = rpc::bulk_load(&s.socket(), "big", o.events, BULK_CONNS, BULK_WINDOW);
        d.stop()?;
        let (rate, errors, first) = r?;
        eprintln!("bench:   {rate:.0} events/s, errors {errors}");
        m.insert("bulk/s", rate);
        m.insert("disk/mb", dir_bytes(&s.data_dir()) as f64 / 1048576.0);
        if errors > 0 {
            bail!(
                "bulk load had {errors} failed appends (first: {}); the read tests need every event",
                first.unwrap_or_default()
            );
        }
        sync_disk();

        for (verify, key) in [(true, "rec/verify"), (false, "rec/noverify")] {
            let store = format!("{FSYNC_ALWAYS}\nverify_on_start = {verify}");
            let mut times = Vec::new();
            for _ in 0..RECOVERY_RUNS {
                let (d, ready) = s.start(&store)?;
                d.stop()?;
                times.push(ready.as_nanos() as u64);
            }
            eprintln!(
                "bench: dstream: restart on {} events, verify_on_start={verify}: {:?} ms",
                o.events,
                ms(&times)
            );
            pcts(&mut times, 1e6).p50.map(|v| m.insert(key, v));
        }

        eprintln!(
            "bench: dstream: reads of the {}-event session (fsync=always)",
            o.events
        );
        let (d, _) = s.start(FSYNC_ALWAYS)?;
        let r = rpc::time_reads(&s.socket(), "big", o.events, READ_REPEATS);
        d.stop()?;
        let mut r = r?;
        let tail = pcts(&mut r.tail_ns, 1e6);
        let seek = pcts(&mut r.seek_ns, 1e6);
        eprintln!(
            "bench:   tail p50 {:?} ms p99 {:?} ms; seek p50 {:?} ms p99 {:?} ms",
            tail.p50, tail.p99, seek.p50, seek.p99
        );
        m.insert("tail/first", r.first_tail_ns as f64 / 1e6);
        tail.p50.map(|v| m.insert("tail/p50", v));
        tail.p99.map(|v| m.insert("tail/p99", v));
        seek.p50.map(|v| m.insert("seek/p50", v));
        seek.p99.map(|v| m.insert("seek/p99", v));

        // Compressed: the same session as zstd frames, while a C=1 appender writes another.
        eprintln!("bench: dstream: compress the {}-event session", o.events);
        let (d, _) = s.start(FSYNC_ALWAYS)?;
        let socket = s.socket();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let appender = {
            let (socket, stop) = (socket.clone(), stop.clone());
            std::thread::spawn(move || -> Result<Vec<u64>> {
                let mut rpc = rpc::Rpc::connect(&socket)?;
                let mut lat = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let t0 = std::time::Instant::now();
                    rpc.call(
                        "append",
                        r#"{"session_id":"other","event":{"type":"bench.event","payload":{"pad":"x"}}}"#,
                    )?;
                    lat.push(t0.elapsed().as_nanos() as u64);
                }
                Ok(lat)
            })
        };
        let t0 = std::time::Instant::now();
        let done = rpc::Rpc::connect(&socket)?.call("compress", r#"{"session_id":"big"}"#);
        let took = t0.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut lat = appender
            .join()
            .map_err(|_| anyhow::anyhow!("the appender panicked"))??;
        let done = done?;
        eprintln!("bench:   {done} in {took:?}");
        m.insert("compress/s", o.events as f64 / took.as_secs_f64());
        pcts(&mut lat, 1e3)
            .p99
            .map(|v| m.insert("compress/append_p99", v));
        let r = rpc::time_reads(&socket, "big", o.events, READ_REPEATS);
        d.stop()?;
        let mut r = r?;
        let tail = pcts(&mut r.tail_ns, 1e6);
        let seek = pcts(&mut r.seek_ns, 1e6);
        tail.p50.map(|v| m.insert("ztail/p50", v));
        seek.p50.map(|v| m.insert("zseek/p50", v));
        m.insert(
            "zdisk/mb",
            dir_blocks(&s.data_dir().join("sessions")) as f64 / 1048576.0,
        );
        drop(dir);
        sync_disk();
        Ok(())
    }

    fn reference_big(&mut self, bin: &Path) -> Result<()> {
        let (o, m) = (self.o, &mut self.theirs);
        eprintln!(
            "bench: reference: bulk load of {} events ({REF_BATCH}-event array POSTs)",
            o.events
        );
        let dir = tempdir(&self.tmp_root, "ref-big-")?;
        let s = RefSetup {
            bin: bin.into(),
            dir: dir.path().into(),
        };
        let (server, _, addr) = s.start()?;
        let r = reference::bulk_load(&addr, "big", o.events, REF_BATCH);
        server.stop()?;
        let rate = r?;
        eprintln!("bench:   {rate:.0} events/s");
        m.insert("bulk/s", rate);
        // Stream files only: its WAL segments are preallocated (fallocate) whatever they hold.
        m.insert(
            "disk/mb",
            dir_bytes(&dir.path().join("data/streams")) as f64 / 1048576.0,
        );
        sync_disk();

        let mut times = Vec::new();
        for _ in 0..RECOVERY_RUNS {
            let (server, ready, _) = s.start()?;
            server.stop()?;
            times.push(ready.as_nanos() as u64);
        }
        eprintln!(
            "bench: reference: restart on {} events: {:?} ms",
            o.events,
            ms(&times)
        );
        pcts(&mut times, 1e6).p50.map(|v| m.insert("rec/verify", v));

        eprintln!(
            "bench: reference: tail reads of the {}-event stream",
            o.events
        );
        let (server, _, addr) = s.start()?;
        let r = reference::time_tail_reads(&addr, "big", o.events, READ_REPEATS);
        server.stop()?;
        let (first, mut samples) = r?;
        let tail = pcts(&mut samples, 1e6);
        eprintln!("bench:   tail p50 {:?} ms p99 {:?} ms", tail.p50, tail.p99);
        m.insert("tail/first", first as f64 / 1e6);
        tail.p50.map(|v| m.insert("tail/p50", v));
        tail.p99.map(|v| m.insert("tail/p99", v));
        drop(dir);
        sync_disk();
        Ok(())
    }
}

fn render(o: &Opts, load: &str, b: &Bench, fs_type: &str, fs_dev: &str) -> String {
    let (ours, theirs, notes) = (&b.ours, &b.theirs, &b.notes);
    let mut t = Table::default();
    for (policy, ref_side) in [("always", true), ("interval", false)] {
        let mode = if policy == "always" {
            "fsync=always vs ref wal"
        } else {
            "fsync=interval 20 ms"
        };
        for (conns, sessions, key) in APPEND_SCENARIOS {
            let what = scenario_label(conns, sessions);
            let mut rows = vec![
                (
                    "s",
                    format!("append throughput appends/s, {what} ({mode})"),
                    Better::Higher,
                ),
                (
                    "p50",
                    format!("append latency p50 µs, {what} ({mode})"),
                    Better::Lower,
                ),
                (
                    "p99",
                    format!("append latency p99 µs, {what} ({mode})"),
                    Better::Lower,
                ),
            ];
            if policy == "always" {
                rows.push((
                    "perfsync",
                    format!(
                        "appends per fdatasync, {what} (dstream: `stats` appends/fsyncs deltas; ref: fsync+fdatasync calls counted by strace in a separate run)"
                    ),
                    Better::Higher,
                ));
                rows.push((
                    "ctx",
                    format!("server context switches per append, {what} (all threads, /proc)"),
                    Better::Lower,
                ));
            }
            for (suffix, metric, better) in rows {
                let k = format!("{policy}/{key}/{suffix}");
                let theirs_v = if ref_side {
                    theirs.get(k.as_str()).copied()
                } else {
                    None
                };
                t.add(metric, ours.get(k.as_str()).copied(), theirs_v, better);
            }
        }
    }
    let get = |m: &Metrics, k: &str| m.get(k).copied();
    t.add(
        "append→subscriber latency p50 µs (C=1, fsync=always)",
        get(ours, "sub/p50"),
        None,
        Better::Lower,
    );
    t.add(
        "append→subscriber latency p99 µs (C=1, fsync=always)",
        get(ours, "sub/p99"),
        None,
        Better::Lower,
    );
    t.add(
        "`dstream-hook claude-code` (the lean hook binary `install` writes), linked as a static PIE, per call (PreToolUse, daemon up), wall ms p50 (reference column: a one-shot C client sending the same ingest)",
        get(ours, "hook_lean/p50"),
        get(theirs, "hook/p50"),
        Better::Lower,
    );
    t.add(
        "… the same, p99",
        get(ours, "hook_lean/p99"),
        get(theirs, "hook/p99"),
        Better::Lower,
    );
    t.add(
        "`dstream-hook claude-code` as `cargo build` links it (dynamic: glibc), wall ms p50 (reference column: the one-shot C client)",
        get(ours, "hook_lean_dynamic/p50"),
        get(theirs, "hook/p50"),
        Better::Lower,
    );
    t.add(
        "… the same, p99",
        get(ours, "hook_lean_dynamic/p99"),
        get(theirs, "hook/p99"),
        Better::Lower,
    );
    t.add(
        "`dstream hook claude-code` (the full binary, older installs) per call, wall ms p50 (reference column: the one-shot C client)",
        get(ours, "hook/p50"),
        get(theirs, "hook/p50"),
        Better::Lower,
    );
    t.add(
        "… the same, p99",
        get(ours, "hook/p99"),
        get(theirs, "hook/p99"),
        Better::Lower,
    );
    t.add(
        "Claude Code `http` hook: the same PreToolUse POSTed to `/hooks/claude-code` (kept-alive connection), round trip ms p50 (reference column: the one-shot C client; goal ≤ 0.3 ms)",
        get(ours, "hook_http/p50"),
        get(theirs, "hook/p50"),
        Better::Lower,
    );
    t.add(
        "… the same, p99",
        get(ours, "hook_http/p99"),
        get(theirs, "hook/p99"),
        Better::Lower,
    );
    t.add(
        "the hook (`dstream-hook claude-code`) with no daemon, autostart off: the event spooled (synced), wall ms p50",
        get(ours, "hook_down/p50"),
        None,
        Better::Lower,
    );
    t.add(
        "… the same, p99",
        get(ours, "hook_down/p99"),
        None,
        Better::Lower,
    );
    t.add(
        "the hook (`dstream-hook claude-code`) with no daemon, autostart on: first event (starts the daemon, stored by it), wall ms p50",
        get(ours, "hook_autostart/p50"),
        None,
        Better::Lower,
    );
    t.add(
        "… the same, p99",
        get(ours, "hook_autostart/p99"),
        None,
        Better::Lower,
    );
    t.add(
        "a `process` call that passes the event on, µs in the plugin: native (C, bash_guard) vs Lua (reference column)",
        get(ours, "plugin/bash_guard"),
        get(ours, "plugin/lua_passthrough"),
        Better::Lower,
    );
    for name in ["claude-code", "opencode", "claude-agent-sdk"] {
        t.add(
            format!("plugin `{name}`: µs per call, in the plugin (captured payloads, `plugins.list` counters)"),
            get(ours, &format!("plugin/{name}")),
            None,
            Better::Lower,
        );
    }
    t.add(
        "native redaction at the store's entry point: µs per stored event (captured payloads, `plugins.list` counters)",
        get(ours, "plugin/redaction"),
        None,
        Better::Lower,
    );
    t.add(
        "`ingest` of captured Claude Code payloads, C=16 over 16 sessions, events/s (fsync=always; reference column: dstream's plain `append` of 256 B events, C=16 over 16 sessions, in the same rounds)",
        get(ours, "ingest/s"),
        get(ours, "always/c16s16/s"),
        Better::Higher,
    );
    t.add(
        "`ingest` of PostToolUse results whose request was never seen (160-byte stdout), C=16 over 16 growing sessions, events/s",
        get(ours, "ingest_unmatched/s"),
        None,
        Better::Higher,
    );
    t.add(
        format!("`dstream import claude-code`, transcript lines/s ({IMPORT_SESSIONS} generated sessions of {IMPORT_TURNS} tool turns, fsync=always)"),
        get(ours, "import/lines_s"),
        None,
        Better::Higher,
    );
    t.add(
        format!(
            "`dstream usage --by day` over {} `usage.request` events, p50 ms, from the search index's hourly sums (reference column: the same call reading every log, `--scan`; goal < 200 ms)",
            thousands(o.events)
        ),
        get(ours, "usage/index_p50"),
        get(ours, "usage/scan_p50"),
        Better::Lower,
    );
    t.add(
        "… from the index, p99 ms",
        get(ours, "usage/index_p99"),
        None,
        Better::Lower,
    );
    t.add(
        format!(
            "OTLP log records/s into the receiver (Claude Code `api_request`, http/json, {} per POST, {} connections, fsync=always; goal ≥ 5,000)",
            otlp::BATCH,
            otlp::CONNECTIONS
        ),
        get(ours, "otlp/records_s"),
        None,
        Better::Higher,
    );
    let events = thousands(o.events);
    let corpus = format!(
        "{events} events with text (prompts, commands, output; words Zipf-distributed over {} distinct), 16 sessions",
        thousands(search::VOCABULARY)
    );
    t.add(
        format!("search index: catch-up from the logs after a start, events/s ({corpus})"),
        get(ours, "search/catchup"),
        None,
        Better::Higher,
    );
    t.add(
        "search index: events/s indexed while a bulk load runs (from its first append until the index holds its last)",
        get(ours, "search/live_rate"),
        None,
        Better::Higher,
    );
    t.add(
        "search index: ms after the bulk load's last append until it is searchable",
        get(ours, "search/drain_ms"),
        None,
        Better::Lower,
    );
    t.add(
        "bulk append events/s with the search index on (reference column: the same load with it off)",
        get(ours, "search/append_on"),
        get(ours, "search/append_off"),
        Better::Higher,
    );
    t.add(
        "20,000 appends/s for 10 s (4 connections, 10 ms ticks, fsync=interval): achieved appends/s with the search index on (reference column: off)",
        get(ours, "search/paced_on_rate"),
        get(ours, "search/paced_off_rate"),
        Better::Higher,
    );
    t.add(
        "… append latency p50 µs, index on (reference column: off)",
        get(ours, "search/paced_on_p50"),
        get(ours, "search/paced_off_p50"),
        Better::Lower,
    );
    t.add(
        "… append latency p99 µs, index on (reference column: off)",
        get(ours, "search/paced_on_p99"),
        get(ours, "search/paced_off_p99"),
        Better::Lower,
    );
    t.add(
        "… most events the index was behind (sampled every 50 ms)",
        get(ours, "search/paced_behind"),
        None,
        Better::Lower,
    );
    t.add(
        "… ms after the last append until it is searchable",
        get(ours, "search/paced_drain_ms"),
        None,
        Better::Lower,
    );
    t.add(
        format!("search index: restart on {events} indexed events, ms from ready until the index is open (checked) and caught up"),
        get(ours, "search/reopen_ms"),
        None,
        Better::Lower,
    );
    t.add(
        "search index bytes / log bytes",
        get(ours, "search/size_ratio"),
        None,
        Better::Lower,
    );
    t.add(
        format!("`search` of one word, p50 ms over {events} indexed events (words drawn uniformly from the vocabulary; limit 20, snippets included)"),
        get(ours, "search/p50"),
        None,
        Better::Lower,
    );
    t.add("… p99 ms", get(ours, "search/p99"), None, Better::Lower);
    t.add(
        "`search` of one of the 10 commonest words (each in a large share of the events), p50 ms",
        get(ours, "search/common_p50"),
        None,
        Better::Lower,
    );
    t.add(
        "… p99 ms",
        get(ours, "search/common_p99"),
        None,
        Better::Lower,
    );
    for threads in [1, 16] {
        t.add(
            format!("appends/s from C through `ds_append`, {threads} thread(s) on one client, own sessions (reference column: the Rust SDK, {threads} task(s) on one client)"),
            get(ours, &format!("ffi/c{threads}")),
            get(ours, &format!("ffi/sdk{threads}")),
            Better::Higher,
        );
    }
    t.add(
        "checkpoint round trip p50 ms (request → decided by a program at once → await answered; 2 fsyncs)",
        get(ours, "cp/p50"),
        None,
        Better::Lower,
    );
    t.add(
        "checkpoint round trip p99 ms",
        get(ours, "cp/p99"),
        None,
        Better::Lower,
    );
    let held = get(ours, "cp/pending").map_or("–".into(), |n| thousands(n as u64));
    for (k, what, better) in [
        (
            "cp/open_rate",
            "opened per second (16 connections, each durable)",
            Better::Higher,
        ),
        (
            "cp/rss",
            "daemon RSS MB with all of them pending",
            Better::Lower,
        ),
        (
            "cp/bytes_each",
            "daemon memory per pending checkpoint, bytes (RSS growth / count)",
            Better::Lower,
        ),
        (
            "cp/restart",
            "restart to ready, rebuilt from the logs, ms",
            Better::Lower,
        ),
        (
            "cp/rss_restart",
            "daemon RSS MB after that restart",
            Better::Lower,
        ),
    ] {
        t.add(
            format!("{held} pending checkpoints: {what}"),
            get(ours, k),
            None,
            better,
        );
    }
    let backlog = get(ours, "relay/rate").map_or("–".into(), |_| thousands(o.events));
    t.add(
        format!("relay of a {backlog}-event backlog from the log to the reference server on loopback, events/s, best of {RELAY_ROUNDS} runs from an empty ledger to a fresh server ({RELAY_BATCH}-event batches, one in flight, each in the durable ledger before it leaves; reference column: a client POSTing the same-size batches from memory to the same server)"),
        get(ours, "relay/rate"),
        get(theirs, "bulk/s"),
        Better::Higher,
    );
    t.add(
        format!("… the same relay, against a client POSTing the very bodies the relay sends (its stored events, envelope included) from memory to a fresh reference server, best of {RELAY_ROUNDS} on both sides, events/s"),
        get(ours, "relay/rate"),
        get(theirs, "relay/same_bodies"),
        Better::Higher,
    );
    t.add(
        "… bytes per relayed event (the reference column's bulk events are 256 B)",
        get(ours, "relay/event_bytes"),
        None,
        Better::Lower,
    );
    t.add(
        "… daemon peak RSS MB while relaying it",
        get(ours, "relay/rss"),
        None,
        Better::Lower,
    );
    t.add(
        "append on the local socket → readable by a remote long-poll reader (`linger_ms = 5`, the default), p50 ms",
        get(ours, "relay/p50"),
        None,
        Better::Lower,
    );
    t.add("… p99 ms", get(ours, "relay/p99"), None, Better::Lower);
    let n = thousands(MANY_SESSIONS);
    let many = format!("{n} sessions, ulimit -n {MANY_NOFILE}");
    for (k, what, better) in [
        ("many/create", "create rate, sessions/s", Better::Higher),
        (
            "many/fds_create",
            "daemon peak open fds while creating them (/proc/<pid>/fd, sampled)",
            Better::Lower,
        ),
        (
            "many/rss",
            "daemon RSS MB after creating them",
            Better::Lower,
        ),
        (
            "many/threads",
            "daemon threads after creating them",
            Better::Lower,
        ),
        (
            "many/restart",
            "restart to ready (SIGTERM, spawn until `hello`), ms",
            Better::Lower,
        ),
        (
            "many/rss_restart",
            "daemon RSS MB right after restart",
            Better::Lower,
        ),
        (
            "many/threads_restart",
            "daemon threads right after restart",
            Better::Lower,
        ),
        (
            "many/rss_touched",
            "daemon RSS MB after restart + one append and one read per session",
            Better::Lower,
        ),
        (
            "many/fds_append",
            "daemon peak open fds during the second append to every session",
            Better::Lower,
        ),
        (
            "many/fds_read",
            "daemon peak open fds while reading every session back",
            Better::Lower,
        ),
    ] {
        t.add(format!("{many}: {what}"), get(ours, k), None, better);
    }
    t.add_text(
        format!("{n} sessions under ulimit -n {MANY_NOFILE}: all appendable/readable"),
        b.many_ok.clone().unwrap_or_else(|| "–".into()),
        "–".into(),
    );
    t.add_incomparable(
        format!("bulk load {} events, events/s (dstream: fsync=never, pipelined single appends; ref: wal, {REF_BATCH}-event array POSTs)", o.events),
        get(ours, "bulk/s"),
        get(theirs, "bulk/s"),
    );
    t.add(
        "read last 100 events, first after restart, ms",
        get(ours, "tail/first"),
        get(theirs, "tail/first"),
        Better::Lower,
    );
    t.add(
        format!("read last 100 events p50 ms ({READ_REPEATS} reads)"),
        get(ours, "tail/p50"),
        get(theirs, "tail/p50"),
        Better::Lower,
    );
    t.add(
        format!("read last 100 events p99 ms ({READ_REPEATS} reads)"),
        get(ours, "tail/p99"),
        get(theirs, "tail/p99"),
        Better::Lower,
    );
    t.add(
        format!("seek: read 1 event at a random LSN p50 ms ({READ_REPEATS} reads)"),
        get(ours, "seek/p50"),
        None,
        Better::Lower,
    );
    t.add(
        format!("seek: read 1 event at a random LSN p99 ms ({READ_REPEATS} reads)"),
        get(ours, "seek/p99"),
        None,
        Better::Lower,
    );
    t.add(
        format!("restart to ready on {} events, ms (median of {RECOVERY_RUNS}; dstream verify_on_start=true)", o.events),
        get(ours, "rec/verify"),
        get(theirs, "rec/verify"),
        Better::Lower,
    );
    t.add(
        format!("restart to ready on {} events, ms (median of {RECOVERY_RUNS}; dstream verify_on_start=false)", o.events),
        get(ours, "rec/noverify"),
        None,
        Better::Lower,
    );
    t.add_incomparable(
        format!(
            "on-disk size of the {}-event session, MB (dstream: log + index; ref: stream files, its preallocated WAL excluded)",
            o.events
        ),
        get(ours, "disk/mb"),
        get(theirs, "disk/mb"),
    );
    t.add(
        format!(
            "on-disk size of the {}-event session once compressed, MB (dstream: allocated blocks of log + index + archive; ref: as above)",
            o.events
        ),
        get(ours, "zdisk/mb"),
        get(theirs, "disk/mb"),
        Better::Lower,
    );
    t.add(
        "compressed: read last 100 events p50 ms (reference column: dstream, the same session uncompressed)",
        get(ours, "ztail/p50"),
        get(ours, "tail/p50"),
        Better::Lower,
    );
    t.add(
        "compressed: seek to a random LSN p50 ms (reference column: dstream, uncompressed)",
        get(ours, "zseek/p50"),
        get(ours, "seek/p50"),
        Better::Lower,
    );
    t.add(
        "compression rate, events/s (`dstream compress` of the whole session)",
        get(ours, "compress/s"),
        None,
        Better::Higher,
    );
    t.add(
        "append p99 µs at C=1 on another session while it compresses (fsync=always)",
        get(ours, "compress/append_p99"),
        None,
        Better::Lower,
    );
    t.add(
        "dstream stored bytes per 256-B event (`stats` bytes_written / appends)",
        get(ours, "bytes/event"),
        None,
        Better::Lower,
    );
    t.add(
        "RSS idle MB (fresh, 1 s after ready)",
        get(ours, "rss/idle"),
        get(theirs, "rss/idle"),
        Better::Lower,
    );
    t.add(
        "RSS idle, anonymous only MB (without the binary's code mapped from the page cache)",
        get(ours, "rss/idle_anon"),
        get(theirs, "rss/idle_anon"),
        Better::Lower,
    );
    t.add(
        "RSS under load MB (max over the measured window of C=16, 16 sessions, durable)",
        get(ours, "rss/load"),
        get(theirs, "rss/load"),
        Better::Lower,
    );
    t.add(
        "RSS under load, anonymous only MB (max over the measured window of C=16, 16 sessions, durable)",
        get(ours, "rss/load_anon"),
        get(theirs, "rss/load_anon"),
        Better::Lower,
    );
    t.add(
        "functions of daemon/hot-code.order in the daemon binary, packed at the start of its code by the release build (reference column: how many the list names)",
        get(ours, "hotcode/found"),
        get(theirs, "hotcode/found"),
        Better::Higher,
    );

    let header = format!(
        "## dstream vs durable-streams benchmark\n\n\
         - Machine: nproc {nproc}, {cpu}, kernel {kernel}, {date}; temp dirs on {fs_type} ({fs_dev}); \
         load average {load}.\n\
         - Workload: {bytes} B JSON events (`{{\"type\":\"bench.event\",\"payload\":{{\"seq\":N,\"pad\":\"x…\"}}}}`), \
         one event per request; each connection (one OS thread) waits for its reply before sending the next (no pipelining; \
         dstream's Unix-socket client waits in `poll`, as the SDK does in epoll, since a thread blocked in `read` there is also \
         woken when the daemon takes its request); \
         {warm:.1} s warm-up + {measure:.1} s measured per scenario; a fresh server and data dir per scenario; \
         the durable append scenarios (dstream and the reference alternated), then `ingest`, run in {rounds} rounds, \
         and their rows show the median of the rounds (memory under load: the highest); \
         the two servers never run at the same time.\n\
         - dstream (release build of this workspace): JSON-RPC `append` over its Unix socket; `[store] fsync = \"always\"` \
         (ack after fsync, group commit) or `\"interval\"` with `fsync_interval_ms = 20`; C connections over S sessions \
         (connection k appends to session k mod S).\n\
         - Reference: durable-streams-server {refv} (`cargo install durable-streams`), `--durability wal` (its only durable mode: \
         its WAL is fdatasync'd before the 204), default shards/worker threads; loopback HTTP/1.1 keep-alive, \
         `PUT /bench-<k mod S>` once, then `POST /bench-<k mod S>` per event.\n\
         - Appends per fdatasync and context switches per append cover the measured window only: dstream's `stats` \
         counters and the sum of voluntary+nonvoluntary switches over /proc/<pid>/task/*/status, read when the window \
         opens and closes, divided by the appends completed in it. The reference's fsync/fdatasync calls are counted in \
         a second run of the same scenario under `strace -f --seccomp-bpf` (only those calls stop the server), so that \
         tracing does not touch its other figures.\n\
         - Many sessions (dstream only): the daemon starts with RLIMIT_NOFILE {nofile} (soft and hard) and fsync=always; \
         {many} sessions are created with one append each ({MANY_CONNS} connections x {MANY_WINDOW} pipelined requests); \
         RSS and `Threads:` from /proc; then SIGTERM and restart (spawn until `hello`); \"all appendable/readable\" = \
         the limits in /proc/<pid>/limits are {nofile}, every creating append succeeded, `sessions.list` counts {many} after \
         the restart, and every session then takes a second append (LSN 2) and reads back LSNs 1-2 with the right payloads.\n\
         - Subscriber latency: a `subscribe` connection on session `lat`, a C=1 appender stamping each event with its send time.\n\
         - Big session: {events} events, loaded with fsync=never, {BULK_CONNS} connections x {BULK_WINDOW} pipelined appends \
         (reference: {REF_BATCH}-event JSON-array POSTs); read/restart numbers with the page cache warm; \
         read = `read` from LSN {tail_from} limit 100 (reference: `GET ?offset=` of the last 100 events), seek = `read` limit 1 \
         at random LSNs; restart = spawn until the first answered `hello` (reference: `GET /health`).\n\
         - Ratio = dstream / reference.\n",
        nproc = nproc(),
        cpu = cpu_model(),
        kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim(),
        date = date(),
        load = load,
        bytes = load::EVENT_BYTES,
        warm = o.warmup.as_secs_f64(),
        measure = o.measure.as_secs_f64(),
        rounds = o.rounds,
        refv = procs::REFERENCE_VERSION,
        events = o.events,
        nofile = MANY_NOFILE,
        many = thousands(MANY_SESSIONS),
        tail_from = o.events.saturating_sub(99),
    );
    let mut out = t.render(&header);
    if !notes.is_empty() {
        out.push_str("\nNotes:\n");
        for n in notes {
            out.push_str(&format!("- {n}\n"));
        }
    }
    out
}

/// Runs `f` while sampling how many descriptors process `pid` holds; returns the peak too.
fn with_peak_fds<R>(pid: u32, f: impl FnOnce() -> R) -> (R, Option<u64>) {
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = None;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(n) = procs::fd_count(pid) {
                    peak = peak.max(Some(n));
                }
                std::thread::sleep(Duration::from_micros(500));
            }
            peak
        });
        let r = f();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (r, sampler.join().expect("fd sampler panicked"))
    })
}

/// 10000 -> "10,000".
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ms(ns: &[u64]) -> Vec<f64> {
    ns.iter()
        .map(|&v| (v as f64 / 1e4).round() / 100.0)
        .collect()
}

/// Sum of the lengths of the files under `dir` (apparent size).
/// Bytes the files under `dir` take on disk (allocated blocks: holes do not count).
fn dir_blocks(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .fold(0, |sum, e| match e.metadata() {
            Ok(md) if md.is_dir() => sum + dir_blocks(&e.path()),
            Ok(md) => sum + md.blocks() * 512,
            Err(_) => sum,
        })
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .fold(0, |sum, e| match e.metadata() {
            Ok(md) if md.is_dir() => sum + dir_bytes(&e.path()),
            Ok(md) => sum + md.len(),
            Err(_) => sum,
        })
}

/// (all jiffies, steal jiffies) from the `cpu` line of /proc/stat.
fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    Some((fields.iter().take(8).sum(), *fields.get(7)?))
}

/// The 1-minute load average: a busy machine (e.g. a build running) distorts the numbers.
fn loadavg() -> String {
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    l.split_whitespace().next().unwrap_or("?").to_string()
}

fn nproc() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn date() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M:%S UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Filesystem type and device of the mount holding `path` (longest matching mount point).
fn filesystem_of(path: &Path) -> (String, String) {
    let path = path.canonicalize().unwrap_or_else(|_| PathBuf::from(path));
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best = (0, "unknown".to_string(), "unknown".to_string());
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 3 && path.starts_with(f[1]) && f[1].len() >= best.0 {
            best = (f[1].len(), f[2].to_string(), f[0].to_string());
        }
    }
    (best.1, best.2)
}
