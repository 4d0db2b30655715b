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
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::util::time::now_ms;

use bytes::Bytes;
use dstream_sdk::Event;
use serde_json::value::RawValue;

use super::error::StoreError;
use super::index::IndexEntry;
use super::record;
use super::session::{EventJson, Session};
use super::types::{AppendAck, NewEventRaw, StoreSettings, StoreStats};
use super::wal::Wal;
use super::writer_state::WriterState;
use crate::config::FsyncPolicy;
use crate::hub::{Committed, Hub};
use crate::vfs::{Open, Vfs};

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
    /// Appends committed together, in one batch.
    Appends(Vec<Append>),
    /// Sync the write-ahead log now, then answer.
    Flush {
        done: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
    },
    /// Checkpoint and stop; `done` is dropped once every log is synced.
    Shutdown {
        done: tokio::sync::oneshot::Sender<()>,
    },
}

/// The first lease of a session in a WAL epoch covers this many LSNs; each renewal doubles
/// it up to [`LEASE_MAX`], so a busy session renews rarely and an idle one risks a small gap.
const LEASE_MIN: u64 = 64;
const LEASE_MAX: u64 = 1 << 16;

pub(crate) struct Committer {
    pub vfs: Arc<dyn Vfs>,
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
    /// Sessions whose lease record is written but not synced.
    leases_unsynced: Vec<Arc<Session>>,
    /// Sessions holding a lease record in this WAL epoch: a checkpoint ends their leases.
    /// (Not the same as `dirty`: a batch that triggers a checkpoint writes its leases into the
    /// new epoch after `dirty` was cleared.)
    leased: HashMap<String, Arc<Session>>,
    /// Sessions with acknowledged events the next WAL sync makes durable, and the last LSN.
    awaiting_sync: Vec<(Arc<Session>, u64)>,
}

