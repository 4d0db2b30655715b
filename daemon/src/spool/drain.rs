//! The daemon's side of the spool: at start, whenever a spool file appears (and every 30 s in
//! case a notification was missed), every spooled event goes through the normal pipeline,
//! once, in its file's order, files in the order they were written. See [`super::journal`]
//! for how a drain killed half-way resumes without duplicating or dropping anything.
//!
//! It runs on its own thread (`dstream-spool`): reading files is blocking work, and each
//! batch waits for its events to be stored before the next is read, so a big backlog holds
//! at most one batch in memory and never crowds the pipeline out for live hooks (the pipeline
//! serves its clients in turn, and the spool is one client).

use std::collections::HashSet;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use notify::{RecursiveMode, Watcher as _};
use serde_json::value::RawValue;

use super::journal::{self, DrainState};
use super::read::{Next, SpoolFile};
use super::write::sync_dir;
use super::{DAMAGED_DIR, SpoolRecord, is_part_name, is_pending_name, overflow, spool_dir};
use crate::component::{Component, Stopping};
use crate::pipeline::{Ingest, IngestError, Pipeline, Spooled, check_ingest};
use crate::store::{NewEventRaw, Store, StoreError};
use crate::util::time::now_ms;

/// The pipeline client id of the spool (connections count up from 1).
const SPOOL_CLIENT: u64 = u64::MAX - 1;
/// A batch is at most this many records, or this many bytes of events (at least one record).
const BATCH_RECORDS: usize = 256;
const BATCH_BYTES: usize = 8 << 20;
/// A `.part` file this old belongs to a writer that died mid-write: drain what it holds.
const ABANDONED_PART: Duration = Duration::from_secs(600);
/// How often the spool folder is looked at without a notification.
const RESCAN: Duration = Duration::from_secs(30);

