//! The commit thread: takes whatever is queued (from any session) as one batch, up to its
//! bounds, commits it, and syncs the write-ahead log when the fsync policy or a flush asks;
//! a failed WAL sync stops the store taking appends.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::messages::{Append, CommitMsg, approx_len};
use super::syncer::{SyncCost, Syncer};
use crate::config::FsyncPolicy;
use crate::hub::Hub;
use crate::store::error::StoreError;
use crate::store::session::Session;
use crate::store::types::{StoreSettings, StoreStats};
use crate::store::wal::Wal;
use crate::vfs::Vfs;

/// Most events committed in one batch.
const MAX_BATCH_EVENTS: usize = 4096;
/// A batch stops growing past this many bytes.
const MAX_BATCH_BYTES: usize = 8 << 20;
/// Batches of one append in a row before a lone append may be committed by its caller.
const LONE_BATCHES_BEFORE_DIRECT: u32 = 4;
/// Room a direct commit leaves in the WAL: the checkpoint a full WAL needs (syncing every log
/// written since the last one) stays the commit thread's.
const DIRECT_WAL_MARGIN: usize = 64 << 10;

pub(crate) struct Committer {
    pub vfs: Arc<dyn Vfs>,
    pub wal: Wal,
    pub settings: StoreSettings,
    pub stats: Arc<StoreStats>,
    pub sessions_dir: PathBuf,
    pub hub: Arc<Hub>,
    /// Logs written since the last checkpoint (they need a sync before the WAL starts over).
    pub(super) dirty: HashMap<String, Arc<Session>>,
    /// Written to the WAL but not synced (interval / never policies).
    pub(super) unsynced: bool,
    pub(super) last_sync: Instant,
    /// Set when the WAL can no longer be trusted: every append is refused from then on.
    pub(super) failed: Option<String>,
    /// Sessions whose lease record is written but not synced.
    pub(super) leases_unsynced: Vec<Arc<Session>>,
    /// Sessions holding a lease record in this WAL epoch: a checkpoint ends their leases.
    /// (Not the same as `dirty`: a batch that triggers a checkpoint writes its leases into the
    /// new epoch after `dirty` was cleared.)
    pub(super) leased: HashMap<String, Arc<Session>>,
    /// Sessions with acknowledged events the next WAL sync makes durable, and the last LSN.
    pub(super) awaiting_sync: Vec<(Arc<Session>, u64)>,
    /// The thread that syncs the WAL while the next batch is written (`fsync = "always"` on
    /// a disk that takes calls from several threads); `None`: syncs are made here.
    pub(super) syncer: Option<Syncer>,
    /// How long the WAL's syncs take, a moving average in ns, wherever they are made.
    pub(super) sync_cost: Arc<SyncCost>,
    /// Whether batches now go to the sync thread (the syncs are slow) or are synced here.
    pub(super) pipelining: bool,
    /// Batches were handed to the sync thread since it was last drained.
    pub(super) handed_over: bool,
    /// Appends queued to this thread or being committed, shared with the store: a caller
    /// commits directly only while it is zero.
    pub(super) pending: Arc<AtomicUsize>,
    /// Batches of one append committed in a row: while writers are concurrent (batches of
    /// several come along) their appends do better sharing a sync than waiting behind a lone
    /// one's.
    pub(super) lone_batches: u32,
}

impl Committer {
    pub(crate) fn new(
        vfs: Arc<dyn Vfs>,
        wal: Wal,
        settings: StoreSettings,
        stats: Arc<StoreStats>,
        sessions_dir: PathBuf,
        hub: Arc<Hub>,
        pending: Arc<AtomicUsize>,
    ) -> Self {
        let sync_cost = Arc::new(SyncCost::default());
        let syncer = (settings.fsync == FsyncPolicy::Always && vfs.concurrent())
            .then(|| Syncer::start(wal.file(), hub.clone(), stats.clone(), sync_cost.clone()))
            .flatten();
        Committer {
            syncer,
            sync_cost,
            pipelining: false,
            handed_over: false,
            pending,
            lone_batches: 0,
            vfs,
            wal,
            settings,
            stats,
            sessions_dir,
            hub,
            dirty: HashMap::new(),
            unsynced: false,
            last_sync: Instant::now(),
            failed: None,
            leases_unsynced: Vec::new(),
            leased: HashMap::new(),
            awaiting_sync: Vec::new(),
        }
    }

