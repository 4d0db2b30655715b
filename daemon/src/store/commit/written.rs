//! A session's share of a batch, before it is written ([`Group`]) and after ([`Written`]):
//! what the commit thread, the sync thread and publishing pass between them, apart from the
//! code of any of them so that none imports another through it.

use std::sync::Arc;

use bytes::Bytes;

use super::messages::Ack;
use crate::store::session::Session;
use crate::store::types::NewEventRaw;

/// One session's share of a batch.
pub(super) struct Group {
    pub(super) session: Arc<Session>,
    pub(super) appends: Vec<(NewEventRaw, Option<String>, Ack)>,
}

/// A group serialized and written to its log, waiting for the WAL sync.
pub(super) struct Written {
    pub(super) session: Arc<Session>,
    pub(super) buf: Bytes,
    /// (lsn, id, start of line in buf, length of the event body)
    pub(super) lines: Vec<(u64, String, usize, usize)>,
    pub(super) acks: Vec<Ack>,
    pub(super) old_len: u64,
    pub(super) timestamp: u64,
    pub(super) new_lineage: Option<String>,
}

impl Written {
    pub(super) fn last_lsn(&self) -> u64 {
        self.lines.last().map_or(0, |l| l.0)
    }
}
