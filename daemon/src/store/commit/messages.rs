//! What the commit thread is sent (appends, flushes, shutdown) and how each append is
//! answered: an [`Ack`] called exactly once, with the event's LSN or the reason it failed.

use std::sync::Arc;

use serde_json::value::RawValue;

use crate::store::error::StoreError;
use crate::store::session::Session;
use crate::store::types::{AppendAck, NewEventRaw};

type AckFn = Box<dyn FnOnce(Result<AppendAck, StoreError>) + Send>;

/// How an append is answered. Called exactly once: if the commit thread goes away without
/// calling it (the daemon stopping), dropping it answers "shutting down".
pub struct Ack(Option<AckFn>);

impl Ack {
    pub fn new(f: impl FnOnce(Result<AppendAck, StoreError>) + Send + 'static) -> Ack {
        Ack(Some(Box::new(f)))
    }
    pub(crate) fn send(mut self, result: Result<AppendAck, StoreError>) {
        if let Some(f) = self.0.take() {
            f(result);
        }
    }
}

impl Drop for Ack {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Err(StoreError::ShuttingDown));
        }
    }
}

pub(crate) struct Append {
    pub session: Arc<Session>,
    pub event: NewEventRaw,
    /// The event's id when the caller chose it (the pipeline does, so that later events can
    /// name it as their cause before it is committed); else the commit thread makes one.
    pub id: Option<String>,
    /// Durable before acknowledged, whatever the fsync policy.
    pub must_sync: bool,
    pub ack: Ack,
}

// Appends are the traffic; the rare Shutdown costs no more than they do.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CommitMsg {
    Append(Append),
    /// Appends committed together, in one batch.
    Appends(Vec<Append>),
    /// Sync the write-ahead log now, then answer.
    Flush {
        done: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
    },
    /// Delete a session whose last LSN is still `last_lsn` (see `store::tombstone`).
    Delete {
        session: Arc<Session>,
        last_lsn: u64,
        reason: String,
        done: tokio::sync::oneshot::Sender<Result<crate::store::tombstone::Tombstone, StoreError>>,
    },
    /// Checkpoint and stop; `done` is dropped once every log is synced.
    Shutdown {
        done: tokio::sync::oneshot::Sender<()>,
    },
}

/// About what an event costs in a batch, before it is serialized.
pub(super) fn approx_len(e: &NewEventRaw) -> usize {
    let raw = |v: &Option<Box<RawValue>>| v.as_ref().map_or(0, |v| v.get().len());
    e.event_type.len() + raw(&e.payload) + raw(&e.metadata) + raw(&e.raw) + 64
}

pub(super) fn fail_all(acks: Vec<Ack>, err: StoreError) {
    for ack in acks {
        ack.send(Err(err.clone()));
    }
}
