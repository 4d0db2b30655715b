//! [`Checkpoints`]: the checkpoint component as the rest of the daemon uses it. Start it,
//! open a checkpoint (`prepare`, then `record` or `recorded`), wait for a decision (`wait`),
//! read checkpoints (`get`, `list`), and match a tool call against the grants. Deciding one
//! is in [`super::decide`].
//!
//! It ties the other parts together, and it is what async callers reach, so it is where
//! blocking work is kept off the async workers: every async method hands its file and log
//! I/O to [`Checkpoints::off_worker`]; the methods documented as blocking are for callers
//! already on a blocking thread.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dstream_sdk::protocol::{CheckpointInfo, CheckpointState};
use tokio::sync::{Notify, oneshot};

use super::deadlines;
use super::grants::Grants;
use super::journal::{Journal, id_hash};
use super::markers::Markers;
use super::table::{self, Entry, Table};
use super::types::{CheckpointError, NewRequest, Prepared, checkpoint_id};
use super::{events, replay, stop};
use crate::store::{AppendAck, NewEventRaw, Store, StoreError};
use crate::util::time::now_ms;
use dstream_sdk::protocol::OnTimeout;

/// The checkpoints. Its parts are shared with [`super::decide`], which decides them.
pub struct Checkpoints {
    pub(super) store: Store,
    pub(super) dir: PathBuf,
    pub(super) table: Mutex<Table>,
    /// Markers, journal and grants go through the store's file layer, so the power-loss
    /// simulation covers them with the logs.
    pub(super) markers: Markers,
    journal: Journal,
    /// "Always allow" grants: `grants.find` is the one in force for a call, if any.
    pub grants: Grants,
    /// Wakes the deadline task when an earlier deadline arrives (or this is dropped).
    wake: Arc<Notify>,
    /// Sessions stopped remotely: their tool calls are denied until a new prompt.
    pub stops: stop::Stops,
}

/// One `wait` in progress. Ending it unanswered (its timeout passed, or its connection went
/// away and the task was dropped) removes every abandoned waiter of the checkpoint, so that
/// short awaits on a long-pending checkpoint do not pile up.
struct Waiter<'a> {
    checkpoints: &'a Checkpoints,
    id: &'a str,
    rx: Option<oneshot::Receiver<CheckpointInfo>>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        drop(self.rx.take()); // closes this waiter's own sender first
        if let Some(e) = self
            .checkpoints
            .table
            .lock()
            .unwrap()
            .entries
            .get_mut(self.id)
        {
            e.waiters.retain(|w| !w.is_closed());
        }
    }
}

impl Checkpoints {
    /// Opens the checkpoint state under `data_dir`, rebuilds the open checkpoints from the
    /// logs the markers name, and starts the deadline task (on the current runtime).
    /// Deadlines that passed while the daemon was down are applied at once. Blocking.
    pub fn start(store: Store, data_dir: &Path, grant_ttl_ms: u64) -> std::io::Result<Arc<Self>> {
        let dir = data_dir.join("checkpoints");
        let vfs = store.vfs();
        for d in [&dir, &dir.join("open")] {
            if !vfs.exists(d) {
                vfs.create_dir_all(d)?;
                vfs.sync_dir(crate::vfs::parent(d))?;
            }
        }
        let stops = stop::Stops::open(vfs.clone(), dir.join("stopped"))?;
        let markers = Markers::new(vfs.clone(), &dir);
        let mut table = Table::default();
        replay::rebuild(&store, &markers, &mut table)?;
        let grants = Grants::load(vfs.clone(), &dir, grant_ttl_ms)?;
        let journal = Journal::new(vfs, &dir);
        table.journaled = journal.ids();
        table.trim_decided();
        let pending = table.deadlines.len();
        if pending > 0 {
            tracing::info!(pending, "pending checkpoints rebuilt from the logs");
        }
        let this = Arc::new(Checkpoints {
            store,
            dir,
            table: Mutex::new(table),
            markers,
            journal,
            grants,
            wake: Arc::new(Notify::new()),
            stops,
        });
        tokio::spawn(deadlines::run(Arc::downgrade(&this), this.wake.clone()));
        Ok(this)
    }

    /// How long the grants made from now on last.
    pub fn set_grant_ttl_ms(&self, ms: u64) {
        self.grants.set_ttl_ms(ms);
    }

