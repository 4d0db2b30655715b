//! How asking the daemon ended, and how it can fail.

use std::io;
use std::path::PathBuf;

use dstream_sdk::protocol::{CheckpointInfo, IngestResult, RpcError};

/// How asking the daemon ended: its result and whether the event had to be altered (then an
/// `updated_input` in the reply must not be applied), or why there is none.
pub(crate) type Outcome = Result<(IngestResult, bool), Failure>;

/// Why there is no verdict from the daemon.
pub(crate) enum Failure {
    /// No daemon: the socket is missing or nobody listens on it.
    NotRunning(io::Error),
    /// No daemon could be reached or started (why), and the event was spooled (where).
    Spooled {
        why: String,
        file: PathBuf,
    },
    /// No daemon could be reached or started, and the event could not be spooled either.
    Lost {
        why: String,
        spool: String,
    },
    Io(io::Error),
    Rpc(RpcError),
    BadReply(String),
    Timeout(&'static str),
    /// No verdict on a pending checkpoint reached the hook by its deadline (the daemon was
    /// gone): its default applies.
    Undecided(Box<CheckpointInfo>),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NotRunning(e) => write!(f, "the daemon is not running: {e}"),
            Failure::Spooled { why, file } => {
                write!(f, "{why}; the event is spooled in {}", file.display())
            }
            Failure::Lost { why, spool } => {
                write!(f, "{why}; the event could NOT be spooled: {spool}")
            }
            Failure::Io(e) => write!(f, "talking to the daemon failed: {e}"),
            Failure::Rpc(e) => write!(f, "the daemon refused the event: {e}"),
            Failure::BadReply(m) => write!(f, "the daemon's reply was not understood: {m}"),
            Failure::Timeout(what) => write!(f, "timed out {what}"),
            Failure::Undecided(c) => write!(
                f,
                "no decision on checkpoint {} reached the hook by its deadline",
                c.id
            ),
        }
    }
}