/// What the drain has done since the daemon started.
#[derive(Debug, Default)]
pub struct DrainStats {
    pub records: AtomicU64,
    pub files: AtomicU64,
    pub damaged: AtomicU64,
    pub refused: AtomicU64,
    pub overflow_reported: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

enum Wake {
    Look,
    Stop,
}

/// The drain, as a daemon component.
pub(crate) struct SpoolDrain {
    tx: Mutex<Option<mpsc::Sender<Wake>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    stopping: Arc<AtomicBool>,
    stats: Arc<DrainStats>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl SpoolDrain {
    /// Starts draining `data_dir`'s spool into `pipeline`. A line longer than `max_line` (the
    /// frame limit) is damage.
    pub(crate) fn start(
        store: Store,
        pipeline: Arc<Pipeline>,
        data_dir: &Path,
        max_line: usize,
    ) -> io::Result<Arc<SpoolDrain>> {
        let dir = spool_dir(data_dir);
        let (tx, rx) = mpsc::channel();
        let stopping = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(DrainStats::default());
        // The folder is watched once it exists; the rescan covers the time before.
        let watcher = {
            let tx = tx.clone();
            let _ = crate::autostart::make_private_dir(&dir);
            notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
                if res.is_ok_and(|e| {
                    matches!(
                        e.kind,
                        notify::EventKind::Create(_) | notify::EventKind::Modify(_)
                    )
                }) {
                    let _ = tx.send(Wake::Look);
                }
            })
            .and_then(|mut w| w.watch(&dir, RecursiveMode::NonRecursive).map(|()| w))
            .map_err(|e| tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the spool folder; it is looked at every 30 s"))
            .ok()
        };
        let mut drainer = Drainer {
            store,
            pipeline,
            dir,
            max_line,
            rt: tokio::runtime::Handle::current(),
            stats: stats.clone(),
            stopping: stopping.clone(),
            refused: HashSet::new(),
        };
        let thread = std::thread::Builder::new()
            .name("dstream-spool".into())
            .spawn(move || {
                loop {
                    drainer.pass();
                    match rx.recv_timeout(RESCAN) {
                        Ok(Wake::Look) | Err(RecvTimeoutError::Timeout) => {
                            // A burst of notifications is one look.
                            while let Ok(w) = rx.try_recv() {
                                if matches!(w, Wake::Stop) {
                                    return;
                                }
                            }
                        }
                        Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })?;
        Ok(Arc::new(SpoolDrain {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            stopping,
            stats,
            _watcher: watcher,
        }))
    }
}

impl SpoolDrain {
    /// What waits in `data_dir`'s spool and what the drain has done, for `stats`.
    pub(crate) fn stats(&self, data_dir: &Path) -> dstream_sdk::protocol::SpoolStats {
        let backlog = super::backlog(data_dir);
        let s = &self.stats;
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        dstream_sdk::protocol::SpoolStats {
            pending_files: backlog.files,
            pending_bytes: backlog.bytes,
            overflow_pending: backlog.overflow_events,
            drained_events: n(&s.records),
            drained_files: n(&s.files),
            damaged: n(&s.damaged),
            refused: n(&s.refused),
            overflow_reported: n(&s.overflow_reported),
            last_error: s.last_error.lock().unwrap().clone(),
        }
    }
}

impl Component for SpoolDrain {
    fn name(&self) -> &'static str {
        "spool"
    }

    fn stop(&self) -> Stopping<'_> {
        Box::pin(async move {
            self.stopping.store(true, Ordering::Relaxed);
            if let Some(tx) = self.tx.lock().unwrap().take() {
                let _ = tx.send(Wake::Stop);
            }
            let thread = self.thread.lock().unwrap().take();
            if let Some(t) = thread {
                let _ = tokio::task::spawn_blocking(move || t.join()).await;
            }
        })
    }
}

/// Why a file's drain ended early.
enum Halt {
    /// The daemon is stopping.
    Stopping,
    /// The store could not take an event: try again on the next pass.
    Failed(String),
}

struct Drainer {
    store: Store,
    pipeline: Arc<Pipeline>,
    dir: PathBuf,
    max_line: usize,
    rt: tokio::runtime::Handle,
    stats: Arc<DrainStats>,
    stopping: Arc<AtomicBool>,
    /// Files already refused (another user's), so each is reported once.
    refused: HashSet<String>,
}

impl Drainer {
    /// One look at the spool: reports lost events, then drains every file, oldest first.
    fn pass(&mut self) {
        if !self.dir.is_dir() {
            return;
        }
        self.report_overflow();
        let state = journal::load(&self.dir);
        for name in self.pending() {
            if self.stopping.load(Ordering::Relaxed) {
                return;
            }
            let resume = state.as_ref().filter(|s| s.file == name);
            match self.drain_file(&name, resume) {
                Ok(()) => {}
                Err(Halt::Stopping) => return,
                Err(Halt::Failed(why)) => {
                    tracing::error!(file = %name, error = %why, "cannot drain the spool; trying again later");
                    *self.stats.last_error.lock().unwrap() = Some(why);
                    return;
                }
            }
        }
    }

    /// The files to drain, in the order they were written: whole `.jsonl` files, and
    /// `.part` files whose writer died long ago. Files of another user are refused.
    fn pending(&mut self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut names = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            let abandoned_part = is_part_name(&name)
                && meta
                    .modified()
                    .ok()
                    .and_then(|m| SystemTime::now().duration_since(m).ok())
                    .is_some_and(|age| age > ABANDONED_PART);
            if !is_pending_name(&name) && !abandoned_part {
                continue;
            }
            if let Some(why) = not_ours(&meta) {
                if self.refused.insert(name.clone()) {
                    self.stats.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(file = %e.path().display(), "refusing a spool file: {why}");
                }
                continue;
            }
            names.push(name);
        }
        // Sorted without a leading dot, so a `.part` file takes its place in time.
        names.sort_by(|a, b| a.trim_start_matches('.').cmp(b.trim_start_matches('.')));
        names
    }

