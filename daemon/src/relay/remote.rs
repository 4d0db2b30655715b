//! The HTTP side of the relay: the few Durable Streams requests it makes (PUT to create, POST
//! with the idempotent producer headers to append or close, GET to read back), each turned
//! into an outcome the stream's state machine acts on. Nothing here retries or sleeps.
//!
//! The server is the one peer dstream does not control, so nothing it sends is taken on
//! trust: redirects are not followed (a 301 would turn a POST into a GET and "deliver" it
//! nowhere), every body is read against a byte bound before it is kept (a control page), or
//! scanned as it arrives without being kept (a tail page), an error body is quoted from its
//! first bytes only, and an append counts as delivered only on the protocol's own answer with
//! its headers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};

use super::page::{LsnScan, valid_offset};

const JSON: &str = "application/json";
/// A request that has not finished after this is treated as a network error and retried.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Long-poll reads: the server answers within its own timeout; this is a safety net.
const LIVE_READ_TIMEOUT: Duration = Duration::from_secs(90);
/// Largest error body quoted in a status message.
const MAX_QUOTED_BODY: usize = 300;
/// Bytes of an error body read at most (to quote its start); the rest is never read.
const MAX_ERROR_BODY: usize = 4096;

/// One remote server, as the relay talks to it.
#[derive(Clone)]
pub struct Remote {
    client: reqwest::Client,
    /// `{url}/{prefix}`, no trailing slash.
    base: String,
    token: Option<String>,
    producer_id: String,
    /// Set by the first 401: the credentials are wrong for every stream, so no request is
    /// sent until the configuration changes (which builds a new `Remote`).
    refused: Arc<Mutex<Option<String>>>,
}

/// What a POST came to.
#[derive(Debug)]
pub enum PostOutcome {
    /// Appended now (200, with a valid `Stream-Next-Offset`), or already there (204: a retry
    /// of a batch the server has).
    Stored { next_offset: Option<String> },
    /// Another producer with our id claimed a newer epoch (403 with `Producer-Epoch`).
    Fenced { server_epoch: u64 },
    /// The server expected another sequence number (409 with `Producer-Expected-Seq`).
    SequenceGap { expected: u64, received: u64 },
    /// The stream is closed (409 with `Stream-Closed: true`).
    Closed,
    /// The stream does not exist (any more).
    NotFound,
    /// Worth trying again later: network errors, timeouts, 408, 429, 5xx.
    Retry {
        reason: String,
        after: Option<Duration>,
    },
    /// Trying again cannot help until the configuration changes: 401, other 4xx.
    Fatal { reason: String },
}

/// Where a fork's stream starts: the stream at `source_url` up to `offset`.
#[derive(Debug, Clone)]
pub struct ForkFrom {
    pub source_url: String,
    pub offset: String,
}

/// What a PUT came to.
#[derive(Debug)]
pub enum CreateOutcome {
    /// With the new stream's tail (`Stream-Next-Offset`), when the server sent a valid one.
    Created {
        next_offset: Option<String>,
    },
    Existed,
    Retry {
        reason: String,
        after: Option<Duration>,
    },
    Fatal {
        reason: String,
    },
}

/// One page of a read: `P` is what was taken from its body.
#[derive(Debug)]
pub enum ReadOutcome<P> {
    Page {
        body: P,
        next_offset: Option<String>,
        up_to_date: bool,
    },
    NotFound,
    /// The server refused the offset (400) or no longer has it (410): read from the start.
    BadOffset {
        reason: String,
    },
    /// The page is larger than the relay reads; its `Stream-Next-Offset`, if it sent a valid
    /// one, lets the reader skip it.
    Oversize {
        reason: String,
        next_offset: Option<String>,
    },
    Retry {
        reason: String,
        after: Option<Duration>,
    },
    Fatal {
        reason: String,
    },
}

