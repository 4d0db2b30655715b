//! The control stream of a relayed session (`{url}/{prefix}/{session}.control`): where web and
//! phone clients post signed decisions for its pending checkpoints, and signed stops. The daemon
//! follows it with long-poll reads while the session's relay stream runs.
//!
//! A message is applied only when its HMAC (see [`super::signing`]) verifies under the approval
//! key, it names this session and the configured key id, it is recent, and its nonce was never
//! seen. Everything else is refused, never applied, and counted in the session as
//! `relay.control_rejected`: at most one such event per page and per ten seconds, holding the
//! count, the reasons and a short sample, never a message itself (a server that sends junk
//! cannot fill the local log), and kept local (not relayed back).
//!
//! The server sets the pace only as far as the protocol lets it: a page that brings nothing
//! accepted, does not advance the offset, or comes back at once empty is followed by the
//! relay's backoff before the next read, so a misbehaving server cannot make it spin. An accepted decision goes through [`Checkpoints::resolve`], the same
//! first-decision-wins path as `dstream approve`, decided by `remote:<key id>`.
//!
//! Where the stream was read up to and the nonces seen lately are kept in a small file
//! (`relay/<session>.control.json`, written atomically before a message is acted on), so a
//! restart neither replays nor skips a message.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::NewEventRaw;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, value::to_raw_value};

use super::page;
use super::remote::{CreateOutcome, ReadOutcome};
use super::shared::Shared;
use super::signing::ControlMessage;
use crate::checkpoint::{CheckpointError, Resolution};
use crate::util::backoff::Backoff;
use crate::util::time::now_ms;

/// Nonces remembered: enough for any burst of decisions within the accepted age.
const MAX_NONCES: usize = 4096;
/// Messages of one page looked at; the rest of a longer page is refused unread.
const MAX_PAGE_MESSAGES: usize = 1000;
/// A control message larger than this is refused unparsed (real ones are a few hundred bytes).
const MAX_MESSAGE_BYTES: usize = 16 * 1024;
/// Refusals are written to the session at most this often (with the count since the last).
const REFUSAL_INTERVAL: Duration = Duration::from_secs(10);
/// Distinct refusal reasons kept per record, and characters kept of each and of the sample.
const MAX_REASONS: usize = 8;
const MAX_QUOTE: usize = 200;
/// An empty long-poll answer sooner than this did not wait: the next read backs off.
const MIN_POLL: Duration = Duration::from_secs(1);
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

#[derive(Debug, Default, Serialize, Deserialize)]
struct ControlState {
    /// The offset after the last message handled.
    offset: Option<String>,
    /// Nonces of verified messages, with their `ts`, pruned past the accepted age.
    seen: BTreeMap<String, u64>,
}

struct Control {
    shared: Arc<Shared>,
    session: Arc<str>,
    state: ControlState,
    refusals: Refusals,
}

/// Refused messages not yet recorded.
#[derive(Default)]
struct Refusals {
    count: u64,
    reasons: Vec<(String, u64)>,
    /// Refusals whose reason did not fit in `reasons`.
    other: u64,
    sample: Option<String>,
    last_written: Option<Instant>,
}

impl Refusals {
    fn add(&mut self, reason: &str, message: Option<&str>) {
        self.add_n(reason, 1, message)
    }

    fn add_n(&mut self, reason: &str, n: u64, message: Option<&str>) {
        self.count += n;
        let reason = quote(reason);
        if let Some((_, k)) = self.reasons.iter_mut().find(|(r, _)| *r == reason) {
            *k += n;
        } else if self.reasons.len() < MAX_REASONS {
            self.reasons.push((reason, n));
        } else {
            self.other += n;
        }
        if self.sample.is_none() {
            self.sample = message.map(quote);
        }
    }

    /// When the pending refusals may be written.
    fn due(&self) -> Option<Instant> {
        (self.count > 0).then(|| match self.last_written {
            Some(t) => t + REFUSAL_INTERVAL,
            None => Instant::now(),
        })
    }
}

