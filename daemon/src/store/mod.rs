//! The durable store: one append-only JSONL log per session, each line sealed with a CRC32C,
//! LSNs contiguous from 1, a sparse index for seeking, recovery at start.
//!
//! Layout of the data directory:
//! ```text
//! <data_dir>/LOCK                      held by the one daemon using this directory
//! <data_dir>/sessions/<id>.jsonl      the log
//! <data_dir>/sessions/<id>.idx        its sparse index (a cache)
//! <data_dir>/quarantine/              damaged logs and cut-off tails, never deleted by dstream
//! ```

mod commit;
mod files;
mod fsutil;
mod gaps;
pub mod index;
mod reader;
pub mod record;
mod recovery;
mod repair;
mod session;
mod wal;

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock, mpsc};

use serde_json::value::RawValue;

pub use commit::Ack;
pub use reader::{QueryFilter, ReadPage, read_range};
pub use repair::RepairReport;
pub use session::{EventJson, Quarantine, Session, SessionMeta, SessionState};

use crate::config::FsyncPolicy;
use commit::{Append, CommitMsg, Committer};
use files::FileCache;
use fsutil::{create_private_dir, save_range, sync_dir};
use gaps::Gaps;
use index::SparseIndex;
use recovery::Damage;
use wal::Wal;

/// The store's share of the configuration.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub fsync: FsyncPolicy,
    pub fsync_interval_ms: u64,
    pub index_interval_bytes: u64,
    pub verify_on_start: bool,
    /// Most session logs held open at once.
    pub max_open_files: usize,
    /// Size of the shared write-ahead log; a checkpoint runs each time it fills.
    pub wal_bytes: u64,
}

#[derive(Debug, Default)]
pub struct StoreStats {
    pub appends: AtomicU64,
    pub bytes_written: AtomicU64,
    pub fsyncs: AtomicU64,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{context}: {message}")]
    Io {
        context: &'static str,
        message: String,
        kind: io::ErrorKind,
    },
    #[error(
        "session {session} is quarantined: {reason} (`dstream repair {session}` moves the damage aside and reopens it)"
    )]
    Quarantined { session: String, reason: String },
    #[error("the store takes no more appends until the daemon restarts: {reason}")]
    Failed { reason: String },
    #[error("session {0} not found")]
    NotFound(String),
    #[error("session {0} is not quarantined; there is nothing to repair")]
    NotQuarantined(String),
    #[error("corrupt record in session {session} near lsn {lsn}: {reason}")]
    Corrupt {
        session: String,
        lsn: u64,
        reason: String,
    },
    #[error("the daemon is shutting down")]
    ShuttingDown,
    #[error("data directory {} is in use by another dstream daemon{holder}", path.display())]
    Locked { path: PathBuf, holder: String },
}

impl StoreError {
    pub(crate) fn io(context: &'static str, e: &io::Error) -> StoreError {
        StoreError::Io {
            context,
            message: e.to_string(),
            kind: e.kind(),
        }
    }
}

/// An event as `append` receives it: the SDK's envelope with its JSON fields kept raw, so they
/// are stored exactly as sent.
pub type NewEventRaw = dstream_sdk::NewEvent<Box<RawValue>>;

/// Longest `type`, `actor`, `causation_id` or `correlation_id`, in bytes.
pub const MAX_LABEL_LEN: usize = 256;