impl Remote {
    pub fn new(
        url: &str,
        prefix: &str,
        token: Option<String>,
        producer_id: String,
    ) -> Result<Remote, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(50))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Remote {
            client,
            base: format!("{}/{}", url.trim().trim_end_matches('/'), prefix),
            token,
            producer_id,
            refused: Arc::default(),
        })
    }

    /// Why the server refused the credentials, if it did.
    pub fn refused(&self) -> Option<String> {
        self.refused.lock().unwrap().clone()
    }

    fn refuse(&self, reason: &str) {
        tracing::error!(%reason, "the relay server refused the credentials; the relay waits for a configuration change");
        *self.refused.lock().unwrap() = Some(reason.to_string());
    }

    /// The URL of a session's stream (`suffix` "" or ".control").
    pub fn stream_url(&self, session: &str, suffix: &str) -> String {
        format!("{}/{session}{suffix}", self.base)
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let r = self.client.request(method, url);
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// `PUT` a JSON stream: created, or already there with the same configuration.
    pub async fn create(&self, url: &str) -> CreateOutcome {
        self.put(url, None).await
    }

    /// `PUT` a JSON stream that starts as a fork of another: the source's messages up to
    /// `fork.offset` (`Stream-Forked-From`, `Stream-Fork-Offset`; an offset the source handed
    /// out, so no `Stream-Fork-Sub-Offset`, which the reference servers count differently).
    /// A server that does not know forks may refuse the headers or ignore them (then the
    /// stream is created empty).
    pub async fn create_fork(&self, url: &str, fork: &ForkFrom) -> CreateOutcome {
        self.put(url, Some(fork)).await
    }

    async fn put(&self, url: &str, fork: Option<&ForkFrom>) -> CreateOutcome {
        let mut req = self
            .request(reqwest::Method::PUT, url)
            .header("content-type", JSON)
            .timeout(REQUEST_TIMEOUT);
        if let Some(f) = fork {
            // The source is named by its path on the same server.
            let path = reqwest::Url::parse(&f.source_url)
                .map(|u| u.path().to_string())
                .unwrap_or_else(|_| f.source_url.clone());
            req = req
                .header("stream-forked-from", path)
                .header("stream-fork-offset", &f.offset);
        }
        let resp = match self.send(req).await {
            Ok(r) => r,
            Err(t) => return t.into(),
        };
        match resp.status() {
            StatusCode::CREATED => CreateOutcome::Created {
                next_offset: header(resp.headers(), "stream-next-offset")
                    .filter(|o| valid_offset(o))
                    .map(str::to_string),
            },
            StatusCode::OK | StatusCode::NO_CONTENT => CreateOutcome::Existed,
            _ => match self.trouble(resp).await {
                Trouble::Fatal { reason } => CreateOutcome::Fatal {
                    reason: format!("creating {url}: {reason}"),
                },
                t => t.into(),
            },
        }
    }

    /// `POST` one batch (a JSON array, or nothing when it only closes the stream) under
    /// `(epoch, seq)`.
    pub async fn append(
        &self,
        url: &str,
        epoch: u64,
        seq: u64,
        body: bytes::Bytes,
        close: bool,
    ) -> PostOutcome {
        let mut req = self
            .request(reqwest::Method::POST, url)
            .header("producer-id", &self.producer_id)
            .header("producer-epoch", epoch.to_string())
            .header("producer-seq", seq.to_string())
            .timeout(REQUEST_TIMEOUT);
        if !body.is_empty() {
            req = req.header("content-type", JSON);
        }
        if close {
            req = req.header("stream-closed", "true");
        }
        let resp = match self.send(req.body(body)).await {
            Ok(r) => r,
            Err(t) => return t.into(),
        };
        let status = resp.status();
        let headers = resp.headers();
        let closed =
            header(headers, "stream-closed").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let next_offset = header(headers, "stream-next-offset").map(str::to_string);
        let server_epoch = header_u64(headers, "producer-epoch");
        let expected = header_u64(headers, "producer-expected-seq");
        let received = header_u64(headers, "producer-received-seq");
        match (status, server_epoch, expected) {
            (StatusCode::OK | StatusCode::NO_CONTENT, ..)
                if server_epoch.is_some_and(|e| e != epoch) =>
            {
                PostOutcome::Retry {
                    reason: format!(
                        "HTTP {}: the server answered for producer epoch {}, not {epoch}; not counted as delivered",
                        status.as_u16(),
                        server_epoch.unwrap_or_default()
                    ),
                    after: None,
                }
            }
            (StatusCode::OK, ..) => match next_offset {
                Some(o) if valid_offset(&o) => PostOutcome::Stored {
                    next_offset: Some(o),
                },
                other => PostOutcome::Retry {
                    reason: format!(
                        "HTTP 200 without a valid Stream-Next-Offset ({}); not counted as delivered",
                        quote_header(other.as_deref())
                    ),
                    after: None,
                },
            },
            (StatusCode::NO_CONTENT, ..) => PostOutcome::Stored {
                next_offset: next_offset.filter(|o| valid_offset(o)),
            },
            (StatusCode::FORBIDDEN, Some(server_epoch), _) => PostOutcome::Fenced { server_epoch },
            (StatusCode::CONFLICT, ..) if closed => PostOutcome::Closed,
            (StatusCode::CONFLICT, _, Some(expected)) => PostOutcome::SequenceGap {
                expected,
                received: received.unwrap_or(seq),
            },
            (StatusCode::NOT_FOUND | StatusCode::GONE, ..) => PostOutcome::NotFound,
            _ => self.trouble(resp).await.into(),
        }
    }

    /// `GET` from `offset` ("-1" is the beginning); with `live`, waits for new messages
    /// (long-poll) when there are none. The body is kept whole, so it is bounded: a page over
    /// `max_bytes` is refused (and worth a retry later, not at once).
    pub async fn read_page(
        &self,
        url: &str,
        offset: &str,
        live: bool,
        max_bytes: usize,
    ) -> ReadOutcome<Bytes> {
        let mut resp = match self.get(url, offset, live).await {
            Ok(r) => r,
            Err(outcome) => return outcome,
        };
        let (next_offset, up_to_date) = match page_headers(&resp, url) {
            Ok(h) => h,
            Err(t) => return t.into(),
        };
        let body = match bounded_body(&mut resp, max_bytes).await {
            Ok(b) => b,
            Err(BodyError::TooLarge(reason)) => {
                return ReadOutcome::Oversize {
                    reason,
                    next_offset,
                };
            }
            Err(BodyError::Network(reason)) => {
                return ReadOutcome::Retry {
                    reason,
                    after: None,
                };
            }
        };
        ReadOutcome::Page {
            body,
            next_offset,
            up_to_date,
        }
    }

    /// `GET` one page of the stream's tail from `offset` and scan it as it arrives for the
    /// highest relayed LSN: nothing of the body is kept, however long the page.
    pub async fn scan_tail(&self, url: &str, offset: &str) -> ReadOutcome<LsnScan> {
        self.scan_page(url, offset, LsnScan::default()).await
    }

    /// `GET` one page from `offset` through `scan` (see [`LsnScan::counting`]).
    pub async fn scan_page(&self, url: &str, offset: &str, scan: LsnScan) -> ReadOutcome<LsnScan> {
        let mut resp = match self.get(url, offset, false).await {
            Ok(r) => r,
            Err(outcome) => return outcome,
        };
        let (next_offset, up_to_date) = match page_headers(&resp, url) {
            Ok(h) => h,
            Err(t) => return t.into(),
        };
        let mut scan = scan;
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    if let Err(e) = scan.feed(&chunk) {
                        return ReadOutcome::Retry {
                            reason: format!("{url} returned a page that is not a JSON array: {e}"),
                            after: None,
                        };
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return ReadOutcome::Retry {
                        reason: network_reason(&e),
                        after: None,
                    };
                }
            }
        }
        match scan.finish() {
            Ok(body) => ReadOutcome::Page {
                body,
                next_offset,
                up_to_date,
            },
            Err(e) => ReadOutcome::Retry {
                reason: format!("{url} returned a page that is not a JSON array: {e}"),
                after: None,
            },
        }
    }

    /// Sends a read; any answer but a page (200, or 204 from a long-poll) is an outcome.
    async fn get<P>(
        &self,
        url: &str,
        offset: &str,
        live: bool,
    ) -> Result<reqwest::Response, ReadOutcome<P>> {
        let mut query = vec![("offset", offset)];
        if live {
            query.push(("live", "long-poll"));
        }
        let req = self
            .request(reqwest::Method::GET, url)
            .query(&query)
            .timeout(if live {
                LIVE_READ_TIMEOUT
            } else {
                REQUEST_TIMEOUT
            });
        let resp = self.send(req).await.map_err(ReadOutcome::from)?;
        match resp.status() {
            StatusCode::OK | StatusCode::NO_CONTENT => Ok(resp),
            StatusCode::NOT_FOUND => Err(ReadOutcome::NotFound),
            status @ (StatusCode::BAD_REQUEST | StatusCode::GONE) if offset != "-1" => {
                let reason = describe(status, resp).await;
                Err(ReadOutcome::BadOffset { reason })
            }
            _ => Err(self.trouble(resp).await.into()),
        }
    }

    /// Sends `req`, unless the server refused the credentials already; a network error is
    /// worth a retry.
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, Trouble> {
        if let Some(reason) = self.refused() {
            return Err(Trouble::Fatal { reason });
        }
        req.send().await.map_err(|e| Trouble::Retry {
            reason: network_reason(&e),
            after: None,
        })
    }

    /// An answer the request itself does not expect: 401 stops the whole relay, 408, 429 and
    /// 5xx are worth a retry, anything else stops this stream.
    async fn trouble(&self, resp: reqwest::Response) -> Trouble {
        let status = resp.status();
        let after = retry_after(resp.headers());
        if status.is_redirection() {
            let location = quote_header(header(resp.headers(), "location"));
            return Trouble::Fatal {
                reason: format!(
                    "HTTP {}: the server redirects to {location}; the relay does not follow \
                     redirects (they can turn an append into a read, or send events elsewhere): \
                     set relay.url to the address it names",
                    status.as_u16()
                ),
            };
        }
        let reason = describe(status, resp).await;
        if status == StatusCode::UNAUTHORIZED {
            self.refuse(&reason);
            Trouble::Fatal { reason }
        } else if retryable(status) {
            Trouble::Retry { reason, after }
        } else {
            Trouble::Fatal { reason }
        }
    }
}

