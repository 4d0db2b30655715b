//! The built-in mapping plugins on payloads captured from the real agents
//! (`tests/fixtures/<source>/*.jsonl`, see its README), through the real daemon, as snapshots
//! (insta; `cargo insta review` or `INSTA_UPDATE=always` to accept a change on purpose).
//!
//! Each fixture run is ingested line by line; the events of every session it touched are
//! read back in order. Ids and timestamps differ per run, so ids are replaced by their
//! position (`#3` is the third stored event of the run) — which keeps what matters: a tool
//! result's `causation_id` must point at its request.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use dstream_tests::{Client, Daemon};
use serde_json::{Value, json};

fn fixtures(source: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(source);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

/// Ingests every line of `file` and returns the stored events of the sessions it touched,
/// session by session in order of first appearance, with stable stand-ins for ids.
fn run(c: &mut Client, source: &str, lines: &[Value]) -> Value {
    // (session, first LSN this run stored there): a session shared by several runs (the
    // source's fallback session, say) shows only this run's events.
    let mut sessions: Vec<(String, u64)> = Vec::new();
    let mut replies = Vec::new();
    for raw in lines {
        let r = c.ok("ingest", json!({"source": source, "event": raw}));
        for e in r["events"].as_array().unwrap() {
            let s = e["session_id"].as_str().unwrap().to_string();
            if !sessions.iter().any(|(x, _)| *x == s) {
                sessions.push((s, e["lsn"].as_u64().unwrap()));
            }
        }
        if let Some(d) = r.get("decision") {
            replies.push(d.clone());
        }
    }
    let mut ids: HashMap<String, String> = HashMap::new();
    let mut out = serde_json::Map::new();
    let mut all = Vec::new();
    for (s, from) in &sessions {
        let events = c.read_from(s, *from);
        for e in &events {
            let n = ids.len() + 1;
            ids.insert(e["id"].as_str().unwrap().to_string(), format!("#{n}"));
        }
        all.push((s.clone(), events));
    }
    for (s, events) in all {
        let events: Vec<Value> = events
            .into_iter()
            .map(|mut e| {
                let o = e.as_object_mut().unwrap();
                o.remove("timestamp");
                o.remove("session_id");
                // `raw` is the input line: asserted equal separately, not snapshotted again.
                o.remove("raw");
                for key in ["id", "causation_id"] {
                    if let Some(Value::String(id)) = o.get(key) {
                        let stable = ids.get(id).cloned().unwrap_or_else(|| "#?".into());
                        o.insert(key.into(), Value::String(stable));
                    }
                }
                e
            })
            .collect();
        out.insert(s, Value::Array(events));
    }
    if !replies.is_empty() {
        out.insert("decisions".into(), Value::Array(replies));
    }
    Value::Object(out)
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

fn snapshot_source(source: &str) {
    let d = Daemon::start();
    let mut c = d.client();
    for file in fixtures(source) {
        let lines = read_lines(&file);
        let stored = run(&mut c, source, &lines);
        // Every stored event keeps its source event in `raw`.
        let name = file.file_stem().unwrap().to_string_lossy().to_string();
        insta::assert_json_snapshot!(format!("{source}__{name}"), stored);
    }
    let list = c.ok("plugins.list", json!({}));
    let mapper = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["sources"].as_array().unwrap().contains(&json!(source)))
        .unwrap_or_else(|| panic!("no plugin maps {source}"));
    assert_eq!(mapper["errors"], 0, "{mapper}");
    assert_eq!(mapper["origin"], "builtin");
}

#[test]
fn claude_code_hook_events_map_to_the_taxonomy() {
    snapshot_source("claude-code");
}

#[test]
fn every_stored_event_keeps_the_hook_event_as_raw() {
    let d = Daemon::start();
    let mut c = d.client();
    for file in fixtures("claude-code") {
        for raw in read_lines(&file) {
            let r = c.ok("ingest", json!({"source": "claude-code", "event": raw}));
            let events = r["events"].as_array().unwrap();
            assert!(!events.is_empty(), "{raw}: nothing stored");
            for e in events {
                let stored = c.ok(
                    "read",
                    json!({"session_id": e["session_id"], "from_lsn": e["lsn"], "limit": 1}),
                );
                assert_eq!(stored["events"][0]["raw"], raw, "{}", file.display());
            }
        }
    }
}

#[test]
fn unknown_and_malformed_hook_events_are_kept() {
    let cases = [
        json!({"session_id": "cc-1", "hook_event_name": "SomeFutureHook", "x": 1}),
        json!({"session_id": "cc-1"}),
        json!({"session_id": "cc-1", "hook_event_name": 42, "tool_input": "not a table"}),
        json!({"session_id": "cc-1", "hook_event_name": "PreToolUse", "tool_input": [1, 2]}),
        json!({"session_id": "cc-1", "hook_event_name": "PostToolBatch", "tool_calls": "nope"}),
        json!({"session_id": "../escape", "hook_event_name": "Stop"}),
        json!([1, 2, 3]),
        json!("just a string"),
    ];
    malformed("claude-code", &cases, "claude-code__unknown_and_malformed");
}

/// Ingests each case and snapshots what was stored: every case must store at least one
/// event, each keeping the case as its `raw`.
fn malformed(source: &str, cases: &[Value], snapshot: &str) {
    let d = Daemon::start();
    let mut c = d.client();
    let mut stored = Vec::new();
    for raw in cases {
        let r = c.ok("ingest", json!({"source": source, "event": raw}));
        let events = r["events"].as_array().unwrap().clone();
        assert!(!events.is_empty(), "{raw}: nothing stored");
        for e in events {
            let got = c.ok(
                "read",
                json!({"session_id": e["session_id"], "from_lsn": e["lsn"], "limit": 1}),
            );
            let mut ev = got["events"][0].clone();
            assert_eq!(&ev["raw"], raw);
            let o = ev.as_object_mut().unwrap();
            for k in ["id", "timestamp", "raw", "lsn", "causation_id"] {
                o.remove(k);
            }
            if let Some(Value::String(err)) = o.get_mut("payload").and_then(|p| p.get_mut("error"))
            {
                // Lua's messages name the plugin file and line: keep only the gist.
                *err = err.split(": ").last().unwrap_or("").to_string();
            }
            stored.push(ev);
        }
    }
    let list = c.ok("plugins.list", json!({}));
    for p in list["plugins"].as_array().unwrap() {
        if p["sources"].as_array().unwrap().contains(&json!(source)) {
            assert_eq!(p["errors"], 0, "the mapping failed: {p}");
        }
    }
    insta::assert_json_snapshot!(snapshot.to_string(), stored);
}

#[test]
fn opencode_events_map_to_the_taxonomy() {
    snapshot_source("opencode");
}

#[test]
fn claude_agent_sdk_messages_map_to_stream_chunks() {
    snapshot_source("claude-agent-sdk");
}

#[test]
fn opencode_unknown_and_malformed_events_are_kept() {
    let cases = [
        // Unknown and server-level bus events, wrapped or not.
        json!({"id": "evt_1", "type": "lsp.client.diagnostics", "properties": {"path": "/x"}}),
        json!({"hook": "event", "event": {"type": "some.future.event", "properties": {"sessionID": "ses_m"}}}),
        json!({"type": "server.connected", "properties": {}}),
        // Known types with missing or wrongly typed fields.
        json!({"type": "session.created", "properties": {}}),
        json!({"type": "session.created", "properties": {"info": {"id": "../escape", "parentID": 7}}}),
        json!({"type": "session.idle", "properties": {"sessionID": ["ses_m"]}}),
        json!({"type": "message.updated", "properties": {"info": "nope"}}),
        json!({"type": "message.part.updated", "properties": {"part": {"sessionID": "ses_m", "type": "tool", "state": 3}}}),
        json!({"type": "message.part.updated", "properties": {"part": {"sessionID": "ses_m", "type": "hologram"}}}),
        json!({"type": "message.part.updated", "properties": {"part": {"sessionID": "ses_m", "type": "text", "id": "prt_x", "messageID": "msg_x", "text": 5, "time": {"start": 1, "end": 2}}}}),
        json!({"type": "message.part.delta", "properties": {"sessionID": "ses_m", "partID": "prt_y", "field": "text", "delta": {"not": "text"}}}),
        json!({"type": "permission.replied", "properties": {"sessionID": "ses_m", "requestID": "per_unknown"}}),
        json!({"type": "session.error", "properties": {"error": "a string"}}),
        json!({"type": 12, "properties": []}),
        // Tool hooks with missing parts; a hook this mapping does not know.
        json!({"hook": "tool.execute.before"}),
        json!({"hook": "tool.execute.after", "input": {"sessionID": "ses_m", "callID": 9}, "output": "text"}),
        json!({"hook": "chat.message", "input": {}, "output": {}}),
        json!({"hook": "event", "event": "not an object"}),
        json!({"something": "else"}),
        json!([1, 2, 3]),
        json!("just a string"),
        json!(null),
        // The session idles: the part left open above is stored with what it had.
        json!({"type": "session.idle", "properties": {"sessionID": "ses_m"}}),
    ];
    malformed("opencode", &cases, "opencode__unknown_and_malformed");
}

#[test]
fn claude_agent_sdk_unknown_and_malformed_messages_are_kept() {
    let sid = "sdk-m";
    let cases = [
        json!({"type": "tool_progress", "session_id": sid, "tool_use_id": "t1"}),
        json!({"type": "system", "subtype": "hook_response", "session_id": sid}),
        json!({"session_id": sid}),
        json!({"type": "stream_event", "session_id": sid}),
        json!({"type": "stream_event", "session_id": sid, "event": {"type": "content_block_delta", "index": 4, "delta": {"type": "input_json_delta", "partial_json": "{"}}}),
        json!({"type": "stream_event", "session_id": sid, "event": {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t2", "name": "Bash"}}}),
        json!({"type": "stream_event", "session_id": sid, "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": "}}}),
        // The accumulated JSON is cut short: args keep the text.
        json!({"type": "stream_event", "session_id": sid, "event": {"type": "content_block_stop", "index": 0}}),
        json!({"type": "stream_event", "session_id": sid, "event": {"type": "content_block_stop", "index": 9}}),
        json!({"type": "stream_event", "session_id": sid, "event": {"type": "content_block_delta", "index": 1, "delta": {"type": "signature_delta", "signature": "sig"}}}),
        json!({"type": "assistant", "session_id": sid, "message": "nope"}),
        json!({"type": "user", "session_id": sid, "message": {"content": [{"type": "image"}]}}),
        json!({"type": "user", "session_id": sid, "message": {"content": "hello"}}),
        json!({"type": "result", "session_id": sid, "subtype": "error_max_turns", "is_error": true, "usage": "x"}),
        json!({"type": "system", "subtype": "init", "session_id": "../escape"}),
        json!([1, 2, 3]),
        json!("just a string"),
    ];
    malformed(
        "claude-agent-sdk",
        &cases,
        "claude-agent-sdk__unknown_and_malformed",
    );
}

#[test]
fn claude_code_transcript_unknown_and_malformed_lines_are_kept() {
    // What `dstream import claude-code` sends is {transcript, entry[, error]}; a client may
    // send anything under that source.
    let t = |entry: Value| json!({"transcript": {"session_id": "s1", "line": 1, "import_id": "s1:L1"}, "entry": entry});
    let cases = [
        json!("just a string"),
        json!([1, 2, 3]),
        json!({}),
        json!({"transcript": "x", "entry": 5}),
        json!({"transcript": {"session_id": "../escape"}, "entry": {"type": "user"}}),
        t(json!({"type": "user", "message": "nope"})),
        t(
            json!({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": {}}, 7]}, "toolUseResult": "str"}),
        ),
        t(
            json!({"type": "assistant", "message": {"id": 5, "usage": "x", "content": "text, not blocks"}}),
        ),
        t(
            json!({"type": "assistant", "message": {"id": "m1", "usage": {"input_tokens": "many"}, "content": [{"type": "tool_use"}, 7, {"type": "image"}]}}),
        ),
        t(json!({"type": "system", "subtype": 5})),
        t(json!({"type": "a type with spaces!"})),
        json!({"transcript": {"session_id": "s1", "agent_id": "../x"}, "entry": {"type": "summary", "summary": 3}}),
        json!({"transcript": {"session_id": "s1", "agent_id": "a1"}, "entry": "garbage {", "error": "not JSON"}),
    ];
    malformed(
        "claude-code-transcript",
        &cases,
        "claude-code-transcript__unknown_and_malformed",
    );
}

#[test]
fn opencode_export_unknown_and_malformed_parts_are_kept() {
    // What `dstream import opencode` sends is {export, session} or {export, message[, part]};
    // a client may send anything under that source.
    let x = json!({"session_id": "ses_1", "root_id": "ses_0", "import_id": "ses_1:p"});
    let m = |message: Value, part: Value| json!({"export": x, "message": message, "part": part});
    let user = json!({"id": "msg_1", "role": "user"});
    let asst = json!({"id": "msg_2", "role": "assistant", "parentID": "msg_1", "modelID": 5});
    let cases = [
        json!("just a string"),
        json!([1, 2, 3]),
        json!({}),
        json!({"export": "x", "session": 5}),
        json!({"export": {"session_id": "../escape", "root_id": "../up"}, "session": {"parentID": "../p", "model": 3}}),
        json!({"export": x, "session": {"parentID": "ses_0", "title": {}, "model": {"id": 7}}}),
        json!({"export": x, "message": user}),
        m(user.clone(), json!("not an object")),
        m(user.clone(), json!({"type": "text", "text": ["no"]})),
        m(asst.clone(), json!({"type": "tool", "state": "running"})),
        m(
            asst.clone(),
            json!({"type": "tool", "callID": 9, "state": {"status": "error", "error": "boom", "time": {"start": "a", "end": 2}}}),
        ),
        m(
            asst.clone(),
            json!({"type": "step-finish", "tokens": "many", "cost": "free"}),
        ),
        m(
            asst.clone(),
            json!({"type": "step-finish", "tokens": {"input": 1, "cache": 5}, "cost": 0.5}),
        ),
        m(asst.clone(), json!({"type": "a type with spaces!"})),
        m(
            asst.clone(),
            json!({"type": "patch", "hash": 1, "files": ["a"]}),
        ),
        m(json!("message text"), json!({"type": "text"})),
    ];
    malformed(
        "opencode-export",
        &cases,
        "opencode-export__unknown_and_malformed",
    );
}

/// The final text of every text/reasoning part OpenCode reported (its update with
/// `time.end`), by part id.
fn final_part_texts(lines: &[Value]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for line in lines {
        let e = line.get("event").unwrap_or(line);
        if e["type"] != "message.part.updated" {
            continue;
        }
        let part = &e["properties"]["part"];
        if (part["type"] == "text" || part["type"] == "reasoning") && !part["time"]["end"].is_null()
        {
            out.insert(
                part["id"].as_str().unwrap().to_string(),
                part["text"].as_str().unwrap().to_string(),
            );
        }
    }
    out
}

/// Ingests the lines (as the dstream OpenCode plugin sends them: bus events unwrapped) and
/// returns the stored events of every session, with how many each line stored.
fn ingest_all(c: &mut Client, lines: &[Value]) -> (Vec<Value>, Vec<usize>) {
    let mut sessions: Vec<(String, u64)> = Vec::new();
    let mut counts = Vec::new();
    for line in lines {
        let event = if line["hook"] == "event" {
            &line["event"]
        } else {
            line
        };
        let r = c.ok("ingest", json!({"source": "opencode", "event": event}));
        let events = r["events"].as_array().unwrap();
        counts.push(events.len());
        for e in events {
            let s = e["session_id"].as_str().unwrap().to_string();
            if !sessions.iter().any(|(x, _)| *x == s) {
                sessions.push((s, e["lsn"].as_u64().unwrap()));
            }
        }
    }
    let mut stored = Vec::new();
    for (s, from) in sessions {
        stored.extend(c.read_from(&s, from));
    }
    (stored, counts)
}

fn chunks_of<'a>(stored: &'a [Value], part: &str) -> Vec<&'a Value> {
    stored
        .iter()
        .filter(|e| e["type"] == "message.chunk" && e["payload"]["part_id"] == part)
        .collect()
}

#[test]
fn opencode_text_parts_are_stored_once_with_their_final_text() {
    let d = Daemon::start();
    let mut c = d.client();
    let mut parts = 0;
    for file in fixtures("opencode") {
        let lines = read_lines(&file);
        let finals = final_part_texts(&lines);
        let (stored, counts) = ingest_all(&mut c, &lines);
        for (part, text) in &finals {
            let chunks = chunks_of(&stored, part);
            let user = stored
                .iter()
                .filter(|e| e["type"] == "user.input" && e["payload"]["part_id"] == part.as_str())
                .count();
            if user == 0 {
                parts += 1;
                assert_eq!(
                    chunks.len(),
                    1,
                    "{}: part {part}: {chunks:?}",
                    file.display()
                );
                assert_eq!(chunks[0]["payload"]["text"], text.as_str());
                assert_eq!(chunks[0]["payload"]["final"], true);
            }
        }
        // Only folded events (deltas, a part's updates before its last, a tool's progress)
        // store nothing.
        for (line, n) in lines.iter().zip(counts) {
            if n > 0 {
                continue;
            }
            let e = line.get("event").unwrap_or(line);
            let part = &e["properties"]["part"];
            let folded = e["type"] == "message.part.delta"
                || (e["type"] == "message.part.updated"
                    && ((part["type"] == "text" && part["time"]["end"].is_null())
                        || (part["type"] == "tool" && part["state"]["status"] == "running")));
            assert!(folded, "{}: nothing stored for {line}", file.display());
        }
    }
    assert!(parts > 0, "no streamed text part in the fixtures");

    // A part streamed in many deltas that never reports its end: stored at idle, complete,
    // once, with the part's last event as raw.
    let sid = "ses_stream";
    let part = |text: &str| {
        json!({"type": "message.part.updated", "properties": {"sessionID": sid, "part": {
            "id": "prt_1", "messageID": "msg_a", "sessionID": sid, "type": "text",
            "text": text, "time": {"start": 1}}}})
    };
    let delta = |d: &str| {
        json!({"type": "message.part.delta", "properties": {"sessionID": sid,
            "messageID": "msg_a", "partID": "prt_1", "field": "text", "delta": d}})
    };
    let mut lines = vec![
        json!({"type": "message.updated", "properties": {"sessionID": sid, "info": {
            "id": "msg_u", "role": "user", "sessionID": sid}}}),
        json!({"type": "message.updated", "properties": {"sessionID": sid, "info": {
            "id": "msg_a", "parentID": "msg_u", "role": "assistant", "sessionID": sid}}}),
        part(""),
    ];
    let words: Vec<String> = (0..300).map(|i| format!("w{i} ")).collect();
    for w in &words[..150] {
        lines.push(delta(w));
    }
    // An older OpenCode resends the whole part with each delta.
    lines.push(part(&words[..150].concat()));
    for w in &words[150..] {
        lines.push(delta(w));
    }
    let last = lines.last().unwrap().clone();
    lines.push(json!({"type": "session.idle", "properties": {"sessionID": sid}}));
    let (stored, counts) = ingest_all(&mut c, &lines);
    assert!(
        counts[3..lines.len() - 1].iter().all(|&n| n == 0),
        "{counts:?}"
    );
    let chunks = chunks_of(&stored, "prt_1");
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    let chunk = chunks[0];
    assert_eq!(chunk["payload"]["text"], words.concat());
    assert_eq!(chunk["payload"]["coalesced"], 302);
    assert_eq!(chunk["correlation_id"], "msg_u");
    assert_eq!(chunk["metadata"]["flushed_by"], "session.idle");
    assert_eq!(chunk["raw"], last);
    let types: Vec<&str> = stored.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "message.updated",
            "message.updated",
            "message.chunk",
            "lifecycle.session.idle"
        ]
    );

    // The same part updated again after it was stored: only the new text is added.
    let (stored, _) = ingest_all(
        &mut c,
        &[
            delta("tail"),
            json!({"type": "session.idle", "properties": {"sessionID": sid}}),
        ],
    );
    let chunks = chunks_of(&stored, "prt_1");
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    assert_eq!(chunks[0]["payload"]["text"], "tail");
}

#[test]
fn opencode_coalesce_text_false_stores_every_delta() {
    let d = Daemon::start_with("[plugins.lua.opencode]\ncoalesce_text = false\n");
    let mut c = d.client();
    let mut total = 0;
    for file in fixtures("opencode") {
        let lines = read_lines(&file);
        let (stored, counts) = ingest_all(&mut c, &lines);
        let mut deltas = Vec::new();
        for (line, n) in lines.iter().zip(&counts) {
            let e = line.get("event").unwrap_or(line);
            if e["type"] == "message.part.delta" {
                assert_eq!(*n, 1, "{line}");
                deltas.push(e["properties"]["delta"].clone());
            }
            let part = &e["properties"]["part"];
            let tool_progress = part["type"] == "tool" && part["state"]["status"] == "running";
            // Tool progress is still folded: that is coalesce_tool_progress.
            if !tool_progress {
                assert!(*n >= 1, "{}: nothing stored for {line}", file.display());
            }
        }
        total += deltas.len();
        let mut stored_deltas: Vec<Value> = stored
            .iter()
            .filter(|e| e["type"] == "message.chunk" && !e["payload"]["delta"].is_null())
            .map(|e| e["payload"]["delta"].clone())
            .collect();
        // Read back session by session: compare as sets of texts.
        let key = |v: &Value| v.to_string();
        stored_deltas.sort_by_key(key);
        deltas.sort_by_key(key);
        assert_eq!(stored_deltas, deltas, "{}", file.display());
        // The part's final update is stored too, with the whole text.
        for (part, text) in final_part_texts(&lines) {
            let finals: Vec<_> = chunks_of(&stored, &part)
                .into_iter()
                .filter(|e| e["payload"]["final"] == true)
                .collect();
            if !finals.is_empty() {
                assert_eq!(finals.len(), 1);
                assert_eq!(finals[0]["payload"]["text"], text.as_str());
            }
        }
    }
    assert!(total > 0, "no delta in the fixtures");
}

#[test]
fn opencode_coalesce_tool_progress_false_stores_every_running_update() {
    let d = Daemon::start_with("[plugins.lua.opencode]\ncoalesce_tool_progress = false\n");
    let mut c = d.client();
    let mut running = 0;
    for file in fixtures("opencode") {
        let lines = read_lines(&file);
        let (stored, counts) = ingest_all(&mut c, &lines);
        for (line, n) in lines.iter().zip(&counts) {
            let part = &line.get("event").unwrap_or(line)["properties"]["part"];
            if part["type"] == "tool" && part["state"]["status"] == "running" {
                running += 1;
                assert_eq!(*n, 1, "{line}");
            }
        }
        let stored_running = stored
            .iter()
            .filter(|e| e["type"] == "execution.tool_use" && e["payload"]["phase"] == "running")
            .count();
        let raw_running = lines
            .iter()
            .filter(|l| {
                let part = &l.get("event").unwrap_or(l)["properties"]["part"];
                part["type"] == "tool" && part["state"]["status"] == "running"
            })
            .count();
        assert_eq!(stored_running, raw_running, "{}", file.display());
    }
    assert!(running > 0, "no running tool update in the fixtures");
}

#[test]
fn claude_agent_sdk_unstreamed_and_subagent_messages() {
    let d = Daemon::start();
    let mut c = d.client();
    let sid = "sdk-sub";
    let lines = [
        // The parent's Task call, then the subagent's messages, which are not streamed.
        json!({"type": "assistant", "session_id": sid, "parent_tool_use_id": null, "uuid": "u1",
            "message": {"id": "msg_1", "content": [
                {"type": "tool_use", "id": "toolu_task", "name": "Task", "input": {"prompt": "p"}}]}}),
        json!({"type": "assistant", "session_id": sid, "parent_tool_use_id": "toolu_task", "uuid": "u2",
            "message": {"id": "msg_2", "content": [
                {"type": "thinking", "thinking": "hm"},
                {"type": "text", "text": "sub says hi"},
                {"type": "tool_use", "id": "toolu_bash", "name": "Bash", "input": {"command": "ls"}}]}}),
        json!({"type": "user", "session_id": sid, "parent_tool_use_id": "toolu_task", "uuid": "u3",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_bash", "content": "a b", "is_error": true}]}}),
        json!({"type": "user", "session_id": sid, "parent_tool_use_id": null, "uuid": "u4",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_task", "content": [{"type": "text", "text": "done"}]}]}}),
    ];
    let stored = run(&mut c, "claude-agent-sdk", &lines);
    let child = format!("{sid}.agent-toolu_task");
    let summary = |s: &str| -> Vec<Value> {
        stored[s]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                json!([
                    e["type"],
                    e["payload"],
                    e.get("causation_id"),
                    e["stream_id"]
                ])
            })
            .collect()
    };
    let parent = summary(sid);
    let sub = summary(&child);
    let types = |v: &[Value]| v.iter().map(|e| e[0].clone()).collect::<Vec<_>>();
    assert_eq!(
        types(&parent),
        [
            "message.completed",
            "message.chunk",
            "agent.spawned",
            "message.chunk",
            "agent.completed"
        ],
        "{parent:#?}"
    );
    assert_eq!(
        parent[1][1],
        json!({"type": "tool-call", "toolCallId": "toolu_task", "toolName": "Task", "args": {"prompt": "p"}})
    );
    assert_eq!(parent[2][1]["child_session_id"], child.as_str());
    assert_eq!(parent[3][1]["type"], "tool-result");
    assert_eq!(parent[3][2], "#2", "the result points at its call");
    assert_eq!(
        types(&sub),
        [
            "message.completed",
            "message.chunk",
            "message.chunk",
            "message.chunk",
            "message.chunk"
        ],
        "{sub:#?}"
    );
    assert_eq!(sub[1][1], json!({"type": "reasoning", "textDelta": "hm"}));
    assert_eq!(
        sub[2][1],
        json!({"type": "text-delta", "textDelta": "sub says hi"})
    );
    assert_eq!(sub[3][1]["type"], "tool-call");
    assert_eq!(
        sub[4][1],
        json!({"type": "tool-result", "toolCallId": "toolu_bash", "result": "a b", "isError": true})
    );
    for e in &sub {
        assert_eq!(e[3], sid, "a subagent's events are in the parent's lineage");
    }
}

/// Results whose requests the pipeline never saw (appended directly, as an import or an SDK
/// does) are joined from the log's end, without the search index; each look reads only what
/// was stored since the last, and still finds a request stored in between.
#[test]
fn results_join_requests_read_from_the_log_end_one_look_after_another() {
    let d = Daemon::start_with("[search]\nenabled = false\n");
    let mut c = d.client();
    let session = "join-tail";
    let request = |t: &str| {
        format!(
            "{{\"type\":\"execution.tool_use\",\"payload\":{{\"tool\":\"Bash\",\"tool_use_id\":\"{t}\",\"input\":{{\"command\":\"ls\"}}}}}}\n"
        )
    };
    let result = |c: &mut Client, t: &str| -> Value {
        let mut post = dstream_tests::claude_pre_tool_use(session, t, "ls");
        post["hook_event_name"] = json!("PostToolUse");
        post["tool_response"] = json!({"stdout": "a b", "stderr": "", "interrupted": false});
        c.ok(
            "ingest",
            json!({"source": "claude-code", "session_id": session, "event": post}),
        );
        let events = c.read_all(session);
        let last = events.last().unwrap().clone();
        assert_eq!(last["type"], "execution.tool_result", "{last}");
        last
    };
    let id_of = |c: &mut Client, t: &str| -> String {
        c.read_all(session)
            .iter()
            .find(|e| e["type"] == "execution.tool_use" && e["payload"]["tool_use_id"] == t)
            .and_then(|e| e["id"].as_str().map(str::to_string))
            .unwrap()
    };
    d.append_lines(session, &(request("tu_a") + &request("tu_c")));
    let (a, c_id) = (id_of(&mut c, "tu_a"), id_of(&mut c, "tu_c"));
    assert_eq!(result(&mut c, "tu_a")["causation_id"], a.as_str());
    // Stored after that look: the next one reads it.
    d.append_lines(session, &request("tu_b"));
    let b = id_of(&mut c, "tu_b");
    assert_eq!(result(&mut c, "tu_b")["causation_id"], b.as_str());
    // Read by the first look: remembered.
    assert_eq!(result(&mut c, "tu_c")["causation_id"], c_id.as_str());
    // A result whose request was never stored names none.
    assert!(result(&mut c, "tu_never").get("causation_id").is_none());
}
