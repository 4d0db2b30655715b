//! Each event type of the taxonomy in words: which label, which text, which tone. Tool calls
//! and checkpoints are in `tools`, money in `usage`; a type not known here shows its name and
//! its payload, clipped.

use dstream_sdk::Event;
use serde_json::Value as Json;

use crate::cli::tail_view::fields::{agent, clipped, first_line, number, text, text_of, who};
use crate::cli::tail_view::joins::{Call, Joins};
use crate::cli::tail_view::paint::{Line, Tone};
use crate::cli::tail_view::tools;
use crate::cli::tail_view::usage;

/// The event `e` as one line of words.
pub fn describe(e: &Event, joins: &mut Joins) -> Line {
    let p = &e.payload;
    let t = e.event_type.as_str();
    match t {
        "user.input" => you(text(p, "text").unwrap_or("")),
        "user.command" => you(&match text(p, "command_name") {
            Some(name) => format!("/{name} {}", text(p, "command_args").unwrap_or("")),
            None => text(p, "prompt").unwrap_or("").to_string(),
        }),
        "message.chunk" => chunk(e, joins),
        "message.completed" | "message.updated" => {
            let how = text_of(p, &["finish", "stop_reason"])
                .map(|f| format!(", {f}"))
                .unwrap_or_default();
            let what = if t == "message.completed" {
                "reply done"
            } else {
                "reply"
            };
            Line::new(agent(e.actor.as_deref()), Tone::Quiet).then(
                format!("· {what} ({}{how})", text(p, "model").unwrap_or("?")),
                Tone::Quiet,
            )
        }
        "message.stream_event" => quiet(
            &agent(e.actor.as_deref()),
            format!("· {}", text(p, "event").unwrap_or("stream")),
        ),
        "execution.tool_use" => tools::tool_use(e, joins),
        "execution.tool_result" => tools::tool_result(e, joins),
        "execution.tool_state" => tools::tool_state(e, joins),
        "execution.permission"
        | "execution.permission_requested"
        | "execution.permission_replied"
        | "execution.permission_denied" => tools::permission(e, joins),
        "execution.step_start" => quiet(
            "step",
            format!("start{}", paren(text(p, "model").map(str::to_string))),
        ),
        "execution.step_finish" => {
            let reason = text_of(p, &["reason", "stop_reason"]).map(str::to_string);
            let calls = number(p, "tool_calls").map(|n| match n {
                1 => "1 tool call".to_string(),
                n => format!("{n} tool calls"),
            });
            let said = [reason, calls].into_iter().flatten().collect::<Vec<_>>();
            quiet("step", format!("done{}", paren(Some(said.join(", ")))))
        }
        _ if t.starts_with("checkpoint.") => tools::checkpoint(e, joins),
        "usage.request" => usage::request(e),
        "usage.session" => usage::session(e),
        _ if t.starts_with("lifecycle.session.") => session(&t["lifecycle.session.".len()..], p),
        "agent.spawned" => Line::new("agent", Tone::Agent)
            .then(format!("spawned {}", agent_name(p)), Tone::Plain)
            .then(
                text(p, "child_session_id")
                    .map(|c| format!(" → {c}"))
                    .unwrap_or_default(),
                Tone::Quiet,
            ),
        "agent.completed" => {
            let said = text_of(p, &["last_assistant_message", "output"])
                .map(|s| format!(": {}", first_line(s)))
                .unwrap_or_default();
            Line::new("agent", Tone::Agent)
                .then(format!("{} finished{said}", agent_name(p)), Tone::Plain)
        }
        "agent.aborted" => {
            let by = text(p, "decided_by")
                .map(|b| format!(" by {}", who(b)))
                .unwrap_or_default();
            let why = [text(p, "reason"), text(p, "error")]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ");
            bad("agent", format!("stopped{by}: {why}"))
        }
        "session.error" => bad(
            "error",
            first_line(text_of(p, &["message", "error"]).unwrap_or("an error")),
        ),
        "plugin.error" => bad(
            "plugin",
            format!(
                "{} failed in {}: {}",
                text(p, "plugin").unwrap_or("?"),
                text(p, "hook").unwrap_or("?"),
                first_line(text(p, "error").unwrap_or(""))
            ),
        ),
        "log.recovered" => bad(
            "log",
            format!(
                "recovered ({}): {}",
                text(p, "reason").unwrap_or("?"),
                first_line(text(p, "detail").unwrap_or(""))
            ),
        ),
        "files.diff" => {
            let files: Vec<&str> = p
                .get("files")
                .and_then(Json::as_array)
                .map(|f| {
                    f.iter()
                        .filter_map(|f| f.as_str().or_else(|| text(f, "file")))
                        .collect()
                })
                .unwrap_or_default();
            match files.len() {
                0 => quiet("files", "no changes".into()),
                n => Line::new("files", Tone::Plain)
                    .then(format!("{n} changed: {}", files.join(", ")), Tone::Plain),
            }
        }
        "files.worktree_created" => Line::new("files", Tone::Plain).then(
            format!("worktree {}", text(p, "name").unwrap_or("?")),
            Tone::Plain,
        ),
        "context.instructions_loaded" => quiet(
            "context",
            format!(
                "loaded {}{}",
                text(p, "file_path").unwrap_or("?"),
                paren(text(p, "load_reason").map(str::to_string))
            ),
        ),
        "unmapped" => quiet(
            "unmapped",
            format!(
                "{} {}",
                text(p, "source").unwrap_or(""),
                text(p, "event_type").unwrap_or("")
            ),
        ),
        _ => Line::new(t, Tone::Quiet).then(clipped(p, 200), Tone::Quiet),
    }
}

