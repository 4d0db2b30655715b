//! Agent-side scenarios (dstream only): the wall time of `dstream hook claude-code` per call,
//! next to a one-shot C client doing the same `ingest`; the hook without a daemon; each mapping
//! plugin's cost per event; and `ingest` throughput.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::load::{Appender, RpcAppender, check_reply};
use crate::rpc::Rpc;

/// The captured runs the mapping plugins are measured on: (source, fixture folder).
pub const SOURCES: &[(&str, &str)] = &[
    ("claude-code", "claude-code"),
    ("opencode", "opencode"),
    ("claude-agent-sdk", "claude-agent-sdk"),
];

/// Every captured payload of `dir` (tests/fixtures/<dir>/*.jsonl), one JSON text each.
pub fn fixtures(repo: &Path, dir: &str) -> Result<Vec<String>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo.join("tests/fixtures").join(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        for line in std::fs::read_to_string(&f)?.lines() {
            if !line.trim().is_empty() {
                out.push(line.to_string());
            }
        }
    }
    Ok(out)
}

/// The captured PreToolUse of the basic Claude Code run: what the hook sees on every tool call.
pub fn pre_tool_use(repo: &Path) -> Result<String> {
    fixtures(repo, "claude-code")?
        .into_iter()
        .find(|l| l.contains("\"hook_event_name\":\"PreToolUse\""))
        .context("no PreToolUse among the captured Claude Code payloads")
}

/// Builds the one-shot C client (tests/bench/oneshot.c) with the system compiler.
pub fn build_oneshot(repo: &Path) -> Result<PathBuf> {
    let src = repo.join("tests/bench/oneshot.c");
    let out = repo.join(".bench-cache/oneshot");
    let status = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .context("running cc (a C compiler is needed for the one-shot client)")?;
    if !status.success() {
        bail!("cc failed to build {}", src.display());
    }
    Ok(out)
}

/// Puts the example native filter (built with `cc`) and a Lua filter doing the same nothing
/// into `plugins`: both emit every event unchanged.
pub fn add_filters(repo: &Path, plugins: &Path) -> Result<()> {
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-I"])
        .arg(repo.join("plugins/include"))
        .arg("-o")
        .arg(plugins.join("bash_guard.so"))
        .arg(repo.join("plugins/examples/c/bash_guard.c"))
        .status()
        .context("running cc for the native plugin")?;
    if !status.success() {
        bail!("cc failed to build plugins/examples/c/bash_guard.c");
    }
    std::fs::write(
        plugins.join("lua_passthrough.lua"),
        "local M = { name = \"lua_passthrough\", api = 1, priority = 10 }\n\
         function M.process(event, emit) emit(event) end\n\
         return M\n",
    )?;
    Ok(())
}

/// Runs `cmd` once per sample with `input` on stdin and returns each run's wall time in ns
/// (spawn to exit, as the agent waits for it). Fails if a run exits unsuccessfully.
pub fn time_runs(mut make: impl FnMut() -> Command, input: &str, runs: usize) -> Result<Vec<u64>> {
    let mut lat = Vec::with_capacity(runs);
    for _ in 0..runs {
        let mut cmd = make();
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let t0 = Instant::now();
        let mut child = cmd.spawn().context("spawning the client")?;
        child
            .stdin
            .take()
            .context("no stdin")?
            .write_all(input.as_bytes())?;
        let status = child.wait()?;
        lat.push(t0.elapsed().as_nanos() as u64);
        if !status.success() {
            bail!("a timed run exited with {status}");
        }
    }
    Ok(lat)
}

