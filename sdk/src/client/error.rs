//! What can go wrong talking to the daemon, with the JSON-RPC code when the daemon refused.

use std::io;
use std::path::{Path, PathBuf};

use crate::protocol::RpcError;

/// What can go wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no dstream daemon is running at {} ({cause}); start one with `dstream daemon`", path.display())]
    NotRunning { path: PathBuf, cause: io::Error },
    /// The socket exists but this user may not connect to it (it is owner-only).
    #[error(
        "permission denied on the daemon's socket {} ({cause}); the socket is owner-only, so \
         connect as the user that runs the daemon",
        path.display()
    )]
    PermissionDenied { path: PathBuf, cause: io::Error },
    // Not `#[from]`/`#[source]`: the message already includes the cause, and a source would
    // make `{:#}` (anyhow's chain) print it twice.
    #[error("i/o error talking to the daemon: {0}")]
    Io(io::Error),
    /// The daemon refused the request. Transparent, so the chain prints the message once.
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The daemon ended a subscription because its feed failed (for example an unreadable log).
    #[error("the daemon ended the subscription: {0}")]
    SubscriptionFailed(String),
    #[error("unexpected reply from the daemon: {0}")]
    Protocol(String),
    #[error("the connection to the daemon closed")]
    Closed,
    /// No daemon answered and none could be started.
    #[error("no dstream daemon is running at {} and none could be started: {cause}", path.display())]
    NotStarted {
        path: PathBuf,
        cause: crate::autostart::StartError,
    },
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl Error {
    /// Classifies a failure to reach the socket at `path`.
    pub(super) fn connecting(path: &Path, cause: io::Error) -> Error {
        let path = path.into();
        match cause.kind() {
            io::ErrorKind::PermissionDenied => Error::PermissionDenied { path, cause },
            _ => Error::NotRunning { path, cause },
        }
    }

    /// The JSON-RPC error code, when the daemon refused the request.
    pub fn code(&self) -> Option<i64> {
        match self {
            Error::Rpc(e) => Some(e.code),
            _ => None,
        }
    }
}
