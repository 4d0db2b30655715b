//! The events this component writes to a session's log: `checkpoint.requested`, the decision
//! (`checkpoint.approved`, `checkpoint.rejected`, `checkpoint.expired`),
//! `checkpoint.delivered` and `agent.aborted`.
//!
//! The log is the record of every checkpoint, so what is written here is what
//! [`super::replay`] reads back after a restart; both sides of that contract are pure
//! functions, kept apart from the table and the files. Also which option a decision picks.

use dstream_sdk::protocol::{
    Action, CheckpointDecision, CheckpointInfo, CheckpointOption, CheckpointState,
};
use serde_json::value::to_raw_value;
use serde_json::{Value as Json, json};

use super::table::{Entry, action_named};
use super::types::{CheckpointError, NewRequest, Resolution};
use crate::store::NewEventRaw;

fn raw(v: &Json) -> Result<Box<serde_json::value::RawValue>, CheckpointError> {
    to_raw_value(v).map_err(|e| CheckpointError::Invalid(e.to_string()))
}

/// A checkpoint event of `kind`, checked as any event to be stored is.
fn event(
    kind: &str,
    payload: Json,
    causation_id: Option<String>,
) -> Result<NewEventRaw, CheckpointError> {
    let checkpoint_id = payload.get("checkpoint_id").cloned().unwrap_or(Json::Null);
    let event = NewEventRaw {
        event_type: kind.into(),
        actor: Some("dstream".into()),
        payload: Some(raw(&payload)?),
        causation_id,
        metadata: Some(raw(&json!({ "checkpoint_id": checkpoint_id }))?),
        ..Default::default()
    };
    crate::store::validate_event(&event).map_err(CheckpointError::Invalid)?;
    Ok(event)
}

/// `checkpoint.requested` for a new checkpoint `info` asked by `req`: the checkpoint as
/// clients see it, with the input and the rule's glob, less what only memory knows.
pub(super) fn requested(
    info: &CheckpointInfo,
    req: &NewRequest,
) -> Result<NewEventRaw, CheckpointError> {
    let mut payload = serde_json::to_value(info).unwrap_or_else(|_| json!({}));
    if let Json::Object(p) = &mut payload {
        for k in ["id", "state", "lsn", "decision", "delivered", "session_id"] {
            p.remove(k);
        }
        p.insert("checkpoint_id".into(), json!(info.id));
        p.insert("timeout_ms".into(), json!(req.timeout_ms));
        if let Some(input) = &req.input {
            p.insert("input".into(), input.clone());
        }
        if let Some(g) = &req.input_glob {
            p.insert("input_glob".into(), json!(g));
        }
    }
    event("checkpoint.requested", payload, req.causation_id.clone())
}

/// The option that `decision` picks on checkpoint `id`: `approve`/`allow` and
/// `reject`/`deny` always exist; any other must be one of the checkpoint's `options`.
pub(super) fn option_for(
    decision: &str,
    id: &str,
    options: &[CheckpointOption],
) -> Result<CheckpointOption, CheckpointError> {
    let plain = |id: &str, action: Action| CheckpointOption {
        id: id.into(),
        label: None,
        action: action.as_str().into(),
        scope: None,
    };
    match decision {
        "approve" | "allow" => Ok(plain("approve", Action::Allow)),
        "reject" | "deny" => Ok(plain("reject", Action::Deny)),
        other => options
            .iter()
            .find(|o| o.id == other)
            .cloned()
            .ok_or_else(|| {
                CheckpointError::Invalid(format!(
                    "{other:?} is not a decision for checkpoint {id}; choose approve, reject{}",
                    options
                        .iter()
                        .filter(|o| o.id != "approve" && o.id != "reject")
                        .map(|o| format!(", {}", o.id))
                        .collect::<String>()
                ))
            }),
    }
}

