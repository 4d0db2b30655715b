//! Child processes: building/installing the two servers, starting them, readiness, stopping,
//! and reading their memory use. Every child is killed when its guard drops (also on panic),
//! and gets PR_SET_PDEATHSIG so that it dies with the bench even on SIGKILL.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::http::HttpConn;

pub const REFERENCE_VERSION: &str = dstream_tests::relay::RUST_REFERENCE_VERSION;
/// Upper bound for any start (recovery of a large log included) and any stop.
const START_TIMEOUT: Duration = Duration::from_secs(180);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// Builds the daemon with cargo (a no-op when fresh) and returns the binary's path, which sits
/// next to the running bench executable.
pub fn build_daemon(repo: &Path) -> Result<PathBuf> {
    // Same override as the test harness: run a given binary instead of building one.
    if let Some(bin) = std::env::var_os("DSTREAM_BIN") {
        eprintln!("bench: using $DSTREAM_BIN = {}", Path::new(&bin).display());
        return Ok(bin.into());
    }
    let exe = std::env::current_exe().context("current_exe")?;
    let exe_dir = exe
        .parent()
        .context("bench exe has no parent dir")?
        .to_path_buf();
    eprintln!(
        "bench: building the daemon: cargo build --release -p dstream-daemon --bin dstream --bin dstream-hook"
    );
    let mut cmd = Command::new(cargo());
    cmd.args([
        "build",
        "--release",
        "-p",
        "dstream-daemon",
        "--bin",
        "dstream",
        "--bin",
        "dstream-hook",
        "--manifest-path",
    ])
    .arg(repo.join("Cargo.toml"));
    // Build into the same target dir the bench runs from, whatever CARGO_TARGET_DIR says.
    if exe_dir.file_name().is_some_and(|n| n == "release")
        && let Some(target) = exe_dir.parent()
    {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build of the daemon failed ({status})");
    }
    let bin = exe_dir.join("dstream");
    if !bin.exists() {
        bail!("{} not found after the build", bin.display());
    }
    Ok(bin)
}

/// The lean hook binary that goes with the daemon `bin`: `$DSTREAM_HOOK_BIN`, else the
/// `dstream-hook` beside it (built with it by [`build_daemon`]); `None` when there is none.
pub fn lean_hook(bin: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DSTREAM_HOOK_BIN") {
        return Some(p.into());
    }
    let lean = bin.with_file_name(format!("dstream-hook{}", std::env::consts::EXE_SUFFIX));
    lean.is_file().then_some(lean)
}

/// The lean hook as `cargo build` links it (dynamically, against glibc; the unwinder linked in), copied
/// into `dir` so that [`relink_hook_static`] does not replace it; `None` without one.
pub fn dynamic_hook_copy(bin: &Path, dir: &Path) -> Result<Option<PathBuf>> {
    let Some(lean) = lean_hook(bin) else {
        return Ok(None);
    };
    let copy = dir.join("dstream-hook-dynamic");
    fs::copy(&lean, &copy).with_context(|| format!("copying {}", lean.display()))?;
    Ok(Some(copy))
}

/// Relinks the lean hook beside `bin` as a static PIE (`-C target-feature=+crt-static` on the
/// binary alone, through `cargo rustc`; still position-independent, so ASLR stays), which
/// skips the dynamic loader and libc's relocations at every start. Linux with glibc
/// only, and not when `$DSTREAM_BIN` names the binaries. Returns its path, or why not.
pub fn relink_hook_static(repo: &Path, bin: &Path) -> Result<PathBuf, String> {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return Err("a static PIE hook is built on Linux with glibc only".into());
    }
    if std::env::var_os("DSTREAM_BIN").is_some() {
        return Err("$DSTREAM_BIN is set: the binaries are not built here".into());
    }
    eprintln!(
        "bench: relinking the lean hook as a static PIE: cargo rustc --release -p dstream-daemon --bin dstream-hook -- -C target-feature=+crt-static"
    );
    let mut cmd = Command::new(cargo());
    cmd.args([
        "rustc",
        "--release",
        "-p",
        "dstream-daemon",
        "--bin",
        "dstream-hook",
        "--manifest-path",
    ])
    .arg(repo.join("Cargo.toml"))
    .args(["--", "-C", "target-feature=+crt-static"]);
    if let Some(target) = bin.parent().and_then(Path::parent) {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => return Err(format!("cargo rustc failed ({s})")),
        Err(e) => return Err(format!("running cargo rustc: {e}")),
    }
    lean_hook(bin).ok_or_else(|| "no dstream-hook after the relink".into())
}

