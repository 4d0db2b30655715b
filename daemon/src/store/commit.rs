//! The one commit path for every session: a single thread that takes whatever appends are
//! queued (from any session), writes each session's share to its log, writes the whole batch
//! to the shared write-ahead log ([`super::wal`]) and syncs that one file, then publishes and
//! acknowledges every append of the batch.
//!
//! Why one thread: an append crosses threads twice (connection → commit thread → connection's
//! reply queue) whatever the number of sessions, the thread count is fixed, and one sync covers
//! every session in the batch. The per-session logs are synced at checkpoints only (when the
//! write-ahead log is full, and at shutdown), after which the write-ahead log starts over.
//!
//! Order: the session logs are written before the write-ahead log, so a failed log write
//! leaves nothing in the write-ahead log to replay; readers see an event only once its batch
//! is durable (`committed_lsn` moves after the sync).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use dstream_sdk::Event;
use serde_json::value::RawValue;

use super::index::IndexEntry;
use super::record;
use super::session::{EventJson, Session};
use super::wal::Wal;
use super::{AppendAck, NewEventRaw, StoreError, StoreSettings, StoreStats};
use crate::config::FsyncPolicy;
use crate::hub::{Committed, Hub};

/// Most events committed in one batch.
const MAX_BATCH_EVENTS: usize = 4096;
/// A batch stops growing past this many bytes.
const MAX_BATCH_BYTES: usize = 8 << 20;

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
    /// Checkpoint and stop; `done` is dropped once every log is synced.
    Shutdown {
        done: tokio::sync::oneshot::Sender<()>,
    },
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What the commit thread knows of one session's log, kept in the session.
pub(crate) struct WriterState {
    /// Bytes of the log that are written.
    len: u64,
    next_lsn: u64,
    last_index_offset: Option<u64>,
    /// Index entries not yet in the `.idx` file: written at the next checkpoint, off the
    /// append path (the file is a cache; recovery extends a short one from the log).
    unsaved_index: Vec<IndexEntry>,
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
            len,
            next_lsn,
            last_index_offset,
            unsaved_index: Vec::new(),
            ids: ulid::Generator::new(),
            failed: None,
            stream_id,
        }
    }
}

pub(crate) struct Committer {
    pub wal: Wal,
    pub settings: StoreSettings,
    pub stats: Arc<StoreStats>,
    pub sessions_dir: PathBuf,
    pub hub: Arc<Hub>,
    /// Logs written since the last checkpoint (they need a sync before the WAL starts over).
    dirty: HashMap<String, Arc<Session>>,
    /// Written to the WAL but not synced (interval / never policies).
    unsynced: bool,
    last_sync: Instant,
    /// Set when the WAL can no longer be trusted: every append is refused from then on.
    failed: Option<String>,
}

/// One session's share of a batch.
struct Group {
    session: Arc<Session>,
    appends: Vec<(NewEventRaw, Option<String>, Ack)>,
}

/// A group serialized and written to its log, waiting for the WAL sync.
struct Written {
    session: Arc<Session>,
    buf: Bytes,
    /// (lsn, id, start of line in buf, length of the event body)
    lines: Vec<(u64, String, usize, usize)>,
    acks: Vec<Ack>,
    old_len: u64,
    timestamp: u64,
    new_lineage: Option<String>,
}

impl Committer {
    pub(crate) fn new(
        wal: Wal,
        settings: StoreSettings,
        stats: Arc<StoreStats>,
        sessions_dir: PathBuf,
        hub: Arc<Hub>,
    ) -> Self {
        Committer {
            wal,
            settings,
            stats,
            sessions_dir,
            hub,
            dirty: HashMap::new(),
            unsynced: false,
            last_sync: Instant::now(),
            failed: None,
        }
    }

    /// The body of the commit thread: serves `rx` until told to stop.
    pub(crate) fn run(mut self, rx: Receiver<CommitMsg>) {
        let period = Duration::from_millis(self.settings.fsync_interval_ms);
        let mut batch: Vec<Append> = Vec::new();
        loop {
            let wait = if self.unsynced && self.settings.fsync == FsyncPolicy::Interval {
                period.saturating_sub(self.last_sync.elapsed())
            } else {
                Duration::from_secs(3600)
            };
            let first = match rx.recv_timeout(wait) {
                Ok(msg) => msg,
                Err(RecvTimeoutError::Timeout) => {
                    self.sync_wal();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.checkpoint();
                    return;
                }
            };
            let mut shutdown = None;
            match first {
                CommitMsg::Shutdown { done } => shutdown = Some(done),
                CommitMsg::Append(a) => batch.push(a),
            }
            let mut bytes = 0;
            while shutdown.is_none() && batch.len() < MAX_BATCH_EVENTS && bytes < MAX_BATCH_BYTES {
                match rx.try_recv() {
                    Ok(CommitMsg::Append(a)) => {
                        bytes += approx_len(&a.event);
                        batch.push(a);
                    }
                    Ok(CommitMsg::Shutdown { done }) => shutdown = Some(done),
                    Err(_) => break,
                }
            }
            if !batch.is_empty() {
                self.commit(std::mem::take(&mut batch));
            }
            if self.unsynced
                && self.settings.fsync == FsyncPolicy::Interval
                && self.last_sync.elapsed() >= period
            {
                self.sync_wal();
            }
            if let Some(done) = shutdown {
                self.checkpoint();
                // Anything still queued is answered "shutting down" by dropping its Ack.
                drop(rx);
                drop(done);
                return;
            }
        }
    }

