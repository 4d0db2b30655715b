//! The closed-loop append workload shared by both servers: one OS thread per connection,
//! each sends one 256-byte event and waits for its acknowledgement before the next.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::http::HttpConn;
use crate::procs::{rss_anon_mb, rss_mb};

/// Size of the event object's JSON text (what the reference server stores verbatim).
pub const EVENT_BYTES: usize = 256;

/// Appends the event JSON `{"type":"bench.event","payload":{"seq":N[,"t":T],"pad":"xx…"}}`,
/// padded to exactly EVENT_BYTES (unless the numbers alone are longer).
pub fn push_event(out: &mut String, seq: u64, t_ns: Option<u64>) {
    let start = out.len();
    let _ = write!(
        out,
        "{{\"type\":\"bench.event\",\"payload\":{{\"seq\":{seq}"
    );
    if let Some(t) = t_ns {
        let _ = write!(out, ",\"t\":{t}");
    }
    out.push_str(",\"pad\":\"");
    let used = out.len() - start + "\"}}".len();
    out.extend(std::iter::repeat_n('x', EVENT_BYTES.saturating_sub(used)));
    out.push_str("\"}}");
}

/// Appends a whole dstream `append` request line (with its `\n`).
pub fn push_append_request(out: &mut String, id: u64, session: &str, seq: u64, t_ns: Option<u64>) {
    let _ = write!(
        out,
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"append\",\"params\":{{\"session_id\":\"{session}\",\"event\":"
    );
    push_event(out, seq, t_ns);
    out.push_str("}}\n");
}

/// Classifies a dstream response line: Ok(()) for a result, Err(text) for an error.
pub fn check_reply(line: &str) -> Result<(), String> {
    if line.contains("\"error\":") || !line.contains("\"result\":") {
        Err(line.trim().chars().take(300).collect())
    } else {
        Ok(())
    }
}

/// One connection's append: Ok(Ok) acknowledged, Ok(Err) refused (counted, the loop goes on),
/// Err broken connection (the thread stops).
pub trait Appender: Send {
    fn append(&mut self, seq: u64) -> io::Result<Result<(), String>>;
}

/// dstream over its Unix socket, blocking.
pub struct RpcAppender {
    w: UnixStream,
    r: BufReader<UnixStream>,
    session: String,
    next_id: u64,
    out: String,
    line: String,
}

impl RpcAppender {
    pub fn connect(socket: &Path, session: &str) -> io::Result<Self> {
        let w = UnixStream::connect(socket)?;
        w.set_read_timeout(Some(Duration::from_secs(60)))?;
        let r = BufReader::with_capacity(64 * 1024, w.try_clone()?);
        Ok(RpcAppender {
            w,
            r,
            session: session.into(),
            next_id: 1,
            out: String::new(),
            line: String::new(),
        })
    }
}

impl RpcAppender {
    pub fn send_line(&mut self, req: &str) -> io::Result<()> {
        self.w.write_all(req.as_bytes())
    }

    pub fn recv_line(&mut self, line: &mut String) -> io::Result<()> {
        line.clear();
        if self.r.buffer().is_empty() {
            wait_readable(&self.w)?;
        }
        if self.r.read_line(line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "daemon closed the connection",
            ));
        }
        Ok(())
    }

    /// Writes a prepared request line and reads one reply line (for callers that build their own).
    pub fn raw_roundtrip(&mut self, req: &str, line: &mut String) -> io::Result<()> {
        self.send_line(req)?;
        self.recv_line(line)
    }
}

/// Waits for the reply in `poll`, as the SDK's clients do in epoll, before reading it. A
/// thread blocked in `read` on a Unix socket is also woken when the daemon *takes* its
/// request (the kernel wakes every waiter on the socket once its write space frees), then
/// sleeps again: a context switch per request on the two cores the daemon shares, which the
/// reference's TCP client does not pay (TCP wakes a writer only after it ran out of space).
/// Measured over `--only ingest`: the bench's voluntary context switches per request went
/// from 2.9 to 2.3.
fn wait_readable(stream: &UnixStream) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut fd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one pollfd, valid for the call.
        if unsafe { libc::poll(&mut fd, 1, 60_000) } >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl Appender for RpcAppender {
    fn append(&mut self, seq: u64) -> io::Result<Result<(), String>> {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        push_append_request(&mut out, self.next_id, &self.session, seq, None);
        self.next_id += 1;
        self.send_line(&out)?;
        self.out = out;
        let mut line = std::mem::take(&mut self.line);
        self.recv_line(&mut line)?;
        let res = check_reply(&line);
        self.line = line;
        Ok(res)
    }
}

/// The reference server: `POST /<stream>` with the event as the body, expecting 204.
pub struct HttpAppender {
    conn: HttpConn,
    path: String,
    body: String,
}

impl HttpAppender {
    /// Connects and creates the stream (PUT, idempotent), outside the timed loop.
    pub fn connect(addr: &str, stream: &str) -> io::Result<Self> {
        let mut conn = HttpConn::connect(addr)?;
        let path = format!("/{stream}");
        let r = conn.request("PUT", &path, Some("application/json"), b"")?;
        if r.status != 201 && r.status != 200 {
            return Err(io::Error::other(format!("PUT {path}: HTTP {}", r.status)));
        }
        Ok(HttpAppender {
            conn,
            path,
            body: String::new(),
        })
    }
}

