//! Cutting ahead: while a batch of a backlog is on the wire, the batches behind it are cut
//! from the log and recorded in the ledger (`queued`), several in one durable write, so that
//! neither the log read nor the ledger's fsync waits for the server's answer. Each still
//! leaves only after the one before it is acknowledged: the server sees one batch at a time.
//!
//! Only full batches are cut ahead (at least `batch_max_events` waiting behind): they are
//! the cuts the step after each answer would make, and a live stream's next batch still
//! waits for the answer, taking what arrived meanwhile. Their bodies are kept for the send
//! within a byte budget shared by all streams ([`AHEAD_BYTES`]); past it, batches are cut
//! after each answer as before.
//!
//! [`AHEAD_BYTES`]: crate::relay::shared::AHEAD_BYTES

use super::body::Kept;
use super::worker::Worker;
use crate::relay::ledger::Inflight;

/// Batches recorded ahead of the one in flight at most: one ledger write serves this many
/// POSTs.
const MAX_AHEAD: usize = 16;

impl Worker {
    /// While batch `f` is on the wire with nothing queued behind it: cuts up to
    /// [`MAX_AHEAD`] full batches after it and records them with one ledger write. Empty
    /// when there is nothing to cut or something failed: the step after the answer then
    /// cuts the next batch the usual way, and reports what fails.
    pub(super) async fn cut_ahead(&self, f: Inflight) -> Vec<(Inflight, Kept)> {
        let mut cut = Vec::new();
        if f.close || !self.ledger.queued.is_empty() {
            return cut;
        }
        let cfg = &self.settings.config;
        let (max_events, max_bytes) = (cfg.batch_max_events, cfg.batch_max_bytes);
        let committed = self.committed_lsn();
        let full = |from: u64| committed >= from && committed - from + 1 >= max_events as u64;
        let (mut seq, mut from) = (f.seq + 1, f.last_lsn + 1);
        while cut.len() < MAX_AHEAD && full(from) {
            let Ok(events) = self.read(from, committed, max_events, max_bytes).await else {
                break;
            };
            let Some(last) = events.last().map(|e| e.lsn) else {
                break;
            };
            let (body, count) = self.body_of(events).await;
            // A batch the filters keep back entirely is never sent: the usual cut skips it.
            if count == 0 {
                break;
            }
            let Some(budget) = u32::try_from(body.len())
                .ok()
                .and_then(|n| self.shared.ahead.clone().try_acquire_many_owned(n).ok())
            else {
                break;
            };
            let q = Inflight {
                seq,
                first_lsn: from,
                last_lsn: last,
                close: false,
            };
            let _budget = Some(budget);
            cut.push((
                q,
                Kept {
                    seq,
                    body,
                    count,
                    _budget,
                },
            ));
            (seq, from) = (seq + 1, last + 1);
        }
        if cut.is_empty() {
            return cut;
        }
        let mut ledger = self.ledger.clone();
        ledger.queued.extend(cut.iter().map(|(q, _)| *q));
        let (ledgers, session) = (self.shared.ledgers.clone(), self.session.clone());
        let saved = tokio::task::spawn_blocking(move || ledgers.save(&session, &ledger)).await;
        if !matches!(saved, Ok(Ok(()))) {
            // Not recorded, so never sent: the bodies and their budget go.
            cut.clear();
        }
        cut
    }
}
