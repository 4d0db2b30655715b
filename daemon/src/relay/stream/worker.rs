//! A stream's state as its task holds it: the ledger (loaded, saved lazily), the status
//! `relay status` shows, the store it reads from, and the backoff every loop that talks to
//! the server waits on.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinHandle;

use super::body::{Bodies, Kept, body_of};
use super::quiet::QuietLog;
use crate::relay::ledger::{Inflight, Ledger};
use crate::relay::settings::Settings;
use crate::relay::shared::{Shared, State};
use crate::store::EventJson;
use crate::util::backoff::Backoff;

/// What one step came to.
pub(super) enum Step {
    Continue,
    /// Nothing to send.
    Idle,
    /// Stopped until the configuration changes.
    Failed(String),
}

/// One session's stream, as its task drives it.
pub(super) struct Worker {
    pub(super) shared: Arc<Shared>,
    pub(super) session: Arc<str>,
    pub(super) settings: Arc<Settings>,
    pub(super) ledger: Ledger,
    /// The ledger has progress not yet written (acks are written lazily: a resend after a
    /// crash is answered 204).
    pub(super) dirty: bool,
    /// The bodies of the batches in flight and queued, kept for resends.
    pub(super) bodies: Bodies,
    /// Batches being cut ahead, if any.
    pub(super) cutting: Option<Cutting>,
    pub(super) backoff: Backoff,
    /// Fences since the last acknowledged batch: a second means another producer is live.
    pub(super) fences: u32,
    /// The acked LSN whose event was checked for being the session's end.
    pub(super) end_checked: u64,
    /// Whether the last step found nothing to do (the next batch lingers for company).
    pub(super) was_idle: bool,
    /// Resyncs and re-creations since the last acknowledged batch: from the second on, each
    /// waits the backoff first.
    pub(super) troubles: u32,
    pub(super) warnings: QuietLog,
    /// Creating the stream as a remote fork was tried and is not possible: it goes full.
    pub(super) fork_declined: bool,
}

/// A cut ahead under way (see `ahead`): the batches it recorded, once its ledger write is
/// done.
pub(super) struct Cutting {
    /// The epoch it was cut under: a new epoch numbers batches afresh.
    pub(super) epoch: u64,
    pub(super) task: JoinHandle<Vec<(Inflight, Kept)>>,
}

impl Worker {
    /// The body of a batch: the events as stored, or what the relay filters make of them.
    pub(super) async fn body_of(&self, events: Vec<EventJson>) -> (Bytes, u64) {
        body_of(&self.shared, &self.session, events).await
    }

    pub(super) fn url(&self) -> String {
        match &self.settings.remote {
            Some(r) => r.stream_url(self.ledger.stream.as_deref().unwrap_or(&self.session), ""),
            None => String::new(),
        }
    }

    pub(super) async fn load_ledger(&mut self) -> std::io::Result<()> {
        self.settle_cut().await;
        let ledgers = self.shared.ledgers.clone();
        let session = self.session.clone();
        let ledger = tokio::task::spawn_blocking(move || ledgers.load(&session))
            .await
            .map_err(std::io::Error::other)??;
        self.ledger = ledger.for_target(&self.settings.target);
        self.bodies.clear();
        self.dirty = false;
        let (acked, sent) = (self.ledger.acked_lsn, self.ledger.bytes_sent);
        self.shared.update(&self.session, |s| {
            s.acked_lsn = acked;
            s.bytes_sent = sent;
        });
        Ok(())
    }

    pub(super) async fn save(&mut self) -> Result<(), String> {
        // After the cut's own write, never before it: the last write is the ledger in force.
        self.settle_cut().await;
        let ledgers = self.shared.ledgers.clone();
        let session = self.session.clone();
        let ledger = self.ledger.clone();
        tokio::task::spawn_blocking(move || ledgers.save(&session, &ledger))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot write the relay ledger: {e}"))?;
        self.dirty = false;
        Ok(())
    }

    pub(super) async fn save_if_dirty(&mut self) {
        if self.dirty
            && let Err(e) = self.save().await
        {
            tracing::warn!(session = %self.session, error = %e, "relay ledger not saved");
        }
    }

    pub(super) fn fail(&self, reason: String) {
        self.shared
            .update(&self.session, |s| s.state = State::Failed { reason });
    }

    pub(super) fn set_state(&self, state: State) {
        let acked = self.ledger.acked_lsn;
        let sent = self.ledger.bytes_sent;
        self.shared.update(&self.session, |s| {
            s.state = state;
            s.acked_lsn = acked;
            s.bytes_sent = sent;
        });
    }

    /// The last LSN that may leave the machine: synced, so a power failure cannot take back
    /// an event a remote reader already holds (under `fsync = "interval"` this trails the
    /// committed LSN by up to an interval).
    pub(super) fn committed_lsn(&self) -> u64 {
        self.shared
            .store
            .get(&self.session)
            .map_or(0, |s| s.durable_lsn())
    }

    /// Committed locally but not yet synced: wait for the background sync, not for a wake.
    pub(super) fn awaiting_sync(&self) -> bool {
        self.shared
            .store
            .get(&self.session)
            .is_some_and(|s| s.durable_lsn() < s.committed_lsn())
    }

    /// The second and later resync or re-creation without an acknowledged batch between
    /// waits the backoff first, so a server that answers every batch with the same trouble
    /// sees a few requests a minute, not thousands.
    pub(super) async fn pause_if_repeated(&mut self, reason: String) -> Option<Step> {
        self.troubles += 1;
        if self.troubles < 2 {
            return None;
        }
        match self.back_off(reason, None).await {
            Step::Continue => None,
            other => Some(other),
        }
    }

    /// Waits before the next try: doubling from `retry_min_ms` to `retry_max_ms`, with jitter,
    /// or longer when the server's `Retry-After` asks for it.
    pub(super) async fn back_off(&mut self, reason: String, after: Option<Duration>) -> Step {
        let delay = self.backoff.next_delay(after);
        let until_ms = crate::util::time::now_ms() + delay.as_millis() as u64;
        tracing::debug!(session = %self.session, %reason, delay_ms = delay.as_millis() as u64, "relay: backing off");
        self.set_state(State::BackingOff { until_ms, reason });
        self.shared.totals.retries.fetch_add(1, Relaxed);
        // Bodies cut ahead are read again from the log when the wait ends: meanwhile their
        // share of the budget serves the streams that can send.
        self.bodies.clear();
        // A configuration change or `dstream relay retry` ends the wait.
        let mut settings = self.shared.settings.subscribe();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = settings.changed() => {}
        }
        Step::Continue
    }
}

/// The relay's backoff under `settings`: `retry_min_ms` doubling to `retry_max_ms`.
pub(super) fn backoff_of(settings: &Settings) -> Backoff {
    Backoff::new(
        Duration::from_millis(settings.config.retry_min_ms),
        Duration::from_millis(settings.config.retry_max_ms),
    )
}
