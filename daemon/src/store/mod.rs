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

pub mod index;
mod reader;
pub mod record;
mod recovery;
mod session;
mod writer;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use serde::Deserialize;
use serde_json::value::RawValue;

pub use reader::{QueryFilter, ReadPage, read_range};
pub use session::{EventJson, Session, SessionMeta, SessionState};
pub use writer::Ack;

use crate::config::FsyncPolicy;
use index::SparseIndex;
use recovery::Damage;
use writer::WriterEnv;

/// The store's share of the configuration.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub fsync: FsyncPolicy,
    pub fsync_interval_ms: u64,
    pub index_interval_bytes: u64,
    pub verify_on_start: bool,
    pub live_buffer: usize,
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
    #[error("session {session} is quarantined: {reason}")]
    Quarantined { session: String, reason: String },
    #[error("session {session} takes no more appends until the daemon restarts: {reason}")]
    Failed { session: String, reason: String },
    #[error("session {0} not found")]
    NotFound(String),
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

/// An event as `append` receives it. Big fields stay raw JSON: they are stored as sent.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewEventRaw {
    #[serde(rename = "type")]
    pub event_type: String,
    #[serde(default)]
    pub actor: Option<String>,
    #[serde(default)]
    pub payload: Option<Box<RawValue>>,
    #[serde(default)]
    pub stream_id: Option<String>,
    #[serde(default)]
    pub causation_id: Option<String>,
    #[serde(default)]
    pub correlation_id: Option<String>,
    #[serde(default)]
    pub metadata: Option<Box<RawValue>>,
    #[serde(default)]
    pub raw: Option<Box<RawValue>>,
    /// Fields the daemon fills in itself; a client's values are ignored, not refused.
    #[serde(default, rename = "lsn")]
    _lsn: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "id")]
    _id: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "timestamp")]
    _timestamp: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "session_id")]
    _session_id: Option<serde::de::IgnoredAny>,
}

/// Longest `type`, `actor`, `causation_id` or `correlation_id`, in bytes.
pub const MAX_LABEL_LEN: usize = 256;

impl NewEventRaw {
    pub(crate) fn approx_len(&self) -> usize {
        let raw = |v: &Option<Box<RawValue>>| v.as_ref().map_or(0, |v| v.get().len());
        self.event_type.len() + raw(&self.payload) + raw(&self.metadata) + raw(&self.raw) + 64
    }

    /// Checks what serde cannot: sizes, the type's form, that ids are safe, metadata an object.
    pub fn validate(&self) -> Result<(), String> {
        if self.event_type.is_empty() {
            return Err("event.type is empty".into());
        }
        for (name, value) in [
            ("event.type", Some(&self.event_type)),
            ("event.actor", self.actor.as_ref()),
            ("event.causation_id", self.causation_id.as_ref()),
            ("event.correlation_id", self.correlation_id.as_ref()),
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
        if let Some(m) = &self.metadata
            && !m.get().starts_with('{')
        {
            return Err("event.metadata must be an object".into());
        }
        Ok(())
    }
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
        moved_to: PathBuf,
    },
}

