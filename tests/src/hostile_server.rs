//! A Durable Streams server that misbehaves on purpose: an HTTP/1.1 front on loopback that
//! forwards to an honest upstream (a real reference server) except where a rule says how to
//! answer instead: huge or endless bodies, junk pages, redirects, the same conflict on every
//! batch, a `Retry-After` of years, bogus offsets. Rules can be changed while the relay talks
//! to it, and cleared to turn it honest, so a test can check exactly-once delivery after.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Which requests a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// POSTs to a session's stream (appends).
    Append,
    /// GETs of a session's stream (resync reads).
    TailRead,
    /// GETs of a control stream (`….control`).
    ControlRead,
}

/// How a matched request is answered.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A made-up answer; nothing reaches the upstream.
    Reply {
        status: u16,
        headers: Vec<(String, String)>,
        body: Body,
    },
    /// Forwarded to the upstream, with these headers of the answer replaced.
    ForwardWith { headers: Vec<(String, String)> },
}

#[derive(Debug, Clone)]
pub enum Body {
    Text(Vec<u8>),
    /// `head`, then `unit` repeated up to `total` bytes in all, sent with a `Content-Length`
    /// (or chunked, without one).
    Repeat {
        head: Vec<u8>,
        unit: Vec<u8>,
        total: u64,
        chunked: bool,
    },
    /// A JSON page of `count` copies of `message`; the `{n}` in header values of the answer
    /// is replaced by a number that grows with every answer (an advancing offset).
    Page {
        message: Vec<u8>,
        count: usize,
    },
}

/// A rule: requests to `target` get `answer`.
#[derive(Debug, Clone)]
pub struct Rule {
    pub target: Target,
    pub answer: Answer,
}

impl Rule {
    pub fn reply(target: Target, status: u16, headers: &[(&str, &str)], body: Body) -> Rule {
        Rule {
            target,
            answer: Answer::Reply {
                status,
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                body,
            },
        }
    }
}

/// Requests seen, per target, and bytes of made-up bodies written.
#[derive(Debug, Default)]
pub struct Counts {
    pub appends: AtomicU64,
    pub tail_reads: AtomicU64,
    pub control_reads: AtomicU64,
    pub other: AtomicU64,
    pub body_bytes_sent: AtomicU64,
}

pub struct HostileServer {
    pub port: u16,
    rules: Arc<Mutex<Vec<Rule>>>,
    pub counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
}