fn you(s: &str) -> Line {
    Line::new("you", Tone::You).then(first_line(s), Tone::Plain)
}

fn quiet(label: &str, s: String) -> Line {
    Line::new(label, Tone::Quiet).then(s, Tone::Quiet)
}

fn bad(label: &str, s: String) -> Line {
    Line::new(label, Tone::Bad).then(s, Tone::Bad)
}

/// ` (s)`, or nothing for nothing.
fn paren(s: Option<String>) -> String {
    s.filter(|s| !s.is_empty())
        .map(|s| format!(" ({s})"))
        .unwrap_or_default()
}

/// A subagent's name: its type, else its agent, title or id.
fn agent_name(p: &Json) -> &str {
    text_of(p, &["agent_type", "agent", "title", "agent_id"]).unwrap_or("a subagent")
}

/// `message.chunk`: the assistant's (or the user's) text, or a piece of the Agent SDK's
/// stream (a tool call forming, its result, the run's end).
fn chunk(e: &Event, joins: &mut Joins) -> Line {
    let p = &e.payload;
    let who = agent(e.actor.as_deref());
    if let Some(said) = text_of(p, &["text", "textDelta"]) {
        if text(p, "role") == Some("user") {
            return you(said);
        }
        return Line::new(who, Tone::Agent).then(first_line(said), Tone::Plain);
    }
    match text(p, "type") {
        Some("tool-call") => {
            let tool = text(p, "toolName").unwrap_or("tool");
            let s = tools::subject(tool, p.get("args"));
            joins.remember(
                &[text(p, "toolCallId")],
                &Call {
                    tool: tool.into(),
                    subject: s.clone(),
                },
            );
            quiet(tool, format!("{s}  · asked"))
        }
        Some("tool-call-streaming-start") => {
            quiet(text(p, "toolName").unwrap_or("tool"), "· forming".into())
        }
        Some("tool-call-delta") => quiet(&who, "· …".into()),
        Some("tool-result") => {
            let result = p.get("result").map(|r| match r.as_str() {
                Some(s) => first_line(s),
                None => clipped(r, 120),
            });
            quiet(&who, format!("· result: {}", result.unwrap_or_default()))
        }
        Some("done") => quiet(
            &who,
            format!(
                "· done{}",
                paren(text(p, "finishReason").map(str::to_string))
            ),
        ),
        _ => quiet(&who, clipped(p, 200)),
    }
}

/// `lifecycle.session.<what>`.
fn session(what: &str, p: &Json) -> Line {
    let line = |s: String| Line::new("session", Tone::Agent).then(s, Tone::Plain);
    let arrow = |from: &str, to: &str| {
        format!(
            "{} → {}",
            text(p, from).unwrap_or("?"),
            text(p, to).unwrap_or("?")
        )
    };
    match what {
        "created" | "resumed" => {
            let verb = if what == "created" {
                "started"
            } else {
                "resumed"
            };
            let place = text_of(p, &["cwd", "directory"])
                .map(|c| format!(" in {c}"))
                .unwrap_or_default();
            let model = text(p, "model")
                .map(|m| format!(", {m}"))
                .unwrap_or_default();
            let title = text(p, "title")
                .map(|t| format!(": {t}"))
                .unwrap_or_default();
            line(format!(
                "{verb}{place}{}{model}{title}",
                paren(text(p, "source").map(str::to_string))
            ))
        }
        "ended" => line(format!(
            "ended{}",
            paren(text(p, "reason").map(str::to_string))
        )),
        "idle" => quiet("session", "idle".into()),
        "status" => quiet("session", format!("· {}", text(p, "status").unwrap_or("?"))),
        "updated" => quiet(
            "session",
            format!("· updated{}", paren(text(p, "title").map(str::to_string))),
        ),
        "compacting" | "compacted" => line(format!(
            "{what} the context{}",
            paren(text(p, "trigger").map(str::to_string))
        )),
        "model_changed" | "model_switching" => {
            line(format!("model {}", arrow("from_model", "to_model")))
        }
        "cwd_changed" => line(format!("cwd {}", arrow("old_cwd", "new_cwd"))),
        "config_changed" => line(format!(
            "config changed: {}",
            text(p, "file_path").unwrap_or("?")
        )),
        other => line(format!("{other} {}", clipped(p, 160))),
    }
}
