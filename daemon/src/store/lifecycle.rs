//! The store's operations that make or end a session other than by appending: `fork` (the
//! copy is made in [`super::fork`]) and deletion (the tombstone's rules in
//! [`super::tombstone`], the work on the commit thread).

use std::io;
use std::path::Path;
use std::sync::Arc;

use super::Store;
use super::commit::CommitMsg;
use super::error::StoreError;
use super::fork::{ForkReport, Prepared, prepare, remove_temps};
use super::session::Session;
use super::tombstone::Tombstone;

impl Store {
    /// Forks `parent` at `at` into `new` (see the module's documentation).
    pub async fn fork(&self, parent: &str, at: u64, new: &str) -> Result<ForkReport, StoreError> {
        let fail = |reason: String| StoreError::Refused(reason);
        let Some(p) = self
            .get(parent)
            .filter(|s| s.committed_lsn() > 0 || s.quarantine().is_some())
        else {
            return Err(self.missing(parent));
        };
        let last = p.committed_lsn();
        if at == 0 || at > last {
            return Err(fail(format!(
                "cannot fork {parent} at lsn {at}: its events are 1..={last}"
            )));
        }
        let new_log = self.inner.sessions_dir.join(format!("{new}.jsonl"));
        self.check_free(new, &new_log, self.get(new).as_ref())?;
        // The parent's events up to `at` are durable before the fork names them.
        self.flush().await?;
        let vfs = self.inner.vfs.clone();
        let (log, parent_session) = (new_log.clone(), p.clone());
        let interval = self.inner.settings.index_interval_bytes;
        let prepared = tokio::task::spawn_blocking(move || {
            prepare(&*vfs, &parent_session, at, &log, interval)
        })
        .await
        .map_err(|e| StoreError::io("fork task", &io::Error::other(e.to_string())))??;
        let store = self.clone();
        let new_id = new.to_string();
        tokio::task::spawn_blocking(move || store.register_fork(&new_id, &new_log, prepared))
            .await
            .map_err(|e| StoreError::io("fork task", &io::Error::other(e.to_string())))?
    }

    /// Refuses an id that has events or a log (`existing`: its entry in the session map).
    fn check_free(
        &self,
        id: &str,
        log: &Path,
        existing: Option<&Arc<Session>>,
    ) -> Result<(), StoreError> {
        if existing.is_some_and(|s| s.committed_lsn() > 0) || self.inner.vfs.exists(log) {
            return Err(StoreError::Exists(id.to_string()));
        }
        if let Some(t) = self.gone(id) {
            return Err(t.error());
        }
        Ok(())
    }

    fn register_fork(
        &self,
        id: &str,
        log: &Path,
        prepared: Prepared,
    ) -> Result<ForkReport, StoreError> {
        let vfs = &*self.inner.vfs;
        let mut sessions = self.inner.sessions.write().unwrap();
        // Under the map's write lock nobody can take a new handle on `id`: a count above one
        // is an append or a subscription holding it.
        let existing = sessions.get(id);
        let in_use = existing.is_some_and(|s| Arc::strong_count(s) > 1);
        let refused = match self.check_free(id, log, existing) {
            Err(e) => Some(e),
            Ok(()) if in_use => Some(StoreError::Refused(format!(
                "session {id} is in use (an append or a subscription is waiting on it); try again"
            ))),
            Ok(()) => None,
        };
        if let Some(e) = refused {
            remove_temps(vfs, &prepared.renames);
            return Err(e);
        }
        let dir = crate::vfs::parent(log);
        let done = prepared.renames.iter().try_for_each(|(tmp, to)| {
            vfs.rename(tmp, to)?;
            vfs.sync_dir(dir)
        });
        if let Err(e) = done {
            remove_temps(vfs, &prepared.renames);
            return Err(StoreError::io("registering the fork", &e));
        }
        let state = prepared.state;
        let report = ForkReport {
            session_id: id.to_string(),
            origin: prepared.origin,
            bytes: state.len,
            last_lsn: state.last_lsn,
        };
        self.inner.files.forget(id);
        let session = self.new_session(id.to_string(), log.to_path_buf(), state, None);
        sessions.insert(id.to_string(), session);
        Ok(report)
    }