struct Inner {
    sessions_dir: PathBuf,
    settings: StoreSettings,
    sessions: RwLock<HashMap<String, Arc<Session>>>,
    stats: Arc<StoreStats>,
    _lock: File,
}

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl Store {
    /// Opens (creating if needed) the data directory, takes its lock, recovers every log and
    /// starts one writer per session. Damage found is repaired or quarantined and reported.
    pub async fn open(
        data_dir: &Path,
        settings: StoreSettings,
    ) -> Result<(Store, Vec<RecoveryNote>), StoreError> {
        let dir = data_dir.to_path_buf();
        let s = settings.clone();
        let (lock, recovered) = tokio::task::spawn_blocking(move || open_blocking(&dir, &s))
            .await
            .map_err(|e| StoreError::io("recovery", &io::Error::other(e.to_string())))??;
        let inner = Arc::new(Inner {
            sessions_dir: data_dir.join("sessions"),
            settings,
            sessions: RwLock::new(HashMap::new()),
            stats: Arc::new(StoreStats::default()),
            _lock: lock,
        });
        let store = Store { inner };
        let mut notes = Vec::new();
        for r in recovered {
            let note = r.note.clone();
            store.install(r);
            if let Some(note) = note {
                notes.push(note);
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
                let event = NewEventRaw {
                    event_type: "log.recovered".into(),
                    actor: Some("dstream".into()),
                    payload: Some(RawValue::from_string(payload.to_string()).expect("valid json")),
                    ..Default::default()
                };
                store.session(session).append(event).await?;
            }
        }
        Ok((store, notes))
    }

    pub fn stats(&self) -> &StoreStats {
        &self.inner.stats
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
        let session = self.start_session(id.to_string(), path, 0, SessionState::default(), None);
        sessions.insert(id.to_string(), session.clone());
        session
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

    fn install(&self, r: Recovered) {
        let session = self.start_session(r.id.clone(), r.path, r.len, r.state, r.quarantine);
        self.inner.sessions.write().unwrap().insert(r.id, session);
    }

    fn start_session(
        &self,
        id: String,
        path: PathBuf,
        len: u64,
        state: SessionState,
        quarantine: Option<String>,
    ) -> Arc<Session> {
        Arc::new(match quarantine {
            Some(reason) => {
                Session::quarantined(id, path, reason, state, self.inner.settings.live_buffer)
            }
            None => {
                let env = WriterEnv {
                    settings: self.inner.settings.clone(),
                    stats: self.inner.stats.clone(),
                };
                Session::open(id, path, len, state, env)
            }
        })
    }

    /// Every session with at least one event, most recently active first.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        let mut list: Vec<_> = self
            .inner
            .sessions
            .read()
            .unwrap()
            .values()
            .filter(|s| s.committed_lsn() > 0)
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
        let Some(session) = self.get(session).filter(|s| s.committed_lsn() > 0) else {
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

    /// Syncs and closes every log; appends queued before this call are written first, and
    /// later ones are refused.
    pub async fn shutdown(&self) {
        let sessions: Vec<_> = self
            .inner
            .sessions
            .read()
            .unwrap()
            .values()
            .cloned()
            .collect();
        let running: Vec<_> = sessions.iter().filter_map(|s| s.close_writer()).collect();
        for done in running {
            let _ = done.await;
        }
    }
}

/// A session as recovery left it.
struct Recovered {
    id: String,
    path: PathBuf,
    len: u64,
    state: SessionState,
    quarantine: Option<String>,
    note: Option<RecoveryNote>,
}

/// A positional read that leaves the file's cursor alone, so one handle serves every reader.
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    #[cfg(unix)]
    return std::os::unix::fs::FileExt::read_at(file, buf, offset);
    #[cfg(windows)]
    return std::os::windows::fs::FileExt::seek_read(file, buf, offset);
}

/// Options for a file only its owner may read: session data is the user's own business.
pub(crate) fn private_file() -> OpenOptions {
    let mut o = OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o
}

fn create_private_dir(path: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)
}

fn open_blocking(
    data_dir: &Path,
    settings: &StoreSettings,
) -> Result<(File, Vec<Recovered>), StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    create_private_dir(data_dir).map_err(ctx("creating the data directory"))?;
    let lock = take_lock(data_dir)?;
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
    let mut blocked = Vec::new();
    for entry in fs::read_dir(&quarantine_dir).map_err(ctx("listing quarantine"))? {
        let name = entry.map_err(ctx("listing quarantine"))?.file_name();
        if let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".blocked")) {
            blocked.push(id.to_string());
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
    for id in blocked {
        let reason =
            fs::read_to_string(quarantine_dir.join(format!("{id}.blocked"))).unwrap_or_default();
        let reason = format!(
            "{} (delete {}.blocked in {} to accept appends again)",
            reason.trim(),
            id,
            quarantine_dir.display()
        );
        if let Some(r) = recovered.iter_mut().find(|r| r.id == id) {
            r.quarantine = Some(reason);
        } else if dstream_sdk::validate_session_id(&id).is_ok() {
            let path = sessions_dir.join(format!("{id}.jsonl"));
            recovered.push(Recovered {
                id,
                path,
                len: 0,
                state: SessionState::default(),
                quarantine: Some(reason),
                note: None,
            });
        }
    }
    Ok((lock, recovered))
}

