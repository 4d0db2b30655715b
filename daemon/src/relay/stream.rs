//! One session's remote stream: create it, send its events in order one batch at a time, back
//! off when the server cannot take them, resync when the server and the ledger disagree, close
//! it when the session ends.
//!
//! Exactly once rests on three rules:
//! - a batch's `(seq, LSN range)` is in the ledger before it is sent, and a resend is the same
//!   range under the same seq, so the server's dedup answers 204 to what it already has;
//! - when the server's producer state and the ledger disagree (409 gap, 403 fence, a stream
//!   that was recreated, a lost ledger) the relay reads the remote tail, counts every event it
//!   finds there as delivered (each relayed event carries its `lsn`), and only then claims a
//!   new epoch, starting at seq 0;
//! - a new epoch is `max(old + 1, now in ms)`, so it is above any epoch this producer id has
//!   used before, even one whose ledger is gone.
//!
//! Against a server that misbehaves: only the protocol's own success answer counts as
//! delivered (a 200 with a valid `Stream-Next-Offset` past the last one known, or a 204);
//! every loop that talks to the server (retries, resyncs, re-creating a stream that keeps
//! vanishing) waits the same backoff once it repeats without progress, and the warnings it
//! logs are rate-limited with a count.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use dstream_sdk::protocol::CheckpointState;
use tokio::sync::Notify;

use super::ledger::{Inflight, Ledger};
use super::remote::{CreateOutcome, PostOutcome, ReadOutcome};
use super::settings::Settings;
use super::shared::{Shared, State};
use crate::plugins::{Hooks, Input, PluginSet};
use crate::store::EventJson;
use crate::util::backoff::Backoff;

/// A stream with nothing to send (and no checkpoint waiting in its session) ends its task, and
/// stops following its control stream, after this long. Long enough that a person who stops
/// an agent from the phone while it sits idle (a long build, a question to its user) is heard
/// before its next tool call; an idle task still gives way at once to a session with work.
const IDLE_EXIT: Duration = Duration::from_secs(15 * 60);
/// A closed stream (its session ended) has nothing to follow: its task ends sooner.
const CLOSED_EXIT: Duration = Duration::from_secs(5);
/// The event type that ends a session (and closes its remote stream).
const SESSION_ENDED: &str = "lifecycle.session.ended";
/// Refused control messages stay local: relaying them back would let a server that sends
/// junk make the relay send it more.
const KEPT_LOCAL: &str = "relay.control_rejected";
/// Pages of one resync read at most: a server that keeps answering "there is more" cannot
/// hold a stream in its resync for ever.
const MAX_RESYNC_PAGES: usize = 100_000;
/// A warning of one kind is logged at most this often per stream; the rest are counted.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// What one step came to.
/// How often a stream looks again for events committed but not yet synced.
const SYNC_POLL: Duration = Duration::from_millis(5);

enum Step {
    Continue,
    /// Nothing to send.
    Idle,
    /// Stopped until the configuration changes.
    Failed(String),
}

struct Worker {
    shared: Arc<Shared>,
    session: Arc<str>,
    settings: Arc<Settings>,
    ledger: Ledger,
    /// The ledger has progress not yet written (acks are written lazily: a resend after a
    /// crash is answered 204).
    dirty: bool,
    /// The body of the in-flight batch, kept for resends.
    body: Option<(u64, Bytes, u64)>,
    backoff: Backoff,
    /// Fences since the last acknowledged batch: a second means another producer is live.
    fences: u32,
    /// The acked LSN whose event was checked for being the session's end.
    end_checked: u64,
    /// Whether the last step found nothing to do (the next batch lingers for company).
    was_idle: bool,
    /// Resyncs and re-creations since the last acknowledged batch: from the second on, each
    /// waits the backoff first.
    troubles: u32,
    warnings: QuietLog,
}

/// Warnings that a misbehaving server could repeat many times a second: each kind is logged
/// at most once per [`WARN_EVERY`], with how many were held back.
#[derive(Default)]
struct QuietLog {
    last: std::collections::HashMap<&'static str, (std::time::Instant, u64)>,
}

impl QuietLog {
    fn warn(&mut self, session: &str, kind: &'static str, message: std::fmt::Arguments) {
        let now = std::time::Instant::now();
        match self.last.get_mut(kind) {
            Some((at, held)) if now.duration_since(*at) < WARN_EVERY => *held += 1,
            entry => {
                let held = entry.map_or(0, |(_, h)| *h);
                if held > 0 {
                    tracing::warn!(%session, "relay: {message} ({held} more like it held back)");
                } else {
                    tracing::warn!(%session, "relay: {message}");
                }
                self.last.insert(kind, (now, 0));
            }
        }
    }
}

