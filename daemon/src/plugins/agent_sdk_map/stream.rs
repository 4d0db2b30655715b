//! Stream events (`includePartialMessages`): text, thinking and tool-call chunks, and the
//! message and block boundaries.

use std::collections::HashMap;

use serde_json::{Map, Value as Json};

use super::call::{Call, Opts, StreamMeta};
use super::state::{Block, BlockKey, Session};
use super::value::{Tbl, copy, is_tool_block, lit, table, text, ulid};

pub(super) fn stream_event(cx: &mut Call, s: &mut Session, ev: Tbl) -> Result<(), String> {
    let et = ev.str("type");
    let index = ev.get("index");
    let mut meta = StreamMeta {
        event: et,
        message_id: cx.raw.get("api_message_id"),
        args_error: None,
    };
    match et {
        Some("content_block_delta") => {
            let d = Tbl::of(ev.get("delta"));
            let dt = d.get("type");
            let o = Opts {
                meta: Some(&meta),
                ..Opts::default()
            };
            match dt.and_then(Json::as_str) {
                Some("text_delta") => {
                    let c = table([
                        ("type", lit("text-delta")),
                        ("textDelta", copy(d.get("text"))),
                    ]);
                    cx.chunk(c, o)
                }
                Some("thinking_delta") => {
                    let c = table([
                        ("type", lit("reasoning")),
                        ("textDelta", copy(d.get("thinking"))),
                    ]);
                    cx.chunk(c, o)
                }
                Some("input_json_delta") => {
                    let mut b = BlockKey::of(index).and_then(|k| s.blocks.get_mut(&k));
                    if let (Some(json), Some(part)) = (
                        b.as_deref_mut().and_then(|b| b.json.as_mut()),
                        d.str("partial_json"),
                    ) {
                        json.push_str(part);
                    }
                    let event_id = ulid();
                    let c = table([
                        ("type", lit("tool-call-delta")),
                        ("toolCallId", text(b.as_ref().and_then(|b| b.id.as_deref()))),
                        ("argsTextDelta", copy(d.get("partial_json"))),
                    ]);
                    let o = Opts {
                        id: Some(event_id.clone()),
                        causation_id: b.as_ref().and_then(|b| b.chunk.clone()),
                        ..o
                    };
                    cx.chunk(c, o)?;
                    // Any block, a tool call or not, chains the deltas it is given.
                    if let Some(b) = b {
                        b.chunk = Some(event_id);
                    }
                    Ok(())
                }
                _ => {
                    let payload = table([
                        ("event", text(et)),
                        ("index", copy(index)),
                        ("delta_type", copy(dt)),
                    ]);
                    plain(cx, payload, &meta)
                }
            }
        }
        Some("content_block_start") => {
            let cb = Tbl::of(ev.get("content_block"));
            let bt = cb.str("type");
            if is_tool_block(bt) {
                let event_id = ulid();
                let (id, name) = (cb.str("id"), cb.str("name"));
                if let Some(k) = BlockKey::of(index) {
                    let b = Block {
                        block_type: bt.map(str::to_owned),
                        id: id.map(str::to_owned),
                        name: name.map(str::to_owned),
                        json: Some(String::new()),
                        chunk: Some(event_id.clone()),
                    };
                    s.blocks.insert(k, b);
                }
                let c = table([
                    ("type", lit("tool-call-streaming-start")),
                    ("toolCallId", text(id)),
                    ("toolName", text(name)),
                ]);
                let o = Opts {
                    id: Some(event_id),
                    meta: Some(&meta),
                    ..Opts::default()
                };
                return cx.chunk(c, o);
            }
            if let Some(k) = BlockKey::of(index) {
                let b = Block {
                    block_type: bt.map(str::to_owned),
                    ..Block::default()
                };
                s.blocks.insert(k, b);
            }
            let payload = table([
                ("event", text(et)),
                ("index", copy(index)),
                ("block_type", text(bt)),
            ]);
            plain(cx, payload, &meta)
        }
        Some("content_block_stop") => {
            let b = BlockKey::of(index).and_then(|k| s.blocks.remove(&k));
            match b {
                Some(Block {
                    json: Some(json),
                    id,
                    name,
                    chunk,
                    ..
                }) => {
                    let args = if json.is_empty() {
                        Json::Object(Map::new())
                    } else {
                        match serde_json::from_slice(json.as_bytes()) {
                            Ok(v) => v,
                            Err(e) => {
                                // What the Lua keeps of host.json_decode's error: its first line.
                                let e = e.to_string();
                                meta.args_error =
                                    Some(e.split('\n').next().unwrap_or_default().to_owned());
                                Json::String(json)
                            }
                        }
                    };
                    let (id, name) = (id.as_deref(), name.as_deref());
                    cx.tool_call(Some(s), id, name, Some(args), chunk, Some(&meta))
                }
                b => {
                    let payload = table([
                        ("event", text(et)),
                        ("index", copy(index)),
                        ("block_type", b.and_then(|b| b.block_type).map(Json::String)),
                    ]);
                    plain(cx, payload, &meta)
                }
            }
        }
        Some("message_start") => {
            let msg = Tbl::of(ev.get("message"));
            let mid = msg.str("id").or_else(|| cx.raw.str("api_message_id"));
            s.blocks = HashMap::new();
            s.message_id = mid.map(str::to_owned);
            if let Some(mid) = mid {
                s.streamed.insert(mid.to_owned());
            }
            let payload = table([
                ("message_id", text(mid)),
                ("model", copy(msg.get("model"))),
                ("usage", copy(msg.get("usage"))),
            ]);
            let o = Opts {
                meta: Some(&meta),
                ..Opts::default()
            };
            cx.out("execution.step_start", payload, o)
        }
        Some("message_delta") => {
            let d = Tbl::of(ev.get("delta"));
            let message_id = match &s.message_id {
                Some(m) => lit(m),
                None => copy(cx.raw.get("api_message_id")),
            };
            let payload = table([
                ("message_id", message_id),
                ("stop_reason", copy(d.get("stop_reason"))),
                ("usage", copy(ev.get("usage"))),
            ]);
            let o = Opts {
                meta: Some(&meta),
                ..Opts::default()
            };
            cx.out("execution.step_finish", payload, o)
        }
        Some("message_stop") => {
            s.blocks = HashMap::new();
            plain(cx, table([("event", text(et))]), &meta)
        }
        Some("error") => {
            let err = Tbl::of(ev.get("error"));
            let payload = table([
                ("error", copy(err.get("type"))),
                ("message", copy(err.get("message"))),
            ]);
            let o = Opts {
                meta: Some(&meta),
                ..Opts::default()
            };
            cx.out("session.error", payload, o)
        }
        _ => plain(cx, table([("event", text(et))]), &meta),
    }
}

/// A `message.stream_event`: a stream event with no event of its own in the taxonomy.
fn plain(cx: &mut Call, payload: Map<String, Json>, meta: &StreamMeta) -> Result<(), String> {
    let o = Opts {
        meta: Some(meta),
        ..Opts::default()
    };
    cx.out("message.stream_event", payload, o)
}
