//! Committing one batch: grouped by session, each group written to its log, the whole batch
//! written to the write-ahead log as one write (with any lease renewals) and synced when it
//! must be (or handed to the sync thread, [`super::syncer`]); the commit thread's view of each
//! log moved past it; once synced, each session's metadata and committed LSN updated, the live
//! feed told, and every append acknowledged ([`super::durable`]). A failed WAL write takes the
//! groups back out.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::durable::publish;
use super::messages::{Append, fail_all};
use super::thread::Committer;
use super::written::{Group, Written};
use crate::config::FsyncPolicy;
use crate::store::error::StoreError;
use crate::store::record;
use crate::store::session::Session;
use crate::store::wal::Wal;

impl Committer {
    pub(super) fn commit(&mut self, batch: Vec<Append>) {
        self.lone_batches = match batch.len() {
            1 => self.lone_batches.saturating_add(1),
            _ => 0,
        };
        // First: switching to inline syncs drains the sync thread, which may report a failure.
        let pipelined = self.choose_pipelining();
        self.take_sync_failure();
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
            // Pipelined, the sync comes after this batch is handed over.
            let sync_here = must_sync && !pipelined;
            self.wal.write(&wal_buf).and_then(|()| {
                if !sync_here {
                    return Ok(());
                }
                self.sync_cost.time(|| self.wal.sync())
            })
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
        // The next batch is written after this one, whether or not this one is synced yet.
        for w in &written {
            self.advance(w);
        }
        if pipelined && let Some(syncer) = &self.syncer {
            syncer.submit(written);
            self.handed_over = true;
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
        for w in written {
            if must_sync {
                w.session.set_durable(w.last_lsn());
            } else {
                self.awaiting_sync.push((w.session.clone(), w.last_lsn()));
            }
            publish(w, &self.hub, &self.stats);
        }
    }
}
