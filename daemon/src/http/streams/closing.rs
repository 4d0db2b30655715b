//! When a session's stream closes: once the session is archived (`lifecycle.session.archived`
//! is its last event), as the relay closes the remote one. An ended session stays open: Claude
//! Code resumes sessions after `SessionEnd`.

use crate::store::Store;

pub const ARCHIVED: &str = "lifecycle.session.archived";

/// Whether the event at `lsn` (the session's last) archives it.
pub async fn archived_at(store: &Store, id: &str, lsn: u64) -> bool {
    if lsn == 0 {
        return false;
    }
    match store.read(id, lsn, 1).await {
        Ok(page) => page
            .events
            .first()
            .is_some_and(|e| e.lsn == lsn && e.is_type(ARCHIVED)),
        Err(_) => false,
    }
}
