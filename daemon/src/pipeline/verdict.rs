//! One tool call's verdict: what the policy's rule, the `decide` plugins, a remote stop and
//! the grants say about it, and the event that records it: a `checkpoint.requested` for a
//! call that must wait for a person, or an automatic `checkpoint.approved` / `rejected`.
//! Where the pipeline meets the checkpoints; apart from the worker, which only asks it.

use dstream_sdk::protocol::{Action, Decision};
use serde_json::{Map, Value as Json, json};

use super::decide::{decide, strongest};
use super::draft::{Draft, object};
use super::joins::JoinMemory;
use crate::budget::Budgets;
use crate::checkpoint::policy::{self, Call, Policy, RuleVerdict};
use crate::checkpoint::{self as checkpoint, Checkpoints, NewRequest, Prepared};
use crate::config::PermissionRequests;
use crate::plugins::PluginSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RequestKind {
    /// A tool call not yet run.
    ToolUse,
    /// The agent's own permission prompt, which waits for an answer (`payload.awaited`).
    Permission,
}

/// Whether `decide` is asked about this event, and as what.
pub(super) fn request_kind(event: &Map<String, Json>) -> Option<RequestKind> {
    let payload = event.get("payload");
    match event.get("type").and_then(Json::as_str)? {
        "execution.tool_use" => match payload.and_then(|p| p.get("phase")) {
            None | Some(Json::Null) => Some(RequestKind::ToolUse),
            Some(p) if p.as_str() == Some("requested") => Some(RequestKind::ToolUse),
            _ => None,
        },
        "execution.permission_requested"
            if payload.and_then(|p| p.get("awaited")) == Some(&Json::Bool(true)) =>
        {
            Some(RequestKind::Permission)
        }
        _ => None,
    }
}

/// A tool call named by its tool and input (for the prompts that come without the call's id).
fn call_key(tool: &str, input: Option<&Json>) -> String {
    let text = input.map(Json::to_string).unwrap_or_default();
    let id = checkpoint::checkpoint_id(tool, &text);
    format!("call:{}", &id[3..])
}

