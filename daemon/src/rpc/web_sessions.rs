//! The web view's session list: each session with what a person scans a list for (its
//! agent, project folder, parent, when it started and last moved, its events, cost, pending
//! checkpoints, relay state, whether it ended). What a session's first events say never
//! changes, so it is read once and kept (for sessions that still exist); whether it ended is
//! read again only when its last LSN moved.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;

use crate::rpc::wire::{RpcResult, to_json};
use crate::state::DaemonState;
use crate::store::Session;

/// Events read from a session's start to find its agent and folder.
const FIRST_EVENTS: usize = 8;

#[derive(Debug, Clone, Default)]
struct Facts {
    agent: Option<String>,
    project_dir: Option<String>,
    /// The last LSN whose event was read, and whether it ended the session.
    last_seen: u64,
    ended: bool,
}

/// What the list remembers of each session.
#[derive(Default)]
pub struct SessionFacts {
    known: Mutex<HashMap<String, Facts>>,
}

#[derive(Serialize)]
struct Row {
    id: String,
    agent: Option<String>,
    project_dir: Option<String>,
    /// The lineage's root, for a subagent's session.
    parent: Option<String>,
    forked_from: Option<String>,
    started_ms: u64,
    last_event_ms: u64,
    events: u64,
    /// Dollars, as the search index sums them; none when it cannot say yet.
    cost_usd: Option<f64>,
    pending: usize,
    /// `relayed`, `behind` or none when the relay is off for it.
    relay: Option<&'static str>,
    ended: bool,
    quarantined: bool,
}

#[derive(Serialize)]
struct List {
    sessions: Vec<Row>,
    total: usize,
}

fn json_of(event: &crate::store::EventJson) -> Option<Value> {
    let mut buf = Vec::new();
    event.write_to(&mut buf);
    serde_json::from_slice(&buf).ok()
}

impl SessionFacts {
    pub async fn list(
        &self,
        state: &Arc<DaemonState>,
        limit: usize,
        ids: Option<Vec<String>>,
    ) -> RpcResult {
        let mut sessions: Vec<Arc<Session>> = state
            .store
            .sessions()
            .into_iter()
            .filter(|s| s.committed_lsn() > 0 || s.quarantine().is_some())
            .collect();
        let total = sessions.len();
        if let Some(ids) = ids {
            sessions.retain(|s| ids.contains(&s.id));
        } else {
            // Forget sessions that are gone, so memory follows the sessions that exist.
            let ids: std::collections::HashSet<&str> =
                sessions.iter().map(|s| s.id.as_str()).collect();
            self.known
                .lock()
                .unwrap()
                .retain(|id, _| ids.contains(id.as_str()));
        }
        sessions.sort_by_key(|s| std::cmp::Reverse(s.meta().last_ts));
        sessions.truncate(limit);
        let costs = self.costs(state).await;
        let relay = relay_states(state, &sessions).await;
        let mut rows = Vec::with_capacity(sessions.len());
        for (s, relay) in sessions.into_iter().zip(relay) {
            let facts = self.facts_of(state, &s).await;
            let meta = s.meta();
            let stream = meta.stream_id.clone().filter(|st| *st != s.id);
            rows.push(Row {
                cost_usd: costs
                    .get(stream.as_deref().unwrap_or(&s.id))
                    .map(|m| *m as f64 / 1e6),
                agent: facts.agent,
                project_dir: facts.project_dir,
                parent: stream,
                forked_from: s.fork().map(|f| f.forked_from.clone()),
                started_ms: meta.first_ts,
                last_event_ms: meta.last_ts,
                events: s.committed_lsn(),
                pending: state.checkpoints.pending_in(&s.id),
                relay,
                ended: facts.ended,
                quarantined: s.quarantine().is_some(),
                id: s.id.clone(),
            });
        }
        to_json(&List {
            sessions: rows,
            total,
        })
    }

    /// Each lineage's cost in micro-dollars, from the search index's sums (nothing while it
    /// is off or behind: the list does not wait for a scan of every log).
    async fn costs(&self, state: &Arc<DaemonState>) -> HashMap<String, u64> {
        let search = state.search.clone();
        let result =
            tokio::task::spawn_blocking(move || search.usage_blocking("session", None, 0, None))
                .await
                .ok()
                .flatten();
        result
            .map(|r| {
                r.rows
                    .into_iter()
                    .map(|row| (row.key, row.cost_usd_micros))
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn facts_of(&self, state: &DaemonState, s: &Session) -> Facts {
        let last = s.committed_lsn();
        let known = self.known.lock().unwrap().get(&s.id).cloned();
        let mut facts = match known {
            Some(f) => f,
            None => {
                let mut f = Facts::default();
                if let Ok(page) = state.store.read(&s.id, 1, FIRST_EVENTS).await {
                    for e in page.events.iter().filter_map(json_of) {
                        f.agent = f.agent.or_else(|| agent_of(&e));
                        f.project_dir = f.project_dir.or_else(|| cwd_of(&e));
                    }
                }
                f
            }
        };
        if facts.last_seen != last && last > 0 {
            if let Ok(page) = state.store.read(&s.id, last, 1).await
                && let Some(e) = page.events.first().and_then(json_of)
            {
                facts.ended = e["type"] == "lifecycle.session.ended";
            }
            facts.last_seen = last;
        }
        self.known
            .lock()
            .unwrap()
            .insert(s.id.clone(), facts.clone());
        facts
    }
}

/// Each session's relay state (`behind` or `relayed`; none while the relay is off), read from
/// the ledgers in one blocking task.
async fn relay_states(state: &DaemonState, sessions: &[Arc<Session>]) -> Vec<Option<&'static str>> {
    if !state.relay.config().enabled() {
        return vec![None; sessions.len()];
    }
    let (relay, sessions) = (state.relay.clone(), sessions.to_vec());
    let n = sessions.len();
    tokio::task::spawn_blocking(move || {
        sessions
            .iter()
            .map(|s| match relay.unrelayed(s) {
                Some(_) => Some("behind"),
                None => Some("relayed"),
            })
            .collect()
    })
    .await
    .unwrap_or_else(|_| vec![Some("relayed"); n])
}

/// The agent that sent an event: its mapping's source, else its actor.
fn agent_of(e: &Value) -> Option<String> {
    let source = e["metadata"]["source"].as_str();
    let actor = e["actor"].as_str().filter(|a| *a != "user");
    source.or(actor).map(str::to_string)
}

fn cwd_of(e: &Value) -> Option<String> {
    e["payload"]["cwd"]
        .as_str()
        .or_else(|| e["metadata"]["cwd"].as_str())
        .map(str::to_string)
}
