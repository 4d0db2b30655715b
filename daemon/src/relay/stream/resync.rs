//! Agreeing with the server again when it and the ledger disagree: the remote tail read and
//! every relayed event found there counted as delivered, then a new epoch claimed (the second
//! and third rules of the module docs of [`super`]).

use super::worker::{Step, Worker};
use crate::relay::remote::ReadOutcome;
use crate::relay::shared::State;

/// Pages of one resync read at most: a server that keeps answering "there is more" cannot
/// hold a stream in its resync for ever.
const MAX_RESYNC_PAGES: usize = 100_000;

impl Worker {
    /// The server and the ledger disagree: read what the remote stream holds past the last
    /// known tail (from its beginning when `from_start`), count the relayed events found
    /// there as delivered, and start a new epoch above `server_epoch`. Pages are scanned as
    /// they arrive, never kept; each must move the offset forward.
    pub(super) async fn resync(&mut self, server_epoch: u64, from_start: bool) -> Step {
        self.set_state(State::CatchingUp);
        let Some(remote) = self.settings.remote.clone() else {
            return Step::Idle;
        };
        let url = self.url();
        let mut offset = match (&self.ledger.remote_offset, from_start) {
            (Some(o), false) => o.clone(),
            _ => "-1".to_string(),
        };
        let mut found: Option<u64> = None;
        let mut pages = 0;
        let mut restarted = false;
        loop {
            pages += 1;
            if pages > MAX_RESYNC_PAGES {
                return self
                    .back_off(
                        format!("the remote tail did not end within {MAX_RESYNC_PAGES} pages"),
                        None,
                    )
                    .await;
            }
            match remote.scan_tail(&url, &offset).await {
                ReadOutcome::Page {
                    body: scan,
                    next_offset,
                    up_to_date,
                } => {
                    if let Some(lsn) = scan.max_lsn {
                        found = Some(found.map_or(lsn, |f| f.max(lsn)));
                    }
                    let advanced = match &next_offset {
                        Some(n) => offset == "-1" || *n > offset,
                        None => false,
                    };
                    if let Some(n) = next_offset.filter(|_| advanced) {
                        offset = n;
                    }
                    if up_to_date || scan.messages == 0 {
                        break;
                    }
                    if !advanced {
                        return self
                            .back_off(
                                "a page of the remote tail did not move its offset forward".into(),
                                None,
                            )
                            .await;
                    }
                }
                ReadOutcome::BadOffset { reason } if offset != "-1" && !restarted => {
                    // An offset the server no longer takes (or never did, if it sent a bogus
                    // one): read the whole stream instead (what the ledger counts as delivered
                    // stays so).
                    let session = self.session.clone();
                    self.warnings.warn(
                        &session,
                        "offset",
                        format_args!("{reason}; reading the remote stream from its start"),
                    );
                    restarted = true;
                    offset = "-1".into();
                }
                ReadOutcome::NotFound => {
                    self.ledger.created = false;
                    return Step::Continue;
                }
                ReadOutcome::BadOffset { reason } | ReadOutcome::Oversize { reason, .. } => {
                    return self.back_off(reason, None).await;
                }
                ReadOutcome::Retry { reason, after } => return self.back_off(reason, after).await,
                ReadOutcome::Fatal { reason } => return Step::Failed(reason),
            }
        }
        let l = &mut self.ledger;
        if from_start {
            l.acked_lsn = found.unwrap_or(0);
        } else if let Some(f) = found {
            l.acked_lsn = l.acked_lsn.max(f);
        }
        l.remote_offset = (offset != "-1").then_some(offset);
        l.drop_batches();
        self.bodies.clear();
        self.claim_epoch(server_epoch);
        tracing::info!(session = %self.session, acked_lsn = self.ledger.acked_lsn, epoch = self.ledger.epoch, "relay: resynced with the remote stream");
        match self.save().await {
            Ok(()) => Step::Continue,
            Err(e) => self.back_off(e, None).await,
        }
    }

    /// A new epoch above every one this producer id used (see the module docs), seq 0.
    pub(super) fn claim_epoch(&mut self, server_epoch: u64) {
        let now = crate::util::time::now_ms();
        self.ledger.epoch = (self.ledger.epoch + 1).max(now).max(server_epoch + 1);
        self.ledger.next_seq = 0;
    }
}
