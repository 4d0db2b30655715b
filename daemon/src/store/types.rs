//! The store's vocabulary, shared by its parts: its settings and counters, what an append
//! takes and returns, and what recovery reports.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::config::FsyncPolicy;
use crate::vfs::Vfs;

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
    /// Under `fsync = "always"`: while the WAL's syncs take longer than this (a moving
    /// average), each is made on the sync thread while the next batch is written; while they
    /// are quicker, on the commit thread, which saves the hand-over (see `commit::syncer`).
    pub pipeline_syncs_over: std::time::Duration,
}

/// The default of [`StoreSettings::pipeline_syncs_over`]: about what handing a batch to
/// another thread and back costs when the CPU is the bound.
pub const PIPELINE_SYNCS_OVER: std::time::Duration = std::time::Duration::from_micros(200);

#[derive(Debug, Default)]
pub struct StoreStats {
    pub appends: AtomicU64,
    pub bytes_written: AtomicU64,
    pub fsyncs: AtomicU64,
    /// Appends committed by their caller's thread ([`crate::store::Store::append_direct`]).
    pub direct_appends: AtomicU64,
}

/// An event as `append` receives it: the SDK's envelope with its JSON fields kept raw, so they
/// are stored exactly as sent.
pub type NewEventRaw = dstream_sdk::NewEvent<Box<RawValue>>;

/// Runs on every event before it is queued, whoever appends it (the daemon redacts secrets
/// here, so nothing reaches the write-ahead log unredacted). Returns the event to store and,
/// optionally, one more to store right after it in the same session. The store knows nothing
/// of what it does.
pub type BeforeAppend =
    Arc<dyn Fn(NewEventRaw) -> (NewEventRaw, Option<NewEventRaw>) + Send + Sync>;

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
    /// LSNs that were leased for acknowledgement before a power failure and are not in the
    /// log: the session resumes above them.
    UnsyncedLoss {
        session: String,
        first_lsn: u64,
        last_lsn: u64,
    },
}

/// What one compression did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compressed {
    /// The archive now holds LSNs 1 to this.
    pub upto_lsn: u64,
    /// Log bytes it replaces, and its own size.
    pub log_bytes: u64,
    pub archive_bytes: u64,
    /// Whether the file system took the replaced bytes back (a hole); some cannot.
    pub freed: bool,
}

/// Where a forked session came from (`<id>.fork`, written once, before its log exists).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    pub forked_from: String,
    pub fork_lsn: u64,
    pub forked_at_ms: u64,
}

impl ForkOrigin {
    /// The sidecar of the log at `log`; a missing one means the session is no fork.
    pub fn load(vfs: &dyn Vfs, log: &Path) -> io::Result<Option<ForkOrigin>> {
        match vfs.read(&log.with_extension("fork")) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(io::Error::other),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}