/// Checks what serde cannot: sizes, the type's form, that labels are clean, metadata an object.
pub fn validate_event(event: &NewEventRaw) -> Result<(), String> {
    if event.event_type.is_empty() {
        return Err("event.type is empty".into());
    }
    for (name, value) in [
        ("event.type", Some(&event.event_type)),
        ("event.actor", event.actor.as_ref()),
        ("event.causation_id", event.causation_id.as_ref()),
        ("event.correlation_id", event.correlation_id.as_ref()),
    ] {
        if let Some(v) = value {
            if v.len() > MAX_LABEL_LEN {
                return Err(format!(
                    "{name} is {} bytes; the limit is {MAX_LABEL_LEN}",
                    v.len()
                ));
            }
            if v.chars().any(char::is_control) {
                return Err(format!("{name} contains a control character"));
            }
        }
    }
    if let Some(m) = &event.metadata
        && !m.get().starts_with('{')
    {
        return Err("event.metadata must be an object".into());
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendAck {
    pub lsn: u64,
    pub id: String,
}

/// What recovery did to one session at start.
#[derive(Debug, Clone)]
pub enum RecoveryNote {
    TornTail {
        session: String,
        reason: String,
        cut_bytes: u64,
        saved_to: PathBuf,
        last_lsn: u64,
    },
    Quarantined {
        session: String,
        reason: String,
        /// Where the good prefix ends.
        offset: u64,
    },
}

struct Inner {
    sessions_dir: PathBuf,
    settings: StoreSettings,
    sessions: RwLock<HashMap<String, Arc<Session>>>,
    stats: Arc<StoreStats>,
    files: Arc<FileCache>,
    /// The commit thread's queue; `None` once the store is shutting down.
    commit: RwLock<Option<mpsc::Sender<CommitMsg>>>,
    /// One repair at a time.
    repairing: tokio::sync::Mutex<()>,
    _lock: File,
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
        let dir = data_dir.to_path_buf();
        let s = settings.clone();
        let (lock, wal, recovered) = tokio::task::spawn_blocking(move || open_blocking(&dir, &s))
            .await
            .map_err(|e| StoreError::io("recovery", &io::Error::other(e.to_string())))??;
        let stats = Arc::new(StoreStats::default());
        let sessions_dir = data_dir.join("sessions");
        let (tx, rx) = mpsc::channel();
        let committer = Committer::new(
            wal,
            settings.clone(),
            stats.clone(),
            sessions_dir.clone(),
            hub,
        );
        std::thread::Builder::new()
            .name("dstream-commit".into())
            .spawn(move || committer.run(rx))
            .map_err(|e| StoreError::io("starting the commit thread", &e))?;
        let inner = Arc::new(Inner {
            sessions_dir,
            files: Arc::new(FileCache::new(settings.max_open_files)),
            settings,
            sessions: RwLock::new(HashMap::new()),
            stats,
            commit: RwLock::new(Some(tx)),
            repairing: tokio::sync::Mutex::new(()),
            _lock: lock,
        });
        let store = Store { inner };
        let mut notes = Vec::new();
        {
            let mut sessions = store.inner.sessions.write().unwrap();
            for r in recovered {
                if let Some(note) = r.note {
                    notes.push(note);
                }
                let session = store.new_session(r.id.clone(), r.path, r.state, r.quarantine);
                sessions.insert(r.id, session);
            }
        }
        for note in &notes {
            if let RecoveryNote::TornTail {
                session,
                reason,
                cut_bytes,
                saved_to,
                last_lsn,
            } = note
            {
                let payload = serde_json::json!({
                    "reason": "torn_tail", "detail": reason, "truncated_bytes": cut_bytes,
                    "saved_to": saved_to, "last_good_lsn": last_lsn,
                });
                store
                    .append_wait(session, recovered_event(payload), true)
                    .await?;
            }
        }
        Ok((store, notes))
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
        sessions.insert(id.to_string(), session.clone());
        session
    }

    /// Queues an event for `session` behind every one queued before it. `ack` answers exactly
    /// once: when the event is durable (per the fsync policy, or synced when `must_sync`), or
    /// with the reason it was not stored.
    pub fn append(&self, session: &str, event: NewEventRaw, must_sync: bool, ack: Ack) {
        let session = self.session(session);
        let commit = self.inner.commit.read().unwrap();
        let Some(tx) = commit.as_ref() else {
            return ack.send(Err(StoreError::ShuttingDown));
        };
        // If the commit thread is gone the message (and its Ack) is dropped: "shutting down".
        let _ = tx.send(CommitMsg::Append(Append {
            session,
            event,
            must_sync,
            ack,
        }));
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

    /// Why `id` has no events to read: quarantined, or simply unknown.
    pub fn missing(&self, id: &str) -> StoreError {
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
        let (dir, settings, id_owned) = (
            self.inner.sessions_dir.clone(),
            self.inner.settings.clone(),
            id.to_string(),
        );
        let q = quarantine.clone();
        let (mut report, recovered) =
            tokio::task::spawn_blocking(move || repair::repair_log(&dir, &id_owned, &q, &settings))
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

    /// Writes and syncs every append queued before this call; later ones are refused.
    pub async fn shutdown(&self) {
        let Some(tx) = self.inner.commit.write().unwrap().take() else {
            return;
        };
        let (done, rx) = tokio::sync::oneshot::channel();
        if tx.send(CommitMsg::Shutdown { done }).is_ok() {
            let _ = rx.await;
        }
    }
}

/// A `log.recovered` event from the daemon itself.
fn recovered_event(payload: serde_json::Value) -> NewEventRaw {
    NewEventRaw {
        event_type: "log.recovered".into(),
        actor: Some("dstream".into()),
        payload: Some(RawValue::from_string(payload.to_string()).expect("valid json")),
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

/// A session as recovery left it.
pub(crate) struct Recovered {
    id: String,
    path: PathBuf,
    state: SessionState,
    quarantine: Option<Quarantine>,
    note: Option<RecoveryNote>,
}

fn open_blocking(
    data_dir: &Path,
    settings: &StoreSettings,
) -> Result<(File, Wal, Vec<Recovered>), StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    create_private_dir(data_dir).map_err(ctx("creating the data directory"))?;
    let lock = fsutil::take_lock(data_dir)?;
    let sessions_dir = data_dir.join("sessions");
    let quarantine_dir = data_dir.join("quarantine");
    create_private_dir(&sessions_dir).map_err(ctx("creating the sessions directory"))?;
    create_private_dir(&quarantine_dir).map_err(ctx("creating the quarantine directory"))?;

    let mut ids = Vec::new();
    for entry in fs::read_dir(&sessions_dir).map_err(ctx("listing sessions"))? {
        let name = entry.map_err(ctx("listing sessions"))?.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
            continue;
        };
        if dstream_sdk::validate_session_id(id).is_ok() {
            ids.push(id.to_string());
        } else {
            tracing::warn!(file = ?name, "ignoring a log whose name is not a valid session id");
        }
    }

    // Recover logs in parallel: the work is reading and checksumming, one file per thread.
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(ids.len().max(1));
    let chunks: Vec<Vec<String>> = (0..threads)
        .map(|t| ids.iter().skip(t).step_by(threads).cloned().collect())
        .collect();
    let mut recovered = Vec::new();
    std::thread::scope(|scope| -> Result<(), StoreError> {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(|| {
                    chunk
                        .into_iter()
                        .map(|id| recover_session(&sessions_dir, &quarantine_dir, id, settings))
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        for h in handles {
            recovered.extend(h.join().map_err(|_| {
                StoreError::io("recovery", &io::Error::other("a recovery thread panicked"))
            })??);
        }
        Ok(())
    })?;
    let (wal, recovered) = replay_wal(data_dir, settings, recovered)?;
    Ok((lock, wal, recovered))
}

/// Puts back into the session logs whatever the write-ahead log holds beyond their ends (the
/// logs are synced only at checkpoints, so after a power loss the WAL may be ahead), then
/// starts the WAL over.
fn replay_wal(
    data_dir: &Path,
    settings: &StoreSettings,
    mut recovered: Vec<Recovered>,
) -> Result<(Wal, Vec<Recovered>), StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    let sessions_dir = data_dir.join("sessions");
    let quarantine_dir = data_dir.join("quarantine");
    let (mut wal, records) = Wal::open(&data_dir.join("wal"), settings.wal_bytes)
        .map_err(ctx("opening the write-ahead log"))?;
    let mut by_session: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
    for r in records {
        by_session.entry(r.session).or_default().push(r.line);
    }
    for (id, lines) in by_session {
        if dstream_sdk::validate_session_id(&id).is_err() {
            tracing::warn!(session = %id, "write-ahead log names an invalid session; skipped");
            continue;
        }
        let at = recovered.iter().position(|r| r.id == id);
        let (mut next, quarantined) = match at.map(|i| &recovered[i]) {
            Some(r) => (r.state.last_lsn + 1, r.quarantine.is_some()),
            None => (1, false),
        };
        let mut missing = Vec::new();
        let mut stray = Vec::new();
        for line in lines {
            match record::lsn_of(&line) {
                Some(lsn) if lsn < next => {}
                Some(lsn) if lsn == next && !quarantined => {
                    missing.extend_from_slice(&line);
                    next += 1;
                }
                _ => stray.extend_from_slice(&line),
            }
        }
        if !stray.is_empty() {
            // Nothing the WAL held is dropped: what cannot go back in order is kept aside.
            let to = quarantine_dir.join(format!("{id}.{}.wal", stamp()));
            fsutil::private_file()
                .write(true)
                .create_new(true)
                .open(&to)
                .and_then(|mut f| io::Write::write_all(&mut f, &stray).and_then(|()| f.sync_all()))
                .map_err(ctx("saving write-ahead records"))?;
            tracing::error!(session = %id, saved_to = %to.display(), "write-ahead records that do not continue the log were kept aside");
        }
        if missing.is_empty() {
            continue;
        }
        let path = sessions_dir.join(format!("{id}.jsonl"));
        let mut file = fsutil::private_file()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(ctx("replaying the write-ahead log"))?;
        io::Write::write_all(&mut file, &missing)
            .and_then(|()| file.sync_all())
            .map_err(ctx("replaying the write-ahead log"))?;
        tracing::info!(session = %id, bytes = missing.len(), "restored records from the write-ahead log");
        let again = recover_session(&sessions_dir, &quarantine_dir, id.clone(), settings)?;
        match at {
            Some(i) => recovered[i] = again,
            None => recovered.push(again),
        }
    }
    sync_dir(&sessions_dir).map_err(ctx("syncing the sessions directory"))?;
    wal.reset().map_err(ctx("restarting the write-ahead log"))?;
    Ok((wal, recovered))
}

pub(crate) fn stamp() -> u64 {
    commit::now_ms()
}

pub(crate) fn recover_session(
    sessions_dir: &Path,
    quarantine_dir: &Path,
    id: String,
    settings: &StoreSettings,
) -> Result<Recovered, StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    let path = sessions_dir.join(format!("{id}.jsonl"));
    let idx_path = path.with_extension("idx");
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(ctx("opening a log"))?;
    let loaded = SparseIndex::load(&idx_path).unwrap_or_else(|e| {
        tracing::warn!(session = %id, error = %e, "index unreadable; rebuilding");
        None
    });
    let gaps = Gaps::load(&path.with_extension("gaps")).map_err(ctx("reading a gaps file"))?;
    let scan = recovery::scan(
        &file,
        loaded.as_ref(),
        settings.verify_on_start,
        settings.index_interval_bytes,
        &gaps,
    )
    .map_err(ctx("scanning a log"))?;
    let meta = SessionMeta {
        stream_id: scan.stream_id.clone(),
        first_ts: scan.first_ts,
        last_ts: scan.last_ts,
        bytes: scan.good_len,
    };
    let mut note = None;
    match scan.damage {
        Damage::Corrupt { reason, offset } => {
            // The log stays where it is: its good prefix is readable, and `repair` moves the
            // damaged part aside. Nothing is rewritten until someone asks for that.
            tracing::error!(session = %id, %reason, offset, "corrupt log quarantined; run `dstream repair {id}`");
            let quarantine = Quarantine {
                reason: reason.clone(),
                offset,
                last_good_lsn: scan.last_lsn,
            };
            let state = SessionState {
                last_lsn: scan.last_lsn,
                len: scan.good_len,
                index: scan.index,
                meta,
                gaps,
            };
            return Ok(Recovered {
                id: id.clone(),
                path,
                state,
                quarantine: Some(quarantine),
                note: Some(RecoveryNote::Quarantined {
                    session: id,
                    reason,
                    offset,
                }),
            });
        }
        Damage::TornTail { reason } => {
            let saved_to = quarantine_dir.join(format!("{id}.{}.tail", stamp()));
            let cut_bytes = scan.file_len - scan.good_len;
            save_range(&file, scan.good_len, cut_bytes, &saved_to)
                .map_err(ctx("saving a torn tail"))?;
            file.set_len(scan.good_len)
                .and_then(|()| file.sync_all())
                .map_err(ctx("cutting a torn tail"))?;
            tracing::warn!(session = %id, %reason, cut_bytes, saved_to = %saved_to.display(), "torn tail cut off");
            note = Some(RecoveryNote::TornTail {
                session: id.clone(),
                reason,
                cut_bytes,
                saved_to,
                last_lsn: scan.last_lsn,
            });
        }
        Damage::None => {}
    }
    if scan.index_rebuilt || note.is_some() {
        write_index(&idx_path, &scan.index).map_err(ctx("writing an index"))?;
    }
    let state = SessionState {
        last_lsn: scan.last_lsn,
        len: scan.good_len,
        index: scan.index,
        meta,
        gaps,
    };
    Ok(Recovered {
        id,
        path,
        state,
        quarantine: None,
        note,
    })
}

fn write_index(path: &Path, index: &SparseIndex) -> io::Result<()> {
    let tmp = path.with_extension("idx.tmp");
    fsutil::private_file()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?
        .write_all(&index.to_bytes())?;
    fs::rename(&tmp, path)
}
