//! What the outcome means for the agent's call, whatever the agent: allow (maybe with an
//! edited input), deny, or no decision; and whether a remote stop ends the turn.

use crate::claude_reply::{Verdict, stop_reason};
use dstream_sdk::protocol::OnTimeout;

use crate::hook::outcome::{Failure, Outcome};

/// The verdict for the outcome: the daemon's decision; for a pending checkpoint the daemon
/// could not answer, its default; without the daemon, none (or a denial when failing closed).
pub(crate) fn verdict(outcome: &Outcome, fail_closed: bool) -> Verdict {
    match outcome {
        Ok((result, altered)) => match &result.decision {
            None => Verdict::Pass,
            Some(d) => Verdict::of(d, *altered),
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
pub(crate) fn stop(outcome: &Outcome) -> Option<String> {
    match outcome {
        Ok((result, _)) => stop_reason(result.decision.as_ref()),
        Err(_) => None,
    }
}
