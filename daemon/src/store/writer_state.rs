//! What the commit thread knows of one session's log, kept in the session (so the session can
//! be built at start without the commit thread, and the commit thread can use it without the
//! session's other parts).

use super::index::IndexEntry;

/// What the commit thread knows of one session's log, kept in the session.
pub(crate) struct WriterState {
    /// Bytes of the log that are written.
    pub(super) len: u64,
    pub(super) next_lsn: u64,
    pub(super) last_index_offset: Option<u64>,
    /// Index entries not yet in the `.idx` file: written at the next checkpoint, off the
    /// append path (the file is a cache; recovery extends a short one from the log).
    pub(super) unsaved_index: Vec<IndexEntry>,
    /// Set when the log can no longer be trusted to match what was acknowledged.
    pub(super) failed: Option<String>,
    /// Lineage of the session, fixed by its first event.
    pub(super) stream_id: Option<String>,
    /// The highest LSN covered by a lease record in this WAL epoch (0: none), the highest
    /// covered by a synced one, and the size of the last lease (see [`Committer::lease`]).
    pub(super) lease: u64,
    pub(super) lease_synced: u64,
    pub(super) lease_step: u64,
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
            failed: None,
            stream_id,
            lease: 0,
            lease_synced: 0,
            lease_step: 0,
        }
    }
}
