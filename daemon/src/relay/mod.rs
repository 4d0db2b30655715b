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
pub mod signing;
mod stream;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{Notify, Semaphore, watch};

use crate::checkpoint::Checkpoints;
use crate::config::RelayConfig;
use crate::hub::{Hub, Lagged};
use crate::store::Store;
use crate::util::glob::glob_match;
use dstream_sdk::protocol::{RelayStatusResult, RelayStreamStatus, RelayTotals};
use ledger::LedgerDir;
use remote::Remote;

/// Stream entries kept for `relay status` once their task has ended; the oldest go first.
const MAX_IDLE_ENTRIES: usize = 4096;
/// Streams with a task at once (each may hold a long-poll on its control stream); more
/// sessions with work wait their turn, so a backlog of 100,000 sessions costs a queue entry
/// each, not a task.
const MAX_RUNNING: usize = 256;
/// Idle entries beyond the cap before they are trimmed (in one pass).
const EVICT_SLACK: usize = 1024;
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

/// The settings in force, rebuilt whenever the configuration changes.
pub(crate) struct Settings {
    pub config: RelayConfig,
    /// Bumped on every change: a stream that failed for good retries on the next one.
    pub generation: u64,
    /// `None` while the relay is off or cannot run (`error` says why).
    pub remote: Option<Remote>,
    /// `{url}/{prefix}`: a ledger belongs to one target.
    pub target: String,
    pub error: Option<String>,
    /// The HMAC key that signs remote decisions; `None`: none are accepted (nor read).
    pub approval_key: Option<Vec<u8>>,
}

impl Settings {
    fn build(config: &RelayConfig, generation: u64) -> Settings {
        let mut s = Settings {
            config: config.clone(),
            generation,
            remote: None,
            target: String::new(),
            error: None,
            approval_key: None,
        };
        if !config.enabled() {
            return s;
        }
        let token = if config.token_env.is_empty() {
            None
        } else {
            match std::env::var(&config.token_env) {
                Ok(t) if !t.is_empty() => Some(t),
                _ => {
                    s.error = Some(format!(
                        "the environment variable {} (relay.token_env) is not set",
                        config.token_env
                    ));
                    return s;
                }
            }
        };
        if !config.approval_key_env.is_empty() {
            match std::env::var(&config.approval_key_env) {
                Ok(k) if !k.is_empty() => s.approval_key = Some(k.into_bytes()),
                _ => tracing::warn!(
                    var = %config.approval_key_env,
                    "relay.approval_key_env names an unset variable: remote decisions are off"
                ),
            }
        }
        let prefix = config.prefix();
        s.target = format!("{}/{prefix}", config.url.trim().trim_end_matches('/'));
        match Remote::new(&config.url, &prefix, token, format!("dstream:{prefix}")) {
            Ok(r) => s.remote = Some(r),
            Err(e) => s.error = Some(e),
        }
        s
    }
}

pub(crate) struct Shared {
    store: Store,
    checkpoints: Arc<Checkpoints>,
    /// The plugins whose `relay` function sees (and may change or keep back) what is sent.
    plugins: watch::Receiver<Arc<crate::plugins::PluginSet>>,
    hub: Arc<Hub>,
    ledgers: LedgerDir,
    settings: watch::Sender<Arc<Settings>>,
    streams: Mutex<Streams>,
    /// Told when a session waits for a task: an idle stream gives its task up.
    slot_wanted: Notify,
    /// Batches in flight across all streams.
    permits: Semaphore,
    totals: Totals,
}

#[derive(Default)]
struct Totals {
    events_sent: AtomicU64,
    bytes_sent: AtomicU64,
    batches: AtomicU64,
    retries: AtomicU64,
}

/// The streams the relay knows of, and which of them have a task.
#[derive(Default)]
struct Streams {
    map: HashMap<Arc<str>, Entry>,
    /// Entries with a task now (at most [`MAX_RUNNING`]).
    running: usize,
    /// Sessions with work waiting for a task, oldest first.
    waiting: std::collections::VecDeque<Arc<str>>,
}

