//! The relay: every session mirrored, exactly once, to a remote Durable Streams server, so web
//! and phone clients can watch it with any Durable Streams client.
//!
//! It reads the daemon-wide stream of committed events only to learn which sessions grew; what
//! it sends it reads from the logs. Ingest never waits for it and it never slows ingest: a
//! relay that is behind (server down, slow network, a backlog from before it was configured)
//! catches up from the logs, oldest first, one bounded batch per stream at a time.
//!
//! - `ledger`: per session, what the remote stream holds, written before each batch leaves;
//! - `remote`: the HTTP requests and what their answers mean;
//! - `stream`: one session's state machine (create, send, back off, resync, close);
//! - `control` + `signing`: signed remote decisions and stops from the control stream.
//!
//! A stream's task exists while its session has work; an idle one ends, so tasks and memory
//! follow active sessions, never history.

mod control;
pub mod ledger;
mod page;
mod remote;
mod secret;
mod settings;
mod shared;
pub mod signing;
mod stream;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{Notify, Semaphore, watch};

use crate::checkpoint::Checkpoints;
use crate::config::RelayConfig;
use crate::hub::{Hub, Lagged};
use crate::store::Store;
use dstream_sdk::protocol::{RelayStatusResult, RelayStreamStatus, RelayTotals};
use ledger::LedgerDir;
use settings::Settings;
use shared::{Shared, State, Status, Streams, Totals, relayable};

/// Sessions `relay status` reports from their ledgers when the relay has not touched them.
const MAX_STATUS_FROM_LEDGERS: usize = 1000;

/// The relay component. Always present; it does nothing while `[relay] url` is empty.
pub struct Relay {
    shared: Arc<Shared>,
    dispatcher: tokio::task::AbortHandle,
}

impl Drop for Relay {
    /// Ends every task of the relay, so that what they hold (the store) is released with the
    /// daemon state, as in-process daemons and their tests expect.
    fn drop(&mut self) {
        self.stop_tasks();
    }
}

impl Relay {
    /// Starts the relay (idle while `config.url` is empty).
    pub fn start(
        store: Store,
        hub: Arc<Hub>,
        checkpoints: Arc<Checkpoints>,
        plugins: watch::Receiver<Arc<crate::plugins::PluginSet>>,
        config: &RelayConfig,
        data_dir: &std::path::Path,
    ) -> std::io::Result<Arc<Relay>> {
        let ledgers = LedgerDir::open(store.vfs(), data_dir)?;
        let settings = Arc::new(Settings::build(config, 0));
        if let Some(e) = &settings.error {
            tracing::error!(error = %e, "the relay cannot run");
        }
        let shared = Arc::new(Shared {
            run_stream: |shared, session, wake| {
                tokio::spawn(stream::run(shared, session, wake)).abort_handle()
            },
            store,
            checkpoints,
            plugins,
            hub,
            ledgers,
            permits: Semaphore::new(config.max_parallel_streams),
            ahead: Arc::new(Semaphore::new(shared::AHEAD_BYTES)),
            settings: watch::channel(settings).0,
            streams: Mutex::new(Streams::default()),
            slot_wanted: Notify::new(),
            totals: Totals::default(),
        });
        let dispatcher = tokio::spawn(dispatch(
            Arc::downgrade(&shared),
            shared.settings.subscribe(),
        ))
        .abort_handle();
        Ok(Arc::new(Relay { shared, dispatcher }))
    }

    /// A changed configuration: streams that failed try again, a new target starts over.
    pub fn reconfigure(&self, config: &RelayConfig) {
        let current = self.shared.settings.borrow().clone();
        let settings = Settings::build(config, current.generation + 1);
        let (old, new) = (
            current.config.max_parallel_streams,
            config.max_parallel_streams,
        );
        if new > old {
            self.shared.permits.add_permits(new - old);
        } else if new < old {
            // Permits in use now are not taken back; the cap holds again as batches end.
            self.shared.permits.forget_permits(old - new);
        }
        if let Some(e) = &settings.error {
            tracing::error!(error = %e, "the relay cannot run");
        }
        self.shared.settings.send_replace(Arc::new(settings));
    }

    /// The `[relay]` settings in force.
    pub fn config(&self) -> RelayConfig {
        self.shared.settings.borrow().config.clone()
    }

    /// Ends the dispatcher and every stream's task (the daemon is stopping). What was not
    /// acknowledged is sent again by the next daemon, from the ledgers.
    pub fn stop_tasks(&self) {
        self.dispatcher.abort();
        for e in self.shared.streams.lock().unwrap().values_mut() {
            if let Some(t) = e.task.take() {
                t.abort();
            }
        }
    }

    /// `relay.retry`: every backoff ends and every stopped stream starts again, as on a
    /// configuration change (the same configuration, a new generation). Whether the relay is
    /// on.
    pub fn retry(&self) -> bool {
        let config = self.shared.settings.borrow().config.clone();
        tracing::info!("relay: retry asked for; every stream tries again now");
        self.reconfigure(&config);
        config.enabled()
    }

    /// Events of `session` the remote stream does not hold yet, as (acked, local) LSNs, when
    /// the relay is on and relays it (retention keeps such a session). Blocking: reads the
    /// session's ledger. A closed stream takes nothing more, so it holds nothing back.
    pub fn unrelayed(&self, session: &crate::store::Session) -> Option<(u64, u64)> {
        let settings = self.shared.settings();
        if !settings.config.enabled() || !relayable(&settings.config.sessions, &session.id) {
            return None;
        }
        let ledger = self
            .shared
            .ledgers
            .load(&session.id)
            .unwrap_or_default()
            .for_target(&settings.target);
        let local = session.committed_lsn();
        (!ledger.closed && ledger.acked_lsn < local).then_some((ledger.acked_lsn, local))
    }

