//! The shared state of one session: what its writer has committed, its index, its live feed.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use bytes::Bytes;
use tokio::sync::{broadcast, oneshot};

use super::index::SparseIndex;
use super::writer::{self, Ack, WriterEnv, WriterMsg, WriterState};
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

/// The channel to the session's writer thread, when one runs.
enum WriterSlot {
    Idle,
    Running(Sender<WriterMsg>),
    /// The daemon is stopping: no new writer starts.
    Closed,
}

/// Appending to a session: its writer thread (started on demand) and the state it resumes.
struct WriterHandle {
    slot: Mutex<WriterSlot>,
    state: Mutex<WriterState>,
    env: WriterEnv,
}

pub struct Session {
    pub id: String,
    pub(crate) path: PathBuf,
    writer: Option<WriterHandle>,
    quarantine: Option<String>,
    committed: AtomicU64,
    pub(crate) live: broadcast::Sender<EventJson>,
    pub(crate) index: RwLock<SparseIndex>,
    pub(crate) meta: Mutex<SessionMeta>,
    read_handle: Mutex<Option<Arc<File>>>,
}

impl Session {
    /// A session that takes appends, resuming after `len` bytes of log.
    pub(crate) fn open(
        id: String,
        path: PathBuf,
        len: u64,
        state: SessionState,
        env: WriterEnv,
    ) -> Session {
        let last_index = state.index.last().map(|e| e.offset);
        let writer_state = WriterState::new(
            len,
            state.last_lsn + 1,
            last_index,
            state.meta.stream_id.clone(),
        );
        let live = env.settings.live_buffer;
        let handle = WriterHandle {
            slot: Mutex::new(WriterSlot::Idle),
            state: Mutex::new(writer_state),
            env,
        };
        Session::build(id, path, Some(handle), None, state, live)
    }

    /// A session whose log is quarantined: readable state only, no appends.
    pub(crate) fn quarantined(
        id: String,
        path: PathBuf,
        reason: String,
        state: SessionState,
        live: usize,
    ) -> Session {
        Session::build(id, path, None, Some(reason), state, live)
    }

    fn build(
        id: String,
        path: PathBuf,
        writer: Option<WriterHandle>,
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

    /// Queues an event behind every one queued before it, starting the writer if it is idle.
    /// `ack` answers exactly once: from the writer once the event is durable or has failed, or
    /// at once if the session cannot take it.
    pub fn submit(self: &Arc<Self>, event: NewEventRaw, ack: Ack) {
        if let Err((err, ack)) = self.enqueue(event, ack) {
            ack.send(Err(err));
        }
    }

    fn enqueue(self: &Arc<Self>, event: NewEventRaw, ack: Ack) -> Result<(), (StoreError, Ack)> {
        let Some(handle) = &self.writer else {
            let reason = self.quarantine.clone().unwrap_or_default();
            return Err((
                StoreError::Quarantined {
                    session: self.id.clone(),
                    reason,
                },
                ack,
            ));
        };
        // Sending under the slot lock is what lets an idle writer retire without losing a
        // message: see `retire_writer`.
        let mut slot = handle.slot.lock().unwrap();
        if matches!(*slot, WriterSlot::Idle) {
            let (tx, rx) = mpsc::channel();
            let (session, env) = (self.clone(), handle.env.clone());
            let name = format!("dstream-w-{}", self.id.chars().take(5).collect::<String>());
            let spawned = std::thread::Builder::new()
                .name(name)
                .spawn(move || writer::run(session, rx, env));
            if let Err(e) = spawned {
                return Err((StoreError::io("starting a writer thread", &e), ack));
            }
            *slot = WriterSlot::Running(tx);
        }
        match &*slot {
            // The receiver lives until the slot stops being Running, which needs this lock.
            WriterSlot::Running(tx) => match tx.send(WriterMsg::Append { event, ack }) {
                Err(mpsc::SendError(WriterMsg::Append { ack, .. })) => {
                    Err((StoreError::ShuttingDown, ack))
                }
                Ok(()) | Err(_) => Ok(()),
            },
            WriterSlot::Idle | WriterSlot::Closed => Err((StoreError::ShuttingDown, ack)),
        }
    }

    /// Appends one event and waits for it to be durable.
    pub async fn append(self: &Arc<Self>, event: NewEventRaw) -> Result<AppendAck, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.submit(event, Ack::new(move |r| drop(tx.send(r))));
        rx.await.unwrap_or(Err(StoreError::ShuttingDown))
    }

    /// For the writer thread: the state to resume from (waits for a retiring writer to finish).
    pub(crate) fn writer_state(&self) -> MutexGuard<'_, WriterState> {
        self.writer
            .as_ref()
            .expect("only sessions with a writer start one")
            .state
            .lock()
            .unwrap()
    }

    /// For an idle writer thread: retire unless a message slipped in; returns that message.
    pub(crate) fn retire_writer(&self, rx: &Receiver<WriterMsg>) -> Option<WriterMsg> {
        let handle = self.writer.as_ref()?;
        let mut slot = handle.slot.lock().unwrap();
        match rx.try_recv() {
            Ok(msg) => Some(msg),
            Err(_) => {
                if matches!(*slot, WriterSlot::Running(_)) {
                    *slot = WriterSlot::Idle;
                }
                None
            }
        }
    }

    /// For a writer told to shut down: no writer may start again, and whatever is still queued
    /// is answered "shutting down" (by dropping its `Ack`).
    pub(crate) fn retire_writer_for_good(&self, rx: &Receiver<WriterMsg>) {
        if let Some(handle) = &self.writer {
            let mut slot = handle.slot.lock().unwrap();
            *slot = WriterSlot::Closed;
            while rx.try_recv().is_ok() {}
        }
    }

    /// Asks a running writer to sync and stop, and keeps new ones from starting. The returned
    /// receiver completes when the writer is done (at once if none was running).
    pub(crate) fn close_writer(&self) -> Option<oneshot::Receiver<()>> {
        let handle = self.writer.as_ref()?;
        let mut slot = handle.slot.lock().unwrap();
        let (done, rx) = oneshot::channel();
        match std::mem::replace(&mut *slot, WriterSlot::Closed) {
            WriterSlot::Running(tx) => {
                let _ = tx.send(WriterMsg::Shutdown { done });
                Some(rx)
            }
            WriterSlot::Idle | WriterSlot::Closed => None,
        }
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
