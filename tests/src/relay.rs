//! What the relay talks to in the tests: the real Durable Streams reference servers, a TCP
//! proxy that cuts connections or demands a token, and the official Node client to read a
//! stream back.
//!
//! - The Rust server is the crate `durable-streams` 0.1.5, `cargo install --locked --root`
//!   into `$HOME/.cache/dstream/durable-streams-0.1.5` on first use.
//! - The Node server (`@durable-streams/server`) and client (`@durable-streams/client`) are
//!   pinned by `tests/relay/package.json` and its lockfile, installed into
//!   `$HOME/.cache/dstream/relay-node`; the scripts of `tests/relay/` run from there.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;

use crate::npm_cache;

pub const RUST_REFERENCE_VERSION: &str = "0.1.5";
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The Rust reference server's executable, installed with cargo on first use.
pub fn rust_reference_bin() -> PathBuf {
    try_rust_reference_bin().unwrap_or_else(|e| panic!("installing the reference server: {e:#}"))
}

fn try_rust_reference_bin() -> anyhow::Result<PathBuf> {
    let root = npm_cache::cache_root(&format!("durable-streams-{RUST_REFERENCE_VERSION}"));
    let bin = root.join("bin/durable-streams-server");
    npm_cache::with_lock(&root, || {
        if bin.is_file() {
            return Ok(bin.clone());
        }
        eprintln!(
            "dstream tests: cargo install durable-streams {RUST_REFERENCE_VERSION} into {} (once)",
            root.display()
        );
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["install", "--locked", "--quiet", "--root"])
            .arg(&root)
            .args(["durable-streams", "--version", RUST_REFERENCE_VERSION])
            // Its own target dir: never the workspace's, which cargo test holds locked.
            .env("CARGO_TARGET_DIR", root.join("build"))
            .status()
            .context("running cargo install")?;
        anyhow::ensure!(
            status.success() && bin.is_file(),
            "cargo install failed ({status})"
        );
        let _ = std::fs::remove_dir_all(root.join("build"));
        Ok(bin.clone())
    })
}

/// The folder holding the Node packages and the scripts of `tests/relay/`.
pub fn node_dir() -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("relay");
    let cache = npm_cache::cache_root("relay-node");
    npm_cache::ensure(&src, &cache, |c| {
        let pkg = c.join("node_modules/@durable-streams/server/package.json");
        anyhow::ensure!(pkg.is_file(), "no {}", pkg.display());
        Ok(())
    })
    .unwrap_or_else(|e| panic!("installing the Node relay packages: {e:#}"));
    // The scripts import the packages, so they run from beside node_modules.
    for entry in std::fs::read_dir(&src).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "mjs") {
            let text = std::fs::read(&path).unwrap();
            let dest = cache.join(entry.file_name());
            if std::fs::read(&dest).ok().as_deref() != Some(&text[..]) {
                // Other tests may be running the old copy: replace it whole, never in place.
                let tmp = cache.join(format!(".{}.{}", std::process::id(), unique()));
                std::fs::write(&tmp, &text).unwrap();
                std::fs::rename(&tmp, &dest).unwrap();
            }
        }
    }
    cache
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// `durable-streams-server` (Rust), `--durability wal`.
    Rust,
    /// `@durable-streams/server` (Node), file-backed.
    Node,
}

/// A reference server on a loopback port, with its data in a temporary folder; stop and start
/// it again on the same port and data.
pub struct RemoteServer {
    pub kind: ServerKind,
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RemoteServer {
    pub fn start(kind: ServerKind) -> RemoteServer {
        let dir = tempfile::Builder::new()
            .prefix("dstream-remote-")
            .tempdir()
            .unwrap();
        let port = free_port();
        let mut s = RemoteServer {
            kind,
            port,
            dir,
            child: None,
        };
        s.start_again();
        s
    }

    /// `http://127.0.0.1:<port>/v1/stream`: the relay's `url`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/stream", self.port)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server not running").id()
    }