impl HostileServer {
    /// Listens on a free loopback port in front of `upstream` (`host:port`).
    pub fn start(upstream: &str) -> HostileServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let s = HostileServer {
            port: listener.local_addr().unwrap().port(),
            rules: Arc::default(),
            counts: Arc::default(),
            stop: Arc::default(),
        };
        let (rules, counts, stop) = (s.rules.clone(), s.counts.clone(), s.stop.clone());
        let upstream = upstream.to_string();
        let served = Arc::new(AtomicU64::new(0));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => {
                        let (rules, counts, upstream, served) = (
                            rules.clone(),
                            counts.clone(),
                            upstream.clone(),
                            served.clone(),
                        );
                        std::thread::spawn(move || {
                            let _ = serve(c, &upstream, &rules, &counts, &served);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        s
    }

    /// `http://127.0.0.1:<port>/v1/stream`: the relay's `url`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/stream", self.port)
    }

    /// Replaces the rules (an empty list: honest from now on).
    pub fn set(&self, rules: Vec<Rule>) {
        *self.rules.lock().unwrap() = rules;
    }

    pub fn honest(&self) {
        self.set(Vec::new());
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct Request {
    method: String,
    path: String,
    /// Header lines as received, without the `Connection` one.
    headers: Vec<String>,
    body: Vec<u8>,
}

fn read_request(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end().to_string();
        if h.is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if !lower.starts_with("connection:") {
            headers.push(h);
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body)?;
    Ok(Some(Request {
        method,
        path,
        headers,
        body,
    }))
}

fn target_of(req: &Request) -> Option<Target> {
    let path = req.path.split('?').next().unwrap_or("");
    match req.method.as_str() {
        "POST" if !path.ends_with(".control") => Some(Target::Append),
        "GET" if path.ends_with(".control") => Some(Target::ControlRead),
        "GET" => Some(Target::TailRead),
        _ => None,
    }
}

fn serve(
    client: TcpStream,
    upstream: &str,
    rules: &Mutex<Vec<Rule>>,
    counts: &Counts,
    served: &AtomicU64,
) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut out = client;
    while let Some(req) = read_request(&mut reader)? {
        let target = target_of(&req);
        match target {
            Some(Target::Append) => counts.appends.fetch_add(1, Ordering::Relaxed),
            Some(Target::TailRead) => counts.tail_reads.fetch_add(1, Ordering::Relaxed),
            Some(Target::ControlRead) => counts.control_reads.fetch_add(1, Ordering::Relaxed),
            None => counts.other.fetch_add(1, Ordering::Relaxed),
        };
        let rule = target.and_then(|t| {
            rules
                .lock()
                .unwrap()
                .iter()
                .find(|r| r.target == t)
                .cloned()
        });
        let n = served.fetch_add(1, Ordering::Relaxed) + 1;
        match rule.map(|r| r.answer) {
            Some(Answer::Reply {
                status,
                headers,
                body,
            }) => reply(&mut out, status, &headers, &body, n, counts)?,
            Some(Answer::ForwardWith { headers }) => forward(&mut out, upstream, &req, &headers)?,
            None => forward(&mut out, upstream, &req, &[])?,
        }
    }
    Ok(())
}

fn reply(
    out: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &Body,
    n: u64,
    counts: &Counts,
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} Whatever\r\n");
    for (k, v) in headers {
        head.push_str(&format!(
            "{k}: {}\r\n",
            v.replace("{n}", &format!("{n:016}"))
        ));
    }
    match body {
        Body::Text(t) => {
            head.push_str(&format!("content-length: {}\r\n\r\n", t.len()));
            out.write_all(head.as_bytes())?;
            out.write_all(t)?;
            counts
                .body_bytes_sent
                .fetch_add(t.len() as u64, Ordering::Relaxed);
        }
        Body::Page { message, count } => {
            let mut page = vec![b'['];
            for i in 0..*count {
                if i > 0 {
                    page.push(b',');
                }
                page.extend_from_slice(message);
            }
            page.push(b']');
            head.push_str(&format!(
                "content-type: application/json\r\ncontent-length: {}\r\n\r\n",
                page.len()
            ));
            out.write_all(head.as_bytes())?;
            out.write_all(&page)?;
            counts
                .body_bytes_sent
                .fetch_add(page.len() as u64, Ordering::Relaxed);
        }
        Body::Repeat {
            head: first,
            unit,
            total,
            chunked,
        } => {
            if *chunked {
                head.push_str("transfer-encoding: chunked\r\n\r\n");
            } else {
                head.push_str(&format!("content-length: {total}\r\n\r\n"));
            }
            out.write_all(head.as_bytes())?;
            // Until the whole body is out or the client hangs up (a bounded reader does).
            let block: Vec<u8> = unit.iter().copied().cycle().take(64 * 1024).collect();
            let mut sent = 0u64;
            let piece = |bytes: &[u8], out: &mut TcpStream| -> std::io::Result<()> {
                if *chunked {
                    write!(out, "{:x}\r\n", bytes.len())?;
                    out.write_all(bytes)?;
                    out.write_all(b"\r\n")?;
                } else {
                    out.write_all(bytes)?;
                }
                counts
                    .body_bytes_sent
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                Ok(())
            };
            piece(first, out)?;
            sent += first.len() as u64;
            while sent < *total {
                let k = block.len().min((*total - sent) as usize);
                piece(&block[..k], out)?;
                sent += k as u64;
            }
            if *chunked {
                out.write_all(b"0\r\n\r\n")?;
            }
        }
    }
    out.flush()
}

/// Sends the request to the upstream on a fresh connection and copies its answer back, with
/// `replace` applied to its head.
fn forward(
    out: &mut TcpStream,
    upstream: &str,
    req: &Request,
    replace: &[(String, String)],
) -> std::io::Result<()> {
    let mut up = TcpStream::connect(upstream)?;
    let mut head = format!(
        "{} {} HTTP/1.1\r\nconnection: close\r\n",
        req.method, req.path
    );
    for h in &req.headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    up.write_all(head.as_bytes())?;
    up.write_all(&req.body)?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    let _ = up.shutdown(Shutdown::Both);
    let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err(std::io::Error::other("the upstream sent no head"));
    };
    let text = String::from_utf8_lossy(&answer[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let mut head = format!("{}\r\n", lines.next().unwrap_or("HTTP/1.1 502 Bad Gateway"));
    let mut chunked = false;
    for l in lines {
        let name = l
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if name == "connection" || replace.iter().any(|(k, _)| k.eq_ignore_ascii_case(&name)) {
            continue;
        }
        if name == "transfer-encoding" {
            chunked = true;
            continue;
        }
        if name == "content-length" {
            continue;
        }
        head.push_str(l);
        head.push_str("\r\n");
    }
    for (k, v) in replace {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let mut body = answer[end + 4..].to_vec();
    if chunked {
        body = crate::relay::dechunk_body(&body);
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    out.write_all(head.as_bytes())?;
    out.write_all(&body)?;
    out.flush()
}
