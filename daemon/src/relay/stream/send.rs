//! Sending a stream's events, one batch at a time: each step decides what comes next
//! (create the stream, resend the batch in flight, cut the next one, close the stream when
//! its session ended, or nothing), records a batch in the ledger before it is sent, and reads
//! the server's answer: acknowledged, or a resync, a backoff, a stop. While a batch is on the
//! wire, batches behind it may be cut and recorded ([`super::ahead`]).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;

use super::body::Kept;
use super::worker::{Step, Worker};
use crate::relay::ledger::Inflight;
use crate::relay::remote::{CreateOutcome, PostOutcome, Remote};
use crate::relay::shared::State;
use crate::store::EventJson;

/// The event type that ends a session (and closes its remote stream).
const SESSION_ENDED: &str = "lifecycle.session.ended";
const ARCHIVED: &str = "lifecycle.session.archived";
/// How often a stream looks again for events committed but not yet synced.
const SYNC_POLL: Duration = Duration::from_millis(5);

impl Worker {
    pub(super) async fn step(&mut self) -> Step {
        let Some(remote) = self.settings.remote.clone() else {
            // The relay is off: nothing kept is sent before it is on again.
            self.settle_cut().await;
            self.bodies.clear();
            return Step::Idle;
        };
        if !self.ledger.created {
            return self.create(&remote).await;
        }
        // Batches cut ahead are taken when ready, or waited for when nothing else is queued.
        if self.cut_done() || (self.ledger.inflight.is_none() && self.cutting.is_some()) {
            self.settle_cut().await;
        }
        if let Some(f) = self.ledger.inflight {
            return self.send(f).await;
        }
        let committed = self.committed_lsn();
        let acked = self.ledger.acked_lsn;
        if self.ledger.closed {
            // Archived, then resumed: go on in the stream the announcement named.
            if committed > acked && self.ledger.closed_for_archive {
                return self.continue_after_archive(acked).await;
            }
            self.set_state(State::Closed);
            if committed > acked {
                return Step::Failed(format!(
                    "the remote stream was closed when the session ended; {} later events are not relayed",
                    committed - acked
                ));
            }
            return Step::Idle;
        }
        if acked < committed {
            return self.next_batch(committed).await;
        }
        if self.awaiting_sync() {
            tokio::time::sleep(SYNC_POLL).await;
            return Step::Continue;
        }
        if self.end_checked != acked {
            self.end_checked = acked;
            let archived = acked > 0 && self.last_event_is(acked, ARCHIVED).await;
            let ended = self.settings.config.close_on_session_end
                && acked > 0
                && self.last_event_is(acked, SESSION_ENDED).await;
            if archived || ended {
                self.ledger.closed_for_archive = archived;
                let f = Inflight {
                    seq: self.ledger.next_seq,
                    first_lsn: acked + 1,
                    last_lsn: acked,
                    close: true,
                };
                self.ledger.inflight = Some(f);
                if let Err(e) = self.save().await {
                    return self.back_off(e, None).await;
                }
                return Step::Continue;
            }
        }
        self.set_state(State::Live);
        Step::Idle
    }

    /// `PUT` the stream. An existing stream that this ledger knows nothing of may hold events
    /// from an earlier ledger: resync before sending any.
    pub(super) async fn create(&mut self, remote: &Remote) -> Step {
        self.set_state(State::CatchingUp);
        if let Some(step) = self.create_as_fork(remote).await {
            return step;
        }
        match remote.create(&self.url()).await {
            CreateOutcome::Created { .. } => {
                self.ledger.marks.clear();
                // A continuation stream begins after the archived part.
                self.ledger.acked_lsn = self.ledger.stream_start;
                self.ledger.remote_offset = None;
                self.ledger.drop_batches();
                self.ledger.bytes_sent = 0;
                self.ledger.closed = false;
                self.claim_epoch(0);
                self.ledger.created = true;
                self.bodies.clear();
                match self.save().await {
                    Ok(()) => Step::Continue,
                    Err(e) => self.back_off(e, None).await,
                }
            }
            CreateOutcome::Existed => {
                let fresh = self.ledger.next_seq == 0
                    && self.ledger.acked_lsn == 0
                    && self.ledger.inflight.is_none()
                    && self.ledger.remote_offset.is_none();
                if fresh {
                    self.ledger.created = true;
                    return self.resync(0, true).await;
                }
                self.ledger.created = true;
                match self.save().await {
                    Ok(()) => Step::Continue,
                    Err(e) => self.back_off(e, None).await,
                }
            }
            CreateOutcome::Retry { reason, after } => self.back_off(reason, after).await,
            CreateOutcome::Fatal { reason } => Step::Failed(reason),
        }
    }

