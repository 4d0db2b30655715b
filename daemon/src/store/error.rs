//! What can go wrong in the store.

use std::io;
use std::path::PathBuf;

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
    #[error("session {session} was deleted at {}: {reason}", crate::util::time::rfc3339(*deleted_at_ms))]
    Gone {
        session: String,
        deleted_at_ms: u64,
        reason: String,
    },
    #[error("session {0} already exists")]
    Exists(String),
    /// A request the store will not carry out, and why.
    #[error("{0}")]
    Refused(String),
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
