//! The pipelined sync, under `fsync = "always"` on a real disk whose syncs are slow: the
//! write-ahead log's `fdatasync` runs on its own thread, so the commit thread writes the next
//! batch (logs and WAL, into the page cache) while the current one is syncing, instead of
//! waiting for the disk between batches. Where syncs are quick the hand-over costs more than
//! it saves, and the commit thread syncs itself ([`SyncCost`] tells which).
//!
//! The promise is unchanged: an append is acknowledged, published and counted as committed
//! only after a sync that started after its WAL record was written. Batches are handed over
//! in the order they were written and answered in that order; every batch waiting when a sync
//! starts is covered by it (a sync flushes the whole file), so a slow sync makes the next one
//! carry more appends rather than queueing syncs.
//!
//! A failed sync fails the store, as it does when the commit thread syncs: that batch and
//! every one written after it are refused, and the commit thread is handed their logs' old
//! lengths to cut them back to (it alone writes the logs, so no write races the cut).

use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::durable::publish;
use super::messages::fail_all;
use super::written::Written;
use crate::hub::Hub;
use crate::store::error::StoreError;
use crate::store::session::Session;
use crate::store::types::StoreStats;
use crate::vfs::VfsFileRef;

/// Batches written and waiting for a sync, at most; the commit thread waits past this, which
/// bounds what is held in memory (each batch is bounded already).
const QUEUED_BATCHES: usize = 4;

enum Job {
    /// Sync, then acknowledge these (one batch's groups).
    Batch(Vec<Written>),
    /// Answered once every batch sent before it is answered.
    Barrier(mpsc::Sender<()>),
}

/// A log to cut back after a failed sync: the session and the length before the batch.
pub(super) type CutBack = (Arc<Session>, u64);

/// How long the WAL's syncs take: a moving average (7/8 old, 1/8 new) in nanoseconds,
/// updated by whichever thread syncs.
#[derive(Debug, Default)]
pub(super) struct SyncCost(AtomicU64);

impl SyncCost {
    /// Runs `sync` (a sync of the WAL) and adds its time to the average.
    pub(super) fn time(&self, sync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let started = Instant::now();
        let synced = sync();
        self.record(started.elapsed());
        synced
    }

    fn record(&self, took: Duration) {
        let new = took.as_nanos().min(u64::MAX as u128) as u64;
        let old = self.0.load(Relaxed);
        let avg = if old == 0 {
            new
        } else {
            old - old / 8 + new / 8
        };
        self.0.store(avg.max(1), Relaxed);
    }

    pub(super) fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(Relaxed))
    }
}

pub(super) struct Syncer {
    jobs: Option<SyncSender<Job>>,
    cut_backs: Receiver<CutBack>,
    failure: Arc<OnceLock<String>>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    /// Starts the sync thread for the write-ahead log `wal`. `None` if no thread can be had
    /// (the commit thread then syncs inline, as under a simulated disk).
    pub(super) fn start(
        wal: VfsFileRef,
        hub: Arc<Hub>,
        stats: Arc<StoreStats>,
        cost: Arc<SyncCost>,
    ) -> Option<Self> {
        let (jobs, jobs_rx) = mpsc::sync_channel(QUEUED_BATCHES);
        let (cut_tx, cut_backs) = mpsc::channel();
        let failure = Arc::new(OnceLock::new());
        let worker = SyncThread {
            wal,
            hub,
            stats,
            cost,
            failure: failure.clone(),
            cut_backs: cut_tx,
        };
        let thread = std::thread::Builder::new()
            .name("dstream-wal-sync".into())
            .spawn(move || worker.run(jobs_rx))
            .map_err(|e| tracing::warn!(error = %e, "no WAL sync thread: syncing inline"))
            .ok()?;
        Some(Syncer {
            jobs: Some(jobs),
            cut_backs,
            failure,
            thread: Some(thread),
        })
    }

    /// Hands a written batch over to be synced and acknowledged.
    pub(super) fn submit(&self, written: Vec<Written>) {
        let jobs = self
            .jobs
            .as_ref()
            .expect("the sync thread runs until dropped");
        if let Err(mpsc::SendError(Job::Batch(written))) = jobs.send(Job::Batch(written)) {
            // The thread is gone (it cannot panic on a batch, but never leave an append
            // unanswered): refuse rather than acknowledge unsynced.
            for w in written {
                fail_all(w.acks, StoreError::ShuttingDown);
            }
        }
    }

    /// Waits until every batch handed over so far is synced and answered (or refused).
    pub(super) fn drain(&self) {
        let (done, wait) = mpsc::channel();
        let jobs = self
            .jobs
            .as_ref()
            .expect("the sync thread runs until dropped");
        if jobs.send(Job::Barrier(done)).is_ok() {
            let _ = wait.recv();
        }
    }

    /// Why the last sync failed, once one has.
    pub(super) fn failure(&self) -> Option<&String> {
        self.failure.get()
    }

    /// Logs to cut back after a failed sync, as they are reported.
    pub(super) fn take_cut_backs(&self) -> Vec<CutBack> {
        self.cut_backs.try_iter().collect()
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has answered what it holds.
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct SyncThread {
    wal: VfsFileRef,
    hub: Arc<Hub>,
    stats: Arc<StoreStats>,
    cost: Arc<SyncCost>,
    failure: Arc<OnceLock<String>>,
    cut_backs: mpsc::Sender<CutBack>,
}

impl SyncThread {
    fn run(self, jobs: Receiver<Job>) {
        while let Ok(first) = jobs.recv() {
            // Every batch written by now is covered by one sync.
            let mut batches = Vec::new();
            let mut barriers = Vec::new();
            for job in std::iter::once(first).chain(jobs.try_iter()) {
                match job {
                    Job::Batch(written) => batches.push(written),
                    Job::Barrier(done) => barriers.push(done),
                }
            }
            if !batches.is_empty() {
                self.sync_and_answer(batches);
            }
            for done in barriers {
                let _ = done.send(());
            }
        }
    }

    fn sync_and_answer(&self, batches: Vec<Vec<Written>>) {
        let synced = match self.failure.get() {
            Some(reason) => Err(reason.clone()),
            None => self.cost.time(|| self.wal.sync()).map_err(|e| {
                let reason = format!("syncing the write-ahead log failed: {e}");
                tracing::error!(%reason, "the store takes no more appends until the daemon restarts");
                self.failure.get_or_init(|| reason).clone()
            }),
        };
        match synced {
            Ok(()) => {
                self.stats.fsyncs.fetch_add(1, Relaxed);
                for w in batches.into_iter().flatten() {
                    w.session.set_durable(w.last_lsn());
                    publish(w, &self.hub, &self.stats);
                }
            }
            Err(reason) => {
                for w in batches.into_iter().flatten() {
                    let _ = self.cut_backs.send((w.session.clone(), w.old_len));
                    fail_all(
                        w.acks,
                        StoreError::Failed {
                            reason: reason.clone(),
                        },
                    );
                }
            }
        }
    }
}
