//! The single writer of one session log, with group commit: every append queued while the
//! previous batch was being written and synced goes out in the next batch, as one `write` and
//! (under `fsync = "always"`) one `fdatasync`.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::index::IndexEntry;
use super::record;
use super::session::{EventJson, Session};
use super::{AppendAck, NewEventRaw, StoreError, StoreSettings, StoreStats};
use crate::config::FsyncPolicy;

/// Most events written in one batch.
const MAX_BATCH_EVENTS: usize = 4096;
/// A batch stops growing past this many bytes.
const MAX_BATCH_BYTES: usize = 8 << 20;

pub(crate) enum WriterMsg {
    Append {
        event: NewEventRaw,
        ack: oneshot::Sender<Result<AppendAck, StoreError>>,
    },
    /// Sync what is written and stop; answers once the log is closed.
    Shutdown { done: oneshot::Sender<()> },
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

pub(crate) struct Writer {
    session: Arc<Session>,
    settings: StoreSettings,
    stats: Arc<StoreStats>,
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

struct Prepared {
    buf: Vec<u8>,
    /// (lsn, id, start of line in buf, length of the event body)
    lines: Vec<(u64, String, usize, usize)>,
    acks: Vec<oneshot::Sender<Result<AppendAck, StoreError>>>,
    must_sync: bool,
    timestamp: u64,
    /// The lineage this batch gives a session that had none yet.
    new_lineage: Option<String>,
}

impl Writer {
    pub(crate) fn new(
        session: Arc<Session>,
        settings: StoreSettings,
        stats: Arc<StoreStats>,
        len: u64,
        next_lsn: u64,
    ) -> Writer {
        let last_index_offset = session.index.read().unwrap().last().map(|e| e.offset);
        let stream_id = session.meta.lock().unwrap().stream_id.clone();
        Writer {
            session,
            settings,
            stats,
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

    pub(crate) async fn run(mut self, mut rx: mpsc::Receiver<WriterMsg>) {
        let mut tick =
            tokio::time::interval(Duration::from_millis(self.settings.fsync_interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let periodic = self.settings.fsync == FsyncPolicy::Interval;
        let mut batch = Vec::new();
        loop {
            let first = tokio::select! {
                biased;
                msg = rx.recv() => msg,
                _ = tick.tick(), if periodic && self.dirty => {
                    self.sync_now().await;
                    continue;
                }
            };
            let mut shutdown = None;
            match first {
                None => {}
                Some(WriterMsg::Shutdown { done }) => shutdown = Some(done),
                Some(WriterMsg::Append { event, ack }) => batch.push((event, ack)),
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
                self.write_batch(std::mem::take(&mut batch)).await;
            }
            if first_is_none_or_shutdown(&shutdown, rx.is_closed()) {
                if self.dirty {
                    self.sync_now().await;
                }
                if let Some(done) = shutdown {
                    let _ = done.send(());
                }
                return;
            }
        }
    }

    fn prepare(
        &mut self,
        batch: Vec<(NewEventRaw, oneshot::Sender<Result<AppendAck, StoreError>>)>,
    ) -> Prepared {
        let timestamp = now_ms();
        let mut p = Prepared {
            buf: Vec::with_capacity(batch.iter().map(|(e, _)| e.approx_len() + 160).sum()),
            lines: Vec::with_capacity(batch.len()),
            acks: Vec::with_capacity(batch.len()),
            must_sync: self.settings.fsync == FsyncPolicy::Always,
            timestamp,
            new_lineage: None,
        };
        // An event without a stream_id joins the session's lineage: the first event's stream.
        let mut lineage = self.stream_id.clone();
        let empty_payload: &RawValue = serde_json::from_str("{}").unwrap();
        for (i, (event, ack)) in batch.into_iter().enumerate() {
            let lsn = self.next_lsn + i as u64;
            let id = self
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
            let start = p.buf.len();
            serde_json::to_writer(&mut p.buf, &stored).expect("serializing to a Vec cannot fail");
            let object = p.buf.split_off(start);
            record::seal(&object, &mut p.buf);
            p.must_sync |= event.event_type.starts_with("checkpoint.");
            p.lines.push((lsn, id, start, object.len() - 1));
            p.acks.push(ack);
        }
        p
    }

    async fn write_batch(
        &mut self,
        batch: Vec<(NewEventRaw, oneshot::Sender<Result<AppendAck, StoreError>>)>,
    ) {
        if let Some(reason) = &self.failed {
            let err = StoreError::Failed {
                session: self.session.id.clone(),
                reason: reason.clone(),
            };
            for (_, ack) in batch {
                let _ = ack.send(Err(err.clone()));
            }
            return;
        }
        let p = self.prepare(batch);
        let file = match self.log_file() {
            Ok(f) => f,
            Err(e) => return fail_all(p.acks, StoreError::io("opening the log", &e)),
        };
        let old_len = self.len;
        let must_sync = p.must_sync;
        let buf = p.buf;
        let written = tokio::task::spawn_blocking(move || {
            let result = write_durably(&file, &buf, old_len, must_sync);
            (buf, result)
        })
        .await;
        let (buf, result) = match written {
            Ok(x) => x,
            Err(e) => {
                return fail_all(
                    p.acks,
                    StoreError::io("writer task", &io::Error::other(e.to_string())),
                );
            }
        };
        match result {
            Ok(()) => {}
            Err(WriteFailure::Rejected(e)) => {
                tracing::error!(session = %self.session.id, error = %e, "append failed; the log is unchanged");
                return fail_all(p.acks, StoreError::io("writing the log", &e));
            }
            Err(WriteFailure::Broken(e)) => {
                let reason = format!("the log could not be restored after a failed write: {e}");
                tracing::error!(session = %self.session.id, %reason, "session writer stopped");
                self.failed = Some(reason);
                return fail_all(p.acks, StoreError::io("writing the log", &e));
            }
        }
        self.stats
            .fsyncs
            .fetch_add(must_sync as u64, std::sync::atomic::Ordering::Relaxed);
        self.stats
            .appends
            .fetch_add(p.lines.len() as u64, std::sync::atomic::Ordering::Relaxed);
        self.stats
            .bytes_written
            .fetch_add(buf.len() as u64, std::sync::atomic::Ordering::Relaxed);
        self.dirty |= !must_sync;

        let buf = Bytes::from(buf);
        self.index_lines(old_len, &p.lines);
        self.len = old_len + buf.len() as u64;
        let last_lsn = p.lines.last().map_or(self.next_lsn - 1, |l| l.0);
        self.next_lsn = last_lsn + 1;
        {
            let mut meta = self.session.meta.lock().unwrap();
            if let Some(root) = p.new_lineage {
                meta.stream_id = Some(root.clone());
                meta.first_ts = p.timestamp;
                self.stream_id = Some(root);
            }
            meta.last_ts = p.timestamp;
            meta.bytes = self.len;
        }
        self.session.set_committed(last_lsn);
        for ((lsn, id, start, body_len), ack) in p.lines.into_iter().zip(p.acks) {
            let _ = self
                .session
                .live
                .send(EventJson::new(lsn, buf.slice(start..start + body_len)));
            let _ = ack.send(Ok(AppendAck { lsn, id }));
        }
    }

    /// Adds sparse index entries for the lines just written (same rule as recovery's rebuild).
    fn index_lines(&mut self, base: u64, lines: &[(u64, String, usize, usize)]) {
        let interval = self.settings.index_interval_bytes;
        let mut added = Vec::new();
        for &(lsn, _, start, _) in lines {
            let offset = base + start as u64;
            if self
                .last_index_offset
                .is_none_or(|last| offset >= last + interval)
            {
                added.push(IndexEntry { lsn, offset });
                self.last_index_offset = Some(offset);
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
            self.idx_file = None;
        }
    }

    fn append_index_file(&mut self, entries: &[IndexEntry]) -> io::Result<()> {
        if self.idx_file.is_none() {
            let path = self.session.path.with_extension("idx");
            self.idx_file = Some(super::private_file().create(true).append(true).open(path)?);
        }
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_bytes()).collect();
        self.idx_file.as_mut().unwrap().write_all(&bytes)
    }

    fn log_file(&mut self) -> io::Result<Arc<File>> {
        if let Some(f) = &self.file {
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
        self.file = Some(f.clone());
        Ok(f)
    }

    async fn sync_now(&mut self) {
        let Some(file) = self.file.clone() else {
            return;
        };
        match tokio::task::spawn_blocking(move || file.sync_data()).await {
            Ok(Ok(())) => {
                self.dirty = false;
                self.stats
                    .fsyncs
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(Err(e)) => {
                // After a failed fsync the kernel may have dropped the dirty pages: what was
                // acknowledged can no longer be vouched for, so stop taking appends.
                let reason = format!("background fsync failed: {e}");
                tracing::error!(session = %self.session.id, %reason, "session writer stopped");
                self.failed = Some(reason);
            }
            Err(e) => tracing::error!(session = %self.session.id, error = %e, "fsync task failed"),
        }
    }
}

fn first_is_none_or_shutdown(shutdown: &Option<oneshot::Sender<()>>, closed: bool) -> bool {
    shutdown.is_some() || closed
}

fn fail_all(acks: Vec<oneshot::Sender<Result<AppendAck, StoreError>>>, err: StoreError) {
    for ack in acks {
        let _ = ack.send(Err(err.clone()));
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