/// Builds libdstream_ffi (release) beside the daemon and returns its directory.
pub fn build_ffi(repo: &Path, daemon: &Path) -> Result<PathBuf> {
    let dir = daemon
        .parent()
        .context("the daemon has no parent dir")?
        .to_path_buf();
    eprintln!("bench: building the C library: cargo build --release -p dstream-ffi --lib");
    let mut cmd = Command::new(cargo());
    cmd.args([
        "build",
        "--release",
        "-p",
        "dstream-ffi",
        "--lib",
        "--manifest-path",
    ])
    .arg(repo.join("Cargo.toml"));
    if dir.file_name().is_some_and(|n| n == "release")
        && let Some(target) = dir.parent()
    {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build of dstream-ffi failed ({status})");
    }
    Ok(dir)
}

/// The reference server, installed (once, shared with the relay tests) under
/// `~/.cache/dstream/durable-streams-<version>`.
pub fn ensure_reference() -> Result<PathBuf> {
    let bin = dstream_tests::relay::rust_reference_bin();
    eprintln!("bench: reference server at {}", bin.display());
    Ok(bin)
}

/// A running child; SIGKILLed and reaped on drop unless stopped gracefully first.
pub struct ChildGuard {
    child: Option<Child>,
    name: String,
    log: PathBuf,
    /// The real server when `child` is a wrapper (strace): signalled to stop, killed on drop.
    inner_pid: Option<u32>,
}

