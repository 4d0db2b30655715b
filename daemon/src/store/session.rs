//! The shared state of one session: what its writer has committed, its index, its live feed.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc, oneshot};

use super::index::SparseIndex;
use super::writer::WriterMsg;
use super::{AppendAck, NewEventRaw, StoreError};

/// One committed event as subscribers receive it: the stored JSON without its crc field and
/// without the closing `}` (see [`EventJson::write_to`]), sliced from the written batch.
#[derive(Debug, Clone)]
pub struct EventJson {
    pub lsn: u64,
    body: Bytes,
}

impl EventJson {
    pub(crate) fn new(lsn: u64, body: Bytes) -> Self {
        EventJson { lsn, body }
    }
    /// Appends the event as a complete JSON object.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.body);
        out.push(b'}');
    }
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.body.len() + 1);
        self.write_to(&mut v);
        v
    }
}

#[derive(Debug, Clone, Default)]
pub struct SessionMeta {
    pub stream_id: Option<String>,
    pub first_ts: u64,
    pub last_ts: u64,
    pub bytes: u64,
}

/// Where a session stands when its writer starts: after recovery, or empty for a new one.
#[derive(Debug, Default)]
pub struct SessionState {
    pub last_lsn: u64,
    pub index: SparseIndex,
    pub meta: SessionMeta,
}

pub struct Session {
    pub id: String,
    pub(crate) path: PathBuf,
    writer: Option<mpsc::Sender<WriterMsg>>,
    quarantine: Option<String>,
    committed: AtomicU64,
    pub(crate) live: broadcast::Sender<EventJson>,
    pub(crate) index: RwLock<SparseIndex>,
    pub(crate) meta: Mutex<SessionMeta>,
    read_handle: Mutex<Option<Arc<File>>>,
}

/// An append accepted into the writer's queue, in order; await it for the acknowledgement.
pub struct PendingAppend(oneshot::Receiver<Result<AppendAck, StoreError>>);

impl PendingAppend {
    pub async fn wait(self) -> Result<AppendAck, StoreError> {
        self.0.await.unwrap_or(Err(StoreError::ShuttingDown))
    }
}

impl Session {
    pub(crate) fn new(
        id: String,
        path: PathBuf,
        writer: Option<mpsc::Sender<WriterMsg>>,
        quarantine: Option<String>,
        state: SessionState,
        live_buffer: usize,
    ) -> Session {
        Session {
            id,
            path,
            writer,
            quarantine,
            committed: AtomicU64::new(state.last_lsn),
            live: broadcast::channel(live_buffer).0,
            index: RwLock::new(state.index),
            meta: Mutex::new(state.meta),
            read_handle: Mutex::new(None),
        }
    }

    /// LSN of the last event that is acknowledged and visible to readers.
    pub fn committed_lsn(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    pub(crate) fn set_committed(&self, lsn: u64) {
        self.committed.store(lsn, Ordering::Release);
    }

    pub fn quarantine_reason(&self) -> Option<&str> {
        self.quarantine.as_deref()
    }

    /// Registers a live listener. Register before reading history so nothing falls between.
    pub fn listen(&self) -> broadcast::Receiver<EventJson> {
        self.live.subscribe()
    }

    pub fn meta(&self) -> SessionMeta {
        self.meta.lock().unwrap().clone()
    }

    /// Queues an event behind every one queued before it; waits only if the queue is full.
    pub async fn submit(&self, event: NewEventRaw) -> Result<PendingAppend, StoreError> {
        let Some(writer) = &self.writer else {
            return Err(StoreError::Quarantined {
                session: self.id.clone(),
                reason: self.quarantine.clone().unwrap_or_default(),
            });
        };
        let (ack, rx) = oneshot::channel();
        writer
            .send(WriterMsg::Append { event, ack })
            .await
            .map_err(|_| StoreError::ShuttingDown)?;
        Ok(PendingAppend(rx))
    }

    pub(crate) fn writer(&self) -> Option<&mpsc::Sender<WriterMsg>> {
        self.writer.as_ref()
    }

    /// A shared read-only handle on the log (positional reads need no seek, so one serves all).
    pub(crate) fn read_handle(&self) -> std::io::Result<Arc<File>> {
        let mut slot = self.read_handle.lock().unwrap();
        if let Some(f) = slot.as_ref() {
            return Ok(f.clone());
        }
        let f = Arc::new(File::open(&self.path)?);
        *slot = Some(f.clone());
        Ok(f)
    }
}