struct LeaseDecision {
    /// The new lease written to the WAL (its last LSN and size), if one was.
    renewed: Option<(u64, u64)>,
    /// The batch goes past the synced lease: it must be synced before it is acknowledged.
    needs_sync: bool,
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
        vfs: Arc<dyn Vfs>,
        wal: Wal,
        settings: StoreSettings,
        stats: Arc<StoreStats>,
        sessions_dir: PathBuf,
        hub: Arc<Hub>,
    ) -> Self {
        Committer {
            vfs,
            wal,
            settings,
            stats,
            sessions_dir,
            hub,
            dirty: HashMap::new(),
            unsynced: false,
            last_sync: Instant::now(),
            failed: None,
            leases_unsynced: Vec::new(),
            leased: HashMap::new(),
            awaiting_sync: Vec::new(),
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
            let mut flushes = Vec::new();
            let mut bytes = 0;
            let mut next = Some(first);
            while let Some(msg) = next.take() {
                match msg {
                    CommitMsg::Append(a) => {
                        bytes += approx_len(&a.event);
                        batch.push(a);
                    }
                    CommitMsg::Appends(all) => {
                        bytes += all.iter().map(|a| approx_len(&a.event)).sum::<usize>();
                        batch.extend(all);
                    }
                    CommitMsg::Flush { done } => flushes.push(done),
                    CommitMsg::Shutdown { done } => shutdown = Some(done),
                }
                if shutdown.is_none()
                    && flushes.is_empty()
                    && batch.len() < MAX_BATCH_EVENTS
                    && bytes < MAX_BATCH_BYTES
                {
                    next = rx.try_recv().ok();
                }
            }
            if !batch.is_empty() {
                self.commit(std::mem::take(&mut batch));
            }
            if !flushes.is_empty()
                || (self.unsynced
                    && self.settings.fsync == FsyncPolicy::Interval
                    && self.last_sync.elapsed() >= period)
            {
                self.sync_wal();
            }
            for done in flushes {
                let result = match &self.failed {
                    None => Ok(()),
                    Some(reason) => Err(StoreError::Failed {
                        reason: reason.clone(),
                    }),
                };
                let _ = done.send(result);
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
                self.synced();
            }
            Err(e) => self.fail(format!("syncing the write-ahead log failed: {e}")),
        }
    }

    /// Everything written to the WAL so far is durable: so are the leases and events in it.
    fn synced(&mut self) {
        self.unsynced = false;
        self.last_sync = Instant::now();
        for session in self.leases_unsynced.drain(..) {
            let mut state = session.writer.lock().unwrap();
            state.lease_synced = state.lease;
        }
        for (session, lsn) in self.awaiting_sync.drain(..) {
            session.set_durable(lsn);
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
        // Under every policy, `never` included: the WAL's records (and the leases that keep
        // LSNs from being handed out twice) are about to be overwritten.
        // In a fixed order (by id), so that a simulated disk sees the same calls every run.
        let mut dirty: Vec<&Arc<Session>> = self.dirty.values().collect();
        dirty.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        if let Some(reason) = sync_logs(dirty, self.vfs.concurrent()) {
            self.fail(reason);
            return;
        }
        // New logs are durable only once their directory entries are.
        if let Err(e) = self.vfs.sync_dir(&self.sessions_dir) {
            self.fail(format!("syncing the sessions directory failed: {e}"));
            return;
        }
        if !self.dirty.is_empty() {
            self.stats
                .fsyncs
                .fetch_add(self.dirty.len() as u64, Relaxed);
        }
        // Whatever the WAL held is in the synced logs now.
        self.synced();
        let mut dirty: Vec<&Arc<Session>> = self.dirty.values().collect();
        dirty.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        for session in dirty {
            // After the logs are synced: an index entry never points past what a crash keeps.
            save_index(&*self.vfs, session);
        }
        self.dirty.clear();
        // Leases live in the WAL epoch; the next append in the new one takes a new lease.
        for (_, session) in self.leased.drain() {
            let mut state = session.writer.lock().unwrap();
            (state.lease, state.lease_synced, state.lease_step) = (0, 0, 0);
        }
        if let Err(e) = self.wal.reset() {
            self.fail(format!("restarting the write-ahead log failed: {e}"));
        }
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
        let written: Vec<Written> = groups
            .into_iter()
            .filter_map(|group| self.write_group(group))
            .collect();
        if written.is_empty() {
            return;
        }
        // The records are encoded only after the checkpoint that may start a new epoch: their
        // crc covers the epoch they are written under, or replay would stop at the first one.
        let leasing = self.settings.fsync != FsyncPolicy::Always;
        let wal_len: usize = written
            .iter()
            .map(|w| {
                let lease = if leasing {
                    Wal::encoded_len(&w.session.id, 0)
                } else {
                    0
                };
                let lines: usize = w
                    .lines
                    .iter()
                    .map(|&(_, _, _, body_len)| {
                        Wal::encoded_len(&w.session.id, body_len + record::CRC_TRAILER_LEN + 1)
                    })
                    .sum();
                lines + lease
            })
            .sum();
        if !self.wal.fits(wal_len) {
            self.checkpoint();
        }
        let mut wal_buf = Vec::with_capacity(wal_len);
        let mut leases = Vec::new();
        for w in &written {
            for &(_, _, start, body_len) in &w.lines {
                // The whole sealed line: body, crc trailer and newline, and where it starts.
                let end = start + body_len + record::CRC_TRAILER_LEN;
                let offset = w.old_len + start as u64;
                self.wal
                    .encode_line(&w.session.id, offset, &w.buf[start..=end], &mut wal_buf);
            }
            if leasing && let Some(lease) = self.lease(w, &mut wal_buf) {
                must_sync |= lease.needs_sync;
                if let Some(renewed) = lease.renewed {
                    leases.push((w.session.clone(), renewed));
                }
            }
        }
        debug_assert!(wal_buf.len() <= wal_len);
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
        for (session, (upto, step)) in leases {
            let mut state = session.writer.lock().unwrap();
            (state.lease, state.lease_step) = (upto, step);
            drop(state);
            self.leased.insert(session.id.clone(), session.clone());
            self.leases_unsynced.push(session);
        }
        if must_sync {
            self.stats.fsyncs.fetch_add(1, Relaxed);
            self.synced();
        } else {
            self.unsynced = true;
        }
        for w in &written {
            let last = w.lines.last().map_or(0, |l| l.0);
            if must_sync {
                w.session.set_durable(last);
            } else {
                self.awaiting_sync.push((w.session.clone(), last));
            }
        }
        for w in written {
            self.finish(w);
        }
    }

    /// Under `interval` and `never`, an event is acknowledged before it is synced, so a power
    /// loss may take it; its LSN must then never be handed out again. Before acknowledging LSN
    /// `n`, a session holds a synced lease on it: a WAL record saying "up to `m >= n`". After a
    /// crash, recovery resumes each session above its lease and records the gap. Renewed (in
    /// this batch's WAL write, synced by the next interval) when half of it is used; the batch
    /// syncs at once only when it would go past the synced lease.
    fn lease(&self, w: &Written, wal_buf: &mut Vec<u8>) -> Option<LeaseDecision> {
        let last = w.lines.last()?.0;
        let state = w.session.writer.lock().unwrap();
        let renewed = (last + state.lease_step / 2 > state.lease).then(|| {
            let step = (state.lease_step * 2).clamp(LEASE_MIN, LEASE_MAX);
            let upto = last + step;
            self.wal.encode_lease(&w.session.id, upto, wal_buf);
            (upto, step)
        });
        Some(LeaseDecision {
            renewed,
            needs_sync: last > state.lease_synced,
        })
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
        // At the length the commit thread knows, not at the file's end: bytes a failed write
        // left behind are overwritten rather than built upon.
        if let Err(e) = file.write_at(&buf, old_len) {
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
fn save_index(vfs: &dyn Vfs, session: &Session) {
    let entries = std::mem::take(&mut session.writer.lock().unwrap().unsaved_index);
    if entries.is_empty() {
        return;
    }
    let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_bytes()).collect();
    let appended = vfs
        .open(&session.path.with_extension("idx"), Open::Create)
        .and_then(|f| f.append(&bytes));
    if let Err(e) = appended {
        tracing::warn!(session = %session.id, error = %e, "could not extend the index file");
    }
}

/// Most threads a checkpoint syncs logs with: syncs of different files proceed in parallel in
/// the kernel (and share journal commits), so a checkpoint over many sessions is not a long
/// queue of one sync after another. The threads live only for the checkpoint.
const CHECKPOINT_THREADS: usize = 8;

/// Syncs the logs of `sessions`; the first failure, if any.
fn sync_logs(sessions: Vec<&Arc<Session>>, concurrent: bool) -> Option<String> {
    let sync = |chunk: &[&Arc<Session>]| {
        chunk.iter().find_map(|s| {
            let synced = s.read_handle().and_then(|f| f.sync());
            synced
                .err()
                .map(|e| format!("syncing the log of {} failed: {e}", s.id))
        })
    };
    if sessions.len() <= 1 || !concurrent {
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