impl ChildGuard {
    fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self> {
        let out = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("spawning {name}"))?;
        Ok(ChildGuard {
            child: Some(child),
            name: name.into(),
            log: log.into(),
            inner_pid: None,
        })
    }

    /// The server's pid (the wrapped one when running under strace).
    pub fn pid(&self) -> u32 {
        self.inner_pid
            .unwrap_or_else(|| self.child.as_ref().map_or(0, |c| c.id()))
    }

    /// Fails (with the end of the child's log) if the child has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut()
            && let Some(status) = c.try_wait()?
        {
            bail!(
                "{} exited early ({status}); log tail:\n{}",
                self.name,
                log_tail(&self.log)
            );
        }
        Ok(())
    }

    /// SIGTERM, then waits (bounded) for the exit; returns how long the exit took.
    pub fn stop(mut self) -> Result<Duration> {
        let mut child = self.child.take().context("already stopped")?;
        let t0 = Instant::now();
        // Under strace, stop the server itself; strace exits when its tracee does.
        let target = self.inner_pid.take().unwrap_or(child.id());
        unsafe { libc::kill(target as i32, libc::SIGTERM) };
        while t0.elapsed() < STOP_TIMEOUT {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    eprintln!(
                        "bench: warning: {} exited with {status} after SIGTERM",
                        self.name
                    );
                }
                return Ok(t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
        bail!(
            "{} did not exit within {STOP_TIMEOUT:?} of SIGTERM; killed",
            self.name
        )
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.inner_pid.take() {
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// One dstream daemon's files: config, socket, data dir, log.
#[derive(Clone)]
pub struct DstreamSetup {
    pub bin: PathBuf,
    pub dir: PathBuf,
    /// RLIMIT_NOFILE (soft and hard) to start the daemon with; None inherits the bench's.
    pub nofile: Option<u64>,
}

impl DstreamSetup {
    pub fn socket(&self) -> PathBuf {
        self.dir.join("d.sock")
    }
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Starts the daemon with `store_toml` as the `[store]` table body and waits for `hello`.
    /// Returns the guard and the time from spawn to the first answered `hello`.
    pub fn start(&self, store_toml: &str) -> Result<(ChildGuard, Duration)> {
        let config = self.dir.join("config.toml");
        // An A/B aid: `DSTREAM_BENCH_EXTRA_TOML` is appended to every daemon's configuration
        // (e.g. "[search]\nenabled = false" to see what the index costs a scenario).
        let extra = std::env::var("DSTREAM_BENCH_EXTRA_TOML").unwrap_or_default();
        fs::write(&config, format!("[store]\n{store_toml}\n{extra}\n"))?;
        let _ = fs::remove_file(self.socket());
        let mut cmd = Command::new(&self.bin);
        cmd.arg("daemon")
            .arg("--config")
            .arg(&config)
            .arg("--socket")
            .arg(self.socket())
            .arg("--data-dir")
            .arg(self.data_dir());
        if let Some(n) = self.nofile {
            // Hard limit too: the daemon raises its soft limit to the hard one at start.
            // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: n as libc::rlim_t,
                        rlim_max: n as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let t0 = Instant::now();
        let mut guard = ChildGuard::spawn("dstream daemon", cmd, &self.dir.join("daemon.log"))?;
        loop {
            if let Some(hello) = try_hello(&self.socket()) {
                let ready = t0.elapsed();
                check_fsync(&hello, store_toml);
                return Ok((guard, ready));
            }
            guard.check_alive()?;
            if t0.elapsed() > START_TIMEOUT {
                bail!(
                    "dstream not ready after {START_TIMEOUT:?}; log tail:\n{}",
                    log_tail(&guard.log)
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Connects and sends `hello`; the response line on success.
fn try_hello(socket: &Path) -> Option<String> {
    let s = UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    (&s).write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{}}\n")
        .ok()?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).ok()?;
    line.contains("\"result\"").then_some(line)
}

/// Warns when the daemon reports another fsync policy than the one configured.
fn check_fsync(hello: &str, store_toml: &str) {
    let v: serde_json::Value = serde_json::from_str(hello).unwrap_or_default();
    for policy in ["always", "interval", "never"] {
        if store_toml.contains(&format!("fsync = \"{policy}\"")) && v["result"]["fsync"] != policy {
            eprintln!(
                "bench: warning: configured fsync={policy} but hello said: {}",
                hello.trim()
            );
        }
    }
}

/// The reference server's data dir; each start gets a fresh free loopback port.
pub struct RefSetup {
    pub bin: PathBuf,
    pub dir: PathBuf,
}

impl RefSetup {
    /// Starts it (durability wal, the default, spelled out) and waits for `GET /health` = 200.
    /// Returns the guard, the time from spawn to ready, and its `host:port`.
    pub fn start(&self) -> Result<(ChildGuard, Duration, String)> {
        self.start_traced(None)
    }

    /// Like `start`, but when `trace_out` is given runs the server under strace, logging its
    /// fsync/fdatasync calls with wall-clock timestamps to that file. `--seccomp-bpf` stops the
    /// server only on those calls, so everything else runs at full speed.
    pub fn start_traced(&self, trace_out: Option<&Path>) -> Result<(ChildGuard, Duration, String)> {
        // Ask the kernel for a free port; the tiny race with other programs is acceptable here.
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = match trace_out {
            Some(out) => {
                let mut c = Command::new("strace");
                c.args(["-f", "--seccomp-bpf", "-qq", "-ttt", "-e", "signal=none"])
                    .args(["-e", "trace=fsync,fdatasync", "-o"])
                    .arg(out)
                    .arg("--")
                    .arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        cmd.args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--data-dir",
        ])
        .arg(self.dir.join("data"))
        .args(["--durability", "wal"]);
        let t0 = Instant::now();
        let mut guard =
            ChildGuard::spawn("durable-streams-server", cmd, &self.dir.join("server.log"))?;
        if trace_out.is_some() {
            let strace_pid = guard.pid();
            // strace forks short-lived probes of its own first: wait for the one running the server.
            let exe = self.bin.canonicalize()?;
            while guard.inner_pid.is_none() {
                guard.inner_pid = child_running(strace_pid, &exe);
                guard.check_alive()?;
                if t0.elapsed() > START_TIMEOUT {
                    bail!("strace started no server within {START_TIMEOUT:?}");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        loop {
            if let Ok(s) = TcpStream::connect(&addr) {
                let mut c = HttpConn::new(s, &addr)?;
                if c.request("GET", "/health", None, b"")
                    .is_ok_and(|r| r.status == 200)
                {
                    return Ok((guard, t0.elapsed(), addr));
                }
            }
            guard.check_alive()?;
            if t0.elapsed() > START_TIMEOUT {
                bail!(
                    "reference not ready after {START_TIMEOUT:?}; log tail:\n{}",
                    log_tail(&guard.log)
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// VmRSS of a process in MB (MiB), from /proc.
pub fn rss_mb(pid: u32) -> Option<f64> {
    status_mb(pid, "VmRSS:")
}

/// RssAnon of a process in MB: its own memory, without the pages of its binary and libraries
/// mapped from the page cache (which the kernel maps around each fault, so they follow the
/// binary's size and what the cache holds more than what the process does).
pub fn rss_anon_mb(pid: u32) -> Option<f64> {
    status_mb(pid, "RssAnon:")
}

fn status_mb(pid: u32, field: &str) -> Option<f64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// A child process of `parent` (from the ppid field of /proc/*/stat) that runs `exe`.
fn child_running(parent: u32, exe: &Path) -> Option<u32> {
    fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        if fs::read_link(format!("/proc/{pid}/exe")).ok()? != exe {
            return None;
        }
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the parenthesised command name: state, ppid, ...
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == parent).then_some(pid)
    })
}

/// Voluntary plus involuntary context switches of all of a process's live threads.
pub fn ctx_switches(pid: u32) -> Option<u64> {
    let mut total = 0;
    for task in fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let Ok(status) = fs::read_to_string(task.path().join("status")) else {
            continue; // the thread exited meanwhile
        };
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    Some(total)
}

/// A numeric field of /proc/<pid>/status (e.g. `Threads`), first number only.
pub fn status_field(pid: u32, field: &str) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|l| l.split(':').next() == Some(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The (soft, hard) "Max open files" limits of a running process.
pub fn nofile_limits(pid: u32) -> Option<(String, String)> {
    let limits = fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut f = line["Max open files".len()..].split_whitespace();
    Some((f.next()?.to_string(), f.next()?.to_string()))
}

pub fn have_strace() -> bool {
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// How many file descriptors a process holds now.
pub fn fd_count(pid: u32) -> Option<u64> {
    Some(fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}
