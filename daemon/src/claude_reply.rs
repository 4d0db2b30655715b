//! What dstream answers Claude Code for a hook event, whichever way the event came (the
//! `dstream hook` command's stdout, or the HTTP hook's response body): the verdict a decision
//! means for the call (allow, maybe with an edited input; deny; or nothing), and the JSON
//! Claude Code reads: `hookSpecificOutput` with a `permissionDecision` (PreToolUse) or a
//! `decision.behavior` (PermissionRequest), and `continue: false` for a remote stop.

use dstream_sdk::protocol::{Action, CheckpointInfo, CheckpointState, Decision};
use serde::Serialize;
use serde_json::Value;

/// What a decision means for the agent's call.
pub enum Verdict {
    Allow {
        reason: String,
        updated_input: Option<Value>,
    },
    Deny(String),
    /// Print nothing: the agent proceeds as it normally would.
    Pass,
}

impl Verdict {
    /// A few words for a debug line.
    pub fn said(&self) -> &'static str {
        match self {
            Verdict::Allow { .. } => "allowed",
            Verdict::Deny(_) => "denied",
            Verdict::Pass => "no decision",
        }
    }

    /// The verdict of the daemon's decision; `altered` says the event was cut to fit, so an
    /// edited input (which would lose the cut part) is not applied.
    pub fn of(d: &Decision, altered: bool) -> Verdict {
        let by = d.decided_by.as_deref().unwrap_or("dstream policy");
        match d.action {
            Action::Allow => Verdict::Allow {
                reason: d
                    .reason
                    .clone()
                    .unwrap_or_else(|| format!("allowed by {by} (dstream)")),
                // Claude Code replaces the tool's input with an object; anything else is not
                // an input.
                updated_input: d
                    .updated_input
                    .clone()
                    .filter(|v| v.is_object() && !altered),
            },
            Action::Deny => Verdict::Deny(
                d.reason
                    .clone()
                    .unwrap_or_else(|| format!("denied by {by} (dstream)")),
            ),
            Action::Ask => Verdict::Pass,
        }
    }
}

/// A decided checkpoint as the decision the agent gets.
pub fn decision_of(checkpoint: CheckpointInfo) -> Decision {
    let Some(d) = checkpoint.decision.clone() else {
        return Decision::ask("the checkpoint is not decided", "dstream");
    };
    let mut reason = match checkpoint.state {
        CheckpointState::Expired => format!(
            "nobody decided before the deadline; dstream applied the default ({})",
            d.action
        ),
        state => format!(
            "{state} by {} (dstream checkpoint {})",
            d.decided_by, checkpoint.id
        ),
    };
    if let Some(note) = &d.note {
        reason.push_str(": ");
        reason.push_str(note);
    }
    Decision {
        action: d.action,
        reason: Some(reason),
        decided_by: Some(d.decided_by.clone()),
        updated_input: d.input.clone(),
        checkpoint: Some(checkpoint),
        stop: false,
    }
}

/// The reason given for a remote stop, when the decision ends the agent's turn.
pub fn stop_reason(d: Option<&Decision>) -> Option<String> {
    d.filter(|d| d.stop).map(|d| {
        d.reason
            .clone()
            .unwrap_or_else(|| "stopped remotely".into())
    })
}

/// What Claude Code reads from a hook.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaudeOutput {
    /// `false` ends the agent's turn after this hook (a remote stop); absent otherwise.
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    continue_: Option<bool>,
    /// Shown to the person when `continue` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_reason: Option<String>,
    hook_specific_output: ClaudeSpecific,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClaudeSpecific {
    hook_event_name: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    permission_decision: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    permission_decision_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    updated_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<PermissionDecision>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PermissionDecision {
    behavior: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    updated_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// The answer to the hook event `kind` for `verdict` (none for events that take no decision),
/// ending the turn when `stop` gives a reason.
pub fn reply(kind: Option<&str>, verdict: Verdict, stop: Option<String>) -> Option<ClaudeOutput> {
    let specific = match (kind, verdict) {
        (_, Verdict::Pass) | (None, _) => None,
        (
            Some("PreToolUse"),
            Verdict::Allow {
                reason,
                updated_input,
            },
        ) => Some(ClaudeSpecific {
            hook_event_name: "PreToolUse",
            permission_decision: Some("allow"),
            permission_decision_reason: Some(reason),
            updated_input,
            decision: None,
        }),
        (Some("PreToolUse"), Verdict::Deny(reason)) => Some(ClaudeSpecific {
            hook_event_name: "PreToolUse",
            permission_decision: Some("deny"),
            permission_decision_reason: Some(reason),
            updated_input: None,
            decision: None,
        }),
        (Some("PermissionRequest"), Verdict::Allow { updated_input, .. }) => Some(ClaudeSpecific {
            hook_event_name: "PermissionRequest",
            permission_decision: None,
            permission_decision_reason: None,
            updated_input: None,
            decision: Some(PermissionDecision {
                behavior: "allow",
                updated_input,
                message: None,
            }),
        }),
        (Some("PermissionRequest"), Verdict::Deny(message)) => Some(ClaudeSpecific {
            hook_event_name: "PermissionRequest",
            permission_decision: None,
            permission_decision_reason: None,
            updated_input: None,
            decision: Some(PermissionDecision {
                behavior: "deny",
                updated_input: None,
                message: Some(message),
            }),
        }),
        // Other events take no permission decision.
        _ => None,
    };
    specific.map(|hook_specific_output| ClaudeOutput {
        continue_: stop.as_ref().map(|_| false),
        stop_reason: stop,
        hook_specific_output,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_reasons_name_the_decider() {
        let d = Decision::new(Action::Deny, "rule:no-rm");
        match Verdict::of(&d, false) {
            Verdict::Deny(r) => assert_eq!(r, "denied by rule:no-rm (dstream)"),
            _ => panic!("expected a denial"),
        }
    }
}
