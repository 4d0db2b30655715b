//! The WAL checkpoint: when the write-ahead log is full (and at shutdown), every log written
//! since the last one is synced (in parallel), then the indexes are saved, the leases ended,
//! and the WAL starts over. Until then the WAL is what makes appends durable.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::thread::Committer;
use crate::store::session::Session;
use crate::vfs::{Open, Vfs};

impl Committer {
    /// Syncs every log written since the last checkpoint, then starts the WAL over.
    pub(crate) fn checkpoint(&mut self) {
        // The WAL is about to start over: every batch in it is synced and answered first.
        self.drain_syncs();
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