    fn sync_wal(&mut self) {
        if !self.unsynced {
            return;
        }
        match self.wal.sync() {
            Ok(()) => {
                self.stats.fsyncs.fetch_add(1, Relaxed);
                self.unsynced = false;
                self.last_sync = Instant::now();
            }
            Err(e) => self.fail(format!("syncing the write-ahead log failed: {e}")),
        }
    }

    fn fail(&mut self, reason: String) {
        // After a failed fsync the kernel may have dropped the dirty pages: what was
        // acknowledged can no longer be vouched for, so stop taking appends.
        tracing::error!(%reason, "the store takes no more appends until the daemon restarts");
        self.failed.get_or_insert(reason);
    }

    /// Syncs every log written since the last checkpoint, then starts the WAL over.
    pub(crate) fn checkpoint(&mut self) {
        if self.failed.is_some() {
            return;
        }
        for session in self.dirty.values() {
            save_index(session);
        }
        if self.settings.fsync != FsyncPolicy::Never {
            if let Some(reason) = sync_logs(self.dirty.values().collect()) {
                self.fail(reason);
                return;
            }
            // New logs are durable only once their directory entries are.
            if let Err(e) = super::fsutil::sync_dir(&self.sessions_dir) {
                self.fail(format!("syncing the sessions directory failed: {e}"));
                return;
            }
            if !self.dirty.is_empty() {
                self.stats
                    .fsyncs
                    .fetch_add(self.dirty.len() as u64, Relaxed);
            }
        }
        self.dirty.clear();
        if let Err(e) = self.wal.reset() {
            self.fail(format!("restarting the write-ahead log failed: {e}"));
        }
        self.unsynced = false;
    }

    fn commit(&mut self, batch: Vec<Append>) {
        if let Some(reason) = &self.failed {
            let err = StoreError::Failed {
                reason: reason.clone(),
            };
            for a in batch {
                a.ack.send(Err(err.clone()));
            }
            return;
        }
        // One group per session, in order of first appearance; order within a session kept.
        let mut must_sync = self.settings.fsync == FsyncPolicy::Always;
        let mut groups: Vec<Group> = Vec::new();
        let mut slot: HashMap<*const Session, usize> = HashMap::new();
        for a in batch {
            must_sync |= a.must_sync;
            let i = *slot.entry(Arc::as_ptr(&a.session)).or_insert_with(|| {
                groups.push(Group {
                    session: a.session.clone(),
                    appends: Vec::new(),
                });
                groups.len() - 1
            });
            groups[i].appends.push((a.event, a.id, a.ack));
        }
        let mut written = Vec::with_capacity(groups.len());
        let mut wal_buf = Vec::new();
        for group in groups {
            if let Some(w) = self.write_group(group) {
                for &(_, _, start, body_len) in &w.lines {
                    // The whole sealed line: body, crc trailer and newline.
                    let end = start + body_len + record::CRC_TRAILER_LEN;
                    self.wal
                        .encode(&w.session.id, &w.buf[start..=end], &mut wal_buf);
                }
                written.push(w);
            }
        }
        if written.is_empty() {
            return;
        }
        if !self.wal.fits(wal_buf.len()) {
            self.checkpoint();
        }
        let outcome = if self.failed.is_some() {
            Err(io::Error::other("the store failed"))
        } else if wal_buf.len() > self.wal.room() {
            Err(io::Error::other("batch larger than the write-ahead log"))
        } else {
            self.wal
                .write(&wal_buf)
                .and_then(|()| if must_sync { self.wal.sync() } else { Ok(()) })
        };
        if let Err(e) = outcome {
            tracing::error!(error = %e, "writing the write-ahead log failed; the batch is refused");
            if must_sync && self.failed.is_none() {
                self.fail(format!("syncing the write-ahead log failed: {e}"));
            }
            for w in written {
                self.cut_back(&w);
                fail_all(w.acks, StoreError::io("writing the write-ahead log", &e));
            }
            return;
        }
        if must_sync {
            self.stats.fsyncs.fetch_add(1, Relaxed);
            self.unsynced = false;
            self.last_sync = Instant::now();
        } else {
            self.unsynced = true;
        }
        for w in written {
            self.finish(w);
        }
    }

