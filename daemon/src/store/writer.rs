//! The single writer of one session log, with group commit: every append queued while the
//! previous batch was being written and synced goes out in the next batch, as one `write` and
//! (under `fsync = "always"`) one `fdatasync`.
//!
//! The writer is a dedicated OS thread, started by the first append to an idle session and
//! ending after a quiet spell. It blocks on disk I/O without holding up the async workers, and
//! it acknowledges each append itself (see [`Ack`]), so an append crosses threads twice: from
//! its connection to the writer, and from the writer to the connection's reply queue.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use super::index::IndexEntry;
use super::record;
use super::session::{EventJson, Session};
use super::{AppendAck, NewEventRaw, StoreError, StoreSettings, StoreStats};
use crate::config::FsyncPolicy;

/// Most events written in one batch.
const MAX_BATCH_EVENTS: usize = 4096;
/// A batch stops growing past this many bytes.
const MAX_BATCH_BYTES: usize = 8 << 20;
/// A writer thread with nothing to do for this long ends; the next append starts another.
const IDLE_EXIT: Duration = Duration::from_secs(30);

type AckFn = Box<dyn FnOnce(Result<AppendAck, StoreError>) + Send>;

/// How an append is answered. Called exactly once: if the writer goes away without calling it
/// (the daemon stopping), dropping it answers "shutting down", so no request goes unanswered.
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

pub(crate) enum WriterMsg {
    Append {
        event: NewEventRaw,
        ack: Ack,
    },
    /// Sync what is written and stop; `done` is dropped once the log is closed.
    Shutdown {
        done: tokio::sync::oneshot::Sender<()>,
    },
}

/// The serialized form of a stored event; field order is the on-disk order (`lsn` first, which
/// recovery reads without parsing the line).
#[derive(Serialize)]
struct StoredEvent<'a> {
    lsn: u64,
    id: &'a str,
    #[serde(rename = "type")]
    event_type: &'a str,
    session_id: &'a str,
    stream_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    causation_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    correlation_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    actor: Option<&'a str>,
    timestamp: u64,
    payload: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw: Option<&'a RawValue>,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What a session's writer knows, kept in the session between writer threads.
pub(crate) struct WriterState {
    file: Option<Arc<File>>,
    idx_file: Option<File>,
    /// Bytes of the log that are written (and, under "always", synced).
    len: u64,
    /// Written but not yet synced (interval/never policies).
    dirty: bool,
    next_lsn: u64,
    last_index_offset: Option<u64>,
    ids: ulid::Generator,
    /// Set when the log can no longer be trusted to match what was acknowledged.
    failed: Option<String>,
    /// Lineage of the session, fixed by its first event.
    stream_id: Option<String>,
}

impl WriterState {
    pub(crate) fn new(
        len: u64,
        next_lsn: u64,
        last_index_offset: Option<u64>,
        stream_id: Option<String>,
    ) -> Self {
        WriterState {
            file: None,
            idx_file: None,
            len,
            dirty: false,
            next_lsn,
            last_index_offset,
            ids: ulid::Generator::new(),
            failed: None,
            stream_id,
        }
    }
}

/// Everything a writer thread needs besides its session.
#[derive(Clone)]
pub(crate) struct WriterEnv {
    pub settings: StoreSettings,
    pub stats: Arc<StoreStats>,
}

struct Writer<'a> {
    session: &'a Session,
    env: &'a WriterEnv,
    state: &'a mut WriterState,
}

struct Prepared {
    buf: Vec<u8>,
    /// (lsn, id, start of line in buf, length of the event body)
    lines: Vec<(u64, String, usize, usize)>,
    acks: Vec<Ack>,
    must_sync: bool,
    timestamp: u64,
    /// The lineage this batch gives a session that had none yet.
    new_lineage: Option<String>,
}