pub(super) async fn run(shared: Arc<Shared>, session: Arc<str>, wake: Arc<Notify>) {
    // The control stream is followed while this stream runs, and no longer.
    let control = AbortOnDrop(tokio::spawn(super::control::run(
        shared.clone(),
        session.clone(),
    )));
    let mut settings_rx = shared.settings.subscribe();
    let settings = settings_rx.borrow_and_update().clone();
    let mut w = Worker {
        backoff: backoff_of(&settings),
        shared,
        session,
        settings,
        ledger: Ledger::default(),
        dirty: false,
        body: None,
        fences: 0,
        end_checked: 0,
        was_idle: false,
        troubles: 0,
        warnings: QuietLog::default(),
    };
    if let Err(e) = w.load_ledger().await {
        return w.stop_failed(e.to_string(), control).await;
    }
    loop {
        let settings = settings_rx.borrow_and_update().clone();
        if settings.generation != w.settings.generation {
            let retarget = settings.target != w.settings.target;
            w.settings = settings;
            w.backoff = backoff_of(&w.settings);
            w.fences = 0;
            if retarget && let Err(e) = w.load_ledger().await {
                return w.stop_failed(e.to_string(), control).await;
            }
        }
        match w.step().await {
            Step::Continue => w.was_idle = false,
            Step::Idle => {
                w.was_idle = true;
                w.save_if_dirty().await;
                // An idle stream gives its task up to a session waiting for one, or after
                // IDLE_EXIT; not while a checkpoint waits in its session (the control stream
                // must be followed), nor when new events arrived meanwhile.
                let may_yield = |w: &Worker| {
                    w.shared
                        .checkpoints
                        .list(
                            Some(CheckpointState::Pending),
                            Some(&w.session),
                            None,
                            false,
                            Some(1),
                        )
                        .0
                        .is_empty()
                };
                if w.shared.has_waiting()
                    && may_yield(&w)
                    && w.shared.retire(&w.session, w.ledger.acked_lsn)
                {
                    return;
                }
                let idle_for = if w.ledger.closed {
                    CLOSED_EXIT
                } else {
                    IDLE_EXIT
                };
                let give_up_task = tokio::select! {
                    _ = wake.notified() => false,
                    _ = settings_rx.changed() => false,
                    _ = w.shared.slot_wanted.notified() => true,
                    _ = tokio::time::sleep(idle_for) => true,
                };
                if give_up_task && may_yield(&w) && w.shared.retire(&w.session, w.ledger.acked_lsn)
                {
                    return;
                }
            }
            Step::Failed(reason) => return w.stop_failed(reason, control).await,
        }
    }
}

impl Worker {
    fn url(&self) -> String {
        match &self.settings.remote {
            Some(r) => r.stream_url(&self.session, ""),
            None => String::new(),
        }
    }

    async fn load_ledger(&mut self) -> std::io::Result<()> {
        let ledgers = self.shared.ledgers.clone();
        let session = self.session.clone();
        let ledger = tokio::task::spawn_blocking(move || ledgers.load(&session))
            .await
            .map_err(std::io::Error::other)??;
        self.ledger = ledger.for_target(&self.settings.target);
        self.body = None;
        self.dirty = false;
        let (acked, sent) = (self.ledger.acked_lsn, self.ledger.bytes_sent);
        self.shared.update(&self.session, |s| {
            s.acked_lsn = acked;
            s.bytes_sent = sent;
        });
        Ok(())
    }

    async fn save(&mut self) -> Result<(), String> {
        let ledgers = self.shared.ledgers.clone();
        let session = self.session.clone();
        let ledger = self.ledger.clone();
        tokio::task::spawn_blocking(move || ledgers.save(&session, &ledger))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot write the relay ledger: {e}"))?;
        self.dirty = false;
        Ok(())
    }

    async fn save_if_dirty(&mut self) {
        if self.dirty
            && let Err(e) = self.save().await
        {
            tracing::warn!(session = %self.session, error = %e, "relay ledger not saved");
        }
    }

    /// Stops for good (until the configuration changes), with the reason in `relay status`.
    async fn stop_failed(mut self, reason: String, control: AbortOnDrop) {
        tracing::error!(session = %self.session, %reason, "relay stopped for this session until the configuration changes");
        self.save_if_dirty().await;
        self.fail(reason);
        drop(control);
        self.shared.release_failed(&self.session);
    }

    fn fail(&self, reason: String) {
        self.shared
            .update(&self.session, |s| s.state = State::Failed { reason });
    }