/// What policy, plugins and grants say about one tool call, and the event that records it:
/// a `checkpoint.requested` for a call that must wait for a person, or an automatic
/// `checkpoint.approved` / `checkpoint.rejected` naming the rule (or grant) that decided.
#[allow(clippy::too_many_arguments)]
pub(super) fn verdict(
    checkpoints: &Checkpoints,
    budgets: &Budgets,
    joins: &mut JoinMemory,
    set: &PluginSet,
    policy: &Policy,
    source: &str,
    raw: &Json,
    draft: &Draft,
    kind: RequestKind,
    cause: &str,
    notes: &mut Vec<Draft>,
) -> (Option<Decision>, Option<Draft>) {
    let payload = draft.event.get("payload");
    let tool = payload
        .and_then(|p| p.get("tool"))
        .and_then(Json::as_str)
        .unwrap_or("")
        .to_string();
    let input = payload.and_then(|p| p.get("input")).cloned();
    let tool_use_id = payload
        .and_then(|p| p.get("tool_use_id"))
        .and_then(Json::as_str)
        .map(str::to_string);
    let call_key = call_key(&tool, input.as_ref());
    if let (RequestKind::ToolUse, Some(t)) = (kind, &tool_use_id) {
        // A permission prompt for this call comes without its id: find it by tool + input.
        joins.remember(&draft.session_id, &call_key, t);
    }
    let rule = policy.evaluate(&Call {
        source,
        tool: &tool,
        input: input.as_ref(),
    });
    let from_rule = rule.as_ref().map(|r| {
        Decision::new(r.action, format!("rule:{}", r.rule)).because(match &r.note {
            Some(note) => format!("{}: {}; {note}", r.rule, r.description),
            None => format!("{}: {}", r.rule, r.description),
        })
    });
    let mut decision = strongest(from_rule, decide(set, draft, notes));
    let cwd = raw
        .get("cwd")
        .or_else(|| raw.get("directory"))
        .and_then(Json::as_str)
        .map(str::to_string);
    // A crossed budget holds (or refuses) every call in its scope; it goes first, so that
    // of two asks the checkpoint names the budget.
    let lineage = draft
        .event
        .get("stream_id")
        .and_then(Json::as_str)
        .unwrap_or(&draft.session_id);
    let brake = budgets.brake(lineage, cwd.as_deref());
    decision = strongest(brake.as_ref().map(|b| b.decision.clone()), decision);
    // Stopped remotely: every call is denied until a person prompts the agent again.
    let stopped = checkpoints.stops.get(&draft.session_id).map(|s| Decision {
        stop: true,
        ..Decision::deny(format!("stopped remotely: {}", s.reason), s.decided_by)
    });
    decision = strongest(stopped, decision);
    if decision.is_none()
        && kind == RequestKind::Permission
        && policy.permission_requests() == PermissionRequests::Ask
    {
        decision = Some(Decision::ask(
            "the agent asks for permission",
            "checkpoints.permission_requests",
        ));
    }
    let Some(mut decision) = decision else {
        return (None, None);
    };
    let braked = brake.filter(|b| b.decision.decided_by == decision.decided_by);
    let auto = |d: &Decision, grant: Option<&str>| {
        let mut p = json!({
            "auto": true,
            "action": d.action,
            "tool": tool,
            "decided_by": d.decided_by,
            "reason": d.reason,
        });
        if let Some(t) = &tool_use_id {
            p["tool_use_id"] = json!(t);
        }
        if let Some(g) = grant {
            p["grant"] = json!(g);
        } else if let Some(r) = &rule {
            p["rule"] = json!(r.rule);
        }
        let kind = if d.action == Action::Deny {
            "checkpoint.rejected"
        } else {
            "checkpoint.approved"
        };
        Draft::new(
            draft.session_id.clone(),
            object(json!({
                "type": kind,
                "actor": "dstream",
                "causation_id": cause,
                "payload": p,
                "metadata": {"source": source},
            })),
        )
    };
    if decision.action != Action::Ask {
        let event = auto(&decision, None);
        return (Some(decision), Some(event));
    }
    // An "always allow" grant does not release the brake of a crossed budget.
    if let Some(g) = checkpoints
        .grants
        .find(&draft.session_id, cwd.as_deref(), &tool, input.as_ref())
        .filter(|_| braked.is_none())
    {
        decision = Decision::allow(
            format!(
                "allowed for this {} by checkpoint {}",
                g.scope, g.checkpoint_id
            ),
            format!("grant:{}", g.checkpoint_id),
        );
        let event = auto(&decision, Some(&g.checkpoint_id));
        return (Some(decision), Some(event));
    }
    let key = match (&tool_use_id, kind) {
        (Some(t), _) => t.clone(),
        (None, RequestKind::Permission) => {
            joins.get(&draft.session_id, &call_key).unwrap_or(call_key)
        }
        (None, RequestKind::ToolUse) => format!("event:{cause}"),
    };
    let (timeout_ms, on_timeout) = match &rule {
        Some(RuleVerdict {
            timeout_ms,
            on_timeout,
            ..
        }) if rule.as_ref().is_some_and(|r| r.action == Action::Ask) => (*timeout_ms, *on_timeout),
        _ => (policy.default_timeout_ms(), policy.default_on_timeout()),
    };
    let asking_rule = rule.as_ref().filter(|r| r.action == Action::Ask);
    let request = NewRequest {
        session_id: draft.session_id.clone(),
        key,
        summary: match &braked {
            Some(b) => format!(
                "{} — {}",
                policy::summary(Some(&tool), input.as_ref()),
                b.summary
            ),
            None => policy::summary(Some(&tool), input.as_ref()),
        },
        options: checkpoint::default_options(cwd.is_some()),
        timeout_ms,
        on_timeout: Some(on_timeout),
        rule: asking_rule.map(|r| r.rule.clone()),
        input_glob: asking_rule.and_then(|r| r.input_glob.clone()),
        source: Some(source.to_string()),
        cwd,
        causation_id: Some(cause.to_string()),
        tool: Some(tool.clone()),
        input,
    };
    match checkpoints.prepare(request) {
        Ok(Prepared::Existing(info)) => {
            if let Some(d) = &info.decision {
                decision.action = d.action;
                decision.reason = d
                    .note
                    .clone()
                    .or(Some(format!("{} ({})", info.state, d.decision)));
                decision.decided_by = Some(d.decided_by.clone());
                decision.updated_input = d.input.clone();
            }
            decision.checkpoint = Some(info);
            (Some(decision), None)
        }
        Ok(Prepared::New {
            info,
            event_id,
            event,
        }) => {
            let mut map = object(serde_json::to_value(&event).unwrap_or(Json::Null));
            map.insert("id".into(), json!(event_id));
            decision.checkpoint = Some(info);
            let follow = Draft::new(draft.session_id.clone(), map);
            (Some(decision), Some(follow))
        }
        Err(e) => {
            // No one could be asked: refuse the call rather than let it through unseen.
            tracing::error!(error = %e, "cannot open a checkpoint; the call is denied");
            decision.action = Action::Deny;
            decision.reason = Some(format!("dstream could not open a checkpoint: {e}"));
            decision.decided_by = Some("dstream".into());
            let event = auto(&decision, None);
            (Some(decision), Some(event))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(event: Json) -> Option<RequestKind> {
        request_kind(&object(event))
    }

    #[test]
    fn requests_are_tool_calls_not_yet_run_and_awaited_prompts() {
        use RequestKind::*;
        assert_eq!(kind(json!({"type": "execution.tool_use"})), Some(ToolUse));
        let phase = |p: Json| json!({"type": "execution.tool_use", "payload": {"phase": p}});
        assert_eq!(kind(phase(Json::Null)), Some(ToolUse));
        assert_eq!(kind(phase(json!("requested"))), Some(ToolUse));
        assert_eq!(kind(phase(json!("completed"))), None);
        let prompt =
            |a: Json| json!({"type": "execution.permission_requested", "payload": {"awaited": a}});
        assert_eq!(kind(prompt(json!(true))), Some(Permission));
        assert_eq!(kind(prompt(json!(false))), None);
        assert_eq!(kind(json!({"type": "execution.tool_result"})), None);
        assert_eq!(kind(json!({"payload": {}})), None);
    }

    #[test]
    fn a_call_key_names_tool_and_input() {
        let a = call_key("Bash", Some(&json!({"command": "ls"})));
        assert!(a.starts_with("call:"), "{a}");
        assert_eq!(a, call_key("Bash", Some(&json!({"command": "ls"}))));
        assert_ne!(a, call_key("Bash", Some(&json!({"command": "rm"}))));
        assert_ne!(a, call_key("Read", Some(&json!({"command": "ls"}))));
    }
}
