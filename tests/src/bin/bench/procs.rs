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

pub const REFERENCE_VERSION: &str = "0.1.5";
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
    eprintln!("bench: building the daemon: cargo build --release -p dstream-daemon --bin dstream");
    let mut cmd = Command::new(cargo());
    cmd.args([
        "build",
        "--release",
        "-p",
        "dstream-daemon",
        "--bin",
        "dstream",
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

/// Installs the reference server under `<repo>/.bench-cache/durable-streams` when missing.
pub fn ensure_reference(repo: &Path) -> Result<PathBuf> {
    let root = repo.join(".bench-cache/durable-streams");
    let bin = root.join("bin/durable-streams-server");
    if bin.exists() {
        eprintln!("bench: reference server found at {}", bin.display());
        return Ok(bin);
    }
    eprintln!(
        "bench: installing the reference server (takes ~1-2 min): cargo install --locked --root {} durable-streams --version {REFERENCE_VERSION}",
        root.display()
    );
    let status = Command::new(cargo())
        .args(["install", "--locked", "--root"])
        .arg(&root)
        .args(["durable-streams", "--version", REFERENCE_VERSION])
        .status()
        .context("running cargo install")?;
    if !status.success() || !bin.exists() {
        bail!("cargo install durable-streams failed ({status})");
    }
    Ok(bin)
}

/// A running child; SIGKILLed and reaped on drop unless stopped gracefully first.
pub struct ChildGuard {
    child: Option<Child>,
    name: String,
    log: PathBuf,
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
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
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
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
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
        fs::write(&config, format!("[store]\n{store_toml}\n"))?;
        let _ = fs::remove_file(self.socket());
        let mut cmd = Command::new(&self.bin);
        cmd.arg("daemon")
            .arg("--config")
            .arg(&config)
            .arg("--socket")
            .arg(self.socket())
            .arg("--data-dir")
            .arg(self.data_dir());
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
        // Ask the kernel for a free port; the tiny race with other programs is acceptable here.
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(&self.bin);
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
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