/// What every request shares among its outcomes.
enum Trouble {
    Retry {
        reason: String,
        after: Option<Duration>,
    },
    Fatal {
        reason: String,
    },
}

macro_rules! from_trouble {
    ($($outcome:ident),*) => {$(
        impl From<Trouble> for $outcome {
            fn from(t: Trouble) -> $outcome {
                match t {
                    Trouble::Retry { reason, after } => $outcome::Retry { reason, after },
                    Trouble::Fatal { reason } => $outcome::Fatal { reason },
                }
            }
        }
    )*};
}
from_trouble!(CreateOutcome, PostOutcome);

impl<P> From<Trouble> for ReadOutcome<P> {
    fn from(t: Trouble) -> ReadOutcome<P> {
        match t {
            Trouble::Retry { reason, after } => ReadOutcome::Retry { reason, after },
            Trouble::Fatal { reason } => ReadOutcome::Fatal { reason },
        }
    }
}

/// The offset headers of a page. A 204 is an empty page that is up to date; an offset that
/// is not one (`valid_offset`) is never kept: the page is refused, worth a retry.
fn page_headers(resp: &reqwest::Response, url: &str) -> Result<(Option<String>, bool), Trouble> {
    let next_offset = header(resp.headers(), "stream-next-offset").map(str::to_string);
    if let Some(o) = &next_offset
        && !valid_offset(o)
    {
        return Err(Trouble::Retry {
            reason: format!(
                "{url} answered with an invalid Stream-Next-Offset ({})",
                quote_header(Some(o))
            ),
            after: None,
        });
    }
    let up_to_date = resp.status() == StatusCode::NO_CONTENT
        || header(resp.headers(), "stream-up-to-date").is_some();
    Ok((next_offset, up_to_date))
}

