//! The reply printed for Claude Code on stdout: the outcome's verdict, shaped by
//! [`crate::claude_reply`] (which the daemon's HTTP hook answers with too).

use crate::claude_reply::{ClaudeOutput, reply};

use crate::hook::outcome::Outcome;
use crate::hook::verdict;

/// What to print for the event `kind` given the outcome, and a few words for the debug line.
pub(crate) fn answer(
    kind: Option<&str>,
    outcome: &Outcome,
    fail_closed: bool,
) -> (Option<ClaudeOutput>, &'static str) {
    let verdict = verdict::verdict(outcome, fail_closed);
    let said = verdict.said();
    // A remote stop also ends the turn: Claude Code stops after this hook.
    let output = reply(kind, verdict, verdict::stop(outcome));
    let said = if output.is_some() {
        said
    } else {
        "printed nothing"
    };
    (output, said)
}

#[cfg(test)]
mod tests {
    use dstream_sdk::protocol::{Decision, IngestResult};
    use serde_json::{Value, json};

    use super::*;
    use crate::hook::outcome::Failure;

    fn decision(action: &str) -> Decision {
        Decision {
            action: action.parse().unwrap(),
            reason: Some("because".into()),
            decided_by: Some("rule:test".into()),
            updated_input: Some(json!({"command": "ls -la"})),
            checkpoint: None,
            stop: false,
        }
    }

    fn render(kind: &str, outcome: Outcome, closed: bool) -> Value {
        let (out, _) = answer(Some(kind), &outcome, closed);
        out.map(|o| serde_json::to_value(o).unwrap())
            .unwrap_or(Value::Null)
    }

    fn decided(action: &str, altered: bool) -> Outcome {
        Ok((
            IngestResult {
                events: vec![],
                decision: Some(decision(action)),
            },
            altered,
        ))
    }

    #[test]
    fn pre_tool_use_decisions_use_permission_decision() {
        assert_eq!(
            render("PreToolUse", decided("allow", false), false),
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "allow", "permissionDecisionReason": "because",
                "updatedInput": {"command": "ls -la"}}})
        );
        assert_eq!(
            render("PreToolUse", decided("deny", false), false),
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "because"}})
        );
        assert_eq!(
            render("PreToolUse", decided("ask", false), false),
            Value::Null
        );
        // An edit of an input that was cut to fit is not applied.
        assert!(
            render("PreToolUse", decided("allow", true), false)["hookSpecificOutput"]
                .get("updatedInput")
                .is_none()
        );
    }

    #[test]
    fn permission_requests_use_decision_behavior() {
        assert_eq!(
            render("PermissionRequest", decided("allow", false), false),
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                "decision": {"behavior": "allow", "updatedInput": {"command": "ls -la"}}}})
        );
        assert_eq!(
            render("PermissionRequest", decided("deny", false), false),
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                "decision": {"behavior": "deny", "message": "because"}}})
        );
        assert_eq!(
            render("PermissionRequest", decided("ask", false), false),
            Value::Null
        );
    }

    #[test]
    fn other_events_and_failures_print_nothing_unless_fail_closed() {
        assert_eq!(
            render("PostToolUse", decided("deny", false), true),
            Value::Null
        );
        let down = || Err(Failure::Timeout("connecting to the daemon"));
        assert_eq!(render("PreToolUse", down(), false), Value::Null);
        let denied = render("PreToolUse", down(), true);
        assert_eq!(
            denied["hookSpecificOutput"]["permissionDecision"],
            json!("deny")
        );
        assert!(
            denied["hookSpecificOutput"]["permissionDecisionReason"]
                .as_str()
                .unwrap()
                .contains("fail-closed")
        );
        assert_eq!(
            render("PermissionRequest", down(), true)["hookSpecificOutput"]["decision"]["behavior"],
            json!("deny")
        );
        assert_eq!(render("Stop", down(), true), Value::Null);
        // A decision the hook does not know is a reply it does not understand: no decision,
        // or a denial when failing closed.
        let reply = json!({"events": [], "decision": {"action": "maybe"}});
        let e = serde_json::from_value::<IngestResult>(reply).unwrap_err();
        let unknown = || Err(Failure::BadReply(e.to_string()));
        assert_eq!(render("PreToolUse", unknown(), false), Value::Null);
        assert_eq!(
            render("PreToolUse", unknown(), true)["hookSpecificOutput"]["permissionDecision"],
            json!("deny")
        );
    }
}
