//! A batch's groups once their WAL sync is done: the session's metadata and committed LSN
//! moved, the live feed told, and every append acknowledged. Run by the commit thread when it
//! syncs inline, by the sync thread when the sync is pipelined ([`super::syncer`]).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;

use super::written::Written;
use crate::hub::{Committed, Hub};
use crate::store::session::EventJson;
use crate::store::types::{AppendAck, StoreStats};

/// The group is durable: metadata, committed LSN, live feed, acknowledgements.
pub(super) fn publish(w: Written, hub: &Hub, stats: &StoreStats) {
    let session = &w.session;
    stats.appends.fetch_add(w.lines.len() as u64, Relaxed);
    stats.bytes_written.fetch_add(w.buf.len() as u64, Relaxed);
    let last_lsn = w.last_lsn();
    {
        let mut meta = session.meta.lock().unwrap();
        if let Some(root) = &w.new_lineage {
            meta.stream_id = Some(root.clone());
            meta.first_ts = w.timestamp;
        }
        meta.last_ts = w.timestamp;
        meta.bytes = w.old_len + w.buf.len() as u64;
    }
    session.set_committed(last_lsn);
    if hub.has_readers() {
        // Copied out of the batch buffer so the hub's byte cap counts what it really holds.
        let name: Arc<str> = session.id.as_str().into();
        let log = &session.log_name;
        hub.publish(w.lines.iter().map(|&(lsn, _, start, body_len)| Committed {
            session: name.clone(),
            event: EventJson::new(
                lsn,
                Bytes::copy_from_slice(&w.buf[start..start + body_len]),
                log,
            ),
        }));
    }
    for ((lsn, id, _, _), ack) in w.lines.into_iter().zip(w.acks) {
        ack.send(Ok(AppendAck { lsn, id }));
    }
}