/// The whole body, if it is at most `max` bytes: a `Content-Length` over it is refused before
/// reading, and reading stops at the first byte past it.
async fn bounded_body(resp: &mut reqwest::Response, max: usize) -> Result<Bytes, BodyError> {
    let too_large = || {
        BodyError::TooLarge(format!(
            "the server sent a page over relay.max_page_bytes ({max} bytes)"
        ))
    };
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > max {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(Bytes::from(body)),
            Err(e) => return Err(BodyError::Network(network_reason(&e))),
        }
    }
}

enum BodyError {
    TooLarge(String),
    Network(String),
}

/// A header value as it may appear in a status line: cut short, control characters shown
/// escaped (the value comes from the server).
fn quote_header(value: Option<&str>) -> String {
    match value {
        None => "none".into(),
        Some(v) => {
            let cut: String = v.chars().take(80).collect();
            format!("{:?}{}", cut, if v.len() > cut.len() { "…" } else { "" })
        }
    }
}

fn retryable(s: StatusCode) -> bool {
    s == StatusCode::REQUEST_TIMEOUT || s == StatusCode::TOO_MANY_REQUESTS || s.is_server_error()
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v: &HeaderValue| v.to_str().ok())
}

fn header_u64(h: &HeaderMap, name: &str) -> Option<u64> {
    header(h, name)?.trim().parse().ok()
}

/// `Retry-After` in seconds (the HTTP-date form is rare for APIs and read as absent); the
/// stream caps it at `relay.retry_max_ms`.
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    header(h, "retry-after").and_then(crate::util::backoff::retry_after)
}

/// "401 Unauthorized: <start of the body>", with a hint where one helps. Only the first
/// `MAX_ERROR_BODY` bytes of the body are read.
async fn describe(status: StatusCode, mut resp: reqwest::Response) -> String {
    let mut head = Vec::new();
    while head.len() < MAX_ERROR_BODY {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_ERROR_BODY - head.len();
                head.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            _ => break,
        }
    }
    // Dropping the response closes a connection whose body was not read to the end.
    drop(resp);
    let body = String::from_utf8_lossy(&head);
    let mut text: String = body
        .trim()
        .chars()
        .take(MAX_QUOTED_BODY)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.is_empty() {
        text = status.canonical_reason().unwrap_or("").to_string();
    }
    let hint = match status {
        StatusCode::UNAUTHORIZED => {
            " (check the token of relay.token_env or relay.token_file; the relay retries after a config change)"
        }
        _ => "",
    };
    format!("HTTP {}: {text}{hint}", status.as_u16())
}

fn network_reason(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut msg = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        "network error".to_string()
    };
    // The innermost cause says what happened ("connection refused", "reset by peer").
    let mut source = e.source();
    let mut last = None;
    while let Some(s) = source {
        last = Some(s.to_string());
        source = s.source();
    }
    if let Some(l) = last {
        msg.push_str(": ");
        msg.push_str(&l);
    }
    msg
}
