//! The control stream of a relayed session (`{url}/{prefix}/{session}.control`): where web and
//! phone clients post signed decisions for its pending checkpoints, and signed stops. The daemon
//! follows it with long-poll reads while the session's relay stream runs.
//!
//! A message is applied only when its HMAC (see [`super::signing`]) verifies under the approval
//! key, it names this session and the configured key id, it is recent, and its nonce was never
//! seen. Everything else is refused and recorded in the session as `relay.control_rejected`,
//! never applied. An accepted decision goes through [`Checkpoints::resolve`], the same
//! first-decision-wins path as `dstream approve`, decided by `remote:<key id>`.
//!
//! Where the stream was read up to and the nonces seen lately are kept in a small file
//! (`relay/<session>.control.json`, written atomically before a message is acted on), so a
//! restart neither replays nor skips a message.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::store::NewEventRaw;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json, value::to_raw_value};

use super::Shared;
use super::remote::{CreateOutcome, ReadOutcome};
use super::signing::ControlMessage;
use crate::checkpoint::{CheckpointError, Resolution, now_ms};

/// Nonces remembered: enough for any burst of decisions within the accepted age.
const MAX_NONCES: usize = 4096;

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
    };
    let mut settings_rx = c.shared.settings.subscribe();
    let mut created_for = None;
    let mut backoff = Duration::from_millis(200);
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
        if created_for != Some(settings.generation) {
            match remote.create(&url).await {
                CreateOutcome::Created | CreateOutcome::Existed => {
                    created_for = Some(settings.generation);
                }
                CreateOutcome::Retry { .. } => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(retry_max);
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
        match remote.read(&url, &offset, true).await {
            ReadOutcome::Page {
                messages,
                next_offset,
                ..
            } => {
                backoff = Duration::from_millis(200);
                for m in messages {
                    c.handle(
                        m,
                        &settings.config.approval_key_id,
                        &key,
                        settings.config.approval_max_age_ms,
                    )
                    .await;
                }
                if next_offset.is_some() && next_offset != c.state.offset {
                    c.state.offset = next_offset;
                    c.save().await;
                }
            }
            ReadOutcome::NotFound => created_for = None,
            ReadOutcome::Retry { .. } => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(retry_max);
            }
            ReadOutcome::Fatal { reason } => {
                tracing::warn!(session = %c.session, %reason, "cannot read the control stream");
                tokio::time::sleep(retry_max).await;
            }
        }
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

    /// Checks one message and applies it, or records why not.
    async fn handle(&mut self, raw: Json, key_id: &str, key: &[u8], max_age_ms: u64) {
        let m: ControlMessage = match serde_json::from_value(raw.clone()) {
            Ok(m) => m,
            Err(e) => {
                return self
                    .reject(&raw, &format!("not a control message: {e}"))
                    .await;
            }
        };
        if m.sig.is_empty() {
            return self.reject(&raw, "unsigned").await;
        }
        if m.key_id != key_id {
            return self
                .reject(
                    &raw,
                    &format!("signed with key id {:?}, not {key_id:?}", m.key_id),
                )
                .await;
        }
        if !m.verify(key) {
            return self.reject(&raw, "the signature does not verify").await;
        }
        if m.session_id != *self.session {
            return self.reject(&raw, "signed for another session").await;
        }
        let now = now_ms();
        if m.ts.abs_diff(now) > max_age_ms {
            return self
                .reject(
                    &raw,
                    &format!(
                        "signed {} s away from now, past relay.approval_max_age_ms (a replay?)",
                        m.ts.abs_diff(now) / 1000
                    ),
                )
                .await;
        }
        if m.nonce.is_empty() || self.state.seen.contains_key(&m.nonce) {
            return self
                .reject(&raw, "replayed (its nonce was used already)")
                .await;
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
                        return self
                            .reject(&raw, "the checkpoint belongs to another session")
                            .await;
                    }
                    None => return self.reject(&raw, "unknown checkpoint").await,
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
                    }
                    Err(e @ CheckpointError::AlreadyDecided { .. }) => {
                        self.reject(&raw, &format!("too late: {e}")).await
                    }
                    Err(e) => self.reject(&raw, &e.to_string()).await,
                }
            }
            "abort" => {
                let reason = if m.reason.is_empty() {
                    "stopped remotely"
                } else {
                    m.reason.as_str()
                };
                if let Err(e) = checkpoints.abort(&self.session, reason, &decided_by).await {
                    self.reject(&raw, &format!("the stop could not be recorded: {e}"))
                        .await;
                }
            }
            other => {
                self.reject(&raw, &format!("unknown message type {other:?}"))
                    .await
            }
        }
    }

    /// Records a refused message in the session (it is relayed like any event, so the remote
    /// client learns of it too).
    async fn reject(&self, raw: &Json, why: &str) {
        tracing::warn!(session = %self.session, reason = %why, "remote control message refused");
        let payload = json!({"reason": why, "message": raw});
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
            tracing::warn!(session = %self.session, error = %e, "cannot record a refused control message");
        }
    }
}