/// The body of a writer thread: takes the session's writer state and serves `rx` until told
/// to stop, or until idle (then hands the state back for the next thread).
pub(crate) fn run(session: Arc<Session>, rx: Receiver<WriterMsg>, env: WriterEnv) {
    let mut state = session.writer_state();
    let mut w = Writer {
        session: &session,
        env: &env,
        state: &mut state,
    };
    let sync_period = Duration::from_millis(env.settings.fsync_interval_ms);
    let periodic = env.settings.fsync == FsyncPolicy::Interval;
    let mut last_sync = Instant::now();
    let mut batch = Vec::new();
    loop {
        let wait = if periodic && w.state.dirty {
            sync_period.saturating_sub(last_sync.elapsed())
        } else {
            IDLE_EXIT
        };
        let first = match rx.recv_timeout(wait) {
            Ok(msg) => msg,
            Err(RecvTimeoutError::Timeout) if periodic && w.state.dirty => {
                w.sync_now();
                last_sync = Instant::now();
                continue;
            }
            Err(RecvTimeoutError::Timeout) => match session.retire_writer(&rx) {
                Some(msg) => msg,
                None => break,
            },
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let mut shutdown = None;
        match first {
            WriterMsg::Shutdown { done } => shutdown = Some(done),
            WriterMsg::Append { event, ack } => batch.push((event, ack)),
        }
        let mut bytes = 0;
        while shutdown.is_none() && batch.len() < MAX_BATCH_EVENTS && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(WriterMsg::Append { event, ack }) => {
                    bytes += event.approx_len();
                    batch.push((event, ack));
                }
                Ok(WriterMsg::Shutdown { done }) => shutdown = Some(done),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            w.write_batch(std::mem::take(&mut batch));
        }
        if periodic && w.state.dirty && last_sync.elapsed() >= sync_period {
            w.sync_now();
            last_sync = Instant::now();
        }
        if let Some(done) = shutdown {
            session.retire_writer_for_good(&rx);
            if w.state.dirty {
                w.sync_now();
            }
            drop(done);
            return;
        }
    }
    if w.state.dirty {
        w.sync_now();
    }
}