    /// The body of the commit thread: serves `rx` until told to stop. The committer is
    /// shared with callers that commit an append themselves while the thread is idle
    /// ([`Committer::commit_direct`]); the thread holds it for a turn at a time.
    pub(crate) fn run(shared: Arc<Mutex<Committer>>, rx: Receiver<CommitMsg>) {
        let lock = || shared.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let wait = lock().next_wait();
            let first = match rx.recv_timeout(wait) {
                Ok(msg) => msg,
                Err(RecvTimeoutError::Timeout) => {
                    lock().sync_wal();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    lock().checkpoint();
                    return;
                }
            };
            if let Some(done) = lock().turn(first, &rx) {
                // Anything still queued is answered "shutting down" by dropping its Ack.
                drop(rx);
                drop(done);
                return;
            }
        }
    }

    /// How long the thread may wait for the next message: until the interval sync is due.
    fn next_wait(&self) -> Duration {
        self.interval_sync_due_in()
            .unwrap_or(Duration::from_secs(3600))
    }

    /// Under `fsync = "interval"` with appends not yet synced: how long until their sync is
    /// due (zero: now).
    fn interval_sync_due_in(&self) -> Option<Duration> {
        (self.unsynced && self.settings.fsync == FsyncPolicy::Interval).then(|| {
            let period = Duration::from_millis(self.settings.fsync_interval_ms);
            period.saturating_sub(self.last_sync.elapsed())
        })
    }

    /// One turn of the thread: `first` and whatever is queued behind it, as one batch, then
    /// the flushes, deletes and shutdown among them. Once told to stop: the one waiting.
    fn turn(
        &mut self,
        first: CommitMsg,
        rx: &Receiver<CommitMsg>,
    ) -> Option<tokio::sync::oneshot::Sender<()>> {
        let mut batch: Vec<Append> = Vec::new();
        let mut shutdown = None;
        let mut flushes = Vec::new();
        let mut deletes = Vec::new();
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                CommitMsg::Append(a) => {
                    bytes += approx_len(&a.event);
                    batch.push(a);
                }
                CommitMsg::Appends(all) => {
                    bytes += all.iter().map(|a| approx_len(&a.event)).sum::<usize>();
                    batch.extend(all);
                }
                CommitMsg::Flush { done } => flushes.push(done),
                CommitMsg::Shutdown { done } => shutdown = Some(done),
                CommitMsg::Delete {
                    session,
                    last_lsn,
                    reason,
                    done,
                } => deletes.push((session, last_lsn, reason, done)),
            }
            if shutdown.is_none()
                && flushes.is_empty()
                && deletes.is_empty()
                && batch.len() < MAX_BATCH_EVENTS
                && bytes < MAX_BATCH_BYTES
            {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            let appends = batch.len();
            self.commit(batch);
            self.pending.fetch_sub(appends, Release);
        }
        if !flushes.is_empty() || !deletes.is_empty() {
            // Answered after every append before them is synced (and a delete sees the
            // session's last LSN committed).
            self.drain_syncs();
        }
        if !flushes.is_empty() || self.interval_sync_due_in() == Some(Duration::ZERO) {
            self.sync_wal();
        }
        for done in flushes {
            let result = match &self.failed {
                None => Ok(()),
                Some(reason) => Err(StoreError::Failed {
                    reason: reason.clone(),
                }),
            };
            let _ = done.send(result);
        }
        for (session, last_lsn, reason, done) in deletes {
            let _ = done.send(self.delete(&session, last_lsn, reason));
        }
        if shutdown.is_some() {
            self.checkpoint();
        }
        shutdown
    }

    /// Commits one append on the caller's thread, as the commit thread would, when that saves
    /// the hand-over: the caller made sure nothing is queued or being committed, the last
    /// batches were lone appends too (under concurrent writers, one committed here would hold
    /// the others' batch back for its own sync), appends are synced one by one on a real disk
    /// (`fsync = "always"`; a simulated disk keeps its one committing thread) and the WAL has
    /// room without a checkpoint. Gives the append back otherwise (`None`: committed). While
    /// syncs are pipelined the caller only writes, and the sync thread answers.
    pub(crate) fn commit_direct(&mut self, append: Append) -> Option<Append> {
        let direct = self.settings.fsync == FsyncPolicy::Always
            && self.lone_batches >= LONE_BATCHES_BEFORE_DIRECT
            && self.syncer.is_some()
            && self.failed.is_none()
            && self.wal.room() > 2 * approx_len(&append.event) + DIRECT_WAL_MARGIN;
        if !direct {
            return Some(append);
        }
        self.commit(vec![append]);
        self.stats.direct_appends.fetch_add(1, Relaxed);
        None
    }

    /// Waits for the sync thread to answer every batch handed to it, then takes in what a
    /// failed sync left to do.
    pub(super) fn drain_syncs(&mut self) {
        if let Some(syncer) = &self.syncer
            && self.handed_over
        {
            syncer.drain();
            self.handed_over = false;
        }
        self.take_sync_failure();
    }

    /// Whether the next batch goes to the sync thread: while syncs take longer than
    /// `pipeline_syncs_over` (and until they take under half of it, so that the choice does
    /// not flap). Batches synced here after some were handed over wait for those first, so
    /// each session's events are still published in order.
    pub(super) fn choose_pipelining(&mut self) -> bool {
        if self.syncer.is_none() {
            return false;
        }
        let cost = self.sync_cost.get();
        let over = self.settings.pipeline_syncs_over;
        self.pipelining = if self.pipelining {
            cost * 2 >= over
        } else {
            cost > over || over.is_zero()
        };
        if !self.pipelining {
            self.drain_syncs();
        }
        self.pipelining
    }

    /// After a failed pipelined sync: the store fails, and the logs of the batches it refused
    /// are cut back.
    pub(super) fn take_sync_failure(&mut self) {
        let Some(syncer) = &self.syncer else {
            return;
        };
        let Some(reason) = syncer.failure().cloned() else {
            return;
        };
        for (session, old_len) in syncer.take_cut_backs() {
            self.cut_back_to(&session, old_len);
        }
        self.fail(reason);
    }

    pub(super) fn sync_wal(&mut self) {
        if !self.unsynced {
            return;
        }
        match self.wal.sync() {
            Ok(()) => {
                self.stats.fsyncs.fetch_add(1, Relaxed);
                self.synced();
            }
            Err(e) => self.fail(format!("syncing the write-ahead log failed: {e}")),
        }
    }

    /// Everything written to the WAL so far is durable: so are the leases and events in it.
    pub(super) fn synced(&mut self) {
        self.unsynced = false;
        self.last_sync = Instant::now();
        for session in self.leases_unsynced.drain(..) {
            let mut state = session.writer.lock().unwrap();
            state.lease_synced = state.lease;
        }
        for (session, lsn) in self.awaiting_sync.drain(..) {
            session.set_durable(lsn);
        }
    }

    pub(super) fn fail(&mut self, reason: String) {
        // After a failed fsync the kernel may have dropped the dirty pages: what was
        // acknowledged can no longer be vouched for, so stop taking appends.
        tracing::error!(%reason, "the store takes no more appends until the daemon restarts");
        self.failed.get_or_insert(reason);
    }
}
