//! The Claude Code mapping written in Rust ([`crate::plugins::claude_code_map`]) held to its
//! reference, `plugins/claude-code.lua`, run in a Lua state as the built-in was.

use serde_json::{Value as Json, json};

use super::twin::{lua_builtin, lua_map};

/// Every captured payload, the malformed cases of the mapping tests, and variants that
/// reach each branch and each odd value (null, wrong types, subagents, ids that are not
/// safe).
fn claude_code_cases() -> Vec<Json> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/claude-code");
    let mut cases: Vec<Json> = Vec::new();
    for f in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        cases.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Json>(l).unwrap()),
        );
    }
    let hooks = [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PermissionRequest",
        "PermissionDenied",
        "PostToolUse",
        "PostToolUseFailure",
        "PostToolBatch",
        "MessageDisplay",
        "Stop",
        "StopFailure",
        "SubagentStart",
        "SubagentStop",
        "InstructionsLoaded",
        "CwdChanged",
        "ConfigChange",
        "Setup",
        "PreModelSwitch",
        "PostModelSwitch",
        "WorktreeCreate",
        "WorktreeRemove",
        "Notification",
        "TeammateIdle",
        "TaskCompleted",
        "PreCompact",
        "PostCompact",
        "SessionEnd",
        "UserPromptExpansion",
        "SomeFutureHook",
    ];
    let fields = [
        "source",
        "model",
        "cwd",
        "transcript_path",
        "prompt",
        "prompt_id",
        "tool_name",
        "tool_input",
        "tool_use_id",
        "permission_suggestions",
        "reason",
        "tool_response",
        "duration_ms",
        "error",
        "delta",
        "message_id",
        "index",
        "final",
        "turn_id",
        "last_assistant_message",
        "background_tasks",
        "agent_type",
        "agent_transcript_path",
        "file_path",
        "memory_type",
        "load_reason",
        "old_cwd",
        "new_cwd",
        "trigger",
        "from_model",
        "to_model",
        "requested_model",
        "name",
        "worktree_path",
        "path",
        "message",
        "title",
        "notification_type",
        "teammate_name",
        "team_name",
        "task_id",
        "task_subject",
        "task_description",
        "custom_instructions",
        "compact_summary",
        "command_name",
        "command_args",
        "command_source",
        "expansion_type",
    ];
    for hook in hooks {
        let full: serde_json::Map<String, Json> = fields
            .iter()
            .enumerate()
            .map(|(i, f)| (f.to_string(), json!({"v": i, "list": [1, null, "x"]})))
            .collect();
        let mut with = |extra: Json| {
            let mut e = Json::Object(full.clone());
            e["hook_event_name"] = json!(hook);
            e["session_id"] = json!("sess-1");
            for (k, v) in extra.as_object().unwrap() {
                e[k] = v.clone();
            }
            cases.push(e);
        };
        with(json!({}));
        with(json!({"agent_id": "a1", "agent_type": "Explore", "permission_mode": "plan"}));
        with(json!({"agent_id": "../bad", "session_id": ".hidden"}));
        with(json!({"session_id": null, "prompt_id": null, "source": null}));
        with(json!({"session_id": "x".repeat(201), "agent_id": 7}));
        with(json!({"source": "startup", "is_interrupt": true}));
        with(json!({"source": "clear", "is_interrupt": "yes"}));
        with(
            json!({"tool_calls": [{"tool_use_id": "t1"}, {"x": 1}, "s", [1], {"tool_use_id": null}, {"tool_use_id": {"deep": [1]}}]}),
        );
        with(json!({"tool_calls": {"1": {"tool_use_id": "t"}}}));
        with(json!({"tool_calls": []}));
        cases.push(json!({"hook_event_name": hook}));
        cases.push(json!({"hook_event_name": hook, "session_id": "s", "agent_id": "a"}));
    }
    cases.extend([
        json!({"session_id": "cc-1", "hook_event_name": 42, "tool_input": "not a table"}),
        json!({"session_id": "cc-1", "hook_event_name": null}),
        json!({"session_id": "cc-1", "hook_event_name": ["PreToolUse"]}),
        json!({"session_id": "cc-1"}),
        json!({"session_id": "ok-é", "hook_event_name": "Stop"}),
        json!({"session_id": "a b", "hook_event_name": "Stop"}),
        json!([1, 2, 3]),
        json!([]),
        json!({}),
        json!("just a string"),
        json!(""),
        json!({"hook_event_name": "PreToolUse", "tool_input": {"n": 1.5, "big": -9007199254740993_i64, "e": [], "o": {}}}),
    ]);
    cases
}

#[test]
fn maps_every_case_exactly_as_the_lua_file_does() {
    let lua = lua_builtin("claude-code.lua", &json!({}));
    let cases = claude_code_cases();
    assert!(cases.len() > 300, "{}", cases.len());
    for raw in cases {
        let by_lua = lua_map(&lua, &raw, "claude-code");
        let by_rust = crate::plugins::claude_code_map::map(&raw, "claude-code");
        match (by_lua, by_rust) {
            (Ok(l), Ok(r)) => assert_eq!(l, r, "{raw}"),
            (Err(l), Err(r)) => assert!(l.ends_with(&r), "{l} / {r}"),
            (l, r) => panic!("{raw}: Lua {l:?}, Rust {r:?}"),
        }
    }
    // What Lua cannot index fails in both, and only that.
    for raw in [json!(5), json!(true), json!(null)] {
        assert!(
            crate::plugins::claude_code_map::map(&raw, "claude-code").is_err(),
            "{raw}"
        );
    }
}
