//! Deleting a session on the commit thread (see `store::tombstone`): after every append
//! queued before it, and before any queued after it, which the session's mark refuses.

use std::sync::Arc;

use super::thread::Committer;
use crate::store::error::StoreError;
use crate::store::session::Session;
use crate::store::tombstone::{Tombstone, remove_files, session_files};

impl Committer {
    pub(super) fn delete(
        &mut self,
        session: &Arc<Session>,
        last_lsn: u64,
        reason: String,
    ) -> Result<Tombstone, StoreError> {
        if let Some(t) = session.gone.get() {
            return Err(t.error());
        }
        let now = session.committed_lsn();
        if now != last_lsn {
            return Err(StoreError::Refused(format!(
                "session {} was not deleted: it has new events (lsn {now}, was {last_lsn})",
                session.id
            )));
        }
        let meta = session.meta();
        let tombstone = Tombstone {
            session_id: session.id.clone(),
            deleted_at_ms: crate::util::time::now_ms(),
            reason,
            last_lsn,
            last_ts: meta.last_ts,
            bytes_freed: meta.bytes,
            stream_id: meta.stream_id,
        };
        let ctx = |c: &'static str| move |e: std::io::Error| StoreError::io(c, &e);
        let bytes = serde_json::to_vec(&tombstone)
            .map_err(|e| StoreError::io("writing a tombstone", &std::io::Error::other(e)))?;
        // The tombstone first, durably: from here on the session is gone, whatever happens.
        self.vfs
            .write_atomic(&session.path.with_extension("gone"), &bytes)
            .map_err(ctx("writing a tombstone"))?;
        let _ = session.gone.set(tombstone.clone());
        self.dirty.remove(&session.id);
        session.forget_file();
        // What fails from here is finished at the next start.
        let removed = remove_files(&*self.vfs, &session_files(&session.path))
            .and_then(|_| self.vfs.sync_dir(&self.sessions_dir));
        if let Err(e) = removed {
            tracing::warn!(session = %session.id, error = %e, "a deleted session's files are removed at the next start");
        }
        Ok(tombstone)
    }
}