    /// Serializes a group and appends it to its log (not synced). `None` when it failed (the
    /// acks are answered).
    fn write_group(&mut self, group: Group) -> Option<Written> {
        let session = group.session;
        if let Some(reason) = session.quarantine_reason() {
            let err = StoreError::Quarantined {
                session: session.id.clone(),
                reason: reason.to_string(),
            };
            fail_all(group.appends.into_iter().map(|(_, _, a)| a).collect(), err);
            return None;
        }
        let mut state = session.writer.lock().unwrap();
        if let Some(reason) = &state.failed {
            let err = StoreError::Failed {
                reason: format!("session {}: {reason}", session.id),
            };
            fail_all(group.appends.into_iter().map(|(_, _, a)| a).collect(), err);
            return None;
        }
        let timestamp = now_ms();
        let mut buf = Vec::with_capacity(
            group
                .appends
                .iter()
                .map(|(e, _, _)| approx_len(e) + 160)
                .sum(),
        );
        let mut lines = Vec::with_capacity(group.appends.len());
        let mut acks = Vec::with_capacity(group.appends.len());
        let mut new_lineage = None;
        // An event without a stream_id joins the session's lineage: the first event's stream.
        let mut lineage = state.stream_id.clone();
        let mut object = Vec::with_capacity(512);
        let empty: &RawValue = serde_json::from_str("{}").expect("valid json");
        for (i, (event, preset_id, ack)) in group.appends.into_iter().enumerate() {
            let lsn = state.next_lsn + i as u64;
            let id = preset_id.unwrap_or_else(|| {
                state
                    .ids
                    .generate()
                    .unwrap_or_else(|_| ulid::Ulid::new())
                    .to_string()
            });
            if lineage.is_none() {
                let root = event
                    .stream_id
                    .clone()
                    .unwrap_or_else(|| session.id.clone());
                new_lineage = Some(root.clone());
                lineage = Some(root);
            }
            let stored = Event::<&RawValue> {
                lsn,
                id,
                event_type: event.event_type,
                session_id: session.id.clone(),
                stream_id: event
                    .stream_id
                    .or_else(|| lineage.clone())
                    .unwrap_or_default(),
                causation_id: event.causation_id,
                correlation_id: event.correlation_id,
                actor: event.actor,
                timestamp,
                payload: event.payload.as_deref().unwrap_or(empty),
                metadata: event.metadata.as_deref(),
                raw: event.raw.as_deref(),
            };
            object.clear();
            serde_json::to_writer(&mut object, &stored).expect("serializing to a Vec cannot fail");
            let start = buf.len();
            record::seal(&object, &mut buf);
            lines.push((lsn, stored.id, start, object.len() - 1));
            acks.push(ack);
        }
        let old_len = state.len;
        let opened = session.log_handle().map(|(file, _created)| file);
        let file = match opened {
            Ok(f) => f,
            Err(e) => {
                drop(state);
                fail_all(acks, StoreError::io("opening the log", &e));
                return None;
            }
        };
        let mut f: &File = &file;
        if let Err(e) = io::Write::write_all(&mut f, &buf) {
            tracing::error!(session = %session.id, error = %e, "append failed; cutting the log back");
            if let Err(e2) = file.set_len(old_len) {
                state.failed = Some(format!(
                    "the log could not be restored after a failed write: {e2}"
                ));
            }
            drop(state);
            fail_all(acks, StoreError::io("writing the log", &e));
            return None;
        }
        drop(state);
        self.dirty.insert(session.id.clone(), session.clone());
        Some(Written {
            session,
            buf: Bytes::from(buf),
            lines,
            acks,
            old_len,
            timestamp,
            new_lineage,
        })
    }

    /// Takes a written group back out of its log after the batch failed.
    fn cut_back(&self, w: &Written) {
        // Reopened if need be: a batch holds no descriptors beyond the file cache's, however
        // many sessions it touches.
        let restored = w
            .session
            .log_handle()
            .and_then(|(file, _)| file.set_len(w.old_len));
        if let Err(e) = restored {
            w.session.writer.lock().unwrap().failed = Some(format!(
                "the log could not be restored after a failed write: {e}"
            ));
        }
    }

