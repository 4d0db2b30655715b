//! Deciding checkpoints: by a person (`resolve`), by a remote stop of the session's agent
//! (`abort`), or by a deadline (the [`Expire`] side of [`Checkpoints`]).
//!
//! One path for all three: the decision is checked against the checkpoint in memory, its
//! event is appended and synced, and only then does memory change, the session's marker go,
//! a grant come into force and the waiters hear of it. Apart from [`super::api`] (which
//! holds the rest of [`Checkpoints`]) because this is the one place where a decision is made.

use std::sync::Arc;

use dstream_sdk::protocol::{
    CheckpointDecision, CheckpointInfo, CheckpointOption, CheckpointState,
};

use super::api::Checkpoints;
use super::deadlines::{self, Expire};
use super::grants::Grant;
use super::table::{self, action_named, state_of};
use super::types::{CheckpointError, Resolution};
use super::{events, stop};
use crate::store::{AppendAck, StoreError};
use crate::util::time::now_ms;

impl Checkpoints {
    /// Stops a session's agent from afar: the stop is durable first, then every checkpoint
    /// pending in the session is rejected ("stopped remotely"), and `agent.aborted` records it.
    /// Returns the checkpoints it rejected.
    pub async fn abort(
        self: &Arc<Self>,
        session: &str,
        reason: &str,
        decided_by: &str,
    ) -> Result<Vec<String>, CheckpointError> {
        let stop = stop::Stop {
            reason: reason.to_string(),
            decided_by: decided_by.to_string(),
            at_ms: now_ms(),
        };
        let s = session.to_string();
        self.off_worker(move |c| c.stops.stop(&s, stop))
            .await?
            .map_err(|source| CheckpointError::Io {
                path: self.dir.join("stopped").join(session),
                source,
            })?;
        let pending = self.table.lock().unwrap().matching(
            Some(CheckpointState::Pending),
            Some(session),
            None,
        );
        let mut rejected = Vec::new();
        for c in table::page(pending, false, None).0 {
            let r = Resolution {
                decision: "reject".into(),
                note: Some("stopped remotely".into()),
                input: None,
                decided_by: decided_by.to_string(),
                uid: None,
            };
            match self.resolve(&c.id, r).await {
                Ok(_) => rejected.push(c.id),
                Err(CheckpointError::AlreadyDecided { .. } | CheckpointError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let event = events::aborted(reason, decided_by, &rejected)?;
        self.store.append_wait(session, event, true).await?;
        Ok(rejected)
    }

    /// Decides a checkpoint: the first valid decision wins, and is durable before anyone
    /// hears of it.
    pub async fn resolve(
        self: &Arc<Self>,
        id: &str,
        r: Resolution,
    ) -> Result<CheckpointInfo, CheckpointError> {
        self.find_off_worker(id, None).await?;
        self.decide(id, r, false).await
    }

    /// Decides `id` by `r` (or by its deadline, when `expired`): the decision event is
    /// appended, then [`Checkpoints::settle`] applies it.
    async fn decide(
        self: &Arc<Self>,
        id: &str,
        r: Resolution,
        expired: bool,
    ) -> Result<CheckpointInfo, CheckpointError> {
        let (event, session, option) = {
            let mut table = self.table.lock().unwrap();
            let Some(e) = table.entries.get_mut(id) else {
                return Err(CheckpointError::NotFound(id.to_string()));
            };
            if let Some(d) = &e.info.decision {
                return Err(CheckpointError::AlreadyDecided {
                    id: id.to_string(),
                    first: events::describe_decision(d, e.info.state),
                });
            }
            if let Some(by) = &e.deciding {
                return Err(CheckpointError::AlreadyDecided {
                    id: id.to_string(),
                    first: format!("a decision by {by} is being recorded"),
                });
            }
            if e.info.state == CheckpointState::Recording {
                return Err(CheckpointError::NotReady(id.to_string()));
            }
            let option = events::option_for(&r.decision, id, &e.options)?;
            let ttl = self.grants.ttl_ms();
            let event = events::decided(id, e, &r, &option, expired, now_ms(), ttl)?;
            e.deciding = Some(r.decided_by.as_str().into());
            (event, e.info.session_id.clone(), option)
        };
        let result = self.store.append_wait(&session, event, true).await;
        let id = id.to_string();
        // Settling may remove the session's marker and write the grants.
        self.off_worker(move |c| c.settle(&id, r, option, expired, result))
            .await?
    }

    /// Applies a decision whose event was appended (`result`): memory, the session's marker,
    /// the grants, and then the waiters hear of it. Blocking.
    fn settle(
        &self,
        id: &str,
        r: Resolution,
        option: CheckpointOption,
        expired: bool,
        result: Result<AppendAck, StoreError>,
    ) -> Result<CheckpointInfo, CheckpointError> {
        let mut table = self.table.lock().unwrap();
        let Some(e) = table.entries.get_mut(id) else {
            return Err(CheckpointError::NotFound(id.to_string()));
        };
        e.deciding = None;
        let ack = result?;
        let decision = CheckpointDecision {
            decision: if expired {
                e.info.on_timeout.to_string()
            } else {
                r.decision
            },
            action: action_named(&option.action),
            note: r.note,
            input: r.input,
            decided_by: r.decided_by,
            decided_ms: now_ms(),
            event_id: Some(ack.id),
        };
        e.info.state = state_of(action_named(&option.action), expired);
        e.info.decision = Some(Box::new(decision));
        let info = e.view(id);
        let waiters = std::mem::take(&mut e.waiters);
        let grant = option.scope.map(|scope| Grant {
            checkpoint_id: id.to_string(),
            scope,
            session_id: info.session_id.clone(),
            cwd: info.cwd.clone(),
            tool: info.tool.clone().unwrap_or_default(),
            input_glob: e.input_glob.as_deref().map(str::to_string),
            expires_ms: now_ms().saturating_add(self.grants.ttl_ms()),
        });
        table.deadlines.remove(&(info.deadline_ms, id.to_string()));
        table.decided.push_back(id.to_string());
        if table.close_one(&info.session_id) {
            self.markers.remove(&info.session_id);
        }
        let granted = grant.is_some();
        if let Some(grant) = grant {
            self.grants.add(grant);
        }
        table.trim_decided();
        drop(table);
        if granted {
            self.grants.save();
        }
        for w in waiters {
            let _ = w.send(info.clone());
        }
        Ok(info)
    }
}

impl Expire for Checkpoints {
    fn next_deadline(&self) -> Option<(u64, String)> {
        self.table.lock().unwrap().deadlines.first().cloned()
    }

    async fn expire(this: Arc<Self>, deadline: u64, id: String) {
        let on_timeout = {
            let mut table = this.table.lock().unwrap();
            table.deadlines.remove(&(deadline, id.clone()));
            match table.entries.get(&id) {
                Some(e) if e.info.decision.is_none() && e.deciding.is_none() => e.info.on_timeout,
                _ => return,
            }
        };
        let r = deadlines::timeout_resolution(on_timeout);
        match this.decide(&id, r, true).await {
            Ok(_) | Err(CheckpointError::AlreadyDecided { .. } | CheckpointError::NotFound(_)) => {}
            Err(e) => {
                tracing::error!(checkpoint = id.as_str(), error = %e, "cannot record an expiry; retrying in 1 s");
                let mut table = this.table.lock().unwrap();
                table.deadlines.insert((now_ms() + deadlines::RETRY_MS, id));
            }
        }
    }
}
