//! Plugins' **decide** and the strength of decisions: every `decide` plugin is asked about a
//! tool call, its answer becomes a [`Decision`], and of several the strongest wins (deny >
//! ask > allow; of equals, the first). A failing plugin counts as deny. Pure but for the
//! plugin calls, apart from the verdict that weighs this against policy, stops and grants.

use std::sync::Arc;

use dstream_sdk::protocol::{Action, Decision};
use serde_json::Value as Json;

use super::draft::{Draft, plugin_error};
use crate::plugins::{Hooks, Input, PluginSet};

/// Asks every `decide` plugin about one tool call: deny beats ask beats allow. A plugin
/// that fails (an error, a timeout, an answer that is none of the four) counts as deny:
/// what cannot be evaluated counts as its strictest outcome, so a plugin made to fail
/// never lets a call through, nor leaves it to a person who may not be there.
pub(super) fn decide(set: &PluginSet, draft: &Draft, notes: &mut Vec<Draft>) -> Option<Decision> {
    let mut decision = None;
    let request = Arc::new(Json::Object(draft.event.clone()));
    for plugin in set.with(Hooks::DECIDE) {
        if plugin.disabled().is_some() {
            continue;
        }
        let verdict = match plugin.call(Hooks::DECIDE, Input::Event(request.clone())) {
            Ok(mut out) => match out.pop() {
                Some(Json::Null) | None => continue,
                Some(Json::String(action)) => plugin_verdict(plugin.name(), &action, None),
                Some(Json::Object(m)) => {
                    let action = m.get("action").and_then(Json::as_str).unwrap_or("");
                    let reason = m.get("reason").and_then(Json::as_str).map(str::to_string);
                    plugin_verdict(plugin.name(), action, reason)
                }
                Some(_) => Err("decide returned neither a string nor a table".to_string()),
            },
            Err(f) => {
                let why = f.error.to_string();
                notes.push(plugin_error(
                    plugin,
                    "decide",
                    &why,
                    Some(&f),
                    &draft.session_id,
                ));
                Ok(failed_to_decide(plugin.name(), &why))
            }
        };
        match verdict {
            Ok(v) => decision = strongest(decision, Some(v)),
            Err(why) => {
                notes.push(plugin_error(
                    plugin,
                    "decide",
                    &why,
                    None,
                    &draft.session_id,
                ));
                decision = strongest(decision, Some(failed_to_decide(plugin.name(), &why)));
            }
        }
    }
    decision
}

/// A plugin's answer as a decision, or why it is none.
fn plugin_verdict(plugin: &str, action: &str, reason: Option<String>) -> Result<Decision, String> {
    match action.parse::<Action>() {
        Ok(action) => Ok(Decision {
            reason,
            ..Decision::new(action, format!("plugin:{plugin}"))
        }),
        Err(_) => Err(format!(
            "decide returned {action:?}; expected \"allow\", \"deny\", \"ask\" or nil"
        )),
    }
}

/// The decision of a `decide` plugin that failed: deny, saying why.
fn failed_to_decide(plugin: &str, why: &str) -> Decision {
    Decision::deny(
        format!(
            "plugin {plugin} failed to decide: {why}; denied because a failing plugin counts as deny"
        ),
        format!("plugin:{plugin}"),
    )
}

/// deny > ask > allow; of equals, the first.
pub(super) fn strongest(a: Option<Decision>, b: Option<Decision>) -> Option<Decision> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.action.strictness() > a.action.strictness() {
            b
        } else {
            a
        }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(action: &str, who: &str) -> Option<Decision> {
        Some(plugin_verdict(who, action, None).unwrap())
    }

    fn action(d: &Option<Decision>) -> (&str, &str) {
        let d = d.as_ref().unwrap();
        (d.action.as_str(), d.decided_by.as_deref().unwrap())
    }

    #[test]
    fn deny_beats_ask_beats_allow_in_either_order() {
        let order = ["allow", "ask", "deny"];
        for (i, weak) in order.iter().enumerate() {
            for strong in &order[i + 1..] {
                let one = strongest(by(weak, "a"), by(strong, "b"));
                let other = strongest(by(strong, "b"), by(weak, "a"));
                assert_eq!(action(&one), (*strong, "plugin:b"), "{weak} then {strong}");
                assert_eq!(
                    action(&other),
                    (*strong, "plugin:b"),
                    "{strong} then {weak}"
                );
            }
        }
    }

    #[test]
    fn of_equals_the_first_stands() {
        for a in ["allow", "ask", "deny"] {
            let d = strongest(by(a, "first"), by(a, "second"));
            assert_eq!(action(&d), (a, "plugin:first"));
        }
    }

    #[test]
    fn no_decision_yields_to_any() {
        assert_eq!(strongest(None, None), None);
        assert_eq!(
            action(&strongest(None, by("allow", "a"))),
            ("allow", "plugin:a")
        );
        assert_eq!(
            action(&strongest(by("ask", "a"), None)),
            ("ask", "plugin:a")
        );
    }

    #[test]
    fn a_plugin_answers_one_of_three_words() {
        let d = plugin_verdict("p", "ask", Some("why".into())).unwrap();
        assert_eq!(
            (
                d.action.as_str(),
                d.reason.as_deref(),
                d.decided_by.as_deref()
            ),
            ("ask", Some("why"), Some("plugin:p"))
        );
        assert!(d.checkpoint.is_none() && d.updated_input.is_none() && !d.stop);
        for other in ["", "Allow", "approve", "yes"] {
            let e = plugin_verdict("p", other, None).unwrap_err();
            assert!(e.contains(&format!("{other:?}")), "{e}");
        }
    }

    #[test]
    fn a_failing_plugin_counts_as_deny() {
        let failed = Some(failed_to_decide("broken", "timed out"));
        let d = failed.as_ref().unwrap();
        assert_eq!(d.action, Action::Deny);
        assert_eq!(d.decided_by.as_deref(), Some("plugin:broken"));
        let reason = d.reason.as_deref().unwrap();
        assert!(
            reason.contains("broken failed to decide: timed out"),
            "{reason}"
        );
        // It outweighs what any other plugin said, whichever answered first.
        for other in ["allow", "ask"] {
            let d = strongest(by(other, "ok"), failed.clone());
            assert_eq!(action(&d), ("deny", "plugin:broken"));
            let d = strongest(failed.clone(), by(other, "ok"));
            assert_eq!(action(&d), ("deny", "plugin:broken"));
        }
        // A plugin's own deny came first and stands.
        let d = strongest(by("deny", "strict"), failed);
        assert_eq!(action(&d), ("deny", "plugin:strict"));
    }
}
