//! What the pipeline takes in: one raw event from a connection, and how its outcome is
//! handed back. Its own file so that the handle, the worker and the socket layer share these
//! types without depending on each other.

use serde_json::value::RawValue;

use dstream_sdk::RpcError;
use dstream_sdk::event::MAX_NESTING_DEPTH;
use dstream_sdk::protocol::{IngestResult, codes};

use crate::store::StoreError;

/// Why an ingest was not stored.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the pipeline has stopped")]
    Stopped,
}

pub type Done = Box<dyn FnOnce(Result<IngestResult, IngestError>) + Send>;

/// One raw event to take in.
pub struct Ingest {
    /// The connection it came on: clients are served in turn.
    pub client: u64,
    pub source: String,
    pub raw: Box<RawValue>,
    pub session_id: Option<String>,
    /// When the client stops waiting for a decision (ms since the epoch), if it said.
    pub reply_by_ms: Option<u64>,
    /// Whether the client is gone (its connection closed): nobody waits for a decision.
    pub gone: Option<Box<dyn Fn() -> bool + Send>>,
    /// Called once with the stored events, or why they were not stored.
    pub done: Done,
    /// Set when the event comes from the spool: the agent went on without a daemon.
    pub spooled: Option<Spooled>,
}

/// An event read back from the spool (see `crate::spool`): its tool calls have run (or were
/// refused by a fail-closed hook), so none opens a checkpoint.
#[derive(Debug, Clone)]
pub struct Spooled {
    /// When the writer got it from the agent (ms since the epoch).
    pub received_ms: u64,
    /// `<spool file>#<record index>`: what makes a drain exactly-once across crashes.
    pub spool_id: String,
    /// The writer refused the call itself (a fail-closed hook): it did not run.
    pub denied_by_writer: bool,
}

impl Ingest {
    /// An ingest of `raw` from `client` that nobody waits on, for the pipeline's own tests.
    #[cfg(test)]
    pub(super) fn for_test(client: u64, source: &str, raw: &impl serde::Serialize) -> Ingest {
        Ingest {
            client,
            source: source.into(),
            raw: serde_json::value::to_raw_value(raw).unwrap(),
            session_id: None,
            reply_by_ms: None,
            spooled: None,
            gone: None,
            done: Box::new(|_| {}),
        }
    }

    /// Nobody waits for this event's decision any more: the hook gave up, the call ran.
    pub(super) fn abandoned(&self) -> Option<&'static str> {
        if let Some(s) = &self.spooled {
            return Some(if s.denied_by_writer {
                "no daemon could be reached; the hook refused the call (--fail-closed)"
            } else {
                "no daemon could be reached; the call ran unchecked and was spooled"
            });
        }
        if self
            .reply_by_ms
            .is_some_and(|t| crate::util::time::now_ms() > t)
        {
            Some("the hook's deadline passed before the daemon got to this tool call")
        } else if self.gone.as_ref().is_some_and(|g| g()) {
            Some("the hook disconnected before the daemon got to this tool call")
        } else {
            None
        }
    }
}

/// Longest `source` name: it also names the fallback session `<source>-unassigned`.
const MAX_SOURCE_LEN: usize = 64;

/// What an ingest must be to be taken (from the socket or the spool alike): a source name, a
/// valid session hint, an event nested no deeper than events may be.
pub fn check_ingest(
    source: &str,
    session_id: Option<&str>,
    event: &RawValue,
) -> Result<(), RpcError> {
    if source.is_empty()
        || source.len() > MAX_SOURCE_LEN
        || !source
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            format!(
                "invalid source {source:?}: 1 to {MAX_SOURCE_LEN} letters, digits, '-', '_' or '.'"
            ),
        ));
    }
    if let Some(id) = session_id {
        dstream_sdk::validate_session_id(id).map_err(|e| {
            RpcError::new(
                codes::INVALID_SESSION_ID,
                format!("invalid session_id {id:?}: {e}"),
            )
        })?;
    }
    let depth = crate::jsonscan::nesting_depth(event.get().as_bytes());
    if depth > MAX_NESTING_DEPTH {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            format!(
                "event nests {depth} levels of arrays and objects; the limit is {MAX_NESTING_DEPTH}"
            ),
        ));
    }
    Ok(())
}
