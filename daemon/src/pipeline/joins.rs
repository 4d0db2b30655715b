//! Joining a tool result to its request: the result's `causation_id` names the request's
//! event, found by `tool_use_id` among the calls remembered ([`JoinMemory`], bounded), else in
//! a [`ToolIndex`] of every stored request (the search index keeps one), else in the events the
//! index has not reached yet (a few, at the log's end), else, with no index, in the last events
//! of the session's log. What a look in the log finds is remembered with how far it read, so
//! each event is read once, however many results look. Apart from the append step that calls
//! it so the memory's bounds and the join's rules can be tested without a store.

use std::collections::{HashMap, VecDeque};

use serde_json::Value as Json;

use super::draft::Draft;
use crate::store::{Store, read_range};

/// Tool calls remembered per daemon to join a result to its request without reading the log.
const JOIN_MEMORY: usize = 4096;
/// How far back in a session's log a result looks for its request when it is not remembered
/// (after a restart, say).
const JOIN_LOOKBACK: u64 = 2000;

/// Tool calls seen recently: (session, tool_use_id) → the request event's id.
#[derive(Default)]
pub(super) struct JoinMemory {
    ids: HashMap<(String, String), String>,
    order: VecDeque<(String, String)>,
    /// Per session, the LSN up to which [`find_request`] read its log into `ids`: every
    /// request there at or below it is remembered, until one of the session's is forgotten.
    read_upto: HashMap<String, u64>,
}

impl JoinMemory {
    pub(super) fn remember(&mut self, session: &str, tool_use_id: &str, event_id: &str) {
        let key = (session.to_string(), tool_use_id.to_string());
        if self.ids.insert(key.clone(), event_id.to_string()).is_none() {
            self.order.push_back(key);
            if self.order.len() > JOIN_MEMORY
                && let Some(old) = self.order.pop_front()
            {
                self.ids.remove(&old);
                // What was read of that session's log is no longer all here.
                self.read_upto.remove(&old.0);
            }
        }
    }

    /// How far the session's log was read into memory, if it still all is.
    fn read_upto(&self, session: &str) -> u64 {
        self.read_upto.get(session).copied().unwrap_or(0)
    }

    fn set_read_upto(&mut self, session: &str, lsn: u64) {
        if self.read_upto.len() >= JOIN_MEMORY && !self.read_upto.contains_key(session) {
            self.read_upto.clear();
        }
        self.read_upto.insert(session.to_string(), lsn);
    }

    pub(super) fn get(&self, session: &str, tool_use_id: &str) -> Option<String> {
        self.ids
            .get(&(session.to_string(), tool_use_id.to_string()))
            .cloned()
    }

    /// Whether joining `drafts` (in order) would look beyond this memory: a tool result with
    /// no cause whose request is neither remembered nor among the drafts before it. Such an
    /// ingest is left to the shard's thread, since the look-up may read the disk.
    pub(super) fn would_look_up(&self, drafts: &[Draft]) -> bool {
        drafts.iter().enumerate().any(|(i, d)| match tool_use(d) {
            Some(("execution.tool_result", id)) if !d.event.contains_key("causation_id") => {
                self.get(&d.session_id, id).is_none()
                    && !drafts[..i].iter().any(|e| {
                        e.session_id == d.session_id
                            && tool_use(e) == Some(("execution.tool_use", id))
                    })
            }
            _ => false,
        })
    }

    /// A tool result without a cause gets its request's id, found by `tool_use_id` here or
    /// else by `look_up` (session, tool_use_id: see [`find_request`]); a tool request (with
    /// the id `id`) is remembered for its result.
    pub(super) fn join(
        &mut self,
        draft: &mut Draft,
        id: &str,
        look_up: impl FnOnce(&mut JoinMemory, &str, &str) -> Option<String>,
    ) {
        let Some((event_type, tool_use_id)) = tool_use(draft) else {
            return;
        };
        match event_type {
            "execution.tool_use" => {
                self.remember(&draft.session_id, tool_use_id, id);
            }
            "execution.tool_result" if !draft.event.contains_key("causation_id") => {
                let cause = self
                    .get(&draft.session_id, tool_use_id)
                    .or_else(|| look_up(self, &draft.session_id, tool_use_id));
                if let Some(cause) = cause {
                    draft
                        .event
                        .insert("causation_id".into(), Json::String(cause));
                }
            }
            _ => {}
        }
    }
}

