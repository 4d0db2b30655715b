//! Reading checkpoints back from the session logs: at start, the open checkpoints of the
//! sessions the markers name; later, a checkpoint that memory no longer holds.
//!
//! The logs are the record, so this is how the table is rebuilt after a restart: the
//! checkpoint events of a log are folded, in order, by [`apply`] (pure, and tested on its
//! own); the rest here reads the logs. Blocking: it reads logs (and removes markers).

use std::collections::HashMap;

use dstream_sdk::protocol::{
    Action, CheckpointDecision, CheckpointInfo, CheckpointState, OnTimeout,
};
use serde_json::Value as Json;

use super::markers::Markers;
use super::table::{Entry, Table, action_named, state_of};
use super::types::default_options;
use crate::store::{Store, StoreError, read_range};

/// How far back in a session's log a checkpoint no longer in memory is looked for.
pub(super) const LOOKBACK: u64 = 2000;

/// Folds one logged checkpoint event (`v`, at `lsn` of `session`'s log) into `found`.
///
/// A request (re)opens its checkpoint as `pending`. The first decision of a requested
/// checkpoint wins; a later one, or one for a checkpoint not requested in what was read, is
/// ignored. A decision without an action is taken as its kind says (`checkpoint.rejected`
/// denies, the others allow). Events without a `checkpoint_id` are ignored.
pub(super) fn apply(found: &mut HashMap<String, Box<Entry>>, session: &str, lsn: u64, v: &Json) {
    let kind = v.get("type").and_then(Json::as_str).unwrap_or("");
    let Some(p) = v.get("payload") else { return };
    let Some(id) = p.get("checkpoint_id").and_then(Json::as_str) else {
        return;
    };
    let text = |k: &str| p.get(k).and_then(Json::as_str).map(str::to_string);
    let num = |k: &str| p.get(k).and_then(Json::as_u64).unwrap_or(0);
    match kind {
        "checkpoint.requested" => {
            let options = p
                .get("options")
                .cloned()
                .and_then(|o| serde_json::from_value(o).ok())
                .unwrap_or_else(|| default_options(false));
            let info = CheckpointInfo {
                id: id.to_string(),
                session_id: session.to_string(),
                key: text("key").unwrap_or_default(),
                state: CheckpointState::Pending,
                tool: text("tool"),
                input: None,
                summary: text("summary").unwrap_or_default(),
                options,
                created_ms: num("created_ms"),
                deadline_ms: num("deadline_ms"),
                on_timeout: text("on_timeout")
                    .and_then(|w| w.parse().ok())
                    .unwrap_or(OnTimeout::Deny),
                rule: text("rule"),
                source: text("source"),
                cwd: text("cwd"),
                lsn,
                decision: None,
                delivered: false,
            };
            found.insert(
                id.to_string(),
                Box::new(Entry::new(
                    info,
                    v.get("id")
                        .and_then(Json::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    text("input_glob"),
                )),
            );
        }
        "checkpoint.approved" | "checkpoint.rejected" | "checkpoint.expired" => {
            let Some(e) = found.get_mut(id) else { return };
            if e.info.decision.is_some() {
                return;
            }
            let action = match text("action") {
                Some(word) => action_named(&word),
                None if kind == "checkpoint.rejected" => Action::Deny,
                None => Action::Allow,
            };
            e.info.state = state_of(action, kind == "checkpoint.expired");
            e.info.decision = Some(Box::new(CheckpointDecision {
                decision: text("decision").unwrap_or_default(),
                action,
                note: text("note"),
                input: p.get("input").cloned(),
                decided_by: text("decided_by").unwrap_or_default(),
                decided_ms: num("decided_ms"),
                event_id: v.get("id").and_then(Json::as_str).map(str::to_string),
            }));
        }
        "checkpoint.delivered" => {
            if let Some(e) = found.get_mut(id) {
                e.info.delivered = true;
            }
        }
        _ => {}
    }
}

/// The checkpoints recorded in `session`'s log from `from` on, with their decisions.
pub(super) fn scan(
    store: &Store,
    session: &str,
    from: u64,
) -> Result<HashMap<String, Box<Entry>>, StoreError> {
    let mut found: HashMap<String, Box<Entry>> = HashMap::new();
    let Some(s) = store.get(session) else {
        return Ok(found);
    };
    let upto = s.committed_lsn();
    let mut next = from.max(1);
    let mut buf = Vec::new();
    while next <= upto {
        let page = read_range(&s, next, upto, 1024, 4 << 20)?;
        let Some(last) = page.last() else { break };
        next = last.lsn + 1;
        for e in &page {
            buf.clear();
            e.write_to(&mut buf);
            if memchr::memmem::find(&buf, b"\"type\":\"checkpoint.").is_none() {
                continue;
            }
            let Ok(v) = serde_json::from_slice::<Json>(&buf) else {
                continue;
            };
            apply(&mut found, session, e.lsn, &v);
        }
    }
    Ok(found)
}

/// Checkpoint `id` as the last [`LOOKBACK`] events of `session`'s log leave it.
pub(super) fn scan_recent(
    store: &Store,
    session: &str,
    id: &str,
) -> Result<Option<Box<Entry>>, StoreError> {
    let Some(s) = store.get(session) else {
        return Ok(None);
    };
    let from = s.committed_lsn().saturating_sub(LOOKBACK) + 1;
    Ok(scan(store, session, from)?.remove(id))
}

/// A checkpoint's input, from its request in the log.
pub(super) fn input_of(store: &Store, info: &CheckpointInfo) -> Option<Json> {
    let s = store.get(&info.session_id)?;
    if info.lsn == 0 {
        return None;
    }
    let page = read_range(&s, info.lsn, info.lsn, 1, 16 << 20).ok()?;
    let mut buf = Vec::new();
    page.first()?.write_to(&mut buf);
    let v: Json = serde_json::from_slice(&buf).ok()?;
    v.pointer("/payload/input").cloned()
}

/// Rebuilds into `table` the checkpoints of every session with a marker, and drops the
/// markers of sessions whose log shows nothing open. A log that cannot be read keeps its
/// marker (it may be repaired, and the next start reads it).
pub(super) fn rebuild(store: &Store, markers: &Markers, table: &mut Table) -> std::io::Result<()> {
    for (session, from) in markers.list()? {
        let found = match scan(store, &session, from) {
            Ok(found) => found,
            Err(e) => {
                tracing::error!(%session, error = %e, "cannot rebuild checkpoints from this session's log");
                continue;
            }
        };
        if table.rebuilt(&session, found) == 0 {
            markers.remove(&session);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::events;
    use crate::checkpoint::types::{NewRequest, Resolution, checkpoint_id};
    use crate::store::NewEventRaw;
    use serde_json::json;

    const S: &str = "sess-1";

    /// Folds `events` (logged at LSN 1, 2, …) as a scan of `S`'s log would.
    fn replay(events: &[Json]) -> HashMap<String, Box<Entry>> {
        let mut found = HashMap::new();
        for (i, v) in events.iter().enumerate() {
            apply(&mut found, S, i as u64 + 1, v);
        }
        found
    }

    fn request(id: &str) -> Json {
        json!({
            "type": "checkpoint.requested",
            "id": format!("ev-req-{id}"),
            "payload": {
                "checkpoint_id": id, "key": "k", "tool": "Bash", "summary": "run ls",
                "created_ms": 10, "deadline_ms": 60_010, "on_timeout": "allow",
                "rule": "rules[0]", "input_glob": "ls *",
            },
        })
    }

    fn decision(kind: &str, id: &str, payload: Json) -> Json {
        let mut p = json!({"checkpoint_id": id, "decided_by": "user:ann", "decided_ms": 20});
        for (k, v) in payload.as_object().unwrap() {
            p[k] = v.clone();
        }
        json!({"type": kind, "id": format!("ev-{kind}-{id}"), "payload": p})
    }

    fn view(found: &HashMap<String, Box<Entry>>, id: &str) -> CheckpointInfo {
        found[id].view(id)
    }

    #[test]
    fn a_request_alone_is_pending_with_what_it_said() {
        let found = replay(&[request("ck_a")]);
        let c = view(&found, "ck_a");
        assert_eq!(c.state, CheckpointState::Pending);
        assert_eq!(c.session_id, S);
        assert_eq!((c.created_ms, c.deadline_ms, c.lsn), (10, 60_010, 1));
        assert_eq!(c.on_timeout, OnTimeout::Allow);
        assert_eq!(c.tool.as_deref(), Some("Bash"));
        assert_eq!(c.rule.as_deref(), Some("rules[0]"));
        assert_eq!(&*found["ck_a"].request_event_id, "ev-req-ck_a");
        assert_eq!(found["ck_a"].input_glob.as_deref(), Some("ls *"));
        // Without options, an agent's call's options (without a project) are assumed.
        assert_eq!(c.options, default_options(false));
        assert!(c.decision.is_none() && !c.delivered);
    }

    #[test]
    fn a_bare_request_defaults_to_deny_on_timeout() {
        let v = json!({"type": "checkpoint.requested", "payload": {"checkpoint_id": "ck_a"}});
        let c = view(&replay(&[v]), "ck_a");
        assert_eq!((c.on_timeout.as_str(), c.key.as_str()), ("deny", ""));
        assert_eq!(c.state, CheckpointState::Pending);
    }

    #[test]
    fn decisions_set_the_state_their_kind_and_action_say() {
        for (kind, action, state) in [
            ("checkpoint.approved", Some("allow"), "approved"),
            ("checkpoint.approved", None, "approved"),
            ("checkpoint.rejected", Some("deny"), "rejected"),
            ("checkpoint.rejected", None, "rejected"),
            ("checkpoint.expired", Some("deny"), "expired"),
            ("checkpoint.expired", None, "expired"),
            // An approval whose option denies (a custom option) is a rejection.
            ("checkpoint.approved", Some("deny"), "rejected"),
        ] {
            let p = match action {
                Some(a) => json!({"decision": "x", "action": a}),
                None => json!({"decision": "x"}),
            };
            let found = replay(&[request("ck_a"), decision(kind, "ck_a", p)]);
            let c = view(&found, "ck_a");
            assert_eq!(c.state.as_str(), state, "{kind} {action:?}");
            let d = c.decision.unwrap();
            let want = action.unwrap_or(if kind == "checkpoint.rejected" {
                "deny"
            } else {
                "allow"
            });
            assert_eq!(d.action.as_str(), want);
            assert_eq!(d.event_id, Some(format!("ev-{kind}-ck_a")));
            assert_eq!((d.decided_by.as_str(), d.decided_ms), ("user:ann", 20));
        }
    }

    #[test]
    fn the_first_decision_wins() {
        let found = replay(&[
            request("ck_a"),
            decision(
                "checkpoint.rejected",
                "ck_a",
                json!({"decision": "reject", "action": "deny", "note": "no"}),
            ),
            decision(
                "checkpoint.approved",
                "ck_a",
                json!({"decision": "approve", "action": "allow"}),
            ),
            decision("checkpoint.expired", "ck_a", json!({"decision": "allow"})),
        ]);
        let c = view(&found, "ck_a");
        assert_eq!(c.state, CheckpointState::Rejected);
        let d = c.decision.unwrap();
        assert_eq!(
            (d.decision.as_str(), d.note.as_deref()),
            ("reject", Some("no"))
        );
    }

    #[test]
    fn a_decision_for_an_unknown_checkpoint_is_ignored() {
        let found = replay(&[
            decision("checkpoint.approved", "ck_x", json!({"action": "allow"})),
            json!({"type": "checkpoint.delivered", "payload": {"checkpoint_id": "ck_x"}}),
            request("ck_a"),
        ]);
        assert_eq!(found.len(), 1);
        assert_eq!(view(&found, "ck_a").state, CheckpointState::Pending);
    }

    #[test]
    fn a_request_logged_again_opens_its_checkpoint_afresh() {
        let found = replay(&[
            request("ck_a"),
            decision("checkpoint.approved", "ck_a", json!({"action": "allow"})),
            request("ck_a"),
        ]);
        let c = view(&found, "ck_a");
        assert_eq!((c.state.as_str(), c.lsn), ("pending", 3));
        assert!(c.decision.is_none());
    }

    #[test]
    fn delivery_is_noted_and_other_events_are_ignored() {
        let found = replay(&[
            request("ck_a"),
            decision("checkpoint.approved", "ck_a", json!({"action": "allow"})),
            json!({"type": "checkpoint.delivered", "payload": {"checkpoint_id": "ck_a"}}),
            // No checkpoint id, no payload, or not a checkpoint event: nothing happens.
            json!({"type": "checkpoint.requested", "payload": {"key": "k"}}),
            json!({"type": "checkpoint.approved"}),
            json!({"type": "tool.call", "payload": {"checkpoint_id": "ck_b"}}),
        ]);
        assert_eq!(found.len(), 1);
        let c = view(&found, "ck_a");
        assert!(c.delivered);
        assert_eq!(c.state, CheckpointState::Approved);
    }

    #[test]
    fn checkpoints_replay_independently() {
        let found = replay(&[
            request("ck_a"),
            request("ck_b"),
            decision("checkpoint.expired", "ck_b", json!({"action": "deny"})),
        ]);
        assert_eq!(view(&found, "ck_a").state, CheckpointState::Pending);
        assert_eq!(view(&found, "ck_b").state, CheckpointState::Expired);
    }

    /// An event as the log holds it once appended with the id `id`.
    fn logged(e: &NewEventRaw, id: &str) -> Json {
        json!({
            "type": e.event_type,
            "id": id,
            "payload": serde_json::from_str::<Json>(e.payload.as_ref().unwrap().get()).unwrap(),
        })
    }

    /// What this component writes, it reads back as it was.
    #[test]
    fn written_events_replay_to_what_memory_held() {
        let id = checkpoint_id(S, "tool-1");
        let info = CheckpointInfo {
            id: id.clone(),
            session_id: S.into(),
            key: "tool-1".into(),
            state: CheckpointState::Recording,
            tool: Some("Bash".into()),
            input: None,
            summary: "run git push".into(),
            options: default_options(true),
            created_ms: 100,
            deadline_ms: 5_100,
            on_timeout: OnTimeout::Deny,
            rule: Some("rules[1]".into()),
            source: Some("claude".into()),
            cwd: Some("/proj".into()),
            lsn: 0,
            decision: None,
            delivered: false,
        };
        let req = NewRequest {
            session_id: S.into(),
            key: "tool-1".into(),
            input: Some(json!({"command": "git push"})),
            input_glob: Some("git *".into()),
            timeout_ms: 5_000,
            ..Default::default()
        };
        let requested = events::requested(&info, &req).unwrap();
        let found = replay(&[logged(&requested, "ev-1")]);
        let held = &found[&id];
        let mut want = info.clone();
        want.state = CheckpointState::Pending;
        want.lsn = 1;
        assert_eq!(held.view(&id), want);
        assert_eq!(held.input_glob.as_deref(), Some("git *"));

        let r = Resolution {
            decision: "approve_project".into(),
            note: Some("fine".into()),
            input: None,
            decided_by: "user:ann".into(),
            uid: Some(1000),
        };
        let option = events::option_for(&r.decision, &id, &held.options).unwrap();
        let decided = events::decided(&id, held, &r, &option, false, 200, 1_000).unwrap();
        assert_eq!(decided.event_type, "checkpoint.approved");
        assert_eq!(decided.causation_id.as_deref(), Some("ev-1"));
        let delivered = events::delivered(&id, "approve_project", "user:bob", None).unwrap();
        let found = replay(&[
            logged(&requested, "ev-1"),
            logged(&decided, "ev-2"),
            logged(&delivered, "ev-3"),
        ]);
        let c = view(&found, &id);
        assert_eq!(c.state, CheckpointState::Approved);
        assert!(c.delivered);
        assert_eq!(
            c.decision,
            Some(CheckpointDecision {
                decision: "approve_project".into(),
                action: Action::Allow,
                note: Some("fine".into()),
                input: None,
                decided_by: "user:ann".into(),
                decided_ms: 200,
                event_id: Some("ev-2".into()),
            })
        );
    }

    /// A deadline writes the checkpoint's default as the decision, and it reads back expired.
    #[test]
    fn a_written_expiry_replays_as_expired() {
        let found = replay(&[request("ck_a")]);
        let r = Resolution {
            decision: "approve".into(),
            note: None,
            input: None,
            decided_by: "timeout".into(),
            uid: None,
        };
        let held = &found["ck_a"];
        let option = events::option_for(&r.decision, "ck_a", &held.options).unwrap();
        let expired = events::decided("ck_a", held, &r, &option, true, 70_000, 0).unwrap();
        assert_eq!(expired.event_type, "checkpoint.expired");
        let found = replay(&[request("ck_a"), logged(&expired, "ev-2")]);
        let c = view(&found, "ck_a");
        assert_eq!(c.state, CheckpointState::Expired);
        let d = c.decision.unwrap();
        assert_eq!((d.decision.as_str(), d.action.as_str()), ("allow", "allow"));
    }
}
