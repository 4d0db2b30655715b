//! One subscription: a [`Follower`] (replay from disk, then the daemon-wide live stream,
//! gap-free) turned into notifications: `event`, `caught_up`, `lagged`, `heartbeat`, and
//! `error` if the log cannot be read. The commit thread never waits for a subscriber, and a
//! subscriber that falls behind misses nothing: it is told `lagged` and resumes from disk.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use dstream_sdk::protocol::notifications;

use crate::follower::{Follow, Follower};
use crate::outbound::Outbound;
use crate::state::DaemonState;
use crate::store::EventJson;

pub struct Subscription {
    pub id: String,
    pub follower: Follower,
    pub out: Outbound,
    pub heartbeat: Duration,
    pub state: Arc<DaemonState>,
}

/// Keeps `stats.subscriptions` right however the task ends, abort included.
struct ActiveSubscription(Arc<DaemonState>);

impl ActiveSubscription {
    fn new(state: Arc<DaemonState>) -> Self {
        state.stats.subscriptions.fetch_add(1, Ordering::Relaxed);
        ActiveSubscription(state)
    }
}

impl Drop for ActiveSubscription {
    fn drop(&mut self) {
        self.0.stats.subscriptions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The connection is gone (or the log unreadable); the subscription ends.
struct Stop;

impl Subscription {
    /// Starts the feed in its own task; the count in `stats` follows the task's life, and so
    /// does `held` (its connection's count of work under way).
    pub fn spawn(self, held: impl Send + 'static) -> tokio::task::JoinHandle<()> {
        let count = ActiveSubscription::new(self.state.clone());
        let mut sub = self;
        tokio::spawn(async move {
            let _count = (count, held);
            let _ = sub.serve().await;
        })
    }

    async fn serve(&mut self) -> Result<(), Stop> {
        let mut last_sent = 0;
        let mut live = false;
        let mut idle_until = Instant::now() + self.heartbeat;
        loop {
            let item = tokio::select! {
                item = self.follower.next() => item,
                _ = tokio::time::sleep_until(idle_until), if live => {
                    self.notify(notifications::HEARTBEAT, &format!("\"lsn\":{last_sent}")).await?;
                    idle_until = Instant::now() + self.heartbeat;
                    continue;
                }
            };
            match item {
                Ok(Follow::Event(event)) => {
                    self.send_event(&event).await?;
                    last_sent = event.lsn;
                }
                Ok(Follow::CaughtUp(lsn)) => {
                    live = true;
                    last_sent = lsn;
                    self.notify(notifications::CAUGHT_UP, &format!("\"lsn\":{lsn}"))
                        .await?;
                }
                Ok(Follow::Lagged { last_sent_lsn }) => {
                    self.state.stats.lagged.fetch_add(1, Ordering::Relaxed);
                    self.notify(
                        notifications::LAGGED,
                        &format!("\"last_sent_lsn\":{last_sent_lsn}"),
                    )
                    .await?;
                }
                Err(e) => return self.fail(&e.to_string()).await,
            }
            idle_until = Instant::now() + self.heartbeat;
        }
    }

    async fn fail(&mut self, message: &str) -> Result<(), Stop> {
        let message = serde_json::to_string(message).unwrap_or_default();
        self.notify(notifications::ERROR, &format!("\"message\":{message}"))
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
        let start = frame.len();
        event.write_to(&mut frame);
        crate::jsonscan::readable_tail(&mut frame, start); // an event stored before the check
        frame.extend_from_slice(b"}}\n");
        self.out.send(frame).await.map_err(|_| Stop)
    }

    async fn notify(&self, method: &str, fields: &str) -> Result<(), Stop> {
        let frame = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"{method}\",\"params\":{{\"subscription\":\"{}\",{fields}}}}}\n",
            self.id
        );
        self.out.send(frame.into_bytes()).await.map_err(|_| Stop)
    }
}
