//! The **append** step: ids assigned (so a tool result can name its request as its cause),
//! results joined to their requests, then the store's one commit path; the ingest's reply
//! ([`Collector`]) goes out once the last event is durable, with a new checkpoint's state
//! turned from `recording` to `pending`.

use std::sync::{Arc, Mutex};

use dstream_sdk::protocol::{CheckpointState, Decision, IngestResult, IngestedEvent};
use serde_json::{Value as Json, json};

use super::draft::{Draft, object};
use super::ingest::{Done, IngestError};
use super::joins::{JoinMemory, ToolIndex, find_request};
use super::normalize::to_new_event;
use crate::checkpoint::Checkpoints;
use crate::store::{Ack, Store, StoreError};

/// Assigns ids, joins tool results to their requests, and hands the events to the store;
/// `done` is called when the last one is durable.
pub(super) fn append(
    store: &Store,
    checkpoints: &Arc<Checkpoints>,
    joins: &mut JoinMemory,
    index: Option<&dyn ToolIndex>,
    drafts: Vec<Draft>,
    decision: Option<Decision>,
    done: Done,
) {
    if drafts.is_empty() {
        return done(Ok(IngestResult {
            events: Vec::new(),
            decision,
        }));
    }
    let total = drafts.len();
    let collector = Arc::new(Mutex::new(Collector {
        events: vec![None; total],
        remaining: total,
        error: None,
        decision,
        done: Some(done),
    }));
    for (i, mut draft) in drafts.into_iter().enumerate() {
        let id = match draft.event.get("id").and_then(Json::as_str) {
            Some(id) if id.parse::<ulid::Ulid>().is_ok() => id.to_string(),
            _ => ulid::Ulid::new().to_string(),
        };
        joins.join(&mut draft, &id, |joins, session, tool_use_id| {
            find_request(joins, store, index, session, tool_use_id)
        });
        let event_type = draft
            .event
            .get("type")
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_string();
        let session = draft.session_id.clone();
        let c = collector.clone();
        let requested = (event_type == "checkpoint.requested")
            .then(|| {
                draft
                    .event
                    .get("payload")
                    .and_then(|p| p.get("checkpoint_id"))
                    .and_then(Json::as_str)
                    .map(|id| (checkpoints.clone(), id.to_string()))
            })
            .flatten();
        let ack = Ack::new(move |r| {
            if let Some((checkpoints, id)) = &requested {
                checkpoints.recorded(id, r.as_ref());
            }
            let mut c = c.lock().unwrap();
            match r {
                Ok(a) => {
                    c.events[i] = Some(IngestedEvent {
                        lsn: a.lsn,
                        id: a.id,
                        event_type,
                        session_id: session,
                    })
                }
                Err(e) => {
                    c.error.get_or_insert(e);
                }
            }
            c.remaining -= 1;
            if c.remaining == 0 {
                c.finish();
            }
        });
        match to_new_event(&draft.event, draft.verbatim_raw.as_deref()) {
            Ok(event) => {
                let must_sync = event.event_type.starts_with("checkpoint.");
                store.append_with_id(&draft.session_id, Some(id), event, must_sync, ack);
            }
            Err(why) => {
                // Cannot happen for a normalized draft; stored as an error rather than lost.
                tracing::error!(%why, "pipeline produced an event the store refuses");
                let event = to_new_event(
                    &object(json!({
                        "type": "plugin.error",
                        "payload": {"error": why, "hook": "append"},
                    })),
                    None,
                )
                .expect("a fixed valid event");
                store.append_with_id(&draft.session_id, Some(id), event, false, ack);
            }
        }
    }
}

struct Collector {
    events: Vec<Option<IngestedEvent>>,
    remaining: usize,
    error: Option<StoreError>,
    decision: Option<Decision>,
    done: Option<Done>,
}

impl Collector {
    fn finish(&mut self) {
        let Some(done) = self.done.take() else { return };
        match self.error.take() {
            Some(e) => done(Err(IngestError::Store(e))),
            None => {
                let events: Vec<IngestedEvent> = self.events.drain(..).flatten().collect();
                let mut decision = self.decision.take();
                // The reply goes out once the request is durable: the checkpoint is pending.
                if let Some(c) = decision.as_mut().and_then(|d| d.checkpoint.as_mut())
                    && c.state == CheckpointState::Recording
                    && let Some(e) = events
                        .iter()
                        .find(|e| e.event_type == "checkpoint.requested")
                {
                    c.state = CheckpointState::Pending;
                    c.lsn = e.lsn;
                }
                done(Ok(IngestResult { events, decision }))
            }
        }
    }
}
