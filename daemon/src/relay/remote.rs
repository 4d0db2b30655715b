//! The HTTP side of the relay: the few Durable Streams requests it makes (PUT to create, POST
//! with the idempotent producer headers to append or close, GET to read back), each turned
//! into an outcome the stream's state machine acts on. Nothing here retries or sleeps.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};

const JSON: &str = "application/json";
/// A request that has not finished after this is treated as a network error and retried.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Long-poll reads: the server answers within its own timeout; this is a safety net.
const LIVE_READ_TIMEOUT: Duration = Duration::from_secs(90);
/// Largest error body quoted in a status message.
const MAX_QUOTED_BODY: usize = 300;

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
    /// Appended now (200), or already there (204: a retry of a batch the server has).
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

/// What a PUT came to.
#[derive(Debug)]
pub enum CreateOutcome {
    Created,
    Existed,
    Retry {
        reason: String,
        after: Option<Duration>,
    },
    Fatal {
        reason: String,
    },
}

/// One page of a read.
#[derive(Debug)]
pub enum ReadOutcome {
    Page {
        /// The JSON messages of the page.
        messages: Vec<serde_json::Value>,
        next_offset: Option<String>,
        up_to_date: bool,
    },
    NotFound,
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
        let req = self
            .request(reqwest::Method::PUT, url)
            .header("content-type", JSON)
            .timeout(REQUEST_TIMEOUT);
        let resp = match self.send(req).await {
            Ok(r) => r,
            Err(t) => return t.into(),
        };
        match resp.status() {
            StatusCode::CREATED => CreateOutcome::Created,
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
            (StatusCode::OK | StatusCode::NO_CONTENT, ..) => PostOutcome::Stored { next_offset },
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
    /// (long-poll) when there are none.
    pub async fn read(&self, url: &str, offset: &str, live: bool) -> ReadOutcome {
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
        let resp = match self.send(req).await {
            Ok(r) => r,
            Err(t) => return t.into(),
        };
        let status = resp.status();
        let next_offset = header(resp.headers(), "stream-next-offset").map(str::to_string);
        let up_to_date = header(resp.headers(), "stream-up-to-date").is_some();
        match status {
            StatusCode::OK => {
                let body = match resp.bytes().await {
                    Ok(b) => b,
                    Err(e) => {
                        return ReadOutcome::Retry {
                            reason: network_reason(&e),
                            after: None,
                        };
                    }
                };
                let messages = if body.iter().all(u8::is_ascii_whitespace) {
                    Vec::new()
                } else {
                    match serde_json::from_slice::<Vec<serde_json::Value>>(&body) {
                        Ok(m) => m,
                        Err(e) => {
                            return ReadOutcome::Fatal {
                                reason: format!(
                                    "{url} returned a body that is not a JSON array: {e}"
                                ),
                            };
                        }
                    }
                };
                ReadOutcome::Page {
                    messages,
                    next_offset,
                    up_to_date,
                }
            }
            // A long-poll that timed out with nothing new.
            StatusCode::NO_CONTENT => ReadOutcome::Page {
                messages: Vec::new(),
                next_offset,
                up_to_date: true,
            },
            StatusCode::NOT_FOUND | StatusCode::GONE => ReadOutcome::NotFound,
            _ => self.trouble(resp).await.into(),
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
from_trouble!(CreateOutcome, PostOutcome, ReadOutcome);

fn retryable(s: StatusCode) -> bool {
    s == StatusCode::REQUEST_TIMEOUT || s == StatusCode::TOO_MANY_REQUESTS || s.is_server_error()
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v: &HeaderValue| v.to_str().ok())
}

fn header_u64(h: &HeaderMap, name: &str) -> Option<u64> {
    header(h, name)?.trim().parse().ok()
}

/// `Retry-After` in seconds (the HTTP-date form is rare for APIs and read as absent).
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    header_u64(h, "retry-after").map(|s| Duration::from_secs(s.min(3600)))
}

/// "401 Unauthorized: <first line of the body>", with a hint where one helps.
async fn describe(status: StatusCode, resp: reqwest::Response) -> String {
    let body = resp.text().await.unwrap_or_default();
    let mut text: String = body.trim().chars().take(MAX_QUOTED_BODY).collect();
    if text.is_empty() {
        text = status.canonical_reason().unwrap_or("").to_string();
    }
    let hint = match status {
        StatusCode::UNAUTHORIZED => {
            " (check the token named by relay.token_env; the relay retries after a config change)"
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