    /// The batch is durable: index, metadata, committed LSN, live feed, acknowledgements.
    fn finish(&mut self, w: Written) {
        let session = &w.session;
        self.stats.appends.fetch_add(w.lines.len() as u64, Relaxed);
        self.stats
            .bytes_written
            .fetch_add(w.buf.len() as u64, Relaxed);
        let last_lsn = w.lines.last().map_or(0, |l| l.0);
        {
            let mut state = session.writer.lock().unwrap();
            self.index_lines(session, &mut state, w.old_len, &w.lines);
            state.len = w.old_len + w.buf.len() as u64;
            state.next_lsn = last_lsn + 1;
            let mut meta = session.meta.lock().unwrap();
            if let Some(root) = w.new_lineage {
                meta.stream_id = Some(root.clone());
                meta.first_ts = w.timestamp;
                state.stream_id = Some(root);
            }
            meta.last_ts = w.timestamp;
            meta.bytes = state.len;
        }
        session.set_committed(last_lsn);
        if self.hub.has_readers() {
            // Copied out of the batch buffer so the hub's byte cap counts what it really holds.
            let name: Arc<str> = session.id.as_str().into();
            self.hub
                .publish(w.lines.iter().map(|&(lsn, _, start, body_len)| Committed {
                    session: name.clone(),
                    event: EventJson::new(
                        lsn,
                        Bytes::copy_from_slice(&w.buf[start..start + body_len]),
                    ),
                }));
        }
        for ((lsn, id, _, _), ack) in w.lines.into_iter().zip(w.acks) {
            ack.send(Ok(AppendAck { lsn, id }));
        }
    }

    /// Adds sparse index entries for the lines just written (same rule as recovery's rebuild).
    fn index_lines(
        &self,
        session: &Session,
        state: &mut WriterState,
        base: u64,
        lines: &[(u64, String, usize, usize)],
    ) {
        let interval = self.settings.index_interval_bytes;
        let mut added = Vec::new();
        for &(lsn, _, start, _) in lines {
            let offset = base + start as u64;
            if state
                .last_index_offset
                .is_none_or(|last| offset >= last + interval)
            {
                added.push(IndexEntry { lsn, offset });
                state.last_index_offset = Some(offset);
            }
        }
        if added.is_empty() {
            return;
        }
        let mut index = session.index.write().unwrap();
        for e in &added {
            index.push(*e);
        }
        state.unsaved_index.extend(added);
    }
}

/// Appends a session's unsaved index entries to its `.idx` file. The file is a cache: a
/// failure costs a longer scan at the next start, nothing more.
fn save_index(session: &Session) {
    let entries = std::mem::take(&mut session.writer.lock().unwrap().unsaved_index);
    if entries.is_empty() {
        return;
    }
    let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_bytes()).collect();
    let appended = super::fsutil::private_file()
        .create(true)
        .append(true)
        .open(session.path.with_extension("idx"))
        .and_then(|mut f| io::Write::write_all(&mut f, &bytes));
    if let Err(e) = appended {
        tracing::warn!(session = %session.id, error = %e, "could not extend the index file");
    }
}

/// Most threads a checkpoint syncs logs with: syncs of different files proceed in parallel in
/// the kernel (and share journal commits), so a checkpoint over many sessions is not a long
/// queue of one sync after another. The threads live only for the checkpoint.
const CHECKPOINT_THREADS: usize = 8;

/// Syncs the logs of `sessions`; the first failure, if any.
fn sync_logs(sessions: Vec<&Arc<Session>>) -> Option<String> {
    let sync = |chunk: &[&Arc<Session>]| {
        chunk.iter().find_map(|s| {
            let synced = s.read_handle().and_then(|f| f.sync_data());
            synced
                .err()
                .map(|e| format!("syncing the log of {} failed: {e}", s.id))
        })
    };
    if sessions.len() <= 1 {
        return sync(&sessions);
    }
    let per_thread = sessions.len().div_ceil(CHECKPOINT_THREADS);
    std::thread::scope(|scope| {
        let running: Vec<_> = sessions
            .chunks(per_thread)
            .map(|chunk| {
                std::thread::Builder::new()
                    .name("dstream-checkpoint".into())
                    .spawn_scoped(scope, move || sync(chunk))
                    // No thread to be had: sync this share here.
                    .map_err(|_| sync(chunk))
            })
            .collect();
        running
            .into_iter()
            .filter_map(|r| match r {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|_| Some("a checkpoint thread panicked".into())),
                Err(failed) => failed,
            })
            .next()
    })
}

fn approx_len(e: &NewEventRaw) -> usize {
    let raw = |v: &Option<Box<RawValue>>| v.as_ref().map_or(0, |v| v.get().len());
    e.event_type.len() + raw(&e.payload) + raw(&e.metadata) + raw(&e.raw) + 64
}

fn fail_all(acks: Vec<Ack>, err: StoreError) {
    for ack in acks {
        ack.send(Err(err.clone()));
    }
}