    /// The tombstone of `id`, if it was deleted.
    pub fn gone(&self, id: &str) -> Option<Tombstone> {
        self.inner.gone.read().unwrap().get(id).cloned()
    }

    /// Every tombstone, by session id.
    pub fn tombstones(&self) -> Vec<Tombstone> {
        let mut all: Vec<_> = self.inner.gone.read().unwrap().values().cloned().collect();
        all.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        all
    }

    /// Deletes session `id` if its last LSN is still `last_lsn` (an event since means it is
    /// in use again: it is kept, and the answer says so). See the module's documentation.
    pub async fn delete(
        &self,
        id: &str,
        last_lsn: u64,
        reason: String,
    ) -> Result<Tombstone, StoreError> {
        let session = self
            .get(id)
            .filter(|s| s.committed_lsn() > 0)
            .ok_or_else(|| self.missing(id))?;
        let (done, rx) = tokio::sync::oneshot::channel();
        {
            let commit = self.inner.commit.read().unwrap();
            let tx = commit.as_ref().ok_or(StoreError::ShuttingDown)?;
            tx.send(CommitMsg::Delete {
                session: session.clone(),
                last_lsn,
                reason,
                done,
            })
            .map_err(|_| StoreError::ShuttingDown)?;
        }
        let tombstone = rx.await.unwrap_or(Err(StoreError::ShuttingDown))?;
        let mut sessions = self.inner.sessions.write().unwrap();
        if sessions
            .get(id)
            .is_some_and(|s| std::sync::Arc::ptr_eq(s, &session))
        {
            sessions.remove(id);
        }
        self.inner
            .gone
            .write()
            .unwrap()
            .insert(id.to_string(), tombstone.clone());
        Ok(tombstone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a fork of a 1,000,000-event session costs: `cargo test -p dstream-daemon --lib
    /// --release fork_of_a_million -- --ignored --nocapture`.
    #[tokio::test(flavor = "multi_thread")]
    #[ignore = "a measurement: appends a million events"]
    async fn fork_of_a_million_events() {
        use crate::config::FsyncPolicy;
        use crate::store::{Ack, NewEventRaw, StoreSettings};
        let dir = tempfile::tempdir().unwrap();
        let settings = StoreSettings {
            fsync: FsyncPolicy::Never,
            fsync_interval_ms: 20,
            index_interval_bytes: 4096,
            verify_on_start: true,
            max_open_files: 16,
            wal_bytes: 64 << 20,
            pipeline_syncs_over: crate::store::PIPELINE_SYNCS_OVER,
        };
        let hub = crate::hub::Hub::new(1 << 20);
        let (store, _) = Store::open(dir.path(), settings, hub).await.unwrap();
        const N: u64 = 1_000_000;
        for chunk in 0..N / 10_000 {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let batch = (0..10_000)
                .map(|i| {
                    let e: NewEventRaw = serde_json::from_value(serde_json::json!({
                        "type": "tool.call", "actor": "claude-code",
                        "payload": {"n": chunk * 10_000 + i, "command": "cargo test -p x", "pad": "y".repeat(100)},
                    }))
                    .unwrap();
                    let tx = tx.clone();
                    ("big".to_string(), e, false, Ack::new(move |r| drop(tx.send(r))))
                })
                .collect();
            store.append_all(batch);
            drop(tx);
            while let Some(r) = rx.recv().await {
                r.unwrap();
            }
        }
        let start = std::time::Instant::now();
        let r = store.fork("big", N, "big-fork").await.unwrap();
        let took = start.elapsed();
        println!(
            "fork of {N} events: {} ms, {} bytes copied ({} bytes a record)",
            took.as_millis(),
            r.bytes,
            r.bytes / N
        );
        let start = std::time::Instant::now();
        store.fork("big", N / 2, "half-fork").await.unwrap();
        println!("fork at {}: {} ms", N / 2, start.elapsed().as_millis());
        assert_eq!(r.last_lsn, N);
        store.shutdown().await;
    }
}