/// The event deciding checkpoint `id` (held as `e`) with `option`: by `r`, or by its
/// deadline when `expired` (then the decision is the checkpoint's default). A scoped option
/// grants for `grant_ttl_ms` from `decided_ms`.
pub(super) fn decided(
    id: &str,
    e: &Entry,
    r: &Resolution,
    option: &CheckpointOption,
    expired: bool,
    decided_ms: u64,
    grant_ttl_ms: u64,
) -> Result<NewEventRaw, CheckpointError> {
    let mut payload = json!({
        "checkpoint_id": id,
        "decision": if expired { e.info.on_timeout.as_str() } else { r.decision.as_str() },
        "action": option.action,
        "decided_by": r.decided_by,
        "decided_ms": decided_ms,
        "summary": e.info.summary,
    });
    if let Some(n) = &r.note {
        payload["note"] = json!(n);
    }
    if let Some(i) = &r.input {
        payload["input"] = i.clone();
    }
    if let Some(uid) = r.uid {
        payload["uid"] = json!(uid);
    }
    if let Some(scope) = &option.scope {
        payload["scope"] = json!(scope);
        payload["grant_expires_ms"] = json!(decided_ms.saturating_add(grant_ttl_ms));
    }
    let kind = if expired {
        "checkpoint.expired"
    } else if action_named(&option.action) == Action::Deny {
        "checkpoint.rejected"
    } else {
        "checkpoint.approved"
    };
    event(kind, payload, Some(e.request_event_id.to_string()))
}

/// `checkpoint.delivered`: the decision `decision` of `id` was handed to `to`.
pub(super) fn delivered(
    id: &str,
    decision: &str,
    to: &str,
    cause: Option<String>,
) -> Result<NewEventRaw, CheckpointError> {
    let payload = json!({"checkpoint_id": id, "decision": decision, "delivered_to": to});
    event("checkpoint.delivered", payload, cause)
}

/// `agent.aborted`: the session's agent was stopped from afar, and these checkpoints rejected.
pub(super) fn aborted(
    reason: &str,
    decided_by: &str,
    rejected: &[String],
) -> Result<NewEventRaw, CheckpointError> {
    Ok(NewEventRaw {
        event_type: "agent.aborted".into(),
        actor: Some("dstream".into()),
        payload: Some(raw(&json!({
            "reason": reason,
            "decided_by": decided_by,
            "rejected_checkpoints": rejected,
        }))?),
        ..Default::default()
    })
}

/// A decision as a refused second decision names it.
pub(super) fn describe_decision(d: &CheckpointDecision, state: CheckpointState) -> String {
    let mut s = format!("{state} ({}) by {}", d.decision, d.decided_by);
    if let Some(n) = &d.note {
        s.push_str(&format!(", note {n:?}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::types::default_options;

    #[test]
    fn approve_and_reject_always_exist_other_options_must_be_offered() {
        let options = default_options(false);
        for (said, action) in [
            ("approve", "allow"),
            ("allow", "allow"),
            ("reject", "deny"),
            ("deny", "deny"),
        ] {
            let o = option_for(said, "ck_1", &[]).unwrap();
            assert_eq!((o.action.as_str(), o.scope), (action, None));
        }
        let o = option_for("approve_session", "ck_1", &options).unwrap();
        assert_eq!(o.scope.as_deref(), Some("session"));
        let e = option_for("approve_project", "ck_1", &options).unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"approve_project\" is not a decision for checkpoint ck_1; choose approve, \
             reject, approve_session"
        );
    }

    #[test]
    fn a_second_decision_hears_who_made_the_first() {
        let mut d = CheckpointDecision {
            decision: "reject".into(),
            action: Action::Deny,
            note: None,
            input: None,
            decided_by: "user:ann".into(),
            decided_ms: 1,
            event_id: None,
        };
        assert_eq!(
            describe_decision(&d, CheckpointState::Rejected),
            "rejected (reject) by user:ann"
        );
        d.note = Some("no".into());
        assert_eq!(
            describe_decision(&d, CheckpointState::Rejected),
            "rejected (reject) by user:ann, note \"no\""
        );
    }
}