/// POSTs `event` to the daemon's `/hooks/claude-code` `runs` times over one kept-alive
/// connection, as Claude Code's `http` hook does; each round trip in ns.
pub fn time_http_hook(
    socket: &Path,
    data_dir: &Path,
    event: &str,
    runs: usize,
) -> Result<Vec<u64>> {
    let stats = Rpc::connect(socket)?.call("stats", "{}")?;
    let addr = stats["http"]["listen"]
        .as_str()
        .with_context(|| format!("the daemon has no HTTP listener: {}", stats["http"]))?
        .to_string();
    let token = std::fs::read_to_string(data_dir.join("http.token"))?;
    let mut conn = crate::http::HttpConn::connect(&addr)?;
    conn.always_send(format!("Authorization: Bearer {}", token.trim()));
    let mut lat = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        let r = conn.request(
            "POST",
            "/hooks/claude-code",
            Some("application/json"),
            event.as_bytes(),
        )?;
        lat.push(t0.elapsed().as_nanos() as u64);
        if r.status != 200 {
            bail!(
                "POST /hooks/claude-code: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
        }
    }
    Ok(lat)
}

/// Ingests every captured payload `rounds` times and returns each plugin's average time per
/// call in µs, from the daemon's own counters (`plugins.list`).
pub fn plugin_costs(socket: &Path, repo: &Path, rounds: usize) -> Result<Vec<(String, f64, u64)>> {
    let mut rpc = Rpc::connect(socket)?;
    for (source, dir) in SOURCES {
        let events = fixtures(repo, dir)?;
        for round in 0..rounds {
            for (i, e) in events.iter().enumerate() {
                // Each round in sessions of its own, as repeated real runs would be.
                let params = format!(
                    "{{\"source\":\"{source}\",\"event\":{e},\"session_id\":\"cost-{round}-{i}\"}}"
                );
                rpc.call("ingest", &params)
                    .with_context(|| format!("ingest of a {source} payload"))?;
            }
        }
    }
    let list = rpc.call("plugins.list", "{}")?;
    let mut out = Vec::new();
    for p in list["plugins"].as_array().into_iter().flatten() {
        let calls = p["calls"].as_u64().unwrap_or(0);
        if calls > 0 {
            let micros = p["micros"].as_u64().unwrap_or(0) as f64;
            out.push((
                p["name"].as_str().unwrap_or("?").to_string(),
                micros / calls as f64,
                calls,
            ));
        }
    }
    // Redaction is built in, not a plugin: its own counters (the store's entry point).
    let r = &list["redaction"];
    let events = r["events"].as_u64().unwrap_or(0);
    if events > 0 {
        let micros = r["micros"].as_u64().unwrap_or(0) as f64;
        out.push(("redaction".to_string(), micros / events as f64, events));
    }
    Ok(out)
}

/// A closed-loop client that ingests captured Claude Code payloads, round robin, into its own
/// session.
pub struct Ingester {
    conn: RpcAppender,
    events: std::sync::Arc<Vec<String>>,
    session: String,
    /// The request and reply buffers, kept from one call to the next.
    req: String,
    line: String,
}

impl Ingester {
    pub fn connect(
        socket: &Path,
        session: &str,
        events: std::sync::Arc<Vec<String>>,
    ) -> Result<Self> {
        Ok(Ingester {
            conn: RpcAppender::connect(socket, session)?,
            events,
            session: session.to_string(),
            req: String::new(),
            line: String::new(),
        })
    }
}

impl Appender for Ingester {
    fn append(&mut self, seq: u64) -> std::io::Result<Result<(), String>> {
        use std::fmt::Write as _;
        let e = &self.events[seq as usize % self.events.len()];
        self.req.clear();
        let _ = writeln!(
            self.req,
            "{{\"jsonrpc\":\"2.0\",\"id\":{seq},\"method\":\"ingest\",\"params\":{{\"source\":\"claude-code\",\"event\":{e},\"session_id\":\"{}\"}}}}",
            self.session
        );
        self.conn.raw_roundtrip(&self.req, &mut self.line)?;
        // Checked as the append load checks its replies (parsing each one cost this client's
        // thread, on the daemon's two cores, more than the append client pays).
        Ok(check_reply(&self.line))
    }
}
