//! One subscription: replay from disk, `caught_up`, then the live feed, gap-free.
//!
//! The live listener is registered before history is read, so an event committed in between
//! arrives on the live feed and is dropped there as already sent (LSN at or below the last one
//! delivered). A subscriber that falls behind the live buffer is told `lagged` and resumed from
//! disk: the writer never waits for it, and it never misses an event.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use crate::server::ServerStats;
use crate::store::{EventJson, Session};

/// How many events one disk read during replay returns.
const REPLAY_PAGE: usize = 1024;

pub struct Subscription {
    pub id: String,
    pub session: Arc<Session>,
    pub live: broadcast::Receiver<EventJson>,
    /// Next LSN to deliver.
    pub next: u64,
    pub out: mpsc::Sender<Vec<u8>>,
    pub heartbeat: Duration,
    pub stats: Arc<ServerStats>,
}

/// Keeps `stats.subscriptions` right however the task ends, abort included.
struct ActiveSubscription(Arc<ServerStats>);

impl ActiveSubscription {
    fn new(stats: Arc<ServerStats>) -> Self {
        stats.subscriptions.fetch_add(1, Ordering::Relaxed);
        ActiveSubscription(stats)
    }
}

impl Drop for ActiveSubscription {
    fn drop(&mut self) {
        self.0.subscriptions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The connection is gone (or the log unreadable); the subscription ends.
struct Stop;

impl Subscription {
    /// Starts the feed in its own task; the count in `stats` follows the task's life.
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        let count = ActiveSubscription::new(self.stats.clone());
        let mut sub = self;
        tokio::spawn(async move {
            let _count = count;
            let _ = sub.serve().await;
        })
    }

    async fn serve(&mut self) -> Result<(), Stop> {
        self.catch_up().await?;
        self.notify("caught_up", &format!("\"lsn\":{}", self.next - 1))
            .await?;
        let mut idle_until = Instant::now() + self.heartbeat;
        loop {
            let received = tokio::select! {
                r = self.live.recv() => r,
                _ = tokio::time::sleep_until(idle_until) => {
                    self.notify("heartbeat", &format!("\"lsn\":{}", self.next - 1)).await?;
                    idle_until = Instant::now() + self.heartbeat;
                    continue;
                }
            };
            match received {
                Ok(event) if event.lsn < self.next => continue,
                Ok(event) => {
                    if event.lsn > self.next {
                        // Not expected (the listener predates replay), but never skip: fill from disk.
                        self.catch_up().await?;
                        if event.lsn < self.next {
                            continue;
                        }
                    }
                    self.send_event(&event).await?;
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.stats.lagged.fetch_add(1, Ordering::Relaxed);
                    self.notify("lagged", &format!("\"last_sent_lsn\":{}", self.next - 1))
                        .await?;
                    self.catch_up().await?;
                }
                Err(broadcast::error::RecvError::Closed) => return Err(Stop),
            }
            idle_until = Instant::now() + self.heartbeat;
        }
    }

    /// Sends everything committed from `next` on, read from disk.
    async fn catch_up(&mut self) -> Result<(), Stop> {
        loop {
            let committed = self.session.committed_lsn();
            if self.next > committed {
                return Ok(());
            }
            let (session, from) = (self.session.clone(), self.next);
            let page = tokio::task::spawn_blocking(move || {
                crate::store::read_range(&session, from, committed, REPLAY_PAGE)
            })
            .await;
            let page = match page {
                Ok(Ok(page)) => page,
                Ok(Err(e)) => return self.fail(&e.to_string()).await,
                Err(e) => return self.fail(&e.to_string()).await,
            };
            for event in &page {
                self.send_event(event).await?;
            }
        }
    }

    async fn fail(&mut self, message: &str) -> Result<(), Stop> {
        let message = serde_json::to_string(message).unwrap_or_default();
        self.notify("error", &format!("\"message\":{message}"))
            .await?;
        Err(Stop)
    }

    async fn send_event(&mut self, event: &EventJson) -> Result<(), Stop> {
        let mut frame = Vec::with_capacity(128 + self.id.len());
        frame.extend_from_slice(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":{\"subscription\":\"",
        );
        frame.extend_from_slice(self.id.as_bytes());
        frame.extend_from_slice(b"\",\"event\":");
        event.write_to(&mut frame);
        frame.extend_from_slice(b"}}\n");
        self.out.send(frame).await.map_err(|_| Stop)?;
        self.next = event.lsn + 1;
        Ok(())
    }

    async fn notify(&self, method: &str, fields: &str) -> Result<(), Stop> {
        let frame = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"{method}\",\"params\":{{\"subscription\":\"{}\",{fields}}}}}\n",
            self.id
        );
        self.out.send(frame.into_bytes()).await.map_err(|_| Stop)
    }
}