/// A draft's type and `payload.tool_use_id`, when it has both.
fn tool_use(d: &Draft) -> Option<(&str, &str)> {
    let kind = d.event.get("type").and_then(Json::as_str)?;
    let id = d.event.get("payload")?.get("tool_use_id")?.as_str()?;
    Some((kind, id))
}

/// Every stored tool request, by session and `tool_use_id`.
pub trait ToolIndex: Send + Sync {
    /// The request's event id, or else the LSN up to which the session's requests are all
    /// indexed (0 when the index has none of them, or is off).
    fn tool_request(&self, session: &str, tool_use_id: &str) -> Result<String, u64>;
}

/// Looks for a tool request in `index`, then in the events of the session's log past what it
/// holds (at most the last [`JOIN_LOOKBACK`]) and past what an earlier look read: every
/// request read there is remembered, so the next result of the session reads only what was
/// stored since.
pub(super) fn find_request(
    joins: &mut JoinMemory,
    store: &Store,
    index: Option<&dyn ToolIndex>,
    session: &str,
    tool_use_id: &str,
) -> Option<String> {
    let indexed = match index.map(|ix| ix.tool_request(session, tool_use_id)) {
        Some(Ok(id)) => return Some(id),
        Some(Err(upto)) => upto,
        None => 0,
    };
    let s = store.get(session)?;
    let upto = s.committed_lsn();
    // A mark past the log's end is not this log's (it was deleted and started again).
    let read = Some(joins.read_upto(session))
        .filter(|&r| r <= upto)
        .unwrap_or(0);
    let from = (upto.saturating_sub(JOIN_LOOKBACK) + 1)
        .max(indexed + 1)
        .max(read + 1);
    if from <= upto {
        let events = read_range(&s, from, upto, JOIN_LOOKBACK as usize, 16 << 20).ok()?;
        // Marked first: forgetting one of the session's calls below unmarks it.
        if let Some(last) = events.last() {
            joins.set_read_upto(session, last.lsn);
        }
        let mut buf = Vec::new();
        let request = memchr::memmem::Finder::new(b"\"execution.tool_use\"");
        for e in &events {
            buf.clear();
            e.write_to(&mut buf);
            // Only an event that may be a request is parsed.
            if request.find(&buf).is_none() {
                continue;
            }
            let Ok(v) = serde_json::from_slice::<Json>(&buf) else {
                continue;
            };
            if v.get("type").and_then(Json::as_str) != Some("execution.tool_use") {
                continue;
            }
            if let (Some(t), Some(id)) = (
                v.pointer("/payload/tool_use_id").and_then(Json::as_str),
                v.get("id").and_then(Json::as_str),
            ) {
                joins.remember(session, t, id);
            }
        }
    }
    joins.get(session, tool_use_id)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::pipeline::draft::object;

    fn draft(session: &str, event: Json) -> Draft {
        Draft::new(session.into(), object(event))
    }

    fn request(session: &str, tool_use_id: &str) -> Draft {
        draft(
            session,
            json!({"type": "execution.tool_use", "payload": {"tool_use_id": tool_use_id}}),
        )
    }

    fn result(session: &str, tool_use_id: &str) -> Draft {
        draft(
            session,
            json!({"type": "execution.tool_result", "payload": {"tool_use_id": tool_use_id}}),
        )
    }

    fn cause(d: &Draft) -> Option<&str> {
        d.event.get("causation_id").and_then(Json::as_str)
    }

    fn unused(_: &mut JoinMemory, _: &str, _: &str) -> Option<String> {
        panic!("the log was read for a request that is remembered")
    }

    #[test]
    fn a_result_names_its_request_by_tool_use_id() {
        let mut joins = JoinMemory::default();
        joins.join(&mut request("s", "tu_1"), "ev_req1", unused);
        joins.join(&mut request("s", "tu_2"), "ev_req2", unused);
        let mut r = result("s", "tu_1");
        joins.join(&mut r, "ev_res1", unused);
        assert_eq!(cause(&r), Some("ev_req1"));
        let mut r = result("s", "tu_2");
        joins.join(&mut r, "ev_res2", unused);
        assert_eq!(cause(&r), Some("ev_req2"));
    }

    #[test]
    fn a_result_with_a_cause_keeps_it() {
        let mut joins = JoinMemory::default();
        joins.join(&mut request("s", "tu_1"), "ev_req", unused);
        let mut r = result("s", "tu_1");
        r.event.insert("causation_id".into(), json!("ev_given"));
        joins.join(&mut r, "ev_res", unused);
        assert_eq!(cause(&r), Some("ev_given"));
    }

    #[test]
    fn an_unmatched_result_is_looked_up_and_else_left_alone() {
        let mut joins = JoinMemory::default();
        joins.join(&mut request("other", "tu_1"), "ev_req", unused);
        // Another session's call with the same id is not this one's request.
        let mut asked = Vec::new();
        let mut r = result("s", "tu_1");
        joins.join(&mut r, "ev_res", |_, s, t| {
            asked.push((s.to_string(), t.to_string()));
            None
        });
        assert_eq!(asked, [("s".to_string(), "tu_1".to_string())]);
        assert_eq!(cause(&r), None);
        // What the log finds is taken.
        let mut r = result("s", "tu_9");
        joins.join(&mut r, "ev_res", |_, _, _| Some("ev_from_log".into()));
        assert_eq!(cause(&r), Some("ev_from_log"));
    }

    #[test]
    fn only_a_result_whose_request_is_not_at_hand_would_be_looked_up() {
        let mut m = JoinMemory::default();
        m.remember("s", "t1", "01REQ");
        assert!(!m.would_look_up(&[result("s", "t1")]), "remembered");
        assert!(m.would_look_up(&[result("s", "t2")]), "not remembered");
        assert!(
            m.would_look_up(&[result("other", "t1")]),
            "another session's"
        );
        assert!(
            !m.would_look_up(&[request("s", "t2"), result("s", "t2")]),
            "its request comes just before it"
        );
        assert!(m.would_look_up(&[result("s", "t2"), request("s", "t2")]));
        let mut caused = result("s", "t3");
        caused.event.insert("causation_id".into(), json!("01CAUSE"));
        assert!(!m.would_look_up(&[caused]), "it names its cause");
        assert!(!m.would_look_up(&[request("s", "t4")]));
        assert!(!m.would_look_up(&[]));
    }

    #[test]
    fn events_without_a_tool_use_id_are_neither_remembered_nor_joined() {
        let mut joins = JoinMemory::default();
        let mut e = draft(
            "s",
            json!({"type": "execution.tool_use", "payload": {"tool": "Bash"}}),
        );
        joins.join(&mut e, "ev_req", unused);
        let mut r = draft("s", json!({"type": "execution.tool_result"}));
        joins.join(&mut r, "ev_res", unused);
        assert_eq!(cause(&r), None);
        assert!(joins.ids.is_empty() && joins.order.is_empty());
        // Other types with an id are not requests.
        let mut other = draft(
            "s",
            json!({"type": "user.input", "payload": {"tool_use_id": "tu_1"}}),
        );
        joins.join(&mut other, "ev_x", unused);
        assert_eq!(joins.get("s", "tu_1"), None);
    }

    #[test]
    fn memory_keeps_the_latest_calls_up_to_its_bound() {
        let mut joins = JoinMemory::default();
        for i in 0..=JOIN_MEMORY {
            joins.remember("s", &format!("tu_{i}"), &format!("ev_{i}"));
        }
        assert_eq!(
            (joins.ids.len(), joins.order.len()),
            (JOIN_MEMORY, JOIN_MEMORY)
        );
        assert_eq!(joins.get("s", "tu_0"), None, "the oldest is forgotten");
        assert_eq!(joins.get("s", "tu_1").as_deref(), Some("ev_1"));
        let last = format!("tu_{JOIN_MEMORY}");
        assert_eq!(joins.get("s", &last), Some(format!("ev_{JOIN_MEMORY}")));
        // Remembering a call again replaces its id without taking another place.
        joins.remember("s", &last, "ev_again");
        assert_eq!(joins.order.len(), JOIN_MEMORY);
        assert_eq!(joins.get("s", &last).as_deref(), Some("ev_again"));
    }
}
