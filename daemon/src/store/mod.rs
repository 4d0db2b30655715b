//! The durable store: one append-only JSONL log per session, each line sealed with a CRC32C,
//! LSNs contiguous from 1 (except where a repair left a recorded gap), a sparse index for
//! seeking, one commit thread and a shared write-ahead log for every session, recovery at start.
//!
//! Layout of the data directory:
//! ```text
//! <data_dir>/LOCK                      held by the one daemon using this directory
//! <data_dir>/wal                       the shared write-ahead log (preallocated)
//! <data_dir>/sessions/<id>.jsonl      the log
//! <data_dir>/sessions/<id>.idx        its sparse index (a cache)
//! <data_dir>/sessions/<id>.gaps       LSN jumps a repair left (rare)
//! <data_dir>/sessions/<id>.<ms>.bad   damaged bytes a repair moved out of the log
//! <data_dir>/sessions/<id>.fork       a fork's parent and fork LSN (see `fork`)
//! <data_dir>/sessions/<id>.gone       what is left of a deleted session (see `tombstone`)
//! <data_dir>/quarantine/              cut-off torn tails, never deleted by dstream
//! ```
//!
//! One job per file: `commit` (the commit thread), `wal`, `files` (open-log cache), `session`
//! (per-session state), `open` + `recovery` (start-up; `recovery_parallel`: a big clean log
//! checked on two threads; `line_read`), `repair`, `reader` (reads and queries),
//! `record` (line format), `index`, `gaps`, `fork`, `tombstone`, `fsutil`, `error`.

mod archive;
mod commit;
mod compress;
mod error;
mod files;
mod fork;
mod fsutil;
mod gaps;
pub mod index;
mod lifecycle;
mod line_read;
mod open;
#[cfg(test)]
pub(crate) mod power_loss;
#[cfg(test)]
mod power_loss_lifecycle;
mod reader;
pub mod record;
mod recovery;
mod recovery_parallel;
mod repair;
mod session;
mod tombstone;
mod types;
mod wal;
mod writer_state;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, mpsc};

pub use commit::Ack;
pub use error::StoreError;
pub use fork::{ForkReport, default_fork_id};
pub use fsutil::write_new_unique;
pub use reader::{QueryFilter, ReadPage, read_range};
pub use repair::RepairReport;
pub use session::{EventJson, Quarantine, Session, SessionMeta, SessionState};
pub use tombstone::Tombstone;
pub use types::{
    AppendAck, BeforeAppend, Compressed, ForkOrigin, MAX_LABEL_LEN, NewEventRaw,
    PIPELINE_SYNCS_OVER, RecoveryNote, StoreSettings, StoreStats, validate_event,
};

use crate::vfs::{Vfs, VfsLock};
use commit::{Append, CommitMsg, Committer};
use files::FileCache;
use open::open_blocking;