impl Appender for HttpAppender {
    fn append(&mut self, seq: u64) -> io::Result<Result<(), String>> {
        self.body.clear();
        push_event(&mut self.body, seq, None);
        let r = self.conn.request(
            "POST",
            &self.path,
            Some("application/json"),
            self.body.as_bytes(),
        )?;
        if r.status == 204 || r.status == 200 {
            Ok(Ok(()))
        } else {
            Ok(Err(format!(
                "HTTP {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            )))
        }
    }
}

pub struct LoadResult {
    pub per_sec: f64,
    /// Per-append latency samples from the measured window, in ns.
    pub lat_ns: Vec<u64>,
    pub errors: u64,
    pub first_error: Option<String>,
    pub max_rss_mb: Option<f64>,
    /// The largest RssAnon seen (the process's own memory, without mapped code).
    pub max_anon_mb: Option<f64>,
}

/// Runs all connections for `warmup + measure`; only appends started after the warm-up count.
/// When `rss_pid` is given, samples that process's RSS and RssAnon every 50 ms over the measured
/// window and keeps the maxima: what the server holds while it serves the load, not what its
/// start-up held before it settled (the load begins right after the server answers).
/// `probe` runs (on its own thread) when the measured window opens and when it closes; both
/// snapshots are returned, so that server counters can be read as deltas over the window.
pub fn closed_loop<T: Send>(
    conns: Vec<Box<dyn Appender>>,
    warmup: Duration,
    measure: Duration,
    rss_pid: Option<u32>,
    probe: &(dyn Fn() -> T + Sync),
) -> (LoadResult, T, T) {
    let t_start = Instant::now() + Duration::from_millis(20);
    let t_measure = t_start + warmup;
    let t_end = t_measure + measure;
    let first_error = Mutex::new(None::<String>);
    let done = AtomicBool::new(false);
    let (lat_ns, errors, (max_rss_mb, max_anon_mb), window) = std::thread::scope(|s| {
        let prober = s.spawn(move || {
            std::thread::sleep(t_measure.saturating_duration_since(Instant::now()));
            let before = probe();
            std::thread::sleep(t_end.saturating_duration_since(Instant::now()));
            (before, probe())
        });
        let sampler = rss_pid.map(|pid| {
            let done = &done;
            s.spawn(move || {
                let keep = |max: &mut Option<f64>, v: Option<f64>| {
                    if let Some(v) = v {
                        *max = Some(max.map_or(v, |m: f64| m.max(v)));
                    }
                };
                let (mut rss, mut anon) = (None::<f64>, None::<f64>);
                std::thread::sleep(t_measure.saturating_duration_since(Instant::now()));
                while !done.load(Ordering::Relaxed) {
                    keep(&mut rss, rss_mb(pid));
                    keep(&mut anon, rss_anon_mb(pid));
                    std::thread::sleep(Duration::from_millis(50));
                }
                (rss, anon)
            })
        });
        let workers: Vec<_> = conns
            .into_iter()
            .map(|mut conn| {
                let first_error = &first_error;
                s.spawn(move || {
                    let mut lat = Vec::with_capacity(1 << 16);
                    let mut errors = 0u64;
                    let mut seq = 0u64;
                    std::thread::sleep(t_start.saturating_duration_since(Instant::now()));
                    loop {
                        let t0 = Instant::now();
                        if t0 >= t_end {
                            break;
                        }
                        seq += 1;
                        let outcome = conn.append(seq);
                        let ns = t0.elapsed().as_nanos() as u64;
                        let broken = outcome.is_err();
                        let err = match outcome {
                            Ok(Ok(())) => None,
                            Ok(Err(e)) => Some(e),
                            Err(e) => Some(format!("connection broken: {e}")),
                        };
                        match err {
                            None if t0 >= t_measure => lat.push(ns),
                            None => {}
                            Some(e) => {
                                errors += 1;
                                first_error.lock().unwrap().get_or_insert(e);
                            }
                        }
                        if broken {
                            break;
                        }
                    }
                    (lat, errors)
                })
            })
            .collect();
        let mut all = Vec::new();
        let mut errors = 0;
        for w in workers {
            let (lat, e) = w.join().expect("worker panicked");
            all.extend(lat);
            errors += e;
        }
        done.store(true, Ordering::Relaxed);
        let rss = sampler
            .map(|h| h.join().expect("sampler panicked"))
            .unwrap_or((None, None));
        let window = prober.join().expect("probe panicked");
        (all, errors, rss, window)
    });
    let r = LoadResult {
        per_sec: lat_ns.len() as f64 / measure.as_secs_f64(),
        lat_ns,
        errors,
        first_error: first_error.into_inner().unwrap(),
        max_rss_mb,
        max_anon_mb,
    };
    (r, window.0, window.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_is_256_bytes_and_valid_json() {
        for (seq, t) in [(1, None), (123_456_789, Some(987_654_321_000))] {
            let mut s = String::new();
            push_event(&mut s, seq, t);
            assert_eq!(s.len(), EVENT_BYTES);
            let v: serde_json::Value = serde_json::from_str(&s).unwrap();
            assert_eq!(v["payload"]["seq"], seq);
        }
    }
}