    /// A session that appeared without an append (a fork): its stream starts now, as a full
    /// stream of its own, rather than at its next event.
    pub fn session_added(&self, session: &str, last_lsn: u64) {
        if self.shared.settings().remote.is_some() {
            self.shared.committed(&Arc::from(session), last_lsn);
        }
    }

    /// `relay.status`.
    pub async fn status(&self) -> RelayStatusResult {
        let settings = self.shared.settings.borrow().clone();
        let now = Instant::now();
        let now_ms = crate::util::time::now_ms();
        let mut streams = self.snapshot(now_ms);
        streams.sort_by_key(|s| std::cmp::Reverse(s.local_lsn.saturating_sub(s.acked_lsn)));
        if settings.remote.is_some() {
            // Sessions the relay has not touched since it started: from their ledgers.
            let known: std::collections::HashSet<String> =
                streams.iter().map(|s| s.session_id.clone()).collect();
            let shared = self.shared.clone();
            let pattern = settings.config.sessions.clone();
            let target = settings.target.clone();
            let more = tokio::task::spawn_blocking(move || {
                let mut out = Vec::new();
                for s in shared.store.sessions() {
                    if out.len() >= MAX_STATUS_FROM_LEDGERS {
                        break;
                    }
                    if known.contains(&s.id) || !relayable(&pattern, &s.id) {
                        continue;
                    }
                    let ledger = shared.ledgers.load(&s.id).unwrap_or_default();
                    let ledger = ledger.for_target(&target);
                    let status = Status {
                        local_lsn: s.committed_lsn(),
                        acked_lsn: ledger.acked_lsn,
                        state: if ledger.closed {
                            State::Closed
                        } else if ledger.acked_lsn < s.committed_lsn() {
                            State::CatchingUp
                        } else {
                            State::Live
                        },
                        bytes_sent: ledger.bytes_sent,
                        touched: now,
                    };
                    out.push(stream_status(&s.id, &status, now_ms));
                }
                out
            })
            .await
            .unwrap_or_default();
            streams.extend(more);
        }
        RelayStatusResult {
            enabled: settings.config.enabled(),
            target: (!settings.target.is_empty()).then(|| settings.target.clone()),
            error: settings
                .error
                .clone()
                .or_else(|| settings.remote.as_ref().and_then(|r| r.refused())),
            totals: self.totals_with(&streams),
            streams,
        }
    }

    /// The totals for `stats`.
    pub fn totals(&self) -> RelayTotals {
        self.totals_with(&self.snapshot(crate::util::time::now_ms()))
    }

    /// The streams the relay holds in memory, as `relay status` shows them.
    fn snapshot(&self, now_ms: u64) -> Vec<RelayStreamStatus> {
        let map = self.shared.streams.lock().unwrap();
        map.iter()
            .map(|(session, e)| stream_status(session, &e.status, now_ms))
            .collect()
    }

    fn totals_with(&self, streams: &[RelayStreamStatus]) -> RelayTotals {
        let t = &self.shared.totals;
        RelayTotals {
            enabled: self.shared.settings.borrow().remote.is_some(),
            streams: streams.len() as u64,
            lag_events: streams.iter().map(|s| s.lag).sum(),
            failed_streams: streams.iter().filter(|s| s.state == "failed").count() as u64,
            events_sent: t.events_sent.load(Ordering::Relaxed),
            bytes_sent: t.bytes_sent.load(Ordering::Relaxed),
            batches: t.batches.load(Ordering::Relaxed),
            retries: t.retries.load(Ordering::Relaxed),
        }
    }
}

fn stream_status(session: &str, s: &Status, now_ms: u64) -> RelayStreamStatus {
    let (next_try_in_ms, reason) = match &s.state {
        State::BackingOff { until_ms, reason } => {
            (Some(until_ms.saturating_sub(now_ms)), Some(reason.clone()))
        }
        State::Failed { reason } => (None, Some(reason.clone())),
        _ => (None, None),
    };
    RelayStreamStatus {
        session_id: session.to_string(),
        local_lsn: s.local_lsn,
        acked_lsn: s.acked_lsn,
        lag: s.local_lsn.saturating_sub(s.acked_lsn),
        state: s.state.name().to_string(),
        next_try_in_ms,
        reason,
        bytes_sent: s.bytes_sent,
    }
}

/// Follows the committed events to learn which sessions grew, and starts their streams.
/// Holds the relay only weakly while it is off, so a daemon state dropped with the relay off
/// releases everything at once.
async fn dispatch(
    shared: std::sync::Weak<Shared>,
    mut settings_rx: watch::Receiver<Arc<Settings>>,
) {
    loop {
        // Off: no hub reader at all, so the hub does not publish for the relay.
        while settings_rx.borrow_and_update().remote.is_none() {
            if settings_rx.changed().await.is_err() {
                return;
            }
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let mut hub = shared.hub.subscribe();
        shared.scan().await;
        loop {
            tokio::select! {
                r = hub.recv() => match r {
                    Ok(c) => shared.committed(&c.session, c.event.lsn),
                    Err(Lagged) => shared.scan().await,
                },
                changed = settings_rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    shared.wake_all();
                    if settings_rx.borrow().remote.is_none() {
                        break;
                    }
                    shared.scan().await;
                }
            }
        }
    }
}