    /// Drains one file, then removes it; what cannot be read is moved to `damaged/`.
    fn drain_file(&mut self, name: &str, resume: Option<&DrainState>) -> Result<(), Halt> {
        let path = self.dir.join(name);
        let io_halt = |what: &str, e: io::Error| Halt::Failed(format!("{what} {name}: {e}"));
        let mut file = SpoolFile::open(&path, self.max_line).map_err(|e| io_halt("opening", e))?;
        // Left half-done by a daemon that stopped: records before `first` are stored, and
        // of the batch from `first`, those the store has.
        let (first, stored) = match resume {
            Some(s) => (
                s.first,
                journal::stored_records(&self.store, s).map_err(|e| io_halt("resuming", e))?,
            ),
            None => (0, HashSet::new()),
        };
        let mut damage = None;
        loop {
            let mut batch: Vec<(usize, SpoolRecord<Box<RawValue>>)> = Vec::new();
            let mut bytes = 0;
            while batch.len() < BATCH_RECORDS && bytes < BATCH_BYTES {
                match file.next() {
                    Next::Record { index, record } => {
                        if index < first || stored.contains(&index) {
                            continue;
                        }
                        bytes += record.event.get().len();
                        batch.push((index, record));
                    }
                    Next::Damage { offset, why } => {
                        damage = Some((offset, why));
                        break;
                    }
                    Next::End => break,
                }
            }
            let Some(&(batch_first, _)) = batch.first() else {
                break;
            };
            if self.stopping.load(Ordering::Relaxed) {
                return Err(Halt::Stopping);
            }
            let state = DrainState {
                file: name.to_string(),
                first: batch_first,
                begun_ms: now_ms(),
            };
            journal::save(&self.dir, &state).map_err(|e| io_halt("journaling", e))?;
            let last = batch.len() < BATCH_RECORDS && bytes < BATCH_BYTES;
            self.ingest_batch(name, batch)?;
            if last || damage.is_some() {
                break;
            }
        }
        if let Some((offset, why)) = damage {
            let saved = move_aside(&path, offset, &self.dir.join(DAMAGED_DIR))
                .map_err(|e| io_halt("saving the damaged part of", e))?;
            self.stats.damaged.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(file = %name, offset, %why, saved_to = %saved.display(), "a spool file is damaged: drained up to the damage, the rest moved aside");
        }
        std::fs::remove_file(&path)
            .and_then(|()| sync_dir(&self.dir))
            .map_err(|e| io_halt("removing", e))?;
        journal::clear(&self.dir).map_err(|e| io_halt("journaling", e))?;
        self.stats.files.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Hands a batch to the pipeline, in order, and waits until all of it is stored.
    fn ingest_batch(
        &mut self,
        name: &str,
        batch: Vec<(usize, SpoolRecord<Box<RawValue>>)>,
    ) -> Result<(), Halt> {
        let (tx, rx) = mpsc::channel();
        let mut sent = 0;
        let mut kept = std::collections::HashMap::new();
        for (index, mut record) in batch {
            let spool_id = journal::spool_id(name, index);
            if let Err(e) =
                check_ingest(&record.source, record.session_id.as_deref(), &record.event)
            {
                // Kept rather than dropped: a bad hint is forgotten, a too-deep event is
                // stored as its text. A bad source cannot be stored at all: set aside.
                if record
                    .session_id
                    .as_deref()
                    .is_some_and(|s| dstream_sdk::validate_session_id(s).is_err())
                {
                    record.session_id = None;
                }
                if check_ingest(&record.source, None, &record.event).is_err() {
                    let text = serde_json::to_string(record.event.get()).unwrap_or_default();
                    record.event = RawValue::from_string(text).expect("a JSON string is JSON");
                }
                if check_ingest(&record.source, None, &record.event).is_err() {
                    self.set_aside(name, index, &e.message, &record_line(&record));
                    continue;
                }
            }
            // Kept to set the record aside if its session cannot take it (quarantined).
            kept.insert(index, record_line(&record));
            let tx = tx.clone();
            let ingest = Ingest {
                client: SPOOL_CLIENT,
                source: record.source,
                raw: record.event,
                session_id: record.session_id,
                reply_by_ms: None,
                gone: None,
                done: Box::new(move |r| drop(tx.send((index, r)))),
                spooled: Some(Spooled {
                    received_ms: record.received_ms,
                    spool_id,
                    denied_by_writer: record.answered.as_deref() == Some("deny"),
                }),
            };
            self.rt.block_on(self.pipeline.ingest(ingest));
            sent += 1;
        }
        drop(tx);
        let mut failed = None;
        for _ in 0..sent {
            match rx.recv() {
                Ok((_, Ok(_))) => {
                    self.stats.records.fetch_add(1, Ordering::Relaxed);
                }
                Ok((_, Err(IngestError::Stopped))) | Err(_) => return Err(Halt::Stopping),
                // Its session takes nothing (quarantined until repaired, or deleted by
                // retention): the record waits aside, and the rest of the spool goes on.
                Ok((
                    index,
                    Err(IngestError::Store(
                        e @ (StoreError::Quarantined { .. } | StoreError::Gone { .. }),
                    )),
                )) => {
                    let line = kept.remove(&index).unwrap_or_default();
                    self.set_aside(name, index, &e.to_string(), &line);
                }
                // The store cannot write (a full disk, a failed store): try again later.
                Ok((_, Err(IngestError::Store(e)))) => failed = Some(e.to_string()),
            }
        }
        match failed {
            Some(why) => Err(Halt::Failed(why)),
            None => Ok(()),
        }
    }

    /// A record no ingest could take (a source name the daemon refuses, a quarantined
    /// session): kept aside, with why.
    fn set_aside(&self, name: &str, index: usize, why: &str, line: &str) {
        tracing::warn!(file = %name, index, %why, "a spooled record cannot be ingested; moved aside");
        self.stats.damaged.fetch_add(1, Ordering::Relaxed);
        // The record as a spool line (drainable again once moved back), after a line saying why.
        let text = format!("# {why}\n{line}\n");
        let _ = write_aside(
            &self.dir.join(DAMAGED_DIR),
            &format!("{name}#{index}.jsonl"),
            text.as_bytes(),
        );
    }

    /// Turns the overflow notes into a `spool.overflow` event in each session that lost
    /// events, then removes them.
    fn report_overflow(&mut self) {
        let lost = overflow::read(&self.dir);
        if lost.is_empty() {
            return;
        }
        let mut all_reported = true;
        for (session, l) in &lost {
            let session = session
                .clone()
                .filter(|s| dstream_sdk::validate_session_id(s).is_ok())
                .unwrap_or_else(|| "dstream-spool".to_string());
            let payload = serde_json::json!({
                "lost_events": l.events,
                "lost_bytes": l.bytes,
                "first_ms": l.first_ms,
                "last_ms": l.last_ms,
                "source": l.source,
                "reason": "the spool was full (daemon.spool_max_bytes) while no daemon could be reached",
            });
            let event = NewEventRaw {
                event_type: "spool.overflow".into(),
                actor: Some("dstream".into()),
                payload: serde_json::value::to_raw_value(&payload).ok(),
                ..Default::default()
            };
            let stored = self
                .rt
                .block_on(self.store.append_wait(&session, event, true));
            match stored {
                Ok(_) => {
                    self.stats
                        .overflow_reported
                        .fetch_add(l.events, Ordering::Relaxed);
                    tracing::error!(%session, lost_events = l.events, "events were lost while no daemon was running: the spool was full");
                }
                Err(e) => {
                    all_reported = false;
                    tracing::error!(%session, error = %e, "cannot record lost spool events");
                }
            }
        }
        if all_reported {
            let _ = std::fs::remove_file(self.dir.join(overflow::OVERFLOW_FILE));
            let _ = sync_dir(&self.dir);
        }
    }
}

/// A record as a spool line.
fn record_line(record: &SpoolRecord<Box<RawValue>>) -> String {
    serde_json::to_string(record).unwrap_or_default()
}

/// Why a spool file is not to be trusted: another user's, or not a regular file.
fn not_ours(meta: &std::fs::Metadata) -> Option<String> {
    if !meta.file_type().is_file() {
        return Some("not a regular file".into());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return Some(format!(
                "written by uid {}, not by this user (uid {me})",
                meta.uid()
            ));
        }
    }
    None
}

/// Copies `path` from `offset` to its end into `dir` (durably), returning where.
fn move_aside(path: &Path, offset: u64, dir: &Path) -> io::Result<PathBuf> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut rest = Vec::new();
    file.read_to_end(&mut rest)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().trim_start_matches('.').to_string())
        .unwrap_or_default();
    write_aside(dir, &format!("{name}@{offset}"), &rest)
}

/// Writes `bytes` durably as a new file `name` in `dir` (or beside it, never over one).
fn write_aside(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    crate::autostart::make_private_dir(dir)?;
    crate::store::write_new_unique(&crate::vfs::OsVfs, &dir.join(name), bytes)
}
