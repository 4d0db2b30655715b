//! Tool calls in words: the call when it arrives, its result as a line of its own that
//! repeats the call (joined by `tool_use_id`, else `causation_id`), the agent's permission
//! prompts, and dstream's checkpoints with who decided.

use dstream_sdk::Event;
use serde_json::Value as Json;

use crate::cli::tail_view::fields::{clipped, duration, first_line, number, one_line, text, who};
use crate::cli::tail_view::joins::{Call, Joins};
use crate::cli::tail_view::paint::{Line, Tone};

/// What a person reads first of a tool's input: the command, the file, the pattern.
pub fn subject(tool: &str, input: Option<&Json>) -> String {
    let Some(input) = input.filter(|i| !i.is_null()) else {
        return String::new();
    };
    let pick = |keys: &[&str]| keys.iter().find_map(|k| text(input, k)).map(one_line);
    let by_tool = match tool.to_ascii_lowercase().as_str() {
        "grep" | "glob" => pick(&["pattern"]).map(|p| match pick(&["path"]) {
            Some(dir) => format!("{p} in {dir}"),
            None => p,
        }),
        "webfetch" => pick(&["url"]),
        "websearch" => pick(&["query"]),
        "task" | "agent" => pick(&["description", "subagent_type"]),
        "todowrite" => input
            .get("todos")
            .and_then(Json::as_array)
            .map(|t| format!("{} todos", t.len())),
        _ => None,
    };
    // Claude Code's and OpenCode's names for the main argument, else the input as JSON.
    by_tool
        .or_else(|| {
            pick(&[
                "command",
                "file_path",
                "filePath",
                "path",
                "url",
                "pattern",
                "query",
                "description",
                "prompt",
            ])
        })
        .or_else(|| input.as_str().map(one_line))
        .unwrap_or_else(|| clipped(input, 160))
}

fn call_of(p: &Json, joins: &Joins, keys: &[Option<&str>]) -> Call {
    let known = joins.find(keys).cloned().unwrap_or_default();
    Call {
        tool: text(p, "tool").map_or(known.tool, str::to_string),
        subject: match subject(text(p, "tool").unwrap_or(""), p.get("input")) {
            s if s.is_empty() => known.subject,
            s => s,
        },
    }
}

fn labelled(call: &Call) -> Line {
    let label = if call.tool.is_empty() {
        "tool"
    } else {
        &call.tool
    };
    Line::new(label, Tone::Tool).then(call.subject.clone(), Tone::Plain)
}

/// `execution.tool_use`: the call, and dstream's decision on it when it made one.
pub fn tool_use(e: &Event, joins: &mut Joins) -> Line {
    let p = &e.payload;
    let call = call_of(p, joins, &[]);
    joins.remember(&[text(p, "tool_use_id"), Some(&e.id)], &call);
    let line = labelled(&call);
    let decision = e.metadata.as_ref().and_then(|m| m.get("decision"));
    let by = decision
        .and_then(|d| text(d, "decided_by"))
        .map(who)
        .unwrap_or_else(|| "policy".into());
    let reason = decision
        .and_then(|d| text(d, "reason"))
        .map(|r| format!(": {}", first_line(r)))
        .unwrap_or_default();
    match decision.and_then(|d| text(d, "action")) {
        Some("deny") => line.then(format!("  ✗ denied by {by}{reason}"), Tone::Bad),
        Some("ask") => line.then("  ⏸ waiting for a decision", Tone::Ask),
        _ => line.then("  …", Tone::Quiet),
    }
}

/// `execution.tool_result`: the call again, then `→ ok 19 ms`, `→ exit 2: …`, `→ denied`.
pub fn tool_result(e: &Event, joins: &Joins) -> Line {
    let p = &e.payload;
    let call = call_of(
        p,
        joins,
        &[text(p, "tool_use_id"), e.causation_id.as_deref()],
    );
    let call = Call {
        subject: if call.subject.is_empty() {
            text(p, "title").map(one_line).unwrap_or_default()
        } else {
            call.subject
        },
        ..call
    };
    let took = number(p, "duration_ms")
        .map(|ms| format!(" {}", duration(ms)))
        .unwrap_or_default();
    let line = labelled(&call);
    if p.get("ok").and_then(Json::as_bool) == Some(true) {
        return line.then(format!("  → ok{took}"), Tone::Good);
    }
    if p.get("ok").is_none() {
        let phase = text(p, "phase").unwrap_or("done");
        return line.then(format!("  → {phase}{took}"), Tone::Quiet);
    }
    let error = text(p, "error")
        .or_else(|| text(p, "output"))
        .or_else(|| p.get("output").and_then(|o| text(o, "stderr")))
        .unwrap_or("");
    // Claude Code puts the exit status on the error's first line.
    let (exit, error) = match (number(p, "exit"), error.split_once('\n')) {
        (Some(code), _) => (Some(code), error),
        (None, Some((head, rest))) if head.starts_with("Exit code ") => {
            (head["Exit code ".len()..].trim().parse().ok(), rest)
        }
        _ => (None, error),
    };
    let msg = first_line(error);
    let sep = if msg.is_empty() { "" } else { ": " };
    let outcome = if p.get("interrupted").and_then(Json::as_bool) == Some(true) {
        "interrupted".to_string()
    } else if let Some(code) = exit {
        format!("exit {code}")
    } else if msg.contains("rejected permission") || msg.contains("denied") {
        "denied".to_string()
    } else {
        "failed".to_string()
    };
    line.then(format!("  → {outcome}{sep}{msg}"), Tone::Bad)
}

