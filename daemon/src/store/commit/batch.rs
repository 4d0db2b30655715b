//! Committing one batch: grouped by session, each group written to its log, the whole batch
//! written to the write-ahead log as one write (with any lease renewals) and synced when it
//! must be; then each session's index, metadata and committed LSN updated, the live feed
//! told, and every append acknowledged. A failed WAL write takes the groups back out.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;

use super::messages::{Append, fail_all};
use super::thread::Committer;
use super::write::{Group, Written};
use crate::config::FsyncPolicy;
use crate::hub::Committed;
use crate::store::error::StoreError;
use crate::store::index::IndexEntry;
use crate::store::record;
use crate::store::session::{EventJson, Session};
use crate::store::types::AppendAck;
use crate::store::wal::Wal;
use crate::store::writer_state::WriterState;

impl Committer {
    pub(super) fn commit(&mut self, batch: Vec<Append>) {
        if let Some(reason) = &self.failed {
            let err = StoreError::Failed {
                reason: reason.clone(),
            };
            for a in batch {
                a.ack.send(Err(err.clone()));
            }
            return;
        }
        // One group per session, in order of first appearance; order within a session kept.
        let mut must_sync = self.settings.fsync == FsyncPolicy::Always;
        let mut groups: Vec<Group> = Vec::new();
        let mut slot: HashMap<*const Session, usize> = HashMap::new();
        for a in batch {
            must_sync |= a.must_sync;
            let i = *slot.entry(Arc::as_ptr(&a.session)).or_insert_with(|| {
                groups.push(Group {
                    session: a.session.clone(),
                    appends: Vec::new(),
                });
                groups.len() - 1
            });
            groups[i].appends.push((a.event, a.id, a.ack));
        }
        let written: Vec<Written> = groups
            .into_iter()
            .filter_map(|group| self.write_group(group))
            .collect();
        if written.is_empty() {
            return;
        }
        // The records are encoded only after the checkpoint that may start a new epoch: their
        // crc covers the epoch they are written under, or replay would stop at the first one.
        let leasing = self.settings.fsync != FsyncPolicy::Always;
        let wal_len: usize = written
            .iter()
            .map(|w| {
                let lease = if leasing {
                    Wal::encoded_len(&w.session.id, 0)
                } else {
                    0
                };
                let lines: usize = w
                    .lines
                    .iter()
                    .map(|&(_, _, _, body_len)| {
                        Wal::encoded_len(&w.session.id, body_len + record::CRC_TRAILER_LEN + 1)
                    })
                    .sum();
                lines + lease
            })
            .sum();
        if !self.wal.fits(wal_len) {
            self.checkpoint();
        }
        let mut wal_buf = Vec::with_capacity(wal_len);
        let mut leases = Vec::new();
        for w in &written {
            for &(_, _, start, body_len) in &w.lines {
                // The whole sealed line: body, crc trailer and newline, and where it starts.
                let end = start + body_len + record::CRC_TRAILER_LEN;
                let offset = w.old_len + start as u64;
                self.wal
                    .encode_line(&w.session.id, offset, &w.buf[start..=end], &mut wal_buf);
            }
            if leasing && let Some(lease) = self.lease(w, &mut wal_buf) {
                must_sync |= lease.needs_sync;
                if let Some(renewed) = lease.renewed {
                    leases.push((w.session.clone(), renewed));
                }
            }
        }
        debug_assert!(wal_buf.len() <= wal_len);
        let outcome = if self.failed.is_some() {
            Err(io::Error::other("the store failed"))
        } else if wal_buf.len() > self.wal.room() {
            Err(io::Error::other("batch larger than the write-ahead log"))
        } else {
            self.wal
                .write(&wal_buf)
                .and_then(|()| if must_sync { self.wal.sync() } else { Ok(()) })
        };
        if let Err(e) = outcome {
            tracing::error!(error = %e, "writing the write-ahead log failed; the batch is refused");
            if must_sync && self.failed.is_none() {
                self.fail(format!("syncing the write-ahead log failed: {e}"));
            }
            for w in written {
                self.cut_back(&w);
                fail_all(w.acks, StoreError::io("writing the write-ahead log", &e));
            }
            return;
        }
        for (session, (upto, step)) in leases {
            let mut state = session.writer.lock().unwrap();
            (state.lease, state.lease_step) = (upto, step);
            drop(state);
            self.leased.insert(session.id.clone(), session.clone());
            self.leases_unsynced.push(session);
        }
        if must_sync {
            self.stats.fsyncs.fetch_add(1, Relaxed);
            self.synced();
        } else {
            self.unsynced = true;
        }
        for w in &written {
            let last = w.lines.last().map_or(0, |l| l.0);
            if must_sync {
                w.session.set_durable(last);
            } else {
                self.awaiting_sync.push((w.session.clone(), last));
            }
        }
        for w in written {
            self.finish(w);
        }
    }

    /// The batch is durable: index, metadata, committed LSN, live feed, acknowledgements.
    fn finish(&mut self, w: Written) {
        let session = &w.session;
        self.stats.appends.fetch_add(w.lines.len() as u64, Relaxed);
        self.stats
            .bytes_written
            .fetch_add(w.buf.len() as u64, Relaxed);
        let last_lsn = w.lines.last().map_or(0, |l| l.0);
        {
            let mut state = session.writer.lock().unwrap();
            self.index_lines(session, &mut state, w.old_len, &w.lines);
            state.len = w.old_len + w.buf.len() as u64;
            state.next_lsn = last_lsn + 1;
            let mut meta = session.meta.lock().unwrap();
            if let Some(root) = w.new_lineage {
                meta.stream_id = Some(root.clone());
                meta.first_ts = w.timestamp;
                state.stream_id = Some(root);
            }
            meta.last_ts = w.timestamp;
            meta.bytes = state.len;
        }
        session.set_committed(last_lsn);
        if self.hub.has_readers() {
            // Copied out of the batch buffer so the hub's byte cap counts what it really holds.
            let name: Arc<str> = session.id.as_str().into();
            self.hub
                .publish(w.lines.iter().map(|&(lsn, _, start, body_len)| Committed {
                    session: name.clone(),
                    event: EventJson::new(
                        lsn,
                        Bytes::copy_from_slice(&w.buf[start..start + body_len]),
                    ),
                }));
        }
        for ((lsn, id, _, _), ack) in w.lines.into_iter().zip(w.acks) {
            ack.send(Ok(AppendAck { lsn, id }));
        }
    }

    /// Adds sparse index entries for the lines just written (same rule as recovery's rebuild).
    fn index_lines(
        &self,
        session: &Session,
        state: &mut WriterState,
        base: u64,
        lines: &[(u64, String, usize, usize)],
    ) {
        let interval = self.settings.index_interval_bytes;
        let mut added = Vec::new();
        for &(lsn, _, start, _) in lines {
            let offset = base + start as u64;
            if state
                .last_index_offset
                .is_none_or(|last| offset >= last + interval)
            {
                added.push(IndexEntry { lsn, offset });
                state.last_index_offset = Some(offset);
            }
        }
        if added.is_empty() {
            return;
        }
        let mut index = session.index.write().unwrap();
        for e in &added {
            index.push(*e);
        }
        state.unsaved_index.extend(added);
    }
}
