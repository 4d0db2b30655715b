//! The built-in `claude-code` mapping, in Rust: what `plugins/claude-code.lua` does, event for
//! event (a test holds the two to the same output over every captured payload and malformed
//! case), without handing the hook event to Lua and back, which cost three quarters of every
//! Claude Code event's map step. The Lua file stays the documentation of the mapping and
//! what a user copies to change it: a `claude-code.lua` in the plugin folder replaces this.

use serde_json::{Map, Value as Json, json};

const ACTOR: &str = "claude-code";

/// Hook events that map to one event type, with the fields kept in the payload.
const SIMPLE: &[(&str, &str, &[&str])] = &[
    (
        "InstructionsLoaded",
        "context.instructions_loaded",
        &["file_path", "memory_type", "load_reason"],
    ),
    (
        "CwdChanged",
        "lifecycle.session.cwd_changed",
        &["old_cwd", "new_cwd"],
    ),
    (
        "ConfigChange",
        "lifecycle.session.config_changed",
        &["source", "file_path"],
    ),
    ("Setup", "lifecycle.session.setup", &["trigger"]),
    (
        "PreModelSwitch",
        "lifecycle.session.model_switching",
        &["from_model", "to_model", "requested_model", "source"],
    ),
    (
        "PostModelSwitch",
        "lifecycle.session.model_changed",
        &["from_model", "to_model", "requested_model", "source"],
    ),
    (
        "WorktreeCreate",
        "files.worktree_created",
        &["name", "worktree_path", "path"],
    ),
    (
        "WorktreeRemove",
        "files.worktree_removed",
        &["name", "worktree_path", "path"],
    ),
    (
        "Notification",
        "agent.notification",
        &["message", "title", "notification_type"],
    ),
    (
        "TeammateIdle",
        "agent.idle",
        &["teammate_name", "team_name"],
    ),
    (
        "TaskCompleted",
        "agent.task_completed",
        &[
            "task_id",
            "task_subject",
            "task_description",
            "teammate_name",
            "team_name",
        ],
    ),
    (
        "PreCompact",
        "lifecycle.session.compacting",
        &["trigger", "custom_instructions"],
    ),
    (
        "PostCompact",
        "lifecycle.session.compacted",
        &["trigger", "compact_summary"],
    ),
    ("SessionEnd", "lifecycle.session.ended", &["reason"]),
    (
        "UserPromptExpansion",
        "user.command",
        &[
            "command_name",
            "command_args",
            "command_source",
            "expansion_type",
            "prompt",
        ],
    ),
];

/// A session or agent id the mapping takes as it is (else the pipeline's fallback applies).
fn valid_id(v: Option<&Json>) -> Option<&str> {
    let s = v?.as_str()?;
    let ok = !s.is_empty()
        && s.len() <= 200
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    ok.then_some(s)
}

/// An object of the fields of `raw` named, those present (a JSON null is present).
fn pick(raw: &Map<String, Json>, fields: &[&str]) -> Map<String, Json> {
    fields
        .iter()
        .filter_map(|&k| raw.get(k).map(|v| (k.to_string(), v.clone())))
        .collect()
}

/// A payload: each `(key, value)` whose value is present.
fn payload<'a>(fields: impl IntoIterator<Item = (&'a str, Option<Json>)>) -> Json {
    Json::Object(
        fields
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect(),
    )
}