fn take_lock(data_dir: &Path) -> Result<File, StoreError> {
    let path = data_dir.join("LOCK");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| StoreError::io("opening the data directory lock", &e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let holder = fs::read_to_string(&path)
                .ok()
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty());
            return Err(StoreError::Locked {
                path: data_dir.into(),
                holder: holder.map(|p| format!(" (pid {p})")).unwrap_or_default(),
            });
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(StoreError::io("locking the data directory", &e));
        }
    }
    file.set_len(0)
        .and_then(|()| file.write_all(std::process::id().to_string().as_bytes()))
        .map_err(|e| StoreError::io("writing the data directory lock", &e))?;
    Ok(file)
}

fn stamp() -> u64 {
    writer::now_ms()
}

fn recover_session(
    sessions_dir: &Path,
    quarantine_dir: &Path,
    id: String,
    settings: &StoreSettings,
) -> Result<Recovered, StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    let path = sessions_dir.join(format!("{id}.jsonl"));
    let idx_path = path.with_extension("idx");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(ctx("opening a log"))?;
    let loaded = SparseIndex::load(&idx_path).unwrap_or_else(|e| {
        tracing::warn!(session = %id, error = %e, "index unreadable; rebuilding");
        None
    });
    let scan = recovery::scan(
        &file,
        loaded.as_ref(),
        settings.verify_on_start,
        settings.index_interval_bytes,
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
        Damage::Corrupt { reason } => {
            let moved_to = quarantine_dir.join(format!("{id}.{}.jsonl", stamp()));
            fs::rename(&path, &moved_to).map_err(ctx("quarantining a log"))?;
            let _ = fs::remove_file(&idx_path);
            fs::write(
                quarantine_dir.join(format!("{id}.blocked")),
                format!("{reason}; the log was moved to {}\n", moved_to.display()),
            )
            .map_err(ctx("quarantining a log"))?;
            sync_dir(quarantine_dir)
                .and_then(|()| sync_dir(sessions_dir))
                .map_err(ctx("quarantining a log"))?;
            tracing::error!(session = %id, %reason, moved_to = %moved_to.display(), "corrupt log quarantined");
            return Ok(Recovered {
                id: id.clone(),
                path,
                len: 0,
                state: SessionState::default(),
                quarantine: Some(reason.clone()),
                note: Some(RecoveryNote::Quarantined {
                    session: id,
                    reason,
                    moved_to,
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
        index: scan.index,
        meta,
    };
    Ok(Recovered {
        id,
        path,
        len: scan.good_len,
        state,
        quarantine: None,
        note,
    })
}

fn save_range(file: &File, offset: u64, len: u64, to: &Path) -> io::Result<()> {
    let mut bytes = vec![0u8; len as usize];
    let mut done = 0;
    while done < bytes.len() {
        match read_at(file, &mut bytes[done..], offset + done as u64)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => done += n,
        }
    }
    let mut out = private_file().write(true).create_new(true).open(to)?;
    out.write_all(&bytes)?;
    out.sync_all()?;
    sync_dir(to.parent().unwrap_or(Path::new(".")))
}

fn write_index(path: &Path, index: &SparseIndex) -> io::Result<()> {
    let tmp = path.with_extension("idx.tmp");
    private_file()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?
        .write_all(&index.to_bytes())?;
    fs::rename(&tmp, path)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