    /// Starts it (again) and waits until it answers HTTP.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "server already running");
        let data = self.dir.path().join("data");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .unwrap();
        let mut cmd = match self.kind {
            ServerKind::Rust => {
                let mut c = Command::new(rust_reference_bin());
                c.args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
                    .arg("--data-dir")
                    .arg(&data)
                    .args(["--durability", "wal"]);
                c
            }
            ServerKind::Node => {
                let dir = node_dir();
                let mut c = Command::new("node");
                c.arg(dir.join("node-server.mjs"))
                    .arg(self.port.to_string())
                    .arg(&data)
                    .current_dir(dir);
                c
            }
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log));
        let child = cmd.spawn().expect("start the reference server");
        self.child = Some(child);
        let t0 = Instant::now();
        loop {
            if let Ok(r) = http(&self.addr(), "GET", "/v1/stream/__ready__/x", &[], b"")
                && r.status > 0
            {
                return;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("the reference server exited ({status}):\n{}", self.log());
            }
            assert!(
                t0.elapsed() < START_TIMEOUT,
                "the reference server did not answer within {START_TIMEOUT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops it: SIGTERM, then SIGKILL if it has not exited after 10 s.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        if crate::wait_child(&mut child, Duration::from_secs(10)).is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it with SIGKILL.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RemoteServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What [`read_stream`] found.
#[derive(Debug)]
pub struct RemoteStream {
    pub messages: Vec<Value>,
    pub closed: bool,
}

/// Reads a whole stream with the official Node client.
pub fn read_stream(url: &str) -> RemoteStream {
    let dir = node_dir();
    let out = Command::new("node")
        .arg(dir.join("read-stream.mjs"))
        .arg(url)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "reading {url} with @durable-streams/client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "read-stream.mjs printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    RemoteStream {
        messages: v["messages"].as_array().cloned().unwrap_or_default(),
        closed: v["closed"].as_bool().unwrap_or(false),
    }
}

/// One HTTP/1.1 exchange on a fresh connection (`Connection: close`).
#[derive(Debug)]
pub struct HttpReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Writes one HTTP/1.1 request (`connection: close`, its length given) to `s`.
pub fn write_request(
    s: &mut TcpStream,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    Ok(())
}

pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<HttpReply> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write_request(&mut s, addr, method, path, headers, body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let end = find(&raw, b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of the response head"))?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    Ok(HttpReply {
        status,
        headers,
        body,
    })
}

/// The body of a chunked HTTP/1.1 answer, without its chunk framing.
pub fn dechunk_body(b: &[u8]) -> Vec<u8> {
    dechunk(b)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = find(b, b"\r\n") {
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&b[..eol])
                .split(';')
                .next()
                .unwrap_or("0")
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// How the [`Proxy`] treats connections.
#[derive(Debug, Clone, Default)]
pub struct ProxyMode {
    /// Cut this many of the next connections after forwarding part of the server's answer.
    pub cut_connections: usize,
    /// Answer 401 to every request whose `Authorization` is not `Bearer <token>`.
    pub required_token: Option<String>,
}

/// A TCP proxy in front of a server, in its own thread, that can cut connections in the middle
/// of a response (the request has reached the server, the answer never reaches the client) or
/// play an authenticating gateway.
pub struct Proxy {
    pub port: u16,
    mode: Arc<Mutex<ProxyMode>>,
    /// Connections accepted, and requests refused with 401.
    pub connections: Arc<AtomicU64>,
    pub unauthorized: Arc<AtomicU64>,
    pub cuts: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    pub fn start(upstream: String, mode: ProxyMode) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let p = Proxy {
            port,
            mode: Arc::new(Mutex::new(mode)),
            connections: Arc::default(),
            unauthorized: Arc::default(),
            cuts: Arc::default(),
            stop: Arc::default(),
        };
        let (mode, conns, unauth, cuts, stop) = (
            p.mode.clone(),
            p.connections.clone(),
            p.unauthorized.clone(),
            p.cuts.clone(),
            p.stop.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let client = match listener.accept() {
                    Ok((c, _)) => c,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                };
                let n = conns.fetch_add(1, Ordering::Relaxed);
                let m = {
                    let mut m = mode.lock().unwrap();
                    let cut = m.cut_connections > 0;
                    if cut {
                        m.cut_connections -= 1;
                    }
                    (cut, m.required_token.clone())
                };
                let (upstream, unauth, cuts) = (upstream.clone(), unauth.clone(), cuts.clone());
                std::thread::spawn(move || {
                    let _ = serve(client, &upstream, n, m, &unauth, &cuts);
                });
            }
        });
        p
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/stream", self.port)
    }

    pub fn set_mode(&self, mode: ProxyMode) {
        *self.mode.lock().unwrap() = mode;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(
    mut client: TcpStream,
    upstream: &str,
    n: u64,
    (cut, token): (bool, Option<String>),
    unauthorized: &AtomicU64,
    cuts: &AtomicU64,
) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    let mut head = Vec::new();
    if let Some(token) = token {
        // Read the first request's head to check its credentials.
        let mut buf = [0u8; 4096];
        while find(&head, b"\r\n\r\n").is_none() {
            let k = client.read(&mut buf)?;
            if k == 0 {
                return Ok(());
            }
            head.extend_from_slice(&buf[..k]);
        }
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let wanted = format!("authorization: bearer {}", token.to_ascii_lowercase());
        if !text.lines().any(|l| l.trim() == wanted) {
            unauthorized.fetch_add(1, Ordering::Relaxed);
            let body = "missing or wrong bearer token";
            let _ = write!(
                client,
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = client.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
    let mut server = TcpStream::connect(upstream)?;
    server.write_all(&head)?;
    let (mut c_read, mut s_write) = (client.try_clone()?, server.try_clone()?);
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c_read, &mut s_write);
        let _ = s_write.shutdown(Shutdown::Write);
    });
    // Server → client: all of it, or (cut) a part that ends somewhere in the head.
    let limit = if cut {
        10 + (n as usize * 37) % 120
    } else {
        usize::MAX
    };
    let mut sent = 0;
    let mut buf = [0u8; 16384];
    loop {
        let k = server.read(&mut buf)?;
        if k == 0 {
            break;
        }
        let take = k.min(limit - sent);
        client.write_all(&buf[..take])?;
        sent += take;
        if sent >= limit {
            cuts.fetch_add(1, Ordering::Relaxed);
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Write);
    let _ = up.join();
    Ok(())
}

/// Polls `f` every 20 ms until it returns `Some`, or panics naming `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            t0.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn unique() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
