//! A fork's stream created on the server as a fork of its parent's (`Stream-Forked-From`), so
//! the parent's events it shares are mostly not sent again. The fork starts at an offset the
//! server handed out for the parent's stream: the last of the parent ledger's marks at or
//! before the fork point (LSN j ≤ k); the events j+1..k and the fork's own then go as usual.
//! Tried once per task; when the parent's stream has no such mark or the server refuses the
//! fork, the fork goes as a full stream of its own. A server that ignores the headers creates
//! an empty stream, which the resync that follows finds empty.

use super::worker::{Step, Worker};
use crate::relay::ledger::Ledger;
use crate::relay::remote::{CreateOutcome, ForkFrom, Remote};
use crate::relay::shared::relayable;

impl Worker {
    /// Creates the stream as a remote fork when it can; `None` when the stream is to be
    /// created as a full one instead.
    pub(super) async fn create_as_fork(&mut self, remote: &Remote) -> Option<Step> {
        if self.fork_declined || self.ledger.stream.is_some() || self.ledger.stream_start > 0 {
            return None;
        }
        let origin = self.shared.store.get(&self.session)?.fork()?.clone();
        let parent = &origin.forked_from;
        if !relayable(&self.settings.config.sessions, parent) {
            return None;
        }
        let ledger = self.parent_ledger(parent).await?;
        let mark = ledger
            .mark_at_or_before(origin.fork_lsn)
            .filter(|_| ledger.created && ledger.stream.is_none());
        let Some((from_lsn, offset)) = mark.cloned() else {
            return self.decline("the parent's stream has no known offset before the fork point");
        };
        let fork = ForkFrom {
            source_url: remote.stream_url(parent, ""),
            offset: offset.clone(),
        };
        match remote.create_fork(&self.url(), &fork).await {
            CreateOutcome::Created { next_offset } => {
                let l = &mut self.ledger;
                l.created = true;
                l.remote_fork = true;
                l.closed = false;
                l.bytes_sent = 0;
                l.drop_batches();
                l.marks.clear();
                self.bodies.clear();
                tracing::info!(session = %self.session, %parent, from_lsn, fork_lsn = origin.fork_lsn, "relay: created the stream as a fork of its parent's");
                if next_offset.as_deref() != Some(offset.as_str()) {
                    // Not the tail the fork must have: find out what the server made of it.
                    return Some(self.resync(0, true).await);
                }
                let l = &mut self.ledger;
                l.acked_lsn = from_lsn;
                l.remote_offset = Some(offset.clone());
                l.mark(from_lsn, &offset);
                self.claim_epoch(0);
                Some(match self.save().await {
                    Ok(()) => Step::Continue,
                    Err(e) => self.back_off(e, None).await,
                })
            }
            // Created before (a crash before the ledger was saved): the plain path resyncs.
            CreateOutcome::Existed => None,
            CreateOutcome::Retry { reason, after } => Some(self.back_off(reason, after).await),
            CreateOutcome::Fatal { reason } => {
                self.decline(&format!("the server refused the fork: {reason}"))
            }
        }
    }

    fn decline(&mut self, why: &str) -> Option<Step> {
        self.fork_declined = true;
        tracing::info!(session = %self.session, %why, "relay: sending the fork as a full stream");
        None
    }

    async fn parent_ledger(&self, parent: &str) -> Option<Ledger> {
        let ledgers = self.shared.ledgers.clone();
        let id = parent.to_string();
        let ledger = tokio::task::spawn_blocking(move || ledgers.load(&id))
            .await
            .ok()?
            .ok()?;
        Some(ledger.for_target(&self.settings.target))
    }
}
