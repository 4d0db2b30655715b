//! What the outcome means for the agent's call, whatever the agent: allow (maybe with an
//! edited input), deny, or no decision; and whether a remote stop ends the turn.

use dstream_sdk::protocol::{Action, Decision, OnTimeout};
use serde_json::Value;

use super::outcome::{Failure, Outcome};

/// The verdict the hook acts on.
pub(super) enum Verdict {
    Allow {
        reason: String,
        updated_input: Option<Value>,
    },
    Deny(String),
    /// Print nothing: the agent proceeds as it normally would.
    Pass,
}

impl Verdict {
    /// A few words for the debug line.
    pub(super) fn said(&self) -> &'static str {
        match self {
            Verdict::Allow { .. } => "allowed",
            Verdict::Deny(_) => "denied",
            Verdict::Pass => "no decision",
        }
    }
}

/// The verdict for the outcome: the daemon's decision; for a pending checkpoint the daemon
/// could not answer, its default; without the daemon, none (or a denial when failing closed).
pub(super) fn verdict(outcome: &Outcome, fail_closed: bool) -> Verdict {
    match outcome {
        Ok((result, altered)) => match &result.decision {
            None => Verdict::Pass,
            Some(d) => verdict_of(d, *altered),
        },
        // The daemon would have applied the checkpoint's default by now; so does the hook.
        Err(e @ Failure::Undecided(c)) => {
            let reason = format!("{e}; its default ({}) applies", c.on_timeout);
            if c.on_timeout == OnTimeout::Allow {
                Verdict::Allow {
                    reason,
                    updated_input: None,
                }
            } else {
                Verdict::Deny(reason)
            }
        }
        Err(e) if fail_closed => Verdict::Deny(format!(
            "dstream could not check this tool call: {e}. Denied because the dstream hook runs \
             fail-closed"
        )),
        Err(_) => Verdict::Pass,
    }
}

/// The reason given for a remote stop, when the daemon's decision ends the agent's turn.
pub(super) fn stop(outcome: &Outcome) -> Option<String> {
    match outcome {
        Ok((result, _)) => result.decision.as_ref().filter(|d| d.stop).map(|d| {
            d.reason
                .clone()
                .unwrap_or_else(|| "stopped remotely".into())
        }),
        Err(_) => None,
    }
}

fn verdict_of(d: &Decision, altered: bool) -> Verdict {
    let by = d.decided_by.as_deref().unwrap_or("dstream policy");
    match d.action {
        Action::Allow => Verdict::Allow {
            reason: d
                .reason
                .clone()
                .unwrap_or_else(|| format!("allowed by {by} (dstream)")),
            // Claude Code replaces the tool's input with an object; anything else is not an
            // input, and an edit of an event that was cut to fit would lose the cut part.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_reasons_name_the_decider() {
        let d = Decision::new(Action::Deny, "rule:no-rm");
        match verdict_of(&d, false) {
            Verdict::Deny(r) => assert_eq!(r, "denied by rule:no-rm (dstream)"),
            _ => panic!("expected a denial"),
        }
    }
}
