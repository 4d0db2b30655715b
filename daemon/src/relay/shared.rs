//! What every task of the relay shares: the store and the plugins it reads from, the ledgers,
//! the settings in force, and the table of streams (which have a task, which wait for one,
//! what `relay status` shows of each).

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{Notify, Semaphore, watch};

use super::ledger::LedgerDir;
use super::settings::Settings;
use crate::checkpoint::Checkpoints;
use crate::hub::Hub;
use crate::store::Store;
use crate::util::glob::glob_match;

/// Stream entries kept for `relay status` once their task has ended; the oldest go first.
const MAX_IDLE_ENTRIES: usize = 4096;
/// Streams with a task at once (each may hold a long-poll on its control stream); more
/// sessions with work wait their turn, so a backlog of 100,000 sessions costs a queue entry
/// each, not a task.
const MAX_RUNNING: usize = 256;
/// Idle entries beyond the cap before they are trimmed (in one pass).
const EVICT_SLACK: usize = 1024;
/// Bytes of batch bodies the relay keeps cut ahead, all streams together.
pub(super) const AHEAD_BYTES: usize = 16 << 20;

/// Starts one stream's task and returns its handle.
pub(super) type RunStream = fn(Arc<Shared>, Arc<str>, Arc<Notify>) -> tokio::task::AbortHandle;

pub(crate) struct Shared {
    /// Starts a stream's task (`stream::run`); given by the relay, so this file does not
    /// depend on the stream it schedules.
    pub(super) run_stream: RunStream,
    pub(super) store: Store,
    pub(super) checkpoints: Arc<Checkpoints>,
    /// The plugins whose `relay` function sees (and may change or keep back) what is sent.
    pub(super) plugins: watch::Receiver<Arc<crate::plugins::PluginSet>>,
    pub(super) hub: Arc<Hub>,
    pub(super) ledgers: LedgerDir,
    pub(super) settings: watch::Sender<Arc<Settings>>,
    pub(super) streams: Mutex<Streams>,
    /// Told when a session waits for a task: an idle stream gives its task up.
    pub(super) slot_wanted: Notify,
    /// Batches in flight across all streams.
    pub(super) permits: Semaphore,
    /// Bytes of batch bodies cut ahead of the ones in flight, across all streams
    /// ([`AHEAD_BYTES`]): what a backlog holds in memory beyond the batches being sent.
    pub(super) ahead: Arc<Semaphore>,
    pub(super) totals: Totals,
}

#[derive(Default)]
pub(super) struct Totals {
    pub(super) events_sent: AtomicU64,
    pub(super) bytes_sent: AtomicU64,
    pub(super) batches: AtomicU64,
    pub(super) retries: AtomicU64,
}

/// The streams the relay knows of, and which of them have a task.
#[derive(Default)]
pub(super) struct Streams {
    pub(super) map: HashMap<Arc<str>, Entry>,
    /// Entries with a task now (at most [`MAX_RUNNING`]).
    pub(super) running: usize,
    /// Sessions with work waiting for a task, oldest first.
    pub(super) waiting: std::collections::VecDeque<Arc<str>>,
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

pub(super) struct Entry {
    pub(super) status: Status,
    pub(super) running: bool,
    /// In `waiting`.
    pub(super) queued: bool,
    /// The configuration generation it failed under: not restarted until it changes.
    pub(super) failed_in: Option<u64>,
    pub(super) task: Option<tokio::task::AbortHandle>,
    pub(super) wake: Arc<Notify>,
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
    pub(super) fn name(&self) -> &'static str {
        match self {
            State::Live => "live",
            State::CatchingUp => "catching_up",
            State::BackingOff { .. } => "backing_off",
            State::Failed { .. } => "failed",
            State::Closed => "closed",
        }
    }
}

/// Whether a session is relayed: it matches `[relay] sessions`, and its name cannot be
/// mistaken for another session's control stream.
pub(super) fn relayable(pattern: &str, session: &str) -> bool {
    !session.ends_with(".control") && glob_match(pattern, session, false)
}

impl Shared {
    pub(super) fn settings(&self) -> Arc<Settings> {
        self.settings.borrow().clone()
    }

    /// A session committed `lsn`: make sure its stream runs.
    pub(super) fn committed(self: &Arc<Self>, session: &Arc<str>, lsn: u64) {
        if relayable(&self.settings().config.sessions, session) {
            self.ensure_running(session.clone(), lsn, None);
        }
    }

    /// Makes sure `session`'s stream has a task (or waits for one): wakes it if it runs,
    /// starts it if a task is free, queues it otherwise. A stream that failed stays stopped
    /// until the configuration changes.
    pub(super) fn ensure_running(
        self: &Arc<Self>,
        session: Arc<str>,
        local_lsn: u64,
        acked: Option<u64>,
    ) {
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
    pub(super) fn start(self: &Arc<Self>, streams: &mut Streams, session: Arc<str>) {
        let Some(entry) = streams.map.get_mut(&session) else {
            return;
        };
        entry.running = true;
        entry.queued = false;
        entry.failed_in = None;
        let wake = entry.wake.clone();
        entry.task = Some((self.run_stream)(self.clone(), session, wake));
        streams.running += 1;
    }

    /// A task ended: the oldest waiting sessions get the free tasks.
    pub(super) fn start_waiting(self: &Arc<Self>, streams: &mut Streams) {
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
    pub(super) async fn scan(self: &Arc<Self>) {
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

    pub(super) fn wake_all(&self) {
        for e in self.streams.lock().unwrap().values() {
            if e.running {
                e.wake.notify_one();
            }
        }
    }

    /// Drops the entries of the streams idle longest, beyond the cap (failed ones too: such a
    /// session tries again at its next event).
    pub(super) fn evict_idle(&self) {
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
    pub(super) fn update(&self, session: &str, f: impl FnOnce(&mut Status)) {
        if let Some(e) = self.streams.lock().unwrap().get_mut(session) {
            f(&mut e.status);
            e.status.touched = Instant::now();
        }
    }

    /// An idle stream's task asks to end: it may, unless new events arrived meanwhile (then
    /// it goes on, so no wake-up is lost between its last look and its end).
    pub(super) fn retire(self: &Arc<Self>, session: &str, acked_lsn: u64) -> bool {
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
    pub(super) fn has_waiting(&self) -> bool {
        !self.streams.lock().unwrap().waiting.is_empty()
    }

    /// A stream failed for good: its task ends, and the stream is started again only once the
    /// configuration changes (a scan then finds it behind).
    pub(super) fn release_failed(self: &Arc<Self>, session: &str) {
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
