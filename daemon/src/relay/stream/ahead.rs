//! Cutting ahead: while the batches of a backlog go out, a task of their stream cuts the next
//! ones from the log and records them in the ledger (`queued`), several in one durable write,
//! so that neither the log reads nor the ledger's fsync wait for the server's answers. Each
//! batch still leaves only once it is on disk and the one before it is acknowledged: the
//! server sees one batch at a time, in order.
//!
//! Only full batches are cut ahead (at least `batch_max_events` waiting behind): they are
//! the cuts the step after each answer would make, and a live stream's next batch still
//! waits for the answer, taking what arrived meanwhile. Their bodies are kept for the send
//! within a byte budget shared by all streams ([`AHEAD_BYTES`]); past it, batches are cut
//! after each answer as before.
//!
//! [`AHEAD_BYTES`]: crate::relay::shared::AHEAD_BYTES

use std::sync::Arc;

use super::body::{Kept, body_of};
use super::worker::{Cutting, Worker};
use crate::relay::ledger::{Inflight, Ledger};
use crate::relay::shared::Shared;

/// Batches recorded ahead of the one in flight at most.
const MAX_AHEAD: usize = 16;
/// A new cut starts once no more than this many are queued, so that its reads and its write
/// overlap the POSTs of those.
const REFILL_AT: usize = MAX_AHEAD / 2;

/// What a cut needs to know.
struct Plan {
    /// The last batch cut before: the cut continues after it.
    after: Inflight,
    upto: u64,
    batches: usize,
    max_events: usize,
    max_bytes: usize,
}

impl Worker {
    /// Starts a cut behind the last batch cut, when a backlog of full batches waits, few are
    /// queued, and no cut is under way.
    pub(super) fn cut_ahead(&mut self) {
        let l = &self.ledger;
        if self.cutting.is_some() || l.queued.len() > REFILL_AT {
            return;
        }
        let Some(after) = l.queued.last().or(l.inflight.as_ref()).copied() else {
            return;
        };
        let cfg = &self.settings.config;
        let plan = Plan {
            after,
            upto: self.committed_lsn(),
            batches: MAX_AHEAD - l.queued.len(),
            max_events: cfg.batch_max_events,
            max_bytes: cfg.batch_max_bytes,
        };
        if after.close || !plan.full(after.last_lsn + 1) {
            return;
        }
        let task = tokio::spawn(cut(
            self.shared.clone(),
            self.session.clone(),
            l.clone(),
            plan,
        ));
        self.cutting = Some(Cutting {
            epoch: l.epoch,
            task,
        });
    }

    /// Whether a cut under way has finished (its batches can be taken without waiting).
    pub(super) fn cut_done(&self) -> bool {
        self.cutting.as_ref().is_some_and(|c| c.task.is_finished())
    }

    /// Waits for the cut under way, if any, and queues its batches when they still follow
    /// the last batch the stream holds, under the same epoch; otherwise (a resync, a new
    /// stream since) they were never sent, and are dropped.
    pub(super) async fn settle_cut(&mut self) {
        let Some(c) = self.cutting.take() else {
            return;
        };
        let batches = c.task.await.unwrap_or_default();
        let l = &mut self.ledger;
        let (seq, lsn) = match l.queued.last().or(l.inflight.as_ref()) {
            Some(b) => (b.seq + 1, b.last_lsn + 1),
            None => (l.next_seq, l.acked_lsn + 1),
        };
        let follows = batches
            .first()
            .is_some_and(|(q, _)| q.seq == seq && q.first_lsn == lsn);
        if !follows || c.epoch != l.epoch || !l.created || l.closed {
            return;
        }
        for (q, kept) in batches {
            l.queued.push(q);
            self.bodies.put(kept);
        }
        if l.inflight.is_none() {
            l.inflight = Some(l.queued.remove(0));
        }
    }
}

impl Plan {
    /// Whether a full batch waits from `from` on.
    fn full(&self, from: u64) -> bool {
        self.upto >= from && self.upto - from + 1 >= self.max_events as u64
    }
}

/// Cuts up to `plan.batches` full batches after `plan.after` and records them in `ledger`
/// with one write. Empty when there was nothing to cut or something failed: the stream then
/// cuts its next batch after the answer, the usual way, and reports what fails.
async fn cut(
    shared: Arc<Shared>,
    id: Arc<str>,
    mut ledger: Ledger,
    plan: Plan,
) -> Vec<(Inflight, Kept)> {
    let mut cut = Vec::new();
    let Some(session) = shared.store.get(&id) else {
        return cut;
    };
    let (mut seq, mut from) = (plan.after.seq + 1, plan.after.last_lsn + 1);
    while cut.len() < plan.batches && plan.full(from) {
        let (s, upto, n, max) = (session.clone(), plan.upto, plan.max_events, plan.max_bytes);
        let read =
            tokio::task::spawn_blocking(move || crate::store::read_range(&s, from, upto, n, max));
        let Ok(Ok(events)) = read.await else {
            break;
        };
        let Some(last) = events.last().map(|e| e.lsn) else {
            break;
        };
        let (body, count) = body_of(&shared, &id, events).await;
        // A batch the filters keep back entirely is never sent: the usual cut skips it.
        if count == 0 {
            break;
        }
        let Some(budget) = u32::try_from(body.len())
            .ok()
            .and_then(|n| shared.ahead.clone().try_acquire_many_owned(n).ok())
        else {
            break;
        };
        let q = Inflight {
            seq,
            first_lsn: from,
            last_lsn: last,
            close: false,
        };
        let kept = Kept {
            seq,
            body,
            count,
            _budget: Some(budget),
        };
        cut.push((q, kept));
        (seq, from) = (seq + 1, last + 1);
    }
    if cut.is_empty() {
        return cut;
    }
    ledger.queued.extend(cut.iter().map(|(q, _)| *q));
    let ledgers = shared.ledgers.clone();
    let saved = tokio::task::spawn_blocking(move || ledgers.save(&id, &ledger)).await;
    if !matches!(saved, Ok(Ok(()))) {
        // Not recorded, so never sent: the bodies and their budget go.
        cut.clear();
    }
    cut
}