/// `execution.tool_state`: a call's progress (OpenCode).
pub fn tool_state(e: &Event, joins: &Joins) -> Line {
    let p = &e.payload;
    let call = call_of(
        p,
        joins,
        &[text(p, "tool_use_id"), e.causation_id.as_deref()],
    );
    let took = number(p, "duration_ms")
        .map(|ms| format!(" {}", duration(ms)))
        .unwrap_or_default();
    let phase = text(p, "phase").unwrap_or("state");
    labelled(&call).then(format!("  · {phase}{took}"), Tone::Quiet)
}

/// The agent's own permission prompts: asked, answered, refused.
pub fn permission(e: &Event, joins: &Joins) -> Line {
    let p = &e.payload;
    let mut call = call_of(
        p,
        joins,
        &[text(p, "tool_use_id"), e.causation_id.as_deref()],
    );
    if call.tool.is_empty() {
        call.tool = text(p, "permission").unwrap_or("").to_string();
    }
    if call.subject.is_empty() {
        call.subject = p
            .get("metadata")
            .and_then(|m| text(m, "command"))
            .or_else(|| {
                p.get("patterns")
                    .and_then(|v| v.get(0))
                    .and_then(Json::as_str)
            })
            .map(one_line)
            .unwrap_or_default();
    }
    let described = format!("{} {}", call.tool, call.subject).trim().to_string();
    match e.event_type.as_str() {
        "execution.permission_requested" => Line::new("⏸ ask", Tone::Ask)
            .then(described, Tone::Plain)
            .then(" — the agent asks for permission", Tone::Quiet),
        "execution.permission_denied" => {
            let why = text(p, "reason").map(|r| format!(": {}", first_line(r)));
            labelled(&call).then(format!("  ✗ denied{}", why.unwrap_or_default()), Tone::Bad)
        }
        _ => {
            // `permission_replied` (OpenCode: once, always, reject) and the telemetry's
            // `execution.permission` (accept, reject, with where it came from).
            let answer = text(p, "reply")
                .or_else(|| text(p, "decision"))
                .unwrap_or("?");
            let from = text(p, "source")
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            let good = !matches!(answer, "reject" | "deny" | "denied" | "rejected");
            let (mark, tone) = if good {
                ("✓", Tone::Good)
            } else {
                ("✗", Tone::Bad)
            };
            labelled(&call).then(format!("  {mark} {answer}{from}"), tone)
        }
    }
}

/// `checkpoint.*`: dstream holding a call for a person, and what was decided by whom.
pub fn checkpoint(e: &Event, joins: &mut Joins) -> Line {
    let p = &e.payload;
    let id = text(p, "checkpoint_id");
    let call = call_of(p, joins, &[id, e.causation_id.as_deref()]);
    let call = Call {
        subject: if call.subject.is_empty() {
            text(p, "summary").map(one_line).unwrap_or_default()
        } else {
            call.subject
        },
        ..call
    };
    let short_id = id.map(|i| format!(" (checkpoint {i})")).unwrap_or_default();
    let by = who(text(p, "decided_by").unwrap_or("someone"));
    let why = text(p, "reason")
        .or_else(|| text(p, "note"))
        .map(|r| format!(": {}", first_line(r)))
        .unwrap_or_default();
    match e.event_type.as_str() {
        "checkpoint.requested" => {
            joins.remember(&[id], &call);
            Line::new("⏸ ask", Tone::Ask)
                .then(
                    format!("{} {}", call.tool, call.subject).trim().to_string(),
                    Tone::Plain,
                )
                .then(format!(" — waiting{short_id}"), Tone::Ask)
        }
        "checkpoint.approved" => {
            let verb = if p.get("auto").is_some() {
                "allowed"
            } else {
                "approved"
            };
            labelled(&call).then(format!("  ✓ {verb} by {by}{why}"), Tone::Good)
        }
        "checkpoint.rejected" => {
            labelled(&call).then(format!("  ✗ denied by {by}{why}"), Tone::Bad)
        }
        "checkpoint.expired" => {
            let then = text(p, "decision").unwrap_or("the default");
            labelled(&call).then(format!("  ⌛ no one decided in time: {then}"), Tone::Bad)
        }
        "checkpoint.delivered" => Line::new("⏸ ask", Tone::Quiet).then(
            format!(
                "{} handed to {}{short_id}",
                text(p, "decision").unwrap_or("decision"),
                text(p, "delivered_to").unwrap_or("the agent")
            ),
            Tone::Quiet,
        ),
        "checkpoint.bypassed" => {
            let would = text(p, "would_have")
                .map(|a| {
                    let rule = text(p, "rule").unwrap_or("a rule");
                    format!(" (rule {rule} would have said {a})")
                })
                .unwrap_or_default();
            let reason = text(p, "reason").unwrap_or("no decision");
            labelled(&call).then(format!("  ! ran undecided: {reason}{would}"), Tone::Bad)
        }
        other => Line::new(other, Tone::Quiet).then(clipped(p, 200), Tone::Quiet),
    }
}
