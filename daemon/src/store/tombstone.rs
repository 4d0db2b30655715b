//! Deleting a session, crash-safely, leaving a tombstone.
//!
//! `sessions/<id>.gone` (small JSON: when, why, the last LSN, the bytes freed) is written
//! durably first; then the log and its companions (`.jsonl`, `.idx`, `.gaps`, `.fork`) are
//! removed and the folder synced. A crash in between leaves a tombstone beside a log: the next
//! start removes the log before it looks at any ([`finish_deletions`]), so a session is either
//! wholly present or wholly gone with its tombstone. The deletion runs on the commit thread
//! (`commit::delete`), after every append queued before it and refusing every one after it;
//! reads, subscriptions and appends to a gone id answer [`StoreError::Gone`]. The id is never
//! used again while its tombstone is there (no LSN is handed out twice under one id); removing
//! the tombstone while the daemon is stopped frees the id, to start over from LSN 1.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::StoreError;
use crate::vfs::Vfs;

/// What is left of a deleted session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    pub session_id: String,
    pub deleted_at_ms: u64,
    pub reason: String,
    pub last_lsn: u64,
    /// The timestamp of its last event.
    pub last_ts: u64,
    pub bytes_freed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
}

impl Tombstone {
    /// The error that a read, subscription or append of this session answers.
    pub fn error(&self) -> StoreError {
        StoreError::Gone {
            session: self.session_id.clone(),
            deleted_at_ms: self.deleted_at_ms,
            reason: self.reason.clone(),
        }
    }
}

/// The files of the session whose log is `log`, the tombstone aside, log first.
pub(crate) fn session_files(log: &Path) -> [std::path::PathBuf; 5] {
    [
        log.to_path_buf(),
        log.with_extension("idx"),
        log.with_extension("gaps"),
        log.with_extension("fork"),
        log.with_extension("zst"),
    ]
}

/// Removes what exists of `files`; whether anything was.
pub(crate) fn remove_files(vfs: &dyn Vfs, files: &[std::path::PathBuf]) -> io::Result<bool> {
    let mut removed = false;
    for f in files {
        match vfs.remove(f) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// At start, after the write-ahead log was replayed (which may have written lines of a
/// deleted session back) and before the logs are listed: every tombstone, with whatever a
/// deletion cut short removed.
pub(crate) fn finish_deletions(
    vfs: &dyn Vfs,
    sessions_dir: &Path,
) -> io::Result<HashMap<String, Tombstone>> {
    let mut gone = HashMap::new();
    let mut removed = false;
    for name in vfs.list_dir(sessions_dir)? {
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".gone")) else {
            continue;
        };
        if dstream_sdk::validate_session_id(id).is_err() {
            continue;
        }
        let path = sessions_dir.join(&name);
        let t: Tombstone = match vfs.read(&path).map(|b| serde_json::from_slice(&b)) {
            Ok(Ok(t)) => t,
            other => {
                // Unreadable, it still says the session was deleted: keep it gone.
                tracing::warn!(session = %id, ?other, "unreadable tombstone; the session stays gone");
                Tombstone {
                    session_id: id.to_string(),
                    deleted_at_ms: 0,
                    reason: "deleted (its tombstone is unreadable)".into(),
                    last_lsn: 0,
                    last_ts: 0,
                    bytes_freed: 0,
                    stream_id: None,
                }
            }
        };
        let log = sessions_dir.join(format!("{id}.jsonl"));
        if remove_files(vfs, &session_files(&log))? {
            tracing::info!(session = %id, "finished a deletion a stop cut short");
            removed = true;
        }
        gone.insert(id.to_string(), t);
    }
    if removed {
        vfs.sync_dir(sessions_dir)?;
    }
    Ok(gone)
}
