//! `[otlp] forward_to`: every OTLP request the receiver accepted is posted on to the user's
//! own collector unchanged (the same body bytes, `Content-Type` and `Content-Encoding`), so
//! installing dstream does not take their telemetry away from them.
//!
//! It never holds up or fails the local store: a handler only offers the request once it is
//! stored, and the offer returns at once. Requests wait in a queue bounded in bytes (past it
//! the oldest are dropped and counted; the one being sent is held beside it, at most one
//! body); one task sends them in order, retrying a collector that is down or busy (network
//! errors, 5xx, 408, 429) with `util::backoff`, `Retry-After` honoured up to the cap. A
//! request the collector refuses (another 4xx, a redirect, which is not followed) is counted
//! and dropped: sending it again would be refused again. What is queued at shutdown is not
//! sent.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use tokio::sync::{Notify, watch};

use crate::http::settings::ForwardTarget;
use crate::util::backoff::{Backoff, retry_after};

/// The queue's bound, in body bytes.
pub const MAX_QUEUE_BYTES: usize = 8 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// One accepted request, as it came.
#[derive(Debug, Clone)]
pub struct Item {
    /// `/v1/logs` or `/v1/metrics`.
    pub path: &'static str,
    pub body: Bytes,
    pub content_type: Option<HeaderValue>,
    pub content_encoding: Option<HeaderValue>,
}

impl Item {
    pub fn new(path: &'static str, headers: &HeaderMap, body: &[u8]) -> Item {
        Item {
            path,
            // A copy of its own: a slice of the connection's read buffer would keep the whole
            // buffer alive, and the queue's bound counts only the body.
            body: Bytes::copy_from_slice(body),
            content_type: headers.get(CONTENT_TYPE).cloned(),
            content_encoding: headers.get(CONTENT_ENCODING).cloned(),
        }
    }
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    bytes: usize,
}

/// What `stats` shows of the forwarder.
#[derive(Debug, Default)]
pub struct ForwardStats {
    /// Requests delivered.
    pub forwarded: AtomicU64,
    /// Requests dropped: the queue full, refused by the collector, forwarding turned off
    /// while they waited.
    pub dropped: AtomicU64,
    /// Failed attempts (each retry counts), and the last failure.
    pub errors: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

/// The forwarder: a queue and the task that empties it.
pub struct Forwarder {
    queue: Mutex<Queue>,
    wake: Notify,
    /// Where to send; `None` forwards nothing (a new configuration may change it).
    target: Mutex<Option<ForwardTarget>>,
    pub stats: ForwardStats,
    stop: watch::Sender<bool>,
}

/// How one attempt went.
enum Sent {
    Delivered,
    /// Worth trying again, after at least this long if the collector said so.
    Retry(String, Option<Duration>),
    /// The collector will not take it.
    Refused(String),
}

impl Forwarder {
    /// A forwarder to `target` (none: it only counts nothing), and its task, which runs until
    /// [`Forwarder::stop`].
    pub fn start(target: Option<ForwardTarget>) -> Arc<Forwarder> {
        let forwarder = Arc::new(Forwarder {
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            target: Mutex::new(target),
            stats: ForwardStats::default(),
            stop: watch::channel(false).0,
        });
        match reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
        {
            Ok(client) => {
                tokio::spawn(run(forwarder.clone(), client));
            }
            Err(e) => forwarder.failed(format!("no HTTP client: {e}")),
        }
        forwarder
    }

    /// Where requests go now (`stats`).
    pub fn target(&self) -> Option<String> {
        self.target.lock().unwrap().as_ref().map(|t| t.base.clone())
    }

    /// Body bytes waiting now (`stats`).
    pub fn queued_bytes(&self) -> u64 {
        self.queue.lock().unwrap().bytes as u64
    }

    /// A new configuration's target.
    pub fn set_target(&self, target: Option<ForwardTarget>) {
        *self.target.lock().unwrap() = target;
        self.wake.notify_one();
    }