impl std::ops::Deref for Streams {
    type Target = HashMap<Arc<str>, Entry>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl std::ops::DerefMut for Streams {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

struct Entry {
    status: Status,
    running: bool,
    /// In `waiting`.
    queued: bool,
    /// The configuration generation it failed under: not restarted until it changes.
    failed_in: Option<u64>,
    task: Option<tokio::task::AbortHandle>,
    wake: Arc<Notify>,
}

/// One stream as `relay status` shows it.
#[derive(Debug, Clone)]
pub(crate) struct Status {
    pub local_lsn: u64,
    pub acked_lsn: u64,
    pub state: State,
    pub bytes_sent: u64,
    pub touched: Instant,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum State {
    /// Caught up, following new events.
    Live,
    CatchingUp,
    BackingOff {
        until_ms: u64,
        reason: String,
    },
    /// Stopped until the configuration changes.
    Failed {
        reason: String,
    },
    /// The session ended and its remote stream is closed.
    Closed,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Live => "live",
            State::CatchingUp => "catching_up",
            State::BackingOff { .. } => "backing_off",
            State::Failed { .. } => "failed",
            State::Closed => "closed",
        }
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
            store,
            checkpoints,
            plugins,
            hub,
            ledgers,
            permits: Semaphore::new(config.max_parallel_streams),
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

/// Whether a session is relayed: it matches `[relay] sessions`, and its name cannot be
/// mistaken for another session's control stream.
fn relayable(pattern: &str, session: &str) -> bool {
    !session.ends_with(".control") && glob_match(pattern, session, false)
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

impl Shared {
    fn settings(&self) -> Arc<Settings> {
        self.settings.borrow().clone()
    }

    /// A session committed `lsn`: make sure its stream runs.
    fn committed(self: &Arc<Self>, session: &Arc<str>, lsn: u64) {
        if relayable(&self.settings().config.sessions, session) {
            self.ensure_running(session.clone(), lsn, None);
        }
    }

    /// Makes sure `session`'s stream has a task (or waits for one): wakes it if it runs,
    /// starts it if a task is free, queues it otherwise. A stream that failed stays stopped
    /// until the configuration changes.
    fn ensure_running(self: &Arc<Self>, session: Arc<str>, local_lsn: u64, acked: Option<u64>) {
        let generation = self.settings().generation;
        let mut guard = self.streams.lock().unwrap();
        let streams = &mut *guard;
        let entry = streams.map.entry(session.clone()).or_insert_with(|| Entry {
            status: Status {
                local_lsn: 0,
                acked_lsn: acked.unwrap_or(0),
                state: State::CatchingUp,
                bytes_sent: 0,
                touched: Instant::now(),
            },
            running: false,
            queued: false,
            failed_in: None,
            task: None,
            wake: Arc::new(Notify::new()),
        });
        entry.status.local_lsn = entry.status.local_lsn.max(local_lsn);
        entry.status.touched = Instant::now();
        if entry.running {
            entry.wake.notify_one();
            return;
        }
        if entry.queued || entry.failed_in == Some(generation) {
            return;
        }
        if streams.running >= MAX_RUNNING {
            entry.queued = true;
            streams.waiting.push_back(session);
            // Every idle stream looks; the first to give its task up starts this one.
            self.slot_wanted.notify_waiters();
            return;
        }
        self.start(streams, session);
        // Entries without a task or a place in the queue, give or take: trimmed in bulk, so
        // the scan is paid once per EVICT_SLACK new entries, not per start.
        let idle = streams
            .map
            .len()
            .saturating_sub(streams.waiting.len() + streams.running);
        let evict = idle > MAX_IDLE_ENTRIES + EVICT_SLACK;
        drop(guard);
        if evict {
            self.evict_idle();
        }
    }

    /// Gives `session` a task; the caller checked that one is free.
    fn start(self: &Arc<Self>, streams: &mut Streams, session: Arc<str>) {
        let Some(entry) = streams.map.get_mut(&session) else {
            return;
        };
        entry.running = true;
        entry.queued = false;
        entry.failed_in = None;
        let wake = entry.wake.clone();
        entry.task = Some(tokio::spawn(stream::run(self.clone(), session, wake)).abort_handle());
        streams.running += 1;
    }

    /// A task ended: the oldest waiting sessions get the free tasks.
    fn start_waiting(self: &Arc<Self>, streams: &mut Streams) {
        while streams.running < MAX_RUNNING {
            let Some(next) = streams.waiting.pop_front() else {
                return;
            };
            match streams.map.get(&next) {
                Some(e) if e.queued && !e.running => self.start(streams, next),
                _ => {}
            }
        }
    }

    /// Every relayed session whose log is ahead of its ledger gets its stream started: at
    /// start, after the hub said the relay lagged, after a configuration change.
    async fn scan(self: &Arc<Self>) {
        let settings = self.settings();
        let this = self.clone();
        let behind = tokio::task::spawn_blocking(move || {
            let running: HashMap<Arc<str>, u64> = this
                .streams
                .lock()
                .unwrap()
                .iter()
                .map(|(k, e)| (k.clone(), e.status.acked_lsn))
                .collect();
            let mut behind = Vec::new();
            for s in this.store.sessions() {
                if !relayable(&settings.config.sessions, &s.id) {
                    continue;
                }
                let committed = s.committed_lsn();
                let acked = match running.get(s.id.as_str()) {
                    Some(a) => *a,
                    None => match this.ledgers.load(&s.id) {
                        Ok(l) => {
                            let l = l.for_target(&settings.target);
                            if l.closed { committed } else { l.acked_lsn }
                        }
                        // Its stream reports the damaged ledger.
                        Err(_) => 0,
                    },
                };
                if acked < committed {
                    behind.push((Arc::<str>::from(s.id.as_str()), committed, acked));
                }
            }
            behind
        })
        .await
        .unwrap_or_default();
        if !behind.is_empty() {
            tracing::info!(
                sessions = behind.len(),
                "relay: catching up sessions from their logs"
            );
        }
        for (session, committed, acked) in behind {
            self.ensure_running(session, committed, Some(acked));
        }
    }

    fn wake_all(&self) {
        for e in self.streams.lock().unwrap().values() {
            if e.running {
                e.wake.notify_one();
            }
        }
    }

    /// Drops the entries of the streams idle longest, beyond the cap (failed ones too: such a
    /// session tries again at its next event).
    fn evict_idle(&self) {
        let mut map = self.streams.lock().unwrap();
        let mut idle: Vec<(Instant, Arc<str>)> = map
            .iter()
            .filter(|(_, e)| !e.running && !e.queued)
            .map(|(k, e)| (e.status.touched, k.clone()))
            .collect();
        if idle.len() <= MAX_IDLE_ENTRIES {
            return;
        }
        idle.sort();
        let excess = idle.len() - MAX_IDLE_ENTRIES;
        for (_, k) in idle.into_iter().take(excess) {
            map.remove(&k);
        }
    }

    /// Updates a stream's status.
    fn update(&self, session: &str, f: impl FnOnce(&mut Status)) {
        if let Some(e) = self.streams.lock().unwrap().get_mut(session) {
            f(&mut e.status);
            e.status.touched = Instant::now();
        }
    }

    /// An idle stream's task asks to end: it may, unless new events arrived meanwhile (then
    /// it goes on, so no wake-up is lost between its last look and its end).
    fn retire(self: &Arc<Self>, session: &str, acked_lsn: u64) -> bool {
        let mut guard = self.streams.lock().unwrap();
        let streams = &mut *guard;
        match streams.map.get_mut(session) {
            Some(e) if e.status.local_lsn > acked_lsn => return false,
            Some(e) => {
                e.running = false;
                e.task = None;
            }
            None => {}
        }
        streams.running = streams.running.saturating_sub(1);
        self.start_waiting(streams);
        true
    }

    /// Whether sessions with work wait for a task.
    fn has_waiting(&self) -> bool {
        !self.streams.lock().unwrap().waiting.is_empty()
    }

    /// A stream failed for good: its task ends, and the stream is started again only once the
    /// configuration changes (a scan then finds it behind).
    fn release_failed(self: &Arc<Self>, session: &str) {
        let generation = self.settings().generation;
        let mut guard = self.streams.lock().unwrap();
        let streams = &mut *guard;
        if let Some(e) = streams.map.get_mut(session) {
            e.running = false;
            e.task = None;
            e.failed_in = Some(generation);
        }
        streams.running = streams.running.saturating_sub(1);
        self.start_waiting(streams);
    }
}
