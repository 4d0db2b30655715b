//! The Claude Code hook events dstream records, and the `--events` choice among them.

use anyhow::bail;

/// The Claude Code hook events dstream records: every event Claude Code 2.1.330 validates its
/// settings against (the release tests/fixtures were captured from), in its order, except
/// `WorktreeCreate`, whose hook replaces Claude Code's own `git worktree add` and must print
/// the new worktree's path.
pub const CLAUDE_EVENTS: &[&str] = &[
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "Notification",
    "UserPromptSubmit",
    "UserPromptExpansion",
    "SessionStart",
    "SessionEnd",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "PreModelSwitch",
    "PostModelSwitch",
    "PermissionRequest",
    "PermissionDenied",
    "Setup",
    "TeammateIdle",
    "TaskCreated",
    "TaskCompleted",
    "Elicitation",
    "ElicitationResult",
    "ConfigChange",
    "WorktreeRemove",
    "InstructionsLoaded",
    "CwdChanged",
    "FileChanged",
    "DirectoryAdded",
    "MessageDisplay",
];

/// The events every Claude Code release with hooks knows (`--events core`). Some releases
/// refuse a whole settings file that names an event they do not know.
pub const CLAUDE_CORE_EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Notification",
    "SubagentStop",
    "Stop",
    "PreCompact",
    "SessionEnd",
];

/// The events `--events` names: `all`, `core` or event names, each once, in the order given
/// (all of them when none are named).
pub fn chosen_events(list: &[String]) -> anyhow::Result<Vec<&'static str>> {
    let mut out: Vec<&'static str> = Vec::new();
    for name in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let add: &[&'static str] = match name {
            "all" => CLAUDE_EVENTS,
            "core" => CLAUDE_CORE_EVENTS,
            "WorktreeCreate" => bail!(
                "WorktreeCreate is not hooked: its hook replaces Claude Code's own worktree \
                 creation and must print the new worktree's path"
            ),
            _ => match CLAUDE_EVENTS.iter().find(|e| **e == name) {
                Some(e) => std::slice::from_ref(e),
                None => bail!(
                    "{name:?} is not a Claude Code hook event dstream knows; known: {}",
                    CLAUDE_EVENTS.join(", ")
                ),
            },
        };
        for e in add {
            if !out.contains(e) {
                out.push(e);
            }
        }
    }
    Ok(if out.is_empty() {
        CLAUDE_EVENTS.to_vec()
    } else {
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lists() {
        assert_eq!(chosen_events(&[]).unwrap().len(), CLAUDE_EVENTS.len());
        assert_eq!(chosen_events(&["core".into()]).unwrap(), CLAUDE_CORE_EVENTS);
        assert_eq!(
            chosen_events(&["Stop".into(), "PreToolUse".into(), "Stop".into()]).unwrap(),
            ["Stop", "PreToolUse"]
        );
        assert!(chosen_events(&["WorktreeCreate".into()]).is_err());
        assert!(chosen_events(&["PreToolCall".into()]).is_err());
        assert!(!CLAUDE_EVENTS.contains(&"WorktreeCreate"));
        for e in CLAUDE_CORE_EVENTS {
            assert!(CLAUDE_EVENTS.contains(e));
        }
    }
}