struct Inner {
    sessions_dir: PathBuf,
    settings: StoreSettings,
    sessions: RwLock<HashMap<String, Arc<Session>>>,
    stats: Arc<StoreStats>,
    files: Arc<FileCache>,
    /// The commit thread's queue; `None` once the store is shutting down.
    commit: RwLock<Option<mpsc::Sender<CommitMsg>>>,
    /// The commit thread's state, which a lone append commits through itself
    /// ([`Store::append_direct`]).
    committer: Arc<std::sync::Mutex<Committer>>,
    /// Appends queued to the commit thread or being committed.
    pending: Arc<AtomicUsize>,
    /// One repair at a time.
    repairing: tokio::sync::Mutex<()>,
    vfs: Arc<dyn Vfs>,
    /// Held until `shutdown` has synced everything, then released: the next daemon may
    /// start at once, whoever still holds a handle to this store.
    lock: std::sync::Mutex<Option<VfsLock>>,
    before_append: RwLock<Option<BeforeAppend>>,
    /// Deleted sessions' tombstones (locked after `sessions` when both are).
    gone: RwLock<HashMap<String, Tombstone>>,
}

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl Store {
    /// Opens (creating if needed) the data directory, takes its lock, recovers every log,
    /// replays the write-ahead log and starts the commit thread. Damage found is repaired or
    /// quarantined and reported.
    pub async fn open(
        data_dir: &Path,
        settings: StoreSettings,
        hub: Arc<crate::hub::Hub>,
    ) -> Result<(Store, Vec<RecoveryNote>), StoreError> {
        Store::open_on(crate::vfs::os(), data_dir, settings, hub).await
    }

    /// [`Store::open`] on the given file system (a simulated one in power-loss tests).
    pub async fn open_on(
        vfs: Arc<dyn Vfs>,
        data_dir: &Path,
        settings: StoreSettings,
        hub: Arc<crate::hub::Hub>,
    ) -> Result<(Store, Vec<RecoveryNote>), StoreError> {
        let dir = data_dir.to_path_buf();
        let s = settings.clone();
        let v = vfs.clone();
        let (lock, wal, recovered, gone) =
            tokio::task::spawn_blocking(move || open_blocking(&*v, &dir, &s))
                .await
                .map_err(|e| StoreError::io("recovery", &io::Error::other(e.to_string())))??;
        let stats = Arc::new(StoreStats::default());
        let sessions_dir = data_dir.join("sessions");
        let (tx, rx) = mpsc::channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let committer = Arc::new(std::sync::Mutex::new(Committer::new(
            vfs.clone(),
            wal,
            settings.clone(),
            stats.clone(),
            sessions_dir.clone(),
            hub,
            pending.clone(),
        )));
        let shared = committer.clone();
        std::thread::Builder::new()
            .name("dstream-commit".into())
            .spawn(move || Committer::run(shared, rx))
            .map_err(|e| StoreError::io("starting the commit thread", &e))?;
        let inner = Arc::new(Inner {
            sessions_dir,
            files: Arc::new(FileCache::new(
                open_files_cap(settings.max_open_files),
                vfs.clone(),
            )),
            settings,
            sessions: RwLock::new(HashMap::new()),
            stats,
            commit: RwLock::new(Some(tx)),
            committer,
            pending,
            repairing: tokio::sync::Mutex::new(()),
            vfs,
            lock: std::sync::Mutex::new(Some(lock)),
            before_append: RwLock::new(None),
            gone: RwLock::new(gone),
        });
        let store = Store { inner };
        let mut notes = Vec::new();
        {
            let mut sessions = store.inner.sessions.write().unwrap();
            for r in recovered {
                if let Some(note) = r.note {
                    notes.push(note);
                }
                if let Some((first_lsn, last_lsn)) = r.lease_gap {
                    notes.push(RecoveryNote::UnsyncedLoss {
                        session: r.id.clone(),
                        first_lsn,
                        last_lsn,
                    });
                }
                let session = store.new_session(r.id.clone(), r.path, r.state, r.quarantine);
                sessions.insert(r.id, session);
            }
        }
        for note in &notes {
            let (session, payload) = match note {
                RecoveryNote::TornTail {
                    session,
                    reason,
                    cut_bytes,
                    saved_to,
                    last_lsn,
                } => (
                    session,
                    serde_json::json!({
                        "reason": "torn_tail", "detail": reason, "truncated_bytes": cut_bytes,
                        "saved_to": saved_to, "last_good_lsn": last_lsn,
                    }),
                ),
                RecoveryNote::UnsyncedLoss {
                    session,
                    first_lsn,
                    last_lsn,
                } => (
                    session,
                    serde_json::json!({
                        "reason": "unsynced_loss",
                        "detail": "the power failed before these lsns were synced (fsync is not \"always\"); some of them may have been acknowledged and are lost, and none will be used again",
                        "lost_lsns": [[first_lsn, last_lsn]],
                    }),
                ),
                RecoveryNote::Quarantined { .. } => continue,
            };
            if store.get(session).is_some_and(|s| s.quarantine().is_some()) {
                // It takes no appends; the gap is in its gaps file, and `repair` reports it.
                continue;
            }
            store
                .append_wait(session, recovered_event(payload), true)
                .await?;
        }
        Ok((store, notes))
    }

    /// The file layer the store runs on, for the other durable state beside the logs.
    pub fn vfs(&self) -> Arc<dyn Vfs> {
        self.inner.vfs.clone()
    }

    pub fn stats(&self) -> &StoreStats {
        &self.inner.stats
    }

    /// How many session logs are open now (at most `max_open_files`, plus any a reader is
    /// still using after eviction).
    pub fn open_files(&self) -> usize {
        self.inner.files.open_count()
    }

    /// The session, created (without a file) if it does not exist yet.
    pub fn session(&self, id: &str) -> Arc<Session> {
        if let Some(s) = self.get(id) {
            return s;
        }
        let mut sessions = self.inner.sessions.write().unwrap();
        if let Some(s) = sessions.get(id) {
            return s.clone();
        }
        let path = self.inner.sessions_dir.join(format!("{id}.jsonl"));
        let session = self.new_session(id.to_string(), path, SessionState::default(), None);
        if let Some(t) = self.inner.gone.read().unwrap().get(id) {
            // A handle on a deleted id (a subscription, a late append): it takes nothing.
            let _ = session.gone.set(t.clone());
        }
        sessions.insert(id.to_string(), session.clone());
        session
    }

    /// Sets the function every appended event goes through from now on.
    pub fn set_before_append(&self, f: BeforeAppend) {
        *self.inner.before_append.write().unwrap() = Some(f);
    }

    /// `event` through [`Store::set_before_append`]'s function, if any.
    fn before_append(&self, event: NewEventRaw) -> (NewEventRaw, Option<NewEventRaw>) {
        let f = self.inner.before_append.read().unwrap().clone();
        match f {
            Some(f) => f(event),
            None => (event, None),
        }
    }

    /// Queues an event for `session` behind every one queued before it. `ack` answers exactly
    /// once: when the event is durable (per the fsync policy, or synced when `must_sync`), or
    /// with the reason it was not stored.
    pub fn append(&self, session: &str, event: NewEventRaw, must_sync: bool, ack: Ack) {
        self.append_with_id(session, None, event, must_sync, ack)
    }

    /// [`Store::append`], with the event's id chosen by the caller (a ULID).
    pub fn append_with_id(
        &self,
        session: &str,
        id: Option<String>,
        event: NewEventRaw,
        must_sync: bool,
        ack: Ack,
    ) {
        self.append_as(session, id, event, must_sync, ack, false)
    }

    /// [`Store::append`] for a caller with nothing else to send meanwhile (a client waiting
    /// for this reply): when nothing is queued or being committed, the append is committed
    /// on the caller's thread, which saves the two hand-overs to the commit thread and back
    /// (at one append at a time, most of what is not the disk's sync). A caller with more to
    /// send uses [`Store::append`], so that its appends share syncs.
    pub fn append_direct(&self, session: &str, event: NewEventRaw, must_sync: bool, ack: Ack) {
        self.append_as(session, None, event, must_sync, ack, true)
    }

    fn append_as(
        &self,
        session: &str,
        id: Option<String>,
        event: NewEventRaw,
        must_sync: bool,
        ack: Ack,
        direct: bool,
    ) {
        let (event, extra) = self.before_append(event);
        let session = self.session(session);
        let commit = self.inner.commit.read().unwrap();
        let Some(tx) = commit.as_ref() else {
            return ack.send(Err(StoreError::ShuttingDown));
        };
        let mut append = Append {
            session: session.clone(),
            event,
            id,
            must_sync,
            ack,
        };
        if direct && extra.is_none() {
            match self.commit_direct(append) {
                None => return,
                Some(given_back) => append = given_back,
            }
        }
        let pending = &self.inner.pending;
        pending.fetch_add(1 + usize::from(extra.is_some()), Ordering::AcqRel);
        // If the commit thread is gone the message (and its Ack) is dropped: "shutting down".
        let _ = tx.send(CommitMsg::Append(append));
        if let Some(event) = extra {
            let _ = tx.send(CommitMsg::Append(Append {
                session,
                event,
                id: None,
                must_sync,
                ack: Ack::new(|_| ()),
            }));
        }
    }

    /// Commits `append` here if nothing is queued or being committed and the committer is
    /// free and willing ([`Committer::commit_direct`]); gives it back otherwise.
    fn commit_direct(&self, append: Append) -> Option<Append> {
        let pending = &self.inner.pending;
        if pending
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Some(append);
        }
        let result = match self.inner.committer.try_lock() {
            Ok(mut committer) => committer.commit_direct(append),
            Err(_) => Some(append),
        };
        pending.fetch_sub(1, Ordering::AcqRel);
        result
    }

    /// Appends several events (to any sessions) in one batch, in order: they become durable
    /// together, with one write-ahead log write.
    pub fn append_all(&self, appends: Vec<(String, NewEventRaw, bool, Ack)>) {
        let mut all = Vec::with_capacity(appends.len());
        for (session, event, must_sync, ack) in appends {
            let (event, extra) = self.before_append(event);
            let session = self.session(&session);
            all.push(Append {
                session: session.clone(),
                event,
                id: None,
                must_sync,
                ack,
            });
            if let Some(event) = extra {
                all.push(Append {
                    session,
                    event,
                    id: None,
                    must_sync,
                    ack: Ack::new(|_| ()),
                });
            }
        }
        let appends = all;
        let commit = self.inner.commit.read().unwrap();
        match commit.as_ref() {
            Some(tx) => {
                self.inner
                    .pending
                    .fetch_add(appends.len(), Ordering::AcqRel);
                drop(tx.send(CommitMsg::Appends(appends)))
            }
            None => {
                for a in appends {
                    a.ack.send(Err(StoreError::ShuttingDown));
                }
            }
        }
    }

    /// Makes every append acknowledged so far durable, whatever the fsync policy.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let (done, rx) = tokio::sync::oneshot::channel();
        {
            let commit = self.inner.commit.read().unwrap();
            let tx = commit.as_ref().ok_or(StoreError::ShuttingDown)?;
            tx.send(CommitMsg::Flush { done })
                .map_err(|_| StoreError::ShuttingDown)?;
        }
        rx.await.unwrap_or(Err(StoreError::ShuttingDown))
    }

    /// Appends one event and waits until it is durable.
    pub async fn append_wait(
        &self,
        session: &str,
        event: NewEventRaw,
        must_sync: bool,
    ) -> Result<AppendAck, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.append(
            session,
            event,
            must_sync,
            Ack::new(move |r| drop(tx.send(r))),
        );
        rx.await.unwrap_or(Err(StoreError::ShuttingDown))
    }

    /// Why `id` has no events to read: deleted, quarantined, or simply unknown.
    pub fn missing(&self, id: &str) -> StoreError {
        if let Some(t) = self.gone(id) {
            return t.error();
        }
        match self.get(id) {
            Some(s) if s.quarantine_reason().is_some() => StoreError::Quarantined {
                session: id.to_string(),
                reason: s.quarantine_reason().unwrap_or_default().to_string(),
            },
            _ => StoreError::NotFound(id.to_string()),
        }
    }

    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.inner.sessions.read().unwrap().get(id).cloned()
    }

    fn new_session(
        &self,
        id: String,
        path: PathBuf,
        state: SessionState,
        quarantine: Option<Quarantine>,
    ) -> Arc<Session> {
        Arc::new(Session::new(
            id,
            path,
            state,
            quarantine,
            self.inner.files.clone(),
        ))
    }

    /// Every session with at least one event, most recently active first.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        let mut list: Vec<_> = self
            .inner
            .sessions
            .read()
            .unwrap()
            .values()
            .filter(|s| s.committed_lsn() > 0 || s.quarantine().is_some())
            .cloned()
            .collect();
        list.sort_by_cached_key(|s| (std::cmp::Reverse(s.meta().last_ts), s.id.clone()));
        list
    }

    /// Every committed event stored at or after `since_ms`, to `visit` (blocking: call it
    /// off the async workers). See [`reader::scan_since`].
    pub fn scan_since(
        &self,
        since_ms: u64,
        visit: &mut dyn FnMut(&[u8]),
    ) -> Result<(), StoreError> {
        reader::scan_since(&self.sessions(), since_ms, visit)
    }

    /// How many sessions have events, and how many are quarantined, in one pass.
    pub fn counts(&self) -> (u64, u64) {
        let sessions = self.inner.sessions.read().unwrap();
        sessions.values().fold((0, 0), |(active, quarantined), s| {
            (
                active + (s.committed_lsn() > 0) as u64,
                quarantined + s.quarantine_reason().is_some() as u64,
            )
        })
    }

    /// Reads committed events of `session` from `from_lsn`, at most `limit`.
    pub async fn read(
        &self,
        session: &str,
        from_lsn: u64,
        limit: usize,
    ) -> Result<ReadPage, StoreError> {
        let Some(session) = self
            .get(session)
            .filter(|s| s.committed_lsn() > 0 || s.quarantine().is_some())
        else {
            return Err(self.missing(session));
        };
        if reader::reads_hot_tail(&session, from_lsn) {
            // A reader following a session live: the hand-over to the blocking pool and back
            // would take longer than the read.
            return reader::read_page(&session, from_lsn, limit);
        }
        tokio::task::spawn_blocking(move || reader::read_page(&session, from_lsn, limit))
            .await
            .map_err(|e| StoreError::io("read task", &io::Error::other(e.to_string())))?
    }

    /// Events matching `filter`, by session id then LSN, at most `limit`; the flag says
    /// whether more matched.
    pub async fn query(
        &self,
        filter: QueryFilter,
        limit: usize,
    ) -> Result<(Vec<EventJson>, bool), StoreError> {
        let mut sessions: Vec<Arc<Session>> = match &filter.session_id {
            Some(id) => self.get(id).into_iter().collect(),
            None => self.sessions(),
        };
        sessions.sort_by(|a, b| a.id.cmp(&b.id));
        tokio::task::spawn_blocking(move || reader::query(&sessions, &filter, limit))
            .await
            .map_err(|e| StoreError::io("query task", &io::Error::other(e.to_string())))?
    }

    /// Repairs a quarantined session without a restart: the damaged bytes move to a file next
    /// to the log, every valid record stays with its LSN, and the session takes appends again
    /// from above every LSN it ever handed out (a `log.recovered` event comes first).
    pub async fn repair(&self, id: &str) -> Result<RepairReport, StoreError> {
        let _one_at_a_time = self.inner.repairing.lock().await;
        let session = self
            .get(id)
            .ok_or_else(|| StoreError::NotFound(id.into()))?;
        let Some(quarantine) = session.quarantine().cloned() else {
            return Err(StoreError::NotQuarantined(id.into()));
        };
        let (dir, settings, id_owned, vfs) = (
            self.inner.sessions_dir.clone(),
            self.inner.settings.clone(),
            id.to_string(),
            self.inner.vfs.clone(),
        );
        let q = quarantine.clone();
        let (mut report, recovered) = tokio::task::spawn_blocking(move || {
            repair::repair_log(&*vfs, &dir, &id_owned, &q, &settings)
        })
        .await
        .map_err(|e| StoreError::io("repair task", &io::Error::other(e.to_string())))??;
        // The old handle points at the replaced file.
        self.inner.files.forget(id);
        let fresh = self.new_session(id.into(), recovered.path, recovered.state, None);
        self.inner
            .sessions
            .write()
            .unwrap()
            .insert(id.into(), fresh);
        let payload = serde_json::json!({
            "reason": "repair", "detail": quarantine.reason, "offset": quarantine.offset,
            "moved_to": report.moved_to, "moved_bytes": report.moved_bytes,
            "kept_records": report.kept_records, "lost_lsns": report.lost_lsns,
        });
        let ack = self.append_wait(id, recovered_event(payload), true).await?;
        report.resumed_at = ack.lsn;
        Ok(report)
    }

    /// Writes and syncs every append queued before this call; later ones are refused. Then
    /// releases the data directory for the next daemon.
    pub async fn shutdown(&self) {
        let Some(tx) = self.inner.commit.write().unwrap().take() else {
            return;
        };
        let (done, rx) = tokio::sync::oneshot::channel();
        if tx.send(CommitMsg::Shutdown { done }).is_ok() {
            let _ = rx.await;
        }
        self.inner.lock.lock().unwrap().take();
    }
}

/// The open-log cap in force: the configured one, but never more than half the process's
/// descriptor limit, which sockets, readers and the write-ahead log share.
fn open_files_cap(configured: usize) -> usize {
    let cap = match fsutil::open_file_limit() {
        Some(limit) => configured.min((limit / 2).max(8) as usize),
        None => configured,
    };
    if cap < configured {
        tracing::info!(
            configured,
            cap,
            "keeping fewer logs open than store.max_open_files: the descriptor limit is low"
        );
    }
    cap
}

/// A `log.recovered` event from the daemon itself.
fn recovered_event(payload: serde_json::Value) -> NewEventRaw {
    NewEventRaw {
        event_type: "log.recovered".into(),
        actor: Some("dstream".into()),
        payload: Some(
            serde_json::value::RawValue::from_string(payload.to_string()).expect("valid json"),
        ),
        stream_id: None,
        causation_id: None,
        correlation_id: None,
        metadata: None,
        raw: None,
        ignored_lsn: None,
        ignored_id: None,
        ignored_timestamp: None,
        ignored_session_id: None,
    }
}
