//! Whole messages: an assistant message (its content as chunks when it was not streamed), a
//! user message's text and tool results, and a turn's result.

use serde_json::Value as Json;

use super::call::{Call, Opts};
use super::state::Session;
use super::value::{Tbl, copy, is_tool_block, lit, table, text};

pub(super) fn assistant(
    cx: &mut Call,
    mut s: Option<&mut Session>,
    msg: Tbl,
) -> Result<(), String> {
    let mid = msg.str("id");
    let content = Tbl::of(msg.get("content")).items();
    let blocks = content
        .iter()
        .map(|b| {
            let b = Tbl::of(Some(b));
            Json::Object(table([
                ("type", copy(b.get("type"))),
                ("id", copy(b.get("id"))),
                ("name", copy(b.get("name"))),
            ]))
        })
        .collect();
    let streamed = match (s.as_deref(), mid) {
        (Some(s), Some(mid)) => s.streamed.contains(mid),
        _ => false,
    };
    let payload = table([
        ("role", lit("assistant")),
        ("message_id", text(mid)),
        ("model", copy(msg.get("model"))),
        ("stop_reason", copy(msg.get("stop_reason"))),
        ("usage", copy(msg.get("usage"))),
        ("blocks", Some(Json::Array(blocks))),
        ("streamed", Some(Json::Bool(streamed))),
    ]);
    cx.out("message.completed", payload, Opts::default())?;
    if streamed {
        return Ok(());
    }
    // Not streamed (no stream events for it, e.g. without includePartialMessages): its
    // content as the chunks streaming would have given.
    for b in content {
        let b = Tbl::of(Some(b));
        match b.str("type") {
            Some("text") => {
                let c = table([
                    ("type", lit("text-delta")),
                    ("textDelta", copy(b.get("text"))),
                ]);
                cx.chunk(c, Opts::default())?;
            }
            Some("thinking") => {
                let c = table([
                    ("type", lit("reasoning")),
                    ("textDelta", copy(b.get("thinking"))),
                ]);
                cx.chunk(c, Opts::default())?;
            }
            t if is_tool_block(t) => {
                let (id, name) = (b.str("id"), b.str("name"));
                cx.tool_call(s.as_deref_mut(), id, name, copy(b.get("input")), None, None)?;
            }
            _ => {}
        }
    }
    Ok(())
}

pub(super) fn user(cx: &mut Call, mut s: Option<&mut Session>, msg: Tbl) -> Result<(), String> {
    let content = msg.get("content");
    if let Some(Json::String(t)) = content {
        let o = Opts {
            by_user: true,
            ..Opts::default()
        };
        return cx.out("user.input", table([("text", lit(t))]), o);
    }
    let mut texts: Vec<&str> = Vec::new();
    let mut emitted = false;
    for b in Tbl::of(content).items() {
        let b = Tbl::of(Some(b));
        match b.str("type") {
            Some("tool_result") => {
                let id = b.str("tool_use_id");
                let is_error = b.get("is_error") == Some(&Json::Bool(true));
                let cause = match (s.as_deref(), id) {
                    (Some(s), Some(id)) => s.calls.get(id).cloned(),
                    _ => None,
                };
                let c = table([
                    ("type", lit("tool-result")),
                    ("toolCallId", text(id)),
                    ("result", copy(b.get("content"))),
                    ("isError", is_error.then_some(Json::Bool(true))),
                ]);
                let o = Opts {
                    causation_id: cause,
                    ..Opts::default()
                };
                cx.chunk(c, o)?;
                emitted = true;
                if let (Some(s), Some(id)) = (s.as_deref_mut(), id)
                    && let Some(child) = s.children.get(id)
                {
                    let payload = table([
                        ("child_session_id", lit(child)),
                        ("tool_use_id", lit(id)),
                        ("is_error", Some(Json::Bool(is_error))),
                    ]);
                    cx.out("agent.completed", payload, Opts::default())?;
                    s.children.remove(id);
                }
            }
            Some("text") => texts.extend(b.str("text")),
            _ => {}
        }
    }
    if !texts.is_empty() {
        let o = Opts {
            by_user: true,
            ..Opts::default()
        };
        cx.out("user.input", table([("text", lit(&texts.join("\n")))]), o)?;
        emitted = true;
    }
    if !emitted {
        cx.unmapped("user message without text or tool results")?;
    }
    Ok(())
}

fn finish_reason(stop_reason: &str) -> Option<&'static str> {
    Some(match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "max_tokens" => "length",
        "tool_use" => "tool-calls",
        "refusal" => "content-filter",
        "pause_turn" => "other",
        _ => return None,
    })
}

pub(super) fn result(cx: &mut Call, raw: Tbl) -> Result<(), String> {
    let subtype = raw.get("subtype");
    // A null subtype is not nil: a failure.
    let failed = raw.get("is_error") == Some(&Json::Bool(true))
        || subtype.is_some_and(|st| st.as_str() != Some("success"));
    let u = Tbl::of(raw.get("usage"));
    let finish = if failed {
        "error"
    } else {
        raw.str("stop_reason")
            .and_then(finish_reason)
            .unwrap_or("unknown")
    };
    let usage = table([
        ("inputTokens", copy(u.get("input_tokens"))),
        ("outputTokens", copy(u.get("output_tokens"))),
        (
            "cacheReadInputTokens",
            copy(u.get("cache_read_input_tokens")),
        ),
        (
            "cacheCreationInputTokens",
            copy(u.get("cache_creation_input_tokens")),
        ),
    ]);
    let c = table([
        ("type", lit("done")),
        ("finishReason", lit(finish)),
        ("cost", copy(raw.get("total_cost_usd"))),
        ("usage", Some(Json::Object(usage))),
        ("durationMs", copy(raw.get("duration_ms"))),
        ("numTurns", copy(raw.get("num_turns"))),
    ]);
    cx.chunk(c, Opts::default())?;
    let payload = table([
        ("total_cost_usd", copy(raw.get("total_cost_usd"))),
        ("input_tokens", copy(u.get("input_tokens"))),
        ("output_tokens", copy(u.get("output_tokens"))),
        (
            "cache_read_input_tokens",
            copy(u.get("cache_read_input_tokens")),
        ),
        (
            "cache_creation_input_tokens",
            copy(u.get("cache_creation_input_tokens")),
        ),
        ("model_usage", copy(raw.get("modelUsage"))),
        ("num_turns", copy(raw.get("num_turns"))),
        ("duration_ms", copy(raw.get("duration_ms"))),
    ]);
    cx.out("usage.session", payload, Opts::default())?;
    if failed {
        let payload = table([
            ("error", copy(subtype)),
            ("message", text(raw.str("result"))),
            ("errors", copy(raw.get("errors"))),
            ("stop_reason", copy(raw.get("stop_reason"))),
        ]);
        cx.out("session.error", payload, Opts::default())?;
    }
    Ok(())
}
