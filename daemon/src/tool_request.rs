//! Reads a tool call that waits for a decision straight from an agent's raw hook event,
//! without the mapping plugin: Claude Code's (and the Agent SDK's) `PreToolUse`, OpenCode's
//! `tool.execute.before`.
//!
//! Why: policy must decide every such call the daemon receives. If the mapping fails on it
//! (hostile content, a broken or disabled plugin) or a filter drops it, the pipeline decides
//! on what this reads instead, so a deny rule never fails open.

use serde_json::Value as Json;

/// What can be read of a waiting tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRequest {
    pub tool: String,
    pub input: Json,
    pub tool_use_id: Option<String>,
    pub session_id: Option<String>,
}

/// The waiting tool call `raw` carries, if it is one.
pub fn from_raw(source: &str, raw: &Json) -> Option<ToolRequest> {
    let text = |v: Option<&Json>| v.and_then(Json::as_str).map(str::to_string);
    let session =
        |v: Option<&Json>| text(v).filter(|s| dstream_sdk::validate_session_id(s).is_ok());
    if raw.get("hook_event_name").and_then(Json::as_str) == Some("PreToolUse") {
        return Some(ToolRequest {
            // A call without a readable tool name is still a call: rules on `*` apply.
            tool: text(raw.get("tool_name")).unwrap_or_default(),
            input: raw.get("tool_input").cloned().unwrap_or(Json::Null),
            tool_use_id: text(raw.get("tool_use_id")),
            session_id: session(raw.get("session_id")),
        });
    }
    if source == "opencode" && raw.get("hook").and_then(Json::as_str) == Some("tool.execute.before")
    {
        let input = raw.get("input");
        return Some(ToolRequest {
            tool: text(input.and_then(|i| i.get("tool"))).unwrap_or_default(),
            input: raw
                .get("output")
                .and_then(|o| o.get("args"))
                .cloned()
                .unwrap_or(Json::Null),
            tool_use_id: text(input.and_then(|i| i.get("callID"))),
            session_id: session(input.and_then(|i| i.get("sessionID"))),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_claude_code_and_opencode_calls_and_nothing_else() {
        let cc = json!({"hook_event_name": "PreToolUse", "session_id": "s1", "tool_name": "Bash",
                        "tool_input": {"command": "rm -rf /"}, "tool_use_id": "toolu_1"});
        assert_eq!(
            from_raw("claude-code", &cc),
            Some(ToolRequest {
                tool: "Bash".into(),
                input: json!({"command": "rm -rf /"}),
                tool_use_id: Some("toolu_1".into()),
                session_id: Some("s1".into()),
            })
        );
        let oc = json!({"hook": "tool.execute.before",
                        "input": {"tool": "bash", "sessionID": "ses_1", "callID": "c1"},
                        "output": {"args": {"command": "rm -rf /"}}});
        let r = from_raw("opencode", &oc).unwrap();
        assert_eq!(
            (r.tool.as_str(), r.session_id.as_deref()),
            ("bash", Some("ses_1"))
        );
        assert_eq!(
            from_raw("claude-code", &json!({"hook_event_name": "PostToolUse"})),
            None
        );
        assert_eq!(from_raw("demo", &oc), None);
    }
}