    fn set_state(&self, state: State) {
        let acked = self.ledger.acked_lsn;
        let sent = self.ledger.bytes_sent;
        self.shared.update(&self.session, |s| {
            s.state = state;
            s.acked_lsn = acked;
            s.bytes_sent = sent;
        });
    }

    /// The last LSN that may leave the machine: synced, so a power failure cannot take back
    /// an event a remote reader already holds (under `fsync = "interval"` this trails the
    /// committed LSN by up to an interval).
    fn committed_lsn(&self) -> u64 {
        self.shared
            .store
            .get(&self.session)
            .map_or(0, |s| s.durable_lsn())
    }

    /// Committed locally but not yet synced: wait for the background sync, not for a wake.
    fn awaiting_sync(&self) -> bool {
        self.shared
            .store
            .get(&self.session)
            .is_some_and(|s| s.durable_lsn() < s.committed_lsn())
    }

    async fn step(&mut self) -> Step {
        let Some(remote) = self.settings.remote.clone() else {
            return Step::Idle;
        };
        if !self.ledger.created {
            return self.create(&remote).await;
        }
        if let Some(f) = self.ledger.inflight {
            return self.send(f).await;
        }
        let committed = self.committed_lsn();
        let acked = self.ledger.acked_lsn;
        if self.ledger.closed {
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
        if self.settings.config.close_on_session_end && self.end_checked != acked {
            self.end_checked = acked;
            if acked > 0 && self.last_event_ends_session(acked).await {
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
    async fn create(&mut self, remote: &super::remote::Remote) -> Step {
        self.set_state(State::CatchingUp);
        match remote.create(&self.url()).await {
            CreateOutcome::Created => {
                self.ledger.acked_lsn = 0;
                self.ledger.remote_offset = None;
                self.ledger.inflight = None;
                self.ledger.bytes_sent = 0;
                self.ledger.closed = false;
                self.claim_epoch(0);
                self.ledger.created = true;
                self.body = None;
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
    async fn next_batch(&mut self, committed: u64) -> Step {
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
        if let Err(e) = self.save().await {
            return self.back_off(e, None).await;
        }
        self.body = Some((f.seq, body, count));
        self.send(f).await
    }

    async fn read(
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

    /// The body of a batch: the events as stored, or what the relay filters make of them.
    async fn body_of(&self, mut events: Vec<EventJson>) -> (Bytes, u64) {
        events.retain(|e| !e.is_type(KEPT_LOCAL));
        let set = self.shared.plugins.borrow().clone();
        if set.with(Hooks::RELAY).next().is_none() {
            let n = events.len() as u64;
            return (json_array(&events), n);
        }
        let session = self.session.clone();
        tokio::task::spawn_blocking(move || filtered_array(&set, &session, &events))
            .await
            .unwrap_or_else(|_| (Bytes::new(), 0))
    }

    async fn last_event_ends_session(&self, lsn: u64) -> bool {
        match self.read(lsn, lsn, 1, usize::MAX).await {
            Ok(events) => events.first().is_some_and(|e| e.is_type(SESSION_ENDED)),
            Err(_) => false,
        }
    }

    /// Sends the in-flight batch (again, after a crash or a retry: the same range).
    async fn send(&mut self, f: Inflight) -> Step {
        let (body, count) = match &self.body {
            Some((seq, body, count)) if *seq == f.seq => (body.clone(), *count),
            _ if f.close && f.first_lsn > f.last_lsn => (Bytes::new(), 0),
            _ => {
                let n = (f.last_lsn + 1 - f.first_lsn) as usize;
                match self.read(f.first_lsn, f.last_lsn, n, usize::MAX).await {
                    Ok(events) if events.last().map(|e| e.lsn) == Some(f.last_lsn) => {
                        let (body, count) = self.body_of(events).await;
                        self.body = Some((f.seq, body.clone(), count));
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

    fn acknowledged(&mut self, f: Inflight, next_offset: Option<String>, bytes: u64, events: u64) {
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
        l.inflight = None;
        if next_offset.is_some() {
            l.remote_offset = next_offset;
        }
        l.bytes_sent += bytes;
        if f.close {
            l.closed = true;
        }
        self.dirty = true;
        self.body = None;
        self.fences = 0;
        self.troubles = 0;
        self.backoff.reset();
        let t = &self.shared.totals;
        t.events_sent.fetch_add(events, Relaxed);
        t.bytes_sent.fetch_add(bytes, Relaxed);
        t.batches.fetch_add(1, Relaxed);
        self.set_state(if f.close { State::Closed } else { State::Live });
    }

    /// The server and the ledger disagree: read what the remote stream holds past the last
    /// known tail (from its beginning when `from_start`), count the relayed events found
    /// there as delivered, and start a new epoch above `server_epoch`. Pages are scanned as
    /// they arrive, never kept; each must move the offset forward.
    async fn resync(&mut self, server_epoch: u64, from_start: bool) -> Step {
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
        l.inflight = None;
        self.body = None;
        self.claim_epoch(server_epoch);
        tracing::info!(session = %self.session, acked_lsn = self.ledger.acked_lsn, epoch = self.ledger.epoch, "relay: resynced with the remote stream");
        match self.save().await {
            Ok(()) => Step::Continue,
            Err(e) => self.back_off(e, None).await,
        }
    }

    /// The second and later resync or re-creation without an acknowledged batch between
    /// waits the backoff first, so a server that answers every batch with the same trouble
    /// sees a few requests a minute, not thousands.
    async fn pause_if_repeated(&mut self, reason: String) -> Option<Step> {
        self.troubles += 1;
        if self.troubles < 2 {
            return None;
        }
        match self.back_off(reason, None).await {
            Step::Continue => None,
            other => Some(other),
        }
    }

    /// A new epoch above every one this producer id used (see the module docs), seq 0.
    fn claim_epoch(&mut self, server_epoch: u64) {
        let now = crate::util::time::now_ms();
        self.ledger.epoch = (self.ledger.epoch + 1).max(now).max(server_epoch + 1);
        self.ledger.next_seq = 0;
    }

    /// Waits before the next try: doubling from `retry_min_ms` to `retry_max_ms`, with jitter,
    /// or longer when the server's `Retry-After` asks for it.
    async fn back_off(&mut self, reason: String, after: Option<Duration>) -> Step {
        let delay = self.backoff.next_delay(after);
        let until_ms = crate::util::time::now_ms() + delay.as_millis() as u64;
        tracing::debug!(session = %self.session, %reason, delay_ms = delay.as_millis() as u64, "relay: backing off");
        self.set_state(State::BackingOff { until_ms, reason });
        self.shared.totals.retries.fetch_add(1, Relaxed);
        // A configuration change or `dstream relay retry` ends the wait.
        let mut settings = self.shared.settings.subscribe();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = settings.changed() => {}
        }
        Step::Continue
    }
}

/// The relay's backoff under `settings`: `retry_min_ms` doubling to `retry_max_ms`.
fn backoff_of(settings: &Settings) -> Backoff {
    Backoff::new(
        Duration::from_millis(settings.config.retry_min_ms),
        Duration::from_millis(settings.config.retry_max_ms),
    )
}

/// `[e1,e2,…]` from stored events, without parsing them.
fn json_array(events: &[EventJson]) -> Bytes {
    let mut out = Vec::with_capacity(events.iter().map(|e| e.len() + 1).sum::<usize>() + 2);
    out.push(b'[');
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        e.write_to(&mut out);
    }
    out.push(b']');
    Bytes::from(out)
}

/// Aborts a task when dropped: the control reader ends with its stream's task.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `[e1,e2,…]` of what the plugins' `relay` functions let out, each changed as they say; an
/// event a filter keeps back (nil) or fails on stays local. Every event sent keeps its `lsn`,
/// which resyncs rely on.
fn filtered_array(set: &PluginSet, session: &str, events: &[EventJson]) -> (Bytes, u64) {
    let filters: Vec<_> = set
        .with(Hooks::RELAY)
        .filter(|p| p.disabled().is_none())
        .collect();
    let mut out = vec![b'['];
    let mut count = 0;
    let mut buf = Vec::new();
    for e in events {
        buf.clear();
        e.write_to(&mut buf);
        let Ok(mut event) = serde_json::from_slice::<serde_json::Value>(&buf) else {
            continue;
        };
        let mut keep = true;
        for p in &filters {
            match p.call(Hooks::RELAY, Input::Event(Arc::new(event.clone()))) {
                Ok(mut r) => match r.pop() {
                    Some(serde_json::Value::Object(mut o)) => {
                        o.insert("lsn".into(), e.lsn.into());
                        event = serde_json::Value::Object(o);
                    }
                    _ => {
                        keep = false;
                        break;
                    }
                },
                Err(f) => {
                    tracing::warn!(%session, plugin = %p.name(), lsn = e.lsn, error = %f.error, "relay filter failed; the event stays local");
                    keep = false;
                    break;
                }
            }
        }
        if keep {
            if count > 0 {
                out.push(b',');
            }
            if serde_json::to_writer(&mut out, &event).is_ok() {
                count += 1;
            }
        }
    }
    out.push(b']');
    (Bytes::from(out), count)
}