    /// Queues `item` when forwarding is on; never waits. Past the bound the oldest requests
    /// are dropped (and an item bigger than the bound itself).
    pub fn offer(&self, item: Item) {
        if self.target.lock().unwrap().is_none() {
            return;
        }
        let mut dropped = 0;
        {
            let mut q = self.queue.lock().unwrap();
            q.bytes += item.body.len();
            q.items.push_back(item);
            while q.bytes > MAX_QUEUE_BYTES {
                let Some(old) = q.items.pop_front() else {
                    break;
                };
                q.bytes -= old.body.len();
                dropped += 1;
            }
        }
        if dropped > 0 {
            self.stats.dropped.fetch_add(dropped, Relaxed);
        }
        self.wake.notify_one();
    }

    /// Stops the task; what is queued is not sent.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    fn pop(&self) -> Option<Item> {
        let mut q = self.queue.lock().unwrap();
        let item = q.items.pop_front()?;
        q.bytes -= item.body.len();
        Some(item)
    }

    fn failed(&self, why: String) {
        self.stats.errors.fetch_add(1, Relaxed);
        tracing::debug!(error = %why, "forwarding to [otlp] forward_to failed");
        *self.stats.last_error.lock().unwrap() = Some(why);
    }
}

/// Sends queued requests in order until stopped.
async fn run(f: Arc<Forwarder>, client: reqwest::Client) {
    let mut stopped = f.stop.subscribe();
    let mut backoff = Backoff::new(RETRY_MIN, RETRY_MAX);
    loop {
        if *stopped.borrow() {
            return;
        }
        let item = loop {
            if let Some(item) = f.pop() {
                break item;
            }
            // A notify between `pop` and here is kept as a permit, so nothing is missed.
            tokio::select! {
                _ = f.wake.notified() => {}
                _ = stopped.wait_for(|s| *s) => return,
            }
        };
        loop {
            let Some(target) = f.target.lock().unwrap().clone() else {
                // Forwarding was turned off while this waited.
                f.stats.dropped.fetch_add(1, Relaxed);
                break;
            };
            match send(&client, &target, &item).await {
                Sent::Delivered => {
                    f.stats.forwarded.fetch_add(1, Relaxed);
                    backoff.reset();
                    break;
                }
                Sent::Refused(why) => {
                    f.failed(why);
                    f.stats.dropped.fetch_add(1, Relaxed);
                    break;
                }
                Sent::Retry(why, after) => {
                    f.failed(why);
                    let delay = backoff.next_delay(after);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = stopped.wait_for(|s| *s) => return,
                    }
                }
            }
        }
    }
}

/// One attempt to deliver `item` to `target`.
async fn send(client: &reqwest::Client, target: &ForwardTarget, item: &Item) -> Sent {
    let url = format!("{}{}", target.base, item.path);
    let mut req = client
        .post(&url)
        .headers(target.headers.clone())
        .body(item.body.clone());
    if let Some(v) = &item.content_type {
        req = req.header(CONTENT_TYPE, v.clone());
    }
    if let Some(v) = &item.content_encoding {
        req = req.header(CONTENT_ENCODING, v.clone());
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return Sent::Retry(format!("{url}: {e}"), None),
    };
    let status = resp.status();
    if status.is_success() {
        return Sent::Delivered;
    }
    let why = format!("{url}: {status}");
    if status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
    {
        let after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(retry_after);
        return Sent::Retry(why, after);
    }
    if status.is_redirection() {
        return Sent::Refused(format!("{why} (redirects are not followed)"));
    }
    Sent::Refused(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(n: usize) -> Item {
        Item {
            path: "/v1/logs",
            body: Bytes::from(vec![0u8; n]),
            content_type: None,
            content_encoding: None,
        }
    }

    #[tokio::test]
    async fn the_queue_drops_the_oldest_past_its_bound_and_nothing_when_off() {
        let target = ForwardTarget {
            // Nothing listens on port 9 of loopback in the test; the task only retries.
            base: "http://127.0.0.1:9".into(),
            headers: HeaderMap::new(),
        };
        let f = Forwarder::start(Some(target));
        f.stop();
        let third = MAX_QUEUE_BYTES / 3 + 1;
        for _ in 0..4 {
            f.offer(item(third));
        }
        let q = f.queue.lock().unwrap();
        assert!(q.bytes <= MAX_QUEUE_BYTES, "{}", q.bytes);
        assert_eq!(q.items.len(), 2);
        drop(q);
        assert_eq!(f.stats.dropped.load(Relaxed), 2);

        let off = Forwarder::start(None);
        off.offer(item(10));
        assert!(off.queue.lock().unwrap().items.is_empty());
        off.stop();
    }
}