/// Maps one Claude Code hook event; `source` is the ingest's. Fails only where the Lua does:
/// on a value that cannot be indexed (a number, a boolean, null).
pub fn map(raw: &Json, source: &str) -> Result<Vec<Json>, String> {
    let empty = Map::new();
    let raw = match raw {
        Json::Object(m) => m,
        // Lua reads no field of a string or an array: every one is nil.
        Json::String(_) | Json::Array(_) => &empty,
        other => {
            let kind = match other {
                Json::Number(_) => "number",
                Json::Bool(_) => "boolean",
                _ => "userdata",
            };
            return Err(format!("attempt to index a {kind} value (local 'raw')"));
        }
    };
    let get = |k: &str| raw.get(k).cloned();
    let hook_value = raw.get("hook_event_name");
    let hook = hook_value.and_then(Json::as_str);
    let session = valid_id(raw.get("session_id"));

    let mut metadata = Map::new();
    if let Some(h) = hook_value {
        metadata.insert("hook".into(), h.clone());
    }
    if let Some(m) = raw.get("permission_mode") {
        metadata.insert("permission_mode".into(), m.clone());
    }
    let mut base = Map::new();
    if let Some(s) = session {
        base.insert("session_id".into(), json!(s));
    }
    if let Some(p) = raw.get("prompt_id") {
        base.insert("correlation_id".into(), p.clone());
    }
    base.insert("actor".into(), json!(ACTOR));
    // A subagent's own events live in its session, in the parent's lineage.
    let agent = valid_id(raw.get("agent_id"));
    if let (Some(s), Some(a)) = (session, agent)
        && hook != Some("SubagentStart")
        && hook != Some("SubagentStop")
    {
        base.insert("session_id".into(), json!(format!("{s}.agent-{a}")));
        base.insert("stream_id".into(), json!(s));
        metadata.insert("agent_id".into(), json!(a));
        if let Some(t) = raw.get("agent_type") {
            metadata.insert("agent_type".into(), t.clone());
        }
    }
    base.insert("metadata".into(), Json::Object(metadata));
    let mut events = Vec::new();
    let mut out = |base: &Map<String, Json>, event_type: &str, payload: Json| {
        let mut e = base.clone();
        e.insert("type".into(), json!(event_type));
        e.insert("payload".into(), payload);
        events.push(Json::Object(e));
    };
    let child = || match (session, agent) {
        (Some(s), Some(a)) => Some(json!(format!("{s}.agent-{a}"))),
        _ => None,
    };

    match hook {
        Some("SessionStart") => {
            let created = match raw.get("source") {
                None => true,
                Some(Json::String(s)) => s == "startup" || s == "clear",
                Some(_) => false,
            };
            let event_type = if created {
                "lifecycle.session.created"
            } else {
                "lifecycle.session.resumed"
            };
            out(
                &base,
                event_type,
                payload([
                    ("source", get("source")),
                    ("model", get("model")),
                    ("cwd", get("cwd")),
                    ("transcript_path", get("transcript_path")),
                ]),
            );
        }
        Some("UserPromptSubmit") => {
            base.insert("actor".into(), json!("user"));
            out(
                &base,
                "user.input",
                payload([("text", get("prompt")), ("prompt_id", get("prompt_id"))]),
            );
        }
        Some("PreToolUse") => out(
            &base,
            "execution.tool_use",
            payload([
                ("phase", Some(json!("requested"))),
                ("tool", get("tool_name")),
                ("input", get("tool_input")),
                ("tool_use_id", get("tool_use_id")),
            ]),
        ),
        Some("PermissionRequest") => out(
            &base,
            "execution.permission_requested",
            payload([
                ("tool", get("tool_name")),
                ("input", get("tool_input")),
                ("suggestions", get("permission_suggestions")),
                // Claude Code waits for the hook's answer: policy may decide it.
                ("awaited", Some(json!(true))),
            ]),
        ),
        Some("PermissionDenied") => out(
            &base,
            "execution.permission_denied",
            payload([
                ("tool", get("tool_name")),
                ("input", get("tool_input")),
                ("tool_use_id", get("tool_use_id")),
                ("reason", get("reason")),
            ]),
        ),
        Some("PostToolUse") => out(
            &base,
            "execution.tool_result",
            payload([
                ("phase", Some(json!("completed"))),
                ("ok", Some(json!(true))),
                ("tool", get("tool_name")),
                ("tool_use_id", get("tool_use_id")),
                ("output", get("tool_response")),
                ("duration_ms", get("duration_ms")),
            ]),
        ),
        Some("PostToolUseFailure") => {
            let interrupted = raw.get("is_interrupt") == Some(&Json::Bool(true));
            out(
                &base,
                "execution.tool_result",
                payload([
                    ("phase", Some(json!("failed"))),
                    ("ok", Some(json!(false))),
                    ("tool", get("tool_name")),
                    ("tool_use_id", get("tool_use_id")),
                    ("error", get("error")),
                    ("interrupted", Some(json!(interrupted))),
                    ("duration_ms", get("duration_ms")),
                ]),
            );
            if interrupted {
                out(
                    &base,
                    "agent.aborted",
                    payload([
                        ("reason", Some(json!("interrupted"))),
                        ("tool_use_id", get("tool_use_id")),
                    ]),
                );
            }
        }
        Some("PostToolBatch") => {
            // Lua's ipairs over the calls: an object's (string) keys are skipped, and a call
            // that is not a table, or has no id, adds nothing.
            let ids: Vec<Json> = match raw.get("tool_calls") {
                Some(Json::Array(calls)) => calls
                    .iter()
                    .filter_map(|c| c.as_object()?.get("tool_use_id").cloned())
                    .collect(),
                _ => Vec::new(),
            };
            let n = ids.len();
            out(
                &base,
                "execution.step_finish",
                payload([
                    ("tool_use_ids", Some(Json::Array(ids))),
                    ("tool_calls", Some(json!(n))),
                ]),
            );
        }
        Some("MessageDisplay") => out(
            &base,
            "message.chunk",
            payload([
                ("role", Some(json!("assistant"))),
                ("text", get("delta")),
                ("message_id", get("message_id")),
                ("index", get("index")),
                ("final", get("final")),
                ("turn_id", get("turn_id")),
            ]),
        ),
        Some("Stop") => out(
            &base,
            "lifecycle.session.idle",
            payload([
                ("last_assistant_message", get("last_assistant_message")),
                ("background_tasks", get("background_tasks")),
            ]),
        ),
        Some("StopFailure") => {
            out(
                &base,
                "session.error",
                payload([
                    ("error", get("error")),
                    ("message", get("last_assistant_message")),
                ]),
            );
            out(
                &base,
                "agent.aborted",
                payload([("reason", Some(json!("error"))), ("error", get("error"))]),
            );
        }
        Some("SubagentStart") => out(
            &base,
            "agent.spawned",
            payload([
                ("agent_id", get("agent_id")),
                ("agent_type", get("agent_type")),
                ("child_session_id", child()),
            ]),
        ),
        Some("SubagentStop") => out(
            &base,
            "agent.completed",
            payload([
                ("agent_id", get("agent_id")),
                ("agent_type", get("agent_type")),
                ("child_session_id", child()),
                ("last_assistant_message", get("last_assistant_message")),
                ("transcript_path", get("agent_transcript_path")),
            ]),
        ),
        _ => match hook.and_then(|h| SIMPLE.iter().find(|(name, _, _)| *name == h)) {
            Some((_, event_type, fields)) => {
                out(&base, event_type, Json::Object(pick(raw, fields)));
            }
            // A hook this version does not know: kept whole in raw, typed so it can be found.
            None => out(
                &base,
                "unmapped",
                payload([
                    ("source", Some(json!(source))),
                    ("hook", hook_value.cloned()),
                ]),
            ),
        },
    }
    Ok(events)
}
