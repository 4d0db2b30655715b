//! What the pipeline's thread ([`super::map_stage`]) does with each ingest once it is mapped:
//! its events go through process → decide → append. This file is the order of the steps (and
//! what happens to a tool call nobody waits for any more); each step is in its own file.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value as Json, json};

use super::append::append;
use super::decide::strongest;
use super::draft::{Draft, bypassed_event, ensure_id, rescued_request};
use super::filter::process;
use super::handle::Pipeline;
use super::ingest::{Ingest, IngestError};
use super::joins::{JoinMemory, ToolIndex};
use super::verdict::{request_kind, verdict};
use crate::budget::Budgets;
use crate::checkpoint::Checkpoints;
use crate::checkpoint::policy::{Call, Policy};
use crate::plugins::PluginSet;
use crate::store::Store;
use dstream_sdk::protocol::Action;

/// One ingest after its map step: what the worker needs to finish it.
pub(super) struct Mapped {
    /// The ingest as it came (its raw text already dropped: `raw` holds it parsed).
    pub ingest: Ingest,
    pub raw: Arc<Json>,
    pub fallback: String,
    pub drafts: Vec<Draft>,
    /// The plugins it was mapped with: its filters and decisions come from the same set.
    pub set: Arc<PluginSet>,
    pub keep_raw: bool,
    pub policy: Arc<Policy>,
}

/// The state the steps after the map keep from one ingest to the next.
pub(super) struct Worker {
    pub(super) store: Store,
    pub(super) checkpoints: Arc<Checkpoints>,
    pub(super) budgets: Arc<Budgets>,
    pub(super) pipeline: std::sync::Weak<Pipeline>,
    pub(super) joins: JoinMemory,
    /// Where results find requests the joins no longer remember (set once the index runs).
    pub(super) tool_index: Arc<OnceLock<Arc<dyn ToolIndex>>>,
}

impl Worker {
    /// Filters, decides and appends one mapped ingest.
    pub(super) fn handle(&mut self, mapped: Mapped) {
        let Mapped {
            ingest,
            raw,
            fallback,
            drafts,
            set,
            keep_raw,
            policy,
        } = mapped;
        let (set, policy) = (&*set, &policy);
        // Asked as late as possible: a hook that gave up while its event was mapped counts.
        let abandoned = ingest.abandoned();
        let Ingest {
            source,
            done,
            spooled,
            ..
        } = ingest;
        let mut notes = Vec::new();

        // process
        let redactor = match self.pipeline.upgrade() {
            Some(p) => p.redact.get(),
            None => return done(Err(IngestError::Stopped)),
        };
        let mut drafts = process(set, &redactor, drafts, &source, &raw, &mut notes);
        // Errors of the filters are stored as they are: running them through the filter
        // that just failed would fail again.
        drafts.append(&mut notes);

        // decide
        let mut decision = None;
        let mut decided = Vec::with_capacity(drafts.len() + 1);
        // A tool call the mapping lost (it failed, was disabled, or a filter dropped the
        // event) is still decided: on what the daemon itself can read of the raw event.
        let mut saw_request = false;
        let mut drafts: VecDeque<Draft> = drafts.into();
        let mut rescued = false;
        loop {
            let mut draft = match drafts.pop_front() {
                Some(d) => d,
                None if !saw_request && !rescued => {
                    rescued = true;
                    match crate::tool_request::from_raw(&source, &raw) {
                        Some(req) => rescued_request(&source, &fallback, req),
                        None => break,
                    }
                }
                None => break,
            };
            let Some(kind) = request_kind(&draft.event) else {
                if draft.event.get("type").and_then(Json::as_str) == Some("user.input") {
                    // A person prompted the agent again: a remote stop has done its job.
                    self.checkpoints.stops.clear(&draft.session_id);
                }
                decided.push(draft);
                continue;
            };
            saw_request = true;
            let cause = ensure_id(&mut draft.event);
            if let Some(why) = abandoned {
                // The call ran without a decision: say so, and open no checkpoint nobody
                // waits for. Never recorded as if a decision had stopped it.
                let rule = policy.evaluate(&call_of(&source, &draft));
                match &spooled {
                    Some(s) if s.denied_by_writer => {
                        set_metadata(
                            &mut draft,
                            "decision",
                            json!({"action": "deny", "reason": why, "decided_by": "hook:fail-closed"}),
                        );
                        decided.push(draft);
                    }
                    // From the spool, only a call a rule would have stopped is worth a note.
                    Some(_) if rule.as_ref().is_none_or(|r| r.action == Action::Allow) => {
                        decided.push(draft);
                    }
                    _ => {
                        let bypassed = bypassed_event(&draft, &cause, why, rule.as_ref());
                        decided.push(draft);
                        decided.push(bypassed);
                    }
                }
                continue;
            }
            let (verdict, follow_up) = verdict(
                &self.checkpoints,
                &self.budgets,
                &mut self.joins,
                set,
                policy,
                &source,
                &raw,
                &draft,
                kind,
                &cause,
                &mut notes,
            );
            if let Some(d) = &verdict {
                let mut slim = json!({"action": d.action});
                if let Some(r) = &d.reason {
                    slim["reason"] = json!(r);
                }
                if let Some(b) = &d.decided_by {
                    slim["decided_by"] = json!(b);
                }
                if let Some(c) = &d.checkpoint {
                    slim["checkpoint_id"] = json!(c.id);
                }
                set_metadata(&mut draft, "decision", slim);
            }
            decided.push(draft);
            decided.extend(follow_up);
            decision = strongest(decision, verdict);
        }
        let mut drafts = decided;
        drafts.append(&mut notes);
        if let Some(s) = &spooled {
            for d in &mut drafts {
                set_metadata(d, "spooled", json!(true));
                set_metadata(d, "received_ms", json!(s.received_ms));
                set_metadata(d, "spool_id", json!(s.spool_id));
            }
        }
        if !keep_raw {
            // Also what a plugin set itself; an unmapped event keeps it, being nothing else.
            for d in &mut drafts {
                if d.event.get("type").and_then(Json::as_str) != Some("unmapped") {
                    d.event.remove("raw");
                }
            }
        }

        append(
            &self.store,
            &self.checkpoints,
            &mut self.joins,
            self.tool_index.get().map(|ix| &**ix),
            drafts,
            decision,
            done,
        );
    }
}

/// Sets `metadata.<key>` on a draft's event (making `metadata` an object if it is not one).
fn set_metadata(draft: &mut Draft, key: &str, value: Json) {
    let meta = draft
        .event
        .entry("metadata")
        .or_insert_with(|| Json::Object(Map::new()));
    if !meta.is_object() {
        *meta = Json::Object(Map::new());
    }
    if let Json::Object(m) = meta {
        m.insert(key.into(), value);
    }
}

/// The tool call a request draft describes, as policy rules see it.
fn call_of<'a>(source: &'a str, draft: &'a Draft) -> Call<'a> {
    let payload = draft.event.get("payload");
    Call {
        source,
        tool: payload
            .and_then(|p| p.get("tool"))
            .and_then(Json::as_str)
            .unwrap_or(""),
        input: payload.and_then(|p| p.get("input")),
    }
}
