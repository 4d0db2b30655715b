//! The shared state of one session: what is committed, its index, its metadata. Its live
//! events go out on the daemon-wide [`crate::hub`]. It holds no thread and no open file: those belong to the commit
//! thread and the [`FileCache`], so an idle session costs a few hundred bytes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::archive::Archive;
use super::files::FileCache;
use super::gaps::Gaps;
use super::index::SparseIndex;
use super::tombstone::Tombstone;
use super::types::ForkOrigin;
use super::writer_state::WriterState;
pub use crate::event_json::EventJson;
use crate::event_json::LogName;
use crate::vfs::VfsFileRef;

#[derive(Debug, Clone, Default)]
pub struct SessionMeta {
    pub stream_id: Option<String>,
    pub first_ts: u64,
    pub last_ts: u64,
    pub bytes: u64,
}

/// Where a session stands after recovery, or empty for a new one.
#[derive(Debug, Default)]
pub struct SessionState {
    pub last_lsn: u64,
    pub len: u64,
    pub index: SparseIndex,
    pub meta: SessionMeta,
    pub gaps: Gaps,
    /// The compressed form of the log's first part, if the session has one.
    pub(crate) archive: Option<Arc<Archive>>,
    /// Set for a fork: its parent and the LSN it was forked at.
    pub fork: Option<ForkOrigin>,
}

/// Why a session takes no appends: its log holds damaged records after `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantine {
    pub reason: String,
    /// Where the readable prefix ends, in bytes.
    pub offset: u64,
    /// The last LSN of the readable prefix.
    pub last_good_lsn: u64,
}

pub struct Session {
    pub id: String,
    /// The id as readers of its log need it (and the seed of the ids it names), made once.
    pub(crate) log_name: LogName,
    pub(crate) path: PathBuf,
    quarantine: Option<Quarantine>,
    /// LSN jumps a repair left in the log (usually none).
    pub(crate) gaps: Gaps,
    fork: Option<ForkOrigin>,
    /// Set once the session is deleted: the commit thread refuses its appends.
    pub(crate) gone: std::sync::OnceLock<Tombstone>,
    committed: AtomicU64,
    /// The last LSN that is synced: equal to `committed` under `fsync = "always"`, behind it by
    /// up to an interval otherwise.
    durable: AtomicU64,
    pub(crate) index: RwLock<SparseIndex>,
    /// The compressed form of the log's first part: reads up to its last LSN come from it.
    /// Readers hold this lock while they read, so the compressor, which installs a new
    /// archive under it before it frees the log's first part, never pulls bytes from under one.
    pub(crate) archive: RwLock<Option<Arc<Archive>>>,
    pub(crate) meta: Mutex<SessionMeta>,
    /// Locked by the commit thread only.
    pub(crate) writer: Mutex<WriterState>,
    files: Arc<FileCache>,
}

impl Session {
    pub(crate) fn new(
        id: String,
        path: PathBuf,
        state: SessionState,
        quarantine: Option<Quarantine>,
        files: Arc<FileCache>,
    ) -> Session {
        let writer = WriterState::new(
            state.len,
            (state.last_lsn + 1).max(state.gaps.next_lsn),
            state.index.last().map(|e| e.offset),
            state.meta.stream_id.clone(),
        );
        Session {
            log_name: LogName::new(&id),
            id,
            path,
            quarantine,
            gaps: state.gaps,
            fork: state.fork,
            gone: std::sync::OnceLock::new(),
            committed: AtomicU64::new(state.last_lsn),
            durable: AtomicU64::new(state.last_lsn),
            index: RwLock::new(state.index),
            archive: RwLock::new(state.archive),
            meta: Mutex::new(state.meta),
            writer: Mutex::new(writer),
            files,
        }
    }

    /// LSN of the last event that is acknowledged and visible to readers.
    pub fn committed_lsn(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    pub(crate) fn set_committed(&self, lsn: u64) {
        self.committed.store(lsn, Ordering::Release);
    }

    /// LSN of the last event that a power failure cannot take: what may leave the machine.
    pub fn durable_lsn(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    pub(crate) fn set_durable(&self, lsn: u64) {
        self.durable.fetch_max(lsn, Ordering::AcqRel);
    }

    pub fn quarantine_reason(&self) -> Option<&str> {
        self.quarantine.as_ref().map(|q| q.reason.as_str())
    }

    pub fn quarantine(&self) -> Option<&Quarantine> {
        self.quarantine.as_ref()
    }

    /// Where this session was forked from, if it is a fork.
    pub fn fork(&self) -> Option<&ForkOrigin> {
        self.fork.as_ref()
    }

    pub fn meta(&self) -> SessionMeta {
        self.meta.lock().unwrap().clone()
    }

    /// The log's open handle (positional reads need no seek, so one serves all readers).
    pub(crate) fn read_handle(&self) -> std::io::Result<VfsFileRef> {
        Ok(self.files.get(&self.id, &self.path, false)?.0)
    }

    /// Closes the log's cached handle (after the file was removed or replaced).
    pub(crate) fn forget_file(&self) {
        self.files.forget(&self.id);
    }

    pub(crate) fn log_handle(&self) -> std::io::Result<(VfsFileRef, bool)> {
        self.files.get(&self.id, &self.path, true)
    }
}