/// The first `MAX_QUOTE` characters of text that came from the server.
fn quote(text: &str) -> String {
    let mut out: String = text.chars().take(MAX_QUOTE).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// Waits the next delay of `backoff` (or until the configuration changes, or `dstream relay
/// retry`).
async fn pause(shared: &Shared, backoff: &mut Backoff) {
    let delay = backoff.next_delay(None);
    let mut settings = shared.settings.subscribe();
    tokio::select! {
        _ = tokio::time::sleep(delay) => {}
        _ = settings.changed() => {}
    }
}

/// Follows the control stream of `session` until the task is aborted (its relay stream ended).
pub(super) async fn run(shared: Arc<Shared>, session: Arc<str>) {
    let state = match shared.ledgers.load_control(&session) {
        Some(b) => serde_json::from_slice(&b).unwrap_or_default(),
        None => ControlState::default(),
    };
    let mut c = Control {
        shared,
        session,
        state,
        refusals: Refusals::default(),
    };
    let mut settings_rx = c.shared.settings.subscribe();
    let mut created_for = None;
    let mut pace = Backoff::new(FIRST_BACKOFF, FIRST_BACKOFF);
    let mut pace_max = Duration::ZERO;
    loop {
        let settings = settings_rx.borrow_and_update().clone();
        let (Some(remote), Some(key)) = (settings.remote.clone(), settings.approval_key.clone())
        else {
            if settings_rx.changed().await.is_err() {
                return;
            }
            continue;
        };
        let url = remote.stream_url(&c.session, ".control");
        let retry_max = Duration::from_millis(settings.config.retry_max_ms);
        if pace_max != retry_max {
            pace.set_bounds(FIRST_BACKOFF, retry_max);
            pace_max = retry_max;
        }
        if created_for != Some(settings.generation) {
            match remote.create(&url).await {
                CreateOutcome::Created { .. } | CreateOutcome::Existed => {
                    created_for = Some(settings.generation);
                }
                CreateOutcome::Retry { .. } => {
                    pause(&c.shared, &mut pace).await;
                    continue;
                }
                CreateOutcome::Fatal { reason } => {
                    tracing::warn!(session = %c.session, %reason, "cannot create the control stream; remote decisions are off for it until the configuration changes");
                    if settings_rx.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        let offset = c.state.offset.clone().unwrap_or_else(|| "-1".into());
        let asked = Instant::now();
        // Refusals come due while the long-poll waits: they are written meanwhile.
        let read = remote.read_page(&url, &offset, true, settings.config.max_page_bytes);
        tokio::pin!(read);
        let outcome = loop {
            let due = c.refusals.due();
            tokio::select! {
                o = &mut read => break o,
                _ = sleep_until(due), if due.is_some() => c.write_refusals().await,
            }
        };
        let calm = match outcome {
            ReadOutcome::Page {
                body, next_offset, ..
            } => {
                let (applied, total) = c
                    .page(
                        &body,
                        &settings.config.approval_key_id,
                        &key,
                        settings.config.approval_max_age_ms,
                    )
                    .await;
                c.advance(next_offset).await;
                // A page that applied something, or a long-poll that waited before it came
                // back empty, is how a healthy stream looks; anything else waits a while.
                applied > 0 || (total == 0 && asked.elapsed() >= MIN_POLL)
            }
            ReadOutcome::Oversize {
                reason,
                next_offset,
            } => {
                c.refusals.add(&reason, None);
                // Skipping the page is the only way past it; what it held is not applied
                // (a person can send a decision again).
                c.advance(next_offset).await;
                false
            }
            ReadOutcome::BadOffset { reason } => {
                tracing::warn!(session = %c.session, %reason, "the server refused the control stream's offset; reading it from the start (nonces and ages keep old messages from applying twice)");
                c.state.offset = None;
                c.save().await;
                false
            }
            ReadOutcome::NotFound => {
                created_for = None;
                false
            }
            ReadOutcome::Retry { .. } => false,
            ReadOutcome::Fatal { reason } => {
                tracing::warn!(session = %c.session, %reason, "cannot read the control stream");
                // Worth a look again only much later.
                pace.saturate();
                false
            }
        };
        if c.refusals.due().is_some_and(|d| d <= Instant::now()) {
            c.write_refusals().await;
        }
        if calm {
            pace.reset();
        } else {
            pause(&c.shared, &mut pace).await;
        }
    }
}

async fn sleep_until(due: Option<Instant>) {
    if let Some(d) = due {
        tokio::time::sleep_until(d.into()).await;
    }
}

impl Control {
    async fn save(&self) {
        let bytes = match serde_json::to_vec(&self.state) {
            Ok(b) => b,
            Err(_) => return,
        };
        let (ledgers, session) = (self.shared.ledgers.clone(), self.session.clone());
        let written =
            tokio::task::spawn_blocking(move || ledgers.save_control(&session, &bytes)).await;
        if !matches!(written, Ok(Ok(()))) {
            tracing::warn!(session = %self.session, "cannot save the control stream's position");
        }
    }

    /// Moves the read position to `next`, if the server sent one that is past it (offsets
    /// sort as strings); whether it moved.
    async fn advance(&mut self, next: Option<String>) -> bool {
        let moved = match (&next, &self.state.offset) {
            (Some(n), Some(cur)) => n > cur,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if moved {
            self.state.offset = next;
            self.save().await;
        }
        moved
    }

    /// Handles every message of a page: how many were applied, of how many.
    async fn page(
        &mut self,
        body: &[u8],
        key_id: &str,
        key: &[u8],
        max_age_ms: u64,
    ) -> (usize, usize) {
        let (messages, total) = match page::messages(body, MAX_PAGE_MESSAGES) {
            Ok(m) => m,
            Err(e) => {
                self.refusals
                    .add(&format!("the page is not a JSON array: {e}"), None);
                return (0, 1);
            }
        };
        let mut applied = 0;
        for m in &messages {
            match self.handle(m, key_id, key, max_age_ms).await {
                Ok(()) => applied += 1,
                Err(why) => {
                    tracing::debug!(session = %self.session, reason = %why, "remote control message refused");
                    self.refusals.add(&why, Some(m.get()));
                }
            }
        }
        if total > messages.len() {
            self.refusals.add_n(
                &format!("more than {MAX_PAGE_MESSAGES} messages in one page"),
                (total - messages.len()) as u64,
                None,
            );
        }
        (applied, total)
    }

    /// Checks one message and applies it, or says why not.
    async fn handle(
        &mut self,
        raw: &RawValue,
        key_id: &str,
        key: &[u8],
        max_age_ms: u64,
    ) -> Result<(), String> {
        if raw.get().len() > MAX_MESSAGE_BYTES {
            return Err(format!(
                "larger than {MAX_MESSAGE_BYTES} bytes ({} bytes)",
                raw.get().len()
            ));
        }
        let m: ControlMessage =
            serde_json::from_str(raw.get()).map_err(|e| format!("not a control message: {e}"))?;
        if m.sig.is_empty() {
            return Err("unsigned".into());
        }
        if m.key_id != key_id {
            return Err(format!(
                "signed with key id {:?}, not {key_id:?}",
                quote(&m.key_id)
            ));
        }
        if !m.verify(key) {
            return Err("the signature does not verify".into());
        }
        if m.session_id != *self.session {
            return Err("signed for another session".into());
        }
        let now = now_ms();
        if m.ts.abs_diff(now) > max_age_ms {
            return Err(format!(
                "signed {} s away from now, past relay.approval_max_age_ms (a replay?)",
                m.ts.abs_diff(now) / 1000
            ));
        }
        if m.nonce.is_empty() || self.state.seen.contains_key(&m.nonce) {
            return Err("replayed (its nonce was used already)".into());
        }
        // Spend the nonce durably before acting, so a crash cannot apply it twice.
        self.state
            .seen
            .retain(|_, ts| ts.abs_diff(now) <= max_age_ms);
        while self.state.seen.len() >= MAX_NONCES {
            self.state.seen.pop_first();
        }
        self.state.seen.insert(m.nonce.clone(), m.ts);
        self.save().await;
        let decided_by = format!("remote:{key_id}");
        let checkpoints = &self.shared.checkpoints;
        match m.kind.as_str() {
            "decision" => {
                match checkpoints.get(&m.checkpoint_id) {
                    Some(c) if c.session_id != *self.session => {
                        return Err("the checkpoint belongs to another session".into());
                    }
                    None => return Err("unknown checkpoint".into()),
                    Some(_) => {}
                }
                let r = Resolution {
                    decision: m.decision.clone(),
                    note: (!m.reason.is_empty()).then(|| m.reason.clone()),
                    input: None,
                    decided_by,
                    uid: None,
                };
                match checkpoints.resolve(&m.checkpoint_id, r).await {
                    Ok(_) => {
                        tracing::info!(session = %self.session, checkpoint = %m.checkpoint_id, decision = %m.decision, "remote decision applied");
                        Ok(())
                    }
                    Err(e @ CheckpointError::AlreadyDecided { .. }) => {
                        Err(format!("too late: {e}"))
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
            "abort" => {
                let reason = if m.reason.is_empty() {
                    "stopped remotely"
                } else {
                    m.reason.as_str()
                };
                checkpoints
                    .abort(&self.session, reason, &decided_by)
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("the stop could not be recorded: {e}"))
            }
            other => Err(format!("unknown message type {:?}", quote(other))),
        }
    }

    /// Records the refusals since the last record as one event in the session: the count,
    /// the reasons with their counts, and the start of one refused message. It stays local:
    /// the relay does not send `relay.control_rejected` back to the server.
    async fn write_refusals(&mut self) {
        let r = std::mem::take(&mut self.refusals);
        self.refusals.last_written = Some(Instant::now());
        if r.count == 0 {
            return;
        }
        tracing::warn!(session = %self.session, count = r.count, first_reason = %r.reasons.first().map_or("", |(w, _)| w.as_str()), "remote control messages refused");
        let reasons: Vec<_> = r
            .reasons
            .iter()
            .map(|(reason, count)| json!({"reason": reason, "count": count}))
            .collect();
        let mut payload = json!({
            "count": r.count,
            "reason": r.reasons.first().map_or("", |(w, _)| w.as_str()),
            "reasons": reasons,
        });
        if r.other > 0 {
            payload["other_reasons"] = r.other.into();
        }
        if let Some(s) = r.sample {
            payload["sample"] = s.into();
        }
        let Ok(payload) = to_raw_value(&payload) else {
            return;
        };
        let event = NewEventRaw {
            event_type: "relay.control_rejected".into(),
            actor: Some("dstream".into()),
            payload: Some(payload),
            ..Default::default()
        };
        if let Err(e) = self
            .shared
            .store
            .append_wait(&self.session, event, true)
            .await
        {
            tracing::warn!(session = %self.session, error = %e, "cannot record refused control messages");
        }
    }
}