impl Writer<'_> {
    fn prepare(&mut self, batch: Vec<(NewEventRaw, Ack)>) -> Prepared {
        let timestamp = now_ms();
        let mut p = Prepared {
            buf: Vec::with_capacity(batch.iter().map(|(e, _)| e.approx_len() + 160).sum()),
            lines: Vec::with_capacity(batch.len()),
            acks: Vec::with_capacity(batch.len()),
            must_sync: self.env.settings.fsync == FsyncPolicy::Always,
            timestamp,
            new_lineage: None,
        };
        let empty_payload: &RawValue = serde_json::from_str("{}").expect("valid json");
        // An event without a stream_id joins the session's lineage: the first event's stream.
        let mut lineage = self.state.stream_id.clone();
        let mut object = Vec::with_capacity(512);
        for (i, (event, ack)) in batch.into_iter().enumerate() {
            let lsn = self.state.next_lsn + i as u64;
            let id = self
                .state
                .ids
                .generate()
                .unwrap_or_else(|_| ulid::Ulid::new())
                .to_string();
            if lineage.is_none() {
                let root = event
                    .stream_id
                    .clone()
                    .unwrap_or_else(|| self.session.id.clone());
                p.new_lineage = Some(root.clone());
                lineage = Some(root);
            }
            let stream_id = event
                .stream_id
                .as_deref()
                .or(lineage.as_deref())
                .unwrap_or_default();
            let stored = StoredEvent {
                lsn,
                id: &id,
                event_type: &event.event_type,
                session_id: &self.session.id,
                stream_id,
                causation_id: event.causation_id.as_deref(),
                correlation_id: event.correlation_id.as_deref(),
                actor: event.actor.as_deref(),
                timestamp,
                payload: event.payload.as_deref().unwrap_or(empty_payload),
                metadata: event.metadata.as_deref(),
                raw: event.raw.as_deref(),
            };
            object.clear();
            serde_json::to_writer(&mut object, &stored).expect("serializing to a Vec cannot fail");
            let start = p.buf.len();
            record::seal(&object, &mut p.buf);
            p.must_sync |= event.event_type.starts_with("checkpoint.");
            p.lines.push((lsn, id, start, object.len() - 1));
            p.acks.push(ack);
        }
        p
    }

    fn write_batch(&mut self, batch: Vec<(NewEventRaw, Ack)>) {
        if let Some(reason) = &self.state.failed {
            let err = StoreError::Failed {
                session: self.session.id.clone(),
                reason: reason.clone(),
            };
            for (_, ack) in batch {
                ack.send(Err(err.clone()));
            }
            return;
        }
        let p = self.prepare(batch);
        let file = match self.log_file() {
            Ok(f) => f,
            Err(e) => return fail_all(p.acks, StoreError::io("opening the log", &e)),
        };
        let old_len = self.state.len;
        match write_durably(&file, &p.buf, old_len, p.must_sync) {
            Ok(()) => {}
            Err(WriteFailure::Rejected(e)) => {
                tracing::error!(session = %self.session.id, error = %e, "append failed; the log is unchanged");
                return fail_all(p.acks, StoreError::io("writing the log", &e));
            }
            Err(WriteFailure::Broken(e)) => {
                let reason = format!("the log could not be restored after a failed write: {e}");
                tracing::error!(session = %self.session.id, %reason, "session writer stopped");
                self.state.failed = Some(reason);
                return fail_all(p.acks, StoreError::io("writing the log", &e));
            }
        }
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        self.env.stats.fsyncs.fetch_add(p.must_sync as u64, relaxed);
        self.env
            .stats
            .appends
            .fetch_add(p.lines.len() as u64, relaxed);
        self.env
            .stats
            .bytes_written
            .fetch_add(p.buf.len() as u64, relaxed);
        self.state.dirty |= !p.must_sync;

        let buf = Bytes::from(p.buf);
        self.index_lines(old_len, &p.lines);
        self.state.len = old_len + buf.len() as u64;
        let last_lsn = p.lines.last().map_or(self.state.next_lsn - 1, |l| l.0);
        self.state.next_lsn = last_lsn + 1;
        {
            let mut meta = self.session.meta.lock().unwrap();
            if let Some(root) = p.new_lineage {
                meta.stream_id = Some(root.clone());
                meta.first_ts = p.timestamp;
                self.state.stream_id = Some(root);
            }
            meta.last_ts = p.timestamp;
            meta.bytes = self.state.len;
        }
        self.session.set_committed(last_lsn);
        for ((lsn, id, start, body_len), ack) in p.lines.into_iter().zip(p.acks) {
            let _ = self
                .session
                .live
                .send(EventJson::new(lsn, buf.slice(start..start + body_len)));
            ack.send(Ok(AppendAck { lsn, id }));
        }
    }

    /// Adds sparse index entries for the lines just written (same rule as recovery's rebuild).
    fn index_lines(&mut self, base: u64, lines: &[(u64, String, usize, usize)]) {
        let interval = self.env.settings.index_interval_bytes;
        let mut added = Vec::new();
        for &(lsn, _, start, _) in lines {
            let offset = base + start as u64;
            if self
                .state
                .last_index_offset
                .is_none_or(|last| offset >= last + interval)
            {
                added.push(IndexEntry { lsn, offset });
                self.state.last_index_offset = Some(offset);
            }
        }
        if added.is_empty() {
            return;
        }
        {
            let mut index = self.session.index.write().unwrap();
            for e in &added {
                index.push(*e);
            }
        }
        // The on-disk index is a cache: a failure here costs a rebuild at the next start.
        if let Err(e) = self.append_index_file(&added) {
            tracing::warn!(session = %self.session.id, error = %e, "could not extend the index file");
            self.state.idx_file = None;
        }
    }

    fn append_index_file(&mut self, entries: &[IndexEntry]) -> io::Result<()> {
        if self.state.idx_file.is_none() {
            let path = self.session.path.with_extension("idx");
            self.state.idx_file = Some(super::private_file().create(true).append(true).open(path)?);
        }
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_bytes()).collect();
        self.state
            .idx_file
            .as_mut()
            .expect("opened above")
            .write_all(&bytes)
    }

    fn log_file(&mut self) -> io::Result<Arc<File>> {
        if let Some(f) = &self.state.file {
            return Ok(f.clone());
        }
        let existed = self.session.path.exists();
        let f = Arc::new(
            super::private_file()
                .create(true)
                .append(true)
                .open(&self.session.path)?,
        );
        if !existed {
            // A new file is durable only once its directory entry is.
            if let Some(dir) = self.session.path.parent() {
                File::open(dir)?.sync_all()?;
            }
        }
        self.state.file = Some(f.clone());
        Ok(f)
    }

    fn sync_now(&mut self) {
        let Some(file) = self.state.file.clone() else {
            return;
        };
        match file.sync_data() {
            Ok(()) => {
                self.state.dirty = false;
                self.env
                    .stats
                    .fsyncs
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => {
                // After a failed fsync the kernel may have dropped the dirty pages: what was
                // acknowledged can no longer be vouched for, so stop taking appends.
                let reason = format!("background fsync failed: {e}");
                tracing::error!(session = %self.session.id, %reason, "session writer stopped");
                self.state.failed = Some(reason);
            }
        }
    }
}

fn fail_all(acks: Vec<Ack>, err: StoreError) {
    for ack in acks {
        ack.send(Err(err.clone()));
    }
}

enum WriteFailure {
    /// The batch was not stored and the log is back as it was.
    Rejected(io::Error),
    /// The batch was not stored and the log could not be put back.
    Broken(io::Error),
}

/// Writes `buf` at the end of the log and, if asked, syncs it. On failure the log is cut back
/// to `old_len`, so a batch is either wholly stored or not at all.
fn write_durably(file: &File, buf: &[u8], old_len: u64, sync: bool) -> Result<(), WriteFailure> {
    let mut f = file;
    let outcome = f
        .write_all(buf)
        .and_then(|()| if sync { file.sync_data() } else { Ok(()) });
    match outcome {
        Ok(()) => Ok(()),
        Err(e) => match file.set_len(old_len).and_then(|()| file.sync_data()) {
            Ok(()) => Err(WriteFailure::Rejected(e)),
            Err(_) => Err(WriteFailure::Broken(e)),
        },
    }
}