    /// Cuts the next batch from the log, records it in the ledger, sends it.
    pub(super) async fn next_batch(&mut self, committed: u64) -> Step {
        let cfg = &self.settings.config;
        let (max_events, max_bytes, linger) =
            (cfg.batch_max_events, cfg.batch_max_bytes, cfg.linger_ms);
        let mut committed = committed;
        // A live stream's first new event waits a moment for the ones right behind it.
        if self.was_idle && linger > 0 && committed - self.ledger.acked_lsn < max_events as u64 {
            tokio::time::sleep(Duration::from_millis(linger)).await;
            committed = self.committed_lsn();
        }
        self.set_state(if committed - self.ledger.acked_lsn > max_events as u64 {
            State::CatchingUp
        } else {
            State::Live
        });
        let from = self.ledger.acked_lsn + 1;
        let events = match self.read(from, committed, max_events, max_bytes).await {
            Ok(e) => e,
            Err(e) => return Step::Failed(e),
        };
        let Some(last) = events.last().map(|e| e.lsn) else {
            return Step::Idle;
        };
        let (body, count) = self.body_of(events).await;
        if count == 0 {
            // The relay filters kept the whole batch local: nothing to send.
            self.ledger.acked_lsn = last;
            self.dirty = true;
            return Step::Continue;
        }
        let f = Inflight {
            seq: self.ledger.next_seq,
            first_lsn: from,
            last_lsn: last,
            close: false,
        };
        self.ledger.inflight = Some(f);
        // Only ever queued behind a batch in flight: without one, a new cut replaces them.
        self.ledger.queued.clear();
        if let Err(e) = self.save().await {
            return self.back_off(e, None).await;
        }
        self.bodies.put(Kept {
            seq: f.seq,
            body,
            count,
            _budget: None,
        });
        self.send(f).await
    }