    /// Runs `work` on the runtime's blocking threads, never on an async worker. Every async
    /// method that may read or write files, or read a log, hands that part over here.
    pub(super) async fn off_worker<R: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Checkpoints) -> R + Send + 'static,
    ) -> Result<R, CheckpointError> {
        let this = self.clone();
        match tokio::task::spawn_blocking(move || work(&this)).await {
            Ok(r) => Ok(r),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(StoreError::ShuttingDown.into()),
        }
    }

    /// Whether memory holds checkpoint `id`.
    fn holds(&self, id: &str) -> bool {
        self.table.lock().unwrap().entries.contains_key(id)
    }

    /// Makes sure memory holds `id`: from memory, else from its session's log (found
    /// through the journal when `session` is not given). Blocking: it may read the journal
    /// and the log.
    pub(super) fn find(&self, id: &str, session: Option<&str>) -> Result<(), CheckpointError> {
        if self.holds(id) {
            return Ok(());
        }
        let session = match session {
            Some(s) => s.to_string(),
            None => self
                .journal
                .session_of(id)
                .ok_or_else(|| CheckpointError::NotFound(id.to_string()))?,
        };
        match self.lookup(&session, id)? {
            Some(_) => Ok(()),
            None => Err(CheckpointError::NotFound(id.to_string())),
        }
    }

    /// [`Checkpoints::find`] for async callers: memory at once, the rest off the workers.
    pub(super) async fn find_off_worker(
        self: &Arc<Self>,
        id: &str,
        session: Option<&str>,
    ) -> Result<(), CheckpointError> {
        if self.holds(id) {
            return Ok(());
        }
        let (id, session) = (id.to_string(), session.map(str::to_string));
        self.off_worker(move |c| c.find(&id, session.as_deref()))
            .await?
    }

    /// Finds `id` in the last events of `session`'s log and keeps it in memory. Blocking.
    fn lookup(&self, session: &str, id: &str) -> Result<Option<CheckpointInfo>, StoreError> {
        let Some(entry) = replay::scan_recent(&self.store, session, id)? else {
            return Ok(None);
        };
        let info = entry.view(id);
        if self.table.lock().unwrap().adopt(session, id, entry) {
            self.wake.notify_one();
        }
        Ok(Some(info))
    }

    /// Opens a checkpoint for `req`, or finds the one its key already has. Blocking: it may
    /// write the session's marker and the journal, and read its log.
    pub fn prepare(&self, req: NewRequest) -> Result<Prepared, CheckpointError> {
        dstream_sdk::validate_session_id(&req.session_id)
            .map_err(|e| CheckpointError::Invalid(format!("session_id: {e}")))?;
        if req.key.is_empty() || req.key.len() > 256 {
            return Err(CheckpointError::Invalid(
                "key must be 1 to 256 bytes".to_string(),
            ));
        }
        let id = checkpoint_id(&req.session_id, &req.key);
        if let Some(info) = self.get(&id) {
            return Ok(Prepared::Existing(info));
        }
        let journaled = self.table.lock().unwrap().journaled.contains(&id_hash(&id));
        if journaled && let Some(info) = self.lookup(&req.session_id, &id)? {
            return Ok(Prepared::Existing(info));
        }
        let created_ms = now_ms();
        let on_timeout = req.on_timeout.unwrap_or(OnTimeout::Deny);
        let info = CheckpointInfo {
            id: id.clone(),
            session_id: req.session_id.clone(),
            key: req.key.clone(),
            state: CheckpointState::Recording,
            tool: req.tool.clone(),
            input: None,
            summary: req.summary.clone(),
            options: req.options.clone(),
            created_ms,
            deadline_ms: created_ms.saturating_add(req.timeout_ms),
            on_timeout,
            rule: req.rule.clone(),
            source: req.source.clone(),
            cwd: req.cwd.clone(),
            lsn: 0,
            decision: None,
            delivered: false,
        };
        let event_id = ulid::Ulid::new().to_string();
        let event = events::requested(&info, &req)?;
        {
            let mut table = self.table.lock().unwrap();
            // Two requests with one key at the same moment: the first one made it.
            if let Some(e) = table.entries.get(&id) {
                return Ok(Prepared::Existing(e.view(&id)));
            }
            self.journal
                .note(&mut table.journaled, &id, &req.session_id);
            let open = table.open.get(&req.session_id).copied().unwrap_or(0);
            if open == 0 {
                // Before the request is in the log, so a restart finds it.
                let from = self
                    .store
                    .get(&req.session_id)
                    .map_or(1, |s| s.committed_lsn() + 1);
                self.markers.write(&req.session_id, from)?;
            }
            table.open.insert(req.session_id.clone(), open + 1);
            table.entries.insert(
                id.clone(),
                Box::new(Entry::new(
                    info.clone(),
                    event_id.clone(),
                    req.input_glob.clone(),
                )),
            );
        }
        Ok(Prepared::New {
            info,
            event_id,
            event,
        })
    }

    /// The outcome of appending a prepared request: durable (it is pending from now on, its
    /// deadline runs) or refused (the checkpoint is dropped; its waiters hear so). Blocking
    /// when refused: the session's marker may be removed.
    pub fn recorded(&self, id: &str, result: Result<&AppendAck, &StoreError>) {
        let mut table = self.table.lock().unwrap();
        match result {
            Ok(ack) => {
                let Some(e) = table.entries.get_mut(id) else {
                    return;
                };
                e.info.state = CheckpointState::Pending;
                e.info.lsn = ack.lsn;
                let deadline = e.info.deadline_ms;
                table.deadlines.insert((deadline, id.to_string()));
                drop(table);
                self.wake.notify_one();
            }
            Err(_) => {
                if let Some(e) = table.entries.remove(id)
                    && table.close_one(&e.info.session_id)
                {
                    self.markers.remove(&e.info.session_id);
                }
            }
        }
    }

    /// Appends a prepared request and waits until it is pending (for `checkpoint.request`).
    pub async fn record(
        self: &Arc<Self>,
        info: CheckpointInfo,
        event_id: String,
        event: NewEventRaw,
    ) -> Result<CheckpointInfo, CheckpointError> {
        let (tx, rx) = oneshot::channel();
        self.store.append_with_id(
            &info.session_id,
            Some(event_id),
            event,
            true,
            crate::store::Ack::new(move |r| drop(tx.send(r))),
        );
        match rx.await.unwrap_or(Err(StoreError::ShuttingDown)) {
            Ok(ack) => self.recorded(&info.id, Ok(&ack)),
            Err(e) => {
                let id = info.id.clone();
                let e = self
                    .off_worker(move |c| {
                        c.recorded(&id, Err(&e));
                        e
                    })
                    .await?;
                return Err(e.into());
            }
        }
        self.get(&info.id)
            .ok_or_else(|| CheckpointError::NotFound(info.id.clone()))
    }

    /// A checkpoint held in memory.
    pub fn get(&self, id: &str) -> Option<CheckpointInfo> {
        self.table
            .lock()
            .unwrap()
            .entries
            .get(id)
            .map(|e| e.view(id))
    }

    /// Waits until `id` is decided, or `timeout` passes (then returns it still pending).
    /// `session` lets a checkpoint no longer held in memory be found in its log.
    pub async fn wait(
        self: &Arc<Self>,
        id: &str,
        session: Option<&str>,
        timeout: Option<Duration>,
    ) -> Result<CheckpointInfo, CheckpointError> {
        let rx = {
            let mut table = self.table.lock().unwrap();
            match table.entries.get_mut(id) {
                Some(e) if e.info.decision.is_some() => return Ok(e.view(id)),
                Some(e) => {
                    let (tx, rx) = oneshot::channel();
                    e.waiters.push(tx);
                    Some(rx)
                }
                None => None,
            }
        };
        let Some(rx) = rx else {
            self.find_off_worker(id, session).await?;
            return Box::pin(self.wait(id, None, timeout)).await;
        };
        let mut waiter = Waiter {
            checkpoints: self,
            id,
            rx: Some(rx),
        };
        let rx = waiter.rx.as_mut().expect("just set");
        let decided = match timeout {
            Some(t) => match tokio::time::timeout(t, rx).await {
                Ok(r) => r,
                Err(_) => {
                    drop(waiter);
                    return self
                        .get(id)
                        .ok_or_else(|| CheckpointError::NotFound(id.to_string()));
                }
            },
            None => rx.await,
        };
        decided
            .map_err(|_| CheckpointError::Invalid(format!("checkpoint {id} could not be recorded")))
    }

    /// Records once that a waiting client was handed the decision of `id`.
    pub async fn delivered(&self, id: &str, to: &str) {
        let (session, cause, decision) = {
            let mut table = self.table.lock().unwrap();
            let Some(e) = table.entries.get_mut(id) else {
                return;
            };
            let Some(d) = &e.info.decision else { return };
            if e.info.delivered {
                return;
            }
            e.info.delivered = true;
            (
                e.info.session_id.clone(),
                d.event_id.clone(),
                d.decision.clone(),
            )
        };
        let Ok(event) = events::delivered(id, &decision, to, cause) else {
            return;
        };
        if let Err(e) = self.store.append_wait(&session, event, true).await {
            tracing::warn!(checkpoint = id, error = %e, "cannot record a checkpoint's delivery");
        }
    }

    /// Checkpoints held in memory (every open one, and recently decided ones), oldest first,
    /// with their inputs read from the logs; not those whose request is still being synced.
    /// Blocking.
    /// Also returns how many matched before the limit cut the list.
    pub fn list(
        &self,
        state: Option<CheckpointState>,
        session: Option<&str>,
        tool: Option<&str>,
        newest_first: bool,
        limit: Option<usize>,
    ) -> (Vec<CheckpointInfo>, usize) {
        let matching = self.table.lock().unwrap().matching(state, session, tool);
        let (mut out, total) = table::page(matching, newest_first, limit);
        for info in &mut out {
            info.input = replay::input_of(&self.store, info);
        }
        (out, total)
    }

    /// Pending (and recording) checkpoints of `session` (retention keeps such a session).
    pub fn pending_in(&self, session: &str) -> usize {
        self.table.lock().unwrap().pending_in(session)
    }

    /// Pending (and recording) checkpoints.
    pub fn pending_count(&self) -> usize {
        self.table.lock().unwrap().pending_count()
    }
}

impl Drop for Checkpoints {
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}