    pub(super) async fn read(
        &self,
        from: u64,
        upto: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<EventJson>, String> {
        let Some(session) = self.shared.store.get(&self.session) else {
            return Ok(Vec::new());
        };
        tokio::task::spawn_blocking(move || {
            crate::store::read_range(&session, from, upto, limit, max_bytes)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot read the log: {e}"))
    }

    /// Whether the event at `lsn` is of type `kind`.
    pub(super) async fn last_event_is(&self, lsn: u64, kind: &str) -> bool {
        match self.read(lsn, lsn, 1, usize::MAX).await {
            Ok(events) => events.first().is_some_and(|e| e.is_type(kind)),
            Err(_) => false,
        }
    }

    /// A session archived (its stream closed) and then resumed: the events after `acked` go
    /// to a new stream, named by the archive announcement at `acked`.
    async fn continue_after_archive(&mut self, acked: u64) -> Step {
        #[derive(serde::Deserialize)]
        struct Announced {
            payload: AnnouncedPayload,
        }
        #[derive(serde::Deserialize)]
        struct AnnouncedPayload {
            continues_in: String,
        }
        let name = match self.read(acked, acked, 1, usize::MAX).await {
            Ok(events) => events.first().and_then(|e| {
                let mut json = Vec::new();
                e.write_to(&mut json);
                serde_json::from_slice::<Announced>(&json)
                    .ok()
                    .map(|a| a.payload.continues_in)
                    .filter(|n| dstream_sdk::validate_session_id(&n.replace('~', "-")).is_ok())
            }),
            Err(_) => None,
        };
        let Some(name) = name else {
            return Step::Failed(
                "the session was archived and resumed, but its announcement names no stream to \
                 continue in"
                    .into(),
            );
        };
        let l = &mut self.ledger;
        l.stream = Some(name);
        l.stream_start = acked;
        l.created = false;
        l.closed = false;
        l.closed_for_archive = false;
        l.remote_offset = None;
        l.marks.clear();
        l.drop_batches();
        l.next_seq = 0;
        self.bodies.clear();
        match self.save().await {
            Ok(()) => Step::Continue,
            Err(e) => self.back_off(e, None).await,
        }
    }

    /// Sends the in-flight batch (again, after a crash or a retry: the same range).
    pub(super) async fn send(&mut self, f: Inflight) -> Step {
        let (body, count) = match self.bodies.get(f.seq) {
            Some(kept) => kept,
            _ if f.close && f.first_lsn > f.last_lsn => (Bytes::new(), 0),
            _ => {
                let n = (f.last_lsn + 1 - f.first_lsn) as usize;
                match self.read(f.first_lsn, f.last_lsn, n, usize::MAX).await {
                    Ok(events) if events.last().map(|e| e.lsn) == Some(f.last_lsn) => {
                        let (body, count) = self.body_of(events).await;
                        self.bodies.put(Kept {
                            seq: f.seq,
                            body: body.clone(),
                            count,
                            _budget: None,
                        });
                        (body, count)
                    }
                    Ok(_) => {
                        return Step::Failed(format!(
                            "the log no longer holds LSNs {}..={} of the batch in flight",
                            f.first_lsn, f.last_lsn
                        ));
                    }
                    Err(e) => return Step::Failed(e),
                }
            }
        };
        if count == 0 && !f.close {
            // Rebuilt after a restart, the filters (changed since) keep it all back.
            self.acknowledged(f, None, 0, 0);
            return Step::Continue;
        }
        let Some(remote) = self.settings.remote.clone() else {
            return Step::Idle;
        };
        self.cut_ahead();
        let outcome = {
            let _permit = self.shared.permits.acquire().await;
            remote
                .append(&self.url(), self.ledger.epoch, f.seq, body.clone(), f.close)
                .await
        };
        match outcome {
            PostOutcome::Stored { next_offset, .. } => {
                self.acknowledged(f, next_offset, body.len() as u64, count);
                if f.close
                    && let Err(e) = self.save().await
                {
                    return self.back_off(e, None).await;
                }
                Step::Continue
            }
            PostOutcome::Closed if f.close => {
                self.acknowledged(f, None, 0, 0);
                Step::Continue
            }
            PostOutcome::Closed => {
                Step::Failed("the remote stream is closed; it takes no more events".into())
            }
            PostOutcome::SequenceGap { expected, received } => {
                let session = self.session.clone();
                self.warnings.warn(
                    &session,
                    "gap",
                    format_args!("the server expected batch {expected}, not {received}; resyncing"),
                );
                if let Some(step) = self
                    .pause_if_repeated(format!(
                        "the server keeps expecting another batch (expected {expected}, sent {received})"
                    ))
                    .await
                {
                    return step;
                }
                self.resync(0, false).await
            }
            PostOutcome::Fenced { server_epoch } => {
                self.fences += 1;
                if self.fences > 1 {
                    return Step::Failed(format!(
                        "another producer keeps claiming this stream (server epoch {server_epoch}); \
                         is a second dstream relaying with the same relay.prefix?"
                    ));
                }
                let session = self.session.clone();
                self.warnings.warn(
                    &session,
                    "fenced",
                    format_args!("fenced by a newer epoch ({server_epoch}); resyncing"),
                );
                self.resync(server_epoch, false).await
            }
            PostOutcome::NotFound => {
                let session = self.session.clone();
                self.warnings.warn(
                    &session,
                    "gone",
                    format_args!("the remote stream is gone; creating it again"),
                );
                if let Some(step) = self
                    .pause_if_repeated(
                        "the remote stream keeps vanishing after it is created".into(),
                    )
                    .await
                {
                    return step;
                }
                self.ledger.created = false;
                Step::Continue
            }
            PostOutcome::Retry { reason, after } => self.back_off(reason, after).await,
            PostOutcome::Fatal { reason } => Step::Failed(reason),
        }
    }

    pub(super) fn acknowledged(
        &mut self,
        f: Inflight,
        next_offset: Option<String>,
        bytes: u64,
        events: u64,
    ) {
        if let (Some(new), Some(old)) = (&next_offset, &self.ledger.remote_offset)
            && new <= old
        {
            // Offsets only grow; the server's word is still the one kept (an offset it
            // handed out wrongly would otherwise stay for good), but it is worth a note.
            let (new, old) = (new.clone(), old.clone());
            let session = self.session.clone();
            self.warnings.warn(
                &session,
                "offset order",
                format_args!("the server's offset went from {old:?} back to {new:?}"),
            );
        }
        let l = &mut self.ledger;
        l.acked_lsn = l.acked_lsn.max(f.last_lsn);
        l.next_seq = f.seq + 1;
        l.promote_queued(&f);
        if let Some(o) = &next_offset {
            l.mark(f.last_lsn, o);
        }
        if next_offset.is_some() {
            l.remote_offset = next_offset;
        }
        l.bytes_sent += bytes;
        if f.close {
            l.closed = true;
        }
        self.dirty = true;
        self.bodies.acknowledged(f.seq);
        self.fences = 0;
        self.troubles = 0;
        self.backoff.reset();
        let t = &self.shared.totals;
        t.events_sent.fetch_add(events, Relaxed);
        t.bytes_sent.fetch_add(bytes, Relaxed);
        t.batches.fetch_add(1, Relaxed);
        self.set_state(if f.close {
            State::Closed
        } else if self.ledger.inflight.is_some() || self.cutting.is_some() {
            // Batches cut ahead are next: a backlog is still going out.
            State::CatchingUp
        } else {
            State::Live
        });
    }
}
