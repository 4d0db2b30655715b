//! The OpenCode mapping written in Rust ([`crate::plugins::opencode_map`]) held to its
//! reference, `plugins/opencode.lua`, run in a Lua state as the built-in is. The mapping keeps
//! state, so sequences are compared: the same inputs, in order, through a fresh Lua state and
//! a fresh Rust mapping, call by call.

use serde_json::{Value as Json, json};

use super::twin::{Ids, lua_builtin, lua_map};
use crate::plugins::opencode_map;

/// What a comparison covered.
#[derive(Default, Debug)]
pub(super) struct Tally {
    sequences: usize,
    calls: usize,
    events: usize,
    /// Calls that failed, in both.
    failed: usize,
}

impl Tally {
    /// Runs `seq` through both with `config`; asserts the same events (ids compared by order
    /// of first appearance) or both failing, call by call.
    pub(super) fn compare(&mut self, name: &str, config: &Json, seq: &[Json]) {
        let lua = lua_builtin("opencode.lua", config);
        let mut rust = opencode_map::new(config);
        let (mut lua_ids, mut rust_ids) = (Ids::default(), Ids::default());
        for (i, raw) in seq.iter().enumerate() {
            match (lua_map(&lua, raw, "opencode"), rust.map(raw, "opencode")) {
                (Ok(l), Ok(r)) => {
                    let (l, r) = (lua_ids.normalize(l), rust_ids.normalize(r));
                    if l != r {
                        panic!(
                            "{name} {config}, call {i}: {raw}\nLua:  {}\nRust: {}",
                            Json::Array(l),
                            Json::Array(r)
                        );
                    }
                    self.events += l.len();
                }
                (Err(l), Err(r)) => {
                    assert!(l.contains(&r), "{name}, call {i}: {l} / {r}");
                    self.failed += 1;
                }
                (l, r) => panic!("{name} {config}, call {i}: {raw}\nLua: {l:?}\nRust: {r:?}"),
            }
        }
        self.sequences += 1;
        self.calls += seq.len();
    }
}

fn fixtures() -> Vec<(String, Vec<Json>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/opencode");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let seq = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            (path.display().to_string(), seq)
        })
        .collect()
}

fn configs() -> [Json; 2] {
    [
        json!(null),
        json!({"coalesce_text": false, "coalesce_tool_progress": false}),
    ]
}

#[test]
fn maps_the_captured_sessions_as_the_lua_file_does() {
    let mut tally = Tally::default();
    for config in configs() {
        let mut all = Vec::new();
        for (name, seq) in fixtures() {
            tally.compare(&name, &config, &seq);
            all.extend(seq);
        }
        tally.compare("all fixtures", &config, &all);
        // The same, as bare bus events (without the hook's wrapper).
        let bare: Vec<Json> = all
            .iter()
            .map(|raw| match raw.get("hook") {
                Some(h) if h == "event" => raw["event"].clone(),
                _ => raw.clone(),
            })
            .collect();
        tally.compare("all fixtures, bare", &config, &bare);
    }
    eprintln!("{tally:?}");
}

/// Builds input sequences: bus events (wrapped as the `event` hook sends them, or bare) and
/// tool hook calls.
#[derive(Default)]
pub(super) struct Seq {
    pub(super) events: Vec<Json>,
}

impl Seq {
    /// A bus event as the `event` hook sends it.
    pub(super) fn bus(&mut self, t: &str, props: Json) -> &mut Seq {
        let id = format!("evt_{}", self.events.len());
        let e = json!({"id": id, "type": t, "properties": props});
        self.events.push(json!({"hook": "event", "event": e}));
        self
    }

    /// A bus event without the wrapper.
    pub(super) fn bare(&mut self, t: &str, props: Json) -> &mut Seq {
        let id = format!("evt_{}", self.events.len());
        self.events
            .push(json!({"id": id, "type": t, "properties": props}));
        self
    }

    pub(super) fn hook(&mut self, hook: &str, input: Json, output: Json) -> &mut Seq {
        self.events
            .push(json!({"hook": hook, "input": input, "output": output}));
        self
    }

    pub(super) fn raw(&mut self, raw: Json) -> &mut Seq {
        self.events.push(raw);
        self
    }

    pub(super) fn part(&mut self, part: Json) -> &mut Seq {
        let sid = part["sessionID"].clone();
        self.bus(
            "message.part.updated",
            json!({"sessionID": sid, "part": part, "time": 1}),
        )
    }

    pub(super) fn delta(&mut self, sid: &str, mid: &str, pid: &str, delta: &str) -> &mut Seq {
        self.bus(
            "message.part.delta",
            json!({"sessionID": sid, "messageID": mid, "partID": pid, "field": "text", "delta": delta}),
        )
    }

    pub(super) fn text(
        &mut self,
        sid: &str,
        mid: &str,
        pid: &str,
        text: &str,
        end: bool,
    ) -> &mut Seq {
        let time = if end {
            json!({"start": 1, "end": 2})
        } else {
            json!({"start": 1})
        };
        self.part(json!({"type": "text", "text": text, "messageID": mid, "sessionID": sid, "id": pid, "time": time}))
    }

    pub(super) fn tool(&mut self, sid: &str, call: &str, tool: &str, state: Json) -> &mut Seq {
        self.part(json!({"type": "tool", "callID": call, "tool": tool, "state": state, "messageID": "msg_a1", "sessionID": sid, "id": format!("prt_{call}")}))
    }

    pub(super) fn before(&mut self, sid: &str, call: &str, tool: &str, args: Json) -> &mut Seq {
        self.hook(
            "tool.execute.before",
            json!({"sessionID": sid, "callID": call, "tool": tool}),
            json!({"args": args}),
        )
    }

    pub(super) fn after(&mut self, sid: &str, call: &str, tool: &str, output: Json) -> &mut Seq {
        self.hook(
            "tool.execute.after",
            json!({"sessionID": sid, "callID": call, "tool": tool, "args": {"subagent_type": "general"}}),
            output,
        )
    }

    pub(super) fn user(&mut self, sid: &str, mid: &str) -> &mut Seq {
        self.bus(
            "message.updated",
            json!({"sessionID": sid, "info": {"id": mid, "role": "user", "sessionID": sid, "agent": "build", "model": {"providerID": "p", "modelID": "m"}}}),
        )
    }

    pub(super) fn assistant(
        &mut self,
        sid: &str,
        mid: &str,
        parent: &str,
        extra: Json,
    ) -> &mut Seq {
        let mut info = json!({"id": mid, "role": "assistant", "sessionID": sid, "parentID": parent, "modelID": "m", "providerID": "p", "time": {"created": 1}});
        for (k, v) in extra.as_object().unwrap() {
            info[k] = v.clone();
        }
        self.bus("message.updated", json!({"sessionID": sid, "info": info}))
    }
}

/// One session's work reaching every branch of the Lua file: each bus handler, each part
/// type and tool state, the hooks, permissions, subagents, text coalescing.
fn scenario(s: &str) -> Vec<Json> {
    let mut q = Seq::default();
    let (a1, u1) = ("msg_a1", "msg_u1");
    q.bus("session.created", json!({"sessionID": s, "info": {"id": s, "slug": "kind-orchid", "directory": "/tmp/p", "projectID": "global", "version": "1.18.33", "title": "New session", "agent": "build"}}))
        .bus("session.updated", json!({"info": {"id": s, "title": "T", "agent": "build", "parentID": null, "model": {"id": "m", "providerID": "p"}, "cost": 0.5, "tokens": {"input": 1}, "summary": {"additions": 1}, "time": {"archived": 5}}}))
        .bus("session.updated", json!({"sessionID": s, "info": {"model": {"modelID": "m2"}}}))
        .bus("session.status", json!({"sessionID": s, "status": {"type": "busy"}}))
        .bus("session.status", json!({"sessionID": s, "status": {"type": "retry", "attempt": 2, "message": "rate limited", "next": 123}}))
        // A turn: the prompt, then the assistant's steps.
        .user(s, u1)
        .part(json!({"type": "text", "text": "hello", "messageID": u1, "sessionID": s, "id": "prt_u1", "synthetic": true}))
        .assistant(s, a1, u1, json!({}))
        .part(json!({"type": "step-start", "snapshot": "abc", "messageID": a1, "sessionID": s, "id": "prt_s1"}))
        .part(json!({"type": "reasoning", "text": "", "messageID": a1, "sessionID": s, "id": "prt_r1", "time": {"start": 1}}))
        .delta(s, a1, "prt_r1", "think")
        .delta(s, a1, "prt_r1", "ing")
        .part(json!({"type": "reasoning", "text": "thinking", "messageID": a1, "sessionID": s, "id": "prt_r1", "time": {"start": 1, "end": 2}}))
        .text(s, a1, "prt_t1", "", false)
        .delta(s, a1, "prt_t1", "Hel")
        .delta(s, a1, "prt_t1", "lo")
        .text(s, a1, "prt_t1", "Hello", true)
        // Stored: the same again, extended, changed.
        .text(s, a1, "prt_t1", "Hello", true)
        .text(s, a1, "prt_t1", "Hello world", true)
        .text(s, a1, "prt_t1", "Bye", true)
        .text(s, a1, "prt_t1", "Bye", false)
        .text(s, a1, "prt_t1", "Bye", true)
        // Reopened by deltas, on top of what was stored.
        .delta(s, a1, "prt_t1", " now")
        .bus("message.part.delta", json!({"sessionID": s, "messageID": a1, "partID": "prt_t1", "field": "metadata", "delta": "x"}))
        .bus("message.part.delta", json!({"sessionID": s, "messageID": a1, "partID": "prt_t1"}))
        .bus("message.part.delta", json!({"sessionID": s, "messageID": a1, "delta": "orphan"}))
        .bus("message.part.delta", json!({"sessionID": s, "messageID": "msg_zz", "partID": "prt_new", "delta": "new part"}))
        .bus("message.part.delta", json!({"sessionID": s, "messageID": a1, "partID": "prt_r1", "delta": " more"}))
        .part(json!({"type": "step-finish", "reason": "stop", "cost": 0.01, "tokens": {"input": 10, "output": 5, "reasoning": 1, "cache": {"read": 2, "write": 3}}, "snapshot": "def", "messageID": a1, "sessionID": s, "id": "prt_f1"}))
        // A step or message of another message leaves the open part open.
        .text(s, a1, "prt_t1b", "kept", false)
        .part(json!({"type": "step-finish", "messageID": "msg_other", "sessionID": s, "id": "prt_f0"}))
        .assistant(s, "msg_other", u1, json!({"time": {"completed": 1}}))
        .text(s, a1, "prt_t1b", "kept open", true)
        .part(json!({"type": "step-finish", "cost": "x", "tokens": {"input": 1.5, "cache": [1]}, "messageID": u1, "sessionID": s, "id": "prt_f2"}))
        .part(json!({"type": "step-finish", "sessionID": s}))
        .part(json!({"type": "text", "text": "no id", "messageID": a1, "sessionID": s, "time": {"start": 1}}))
        .part(json!({"type": "reasoning", "text": "no id", "messageID": a1, "sessionID": s, "time": {"start": 1, "end": null}}))
        // Parts of messages never announced.
        .part(json!({"type": "text", "text": "who?", "messageID": "msg_x", "sessionID": s, "id": "prt_x1", "time": {"start": 1}}))
        .part(json!({"type": "text", "text": "me", "messageID": "msg_y", "sessionID": s, "id": "prt_y1"}))
        .part(json!({"type": "text", "text": "me", "sessionID": s, "id": "prt_y2", "time": []}))
        // Tool calls.
        .tool(s, "call_1", "bash", json!({"status": "pending", "input": {}}))
        .tool(s, "call_1", "bash", json!({"status": "pending", "input": {}}))
        .before(s, "call_1", "bash", json!({"command": "ls"}))
        .bus("permission.asked", json!({"id": "per_1", "sessionID": s, "permission": "bash", "patterns": ["ls"], "always": ["ls *"], "metadata": {}, "tool": {"messageID": a1, "callID": "call_1"}}))
        .bus("permission.replied", json!({"sessionID": s, "requestID": "per_1", "reply": "once"}))
        .tool(s, "call_1", "bash", json!({"status": "running", "input": {"command": "ls"}, "title": "ls", "metadata": {"output": ""}, "time": {"start": 10}}))
        .tool(s, "call_1", "bash", json!({"status": "running", "input": {"command": "ls"}, "title": "ls", "metadata": {"output": "a\n"}, "time": {"start": 10}}))
        .tool(s, "call_1", "bash", json!({"status": "running", "input": {"command": "ls"}, "metadata": {"output": 5}, "time": {"start": 10}}))
        .tool(s, "call_1", "bash", json!({"status": "completed", "input": {"command": "ls"}, "output": "a\nb\n", "title": "ls", "metadata": {"exit": 0, "truncated": false, "output": "a\nb\n"}, "time": {"start": 10, "end": 25}}))
        .after(s, "call_1", "bash", json!({"title": "ls", "output": "a\nb\n", "metadata": {"exit": 0, "truncated": false}}))
        .tool(s, "call_1", "bash", json!({"status": "running", "input": {"command": "ls"}}))
        .tool(s, "call_1", "bash", json!({"status": "pending"}))
        // The hook's outcome first, then the part's.
        .before(s, "call_2", "bash", json!({"command": "false"}))
        .after(s, "call_2", "bash", json!({"title": "false", "output": "", "metadata": {"exit": 1}}))
        .tool(s, "call_2", "bash", json!({"status": "completed", "output": "", "metadata": {"exit": 1.0}, "time": {"start": 1, "end": 2.5}}))
        .tool(s, "call_3", "edit", json!({"status": "pending"}))
        .tool(s, "call_3", "edit", json!({"status": "running", "input": {"filePath": "a"}}))
        .tool(s, "call_3", "edit", json!({"status": "error", "error": "boom", "input": {"filePath": "a"}, "time": {"start": 1.5, "end": 3}}))
        .after(s, "call_3", "edit", json!({"output": "x", "metadata": {"exit": 0.0}}))
        .tool(s, "call_4", "bash", json!({"status": "weird"}))
        .tool(s, "call_4", "bash", json!(null))
        .part(json!({"type": "tool", "tool": "bash", "state": {"status": "pending"}, "sessionID": s}))
        .part(json!({"type": "tool", "tool": "bash", "state": {"status": "running", "metadata": {"sessionId": "ses_sub"}}, "sessionID": s}))
        .part(json!({"type": "tool", "state": {"status": "completed", "metadata": {"exit": -1}, "time": {"start": 9007199254740993_i64, "end": -9007199254740993_i64}}, "sessionID": s}))
        .part(json!({"type": "tool", "callID": 5, "state": {"status": "error", "time": {"start": 1, "end": 18446744073709551615_u64}}, "sessionID": s}))
        .tool(s, "call_5", "bash", json!({"status": "completed", "time": {"start": i64::MIN, "end": i64::MAX}}))
        // Other parts.
        .part(json!({"type": "patch", "hash": "h", "files": ["a.rs"], "messageID": a1, "sessionID": s, "id": "prt_p"}))
        .part(json!({"type": "compaction", "auto": true, "messageID": a1, "sessionID": s, "id": "prt_c"}))
        .part(json!({"type": "agent", "name": "explore", "messageID": a1, "sessionID": s, "id": "prt_ag"}))
        .part(json!({"type": "subtask", "agent": "explore", "description": "d", "prompt": "p", "command": "c", "messageID": a1, "sessionID": s, "id": "prt_st"}))
        .part(json!({"type": "snapshot", "snapshot": "s", "messageID": a1, "sessionID": s, "id": 7}))
        .part(json!({"type": "retry", "attempt": 1, "error": {"name": "APIError"}, "messageID": a1, "sessionID": s, "id": "prt_re"}))
        .part(json!({"type": "file", "mime": "text/plain", "filename": "a.txt", "url": "file:///a.txt", "messageID": u1, "sessionID": s, "id": "prt_fi"}))
        .part(json!({"type": "file", "mime": "image/png", "url": "data:image/png;base64,AAAA", "messageID": a1, "sessionID": s, "id": "prt_fd", "time": {}}))
        .part(json!({"type": "file", "url": "data", "sessionID": s}))
        .part(json!({"type": "file", "url": 5, "messageID": "msg_new", "sessionID": s}))
        .part(json!({"type": "mystery", "messageID": a1, "sessionID": s, "id": "prt_m"}))
        .part(json!({"type": 5, "sessionID": s}))
        .part(json!({"sessionID": s}))
        .bus("message.part.updated", json!({"part": "not a table", "sessionID": s}))
        .bus("message.part.updated", json!({"part": {"type": "text"}}))
        .bus("message.part.delta", json!({"partID": "prt_t1", "delta": "x"}))
        // A message completes with its part open; an aborted one; errors.
        .text(s, a1, "prt_t2", "open", false)
        .assistant(s, a1, u1, json!({"time": {"created": 1, "completed": 5}, "finish": "stop", "cost": 0.2, "tokens": {"input": 3}}))
        .assistant(s, a1, u1, json!({"time": {"created": 1, "completed": 5}}))
        .text(s, "msg_a2", "prt_t3", "open", false)
        .assistant(s, "msg_a2", u1, json!({"error": {"name": "MessageAbortedError", "data": {"message": "aborted"}}, "time": {"completed": null}}))
        .assistant(s, "msg_a3", "", json!({"parentID": 5, "role": "system", "error": {"name": "APIError", "message": "x"}, "modelID": null, "model": {"modelID": "mm", "providerID": "pp"}}))
        .assistant(s, "msg_a4", u1, json!({"role": null, "modelID": false, "providerID": false, "error": null}))
        .text(s, "msg_a3", "prt_t4", "system says", true)
        .bus("message.updated", json!({"sessionID": s, "info": {"role": "assistant", "time": {"completed": 1}}}))
        .bus("message.updated", json!({"info": {"id": "msg_q", "role": "user"}}))
        .bus("message.updated", json!({"info": {"id": "msg_q", "role": "assistant", "parentID": "msg_p", "time": {"completed": 2}, "error": {"name": "MessageAbortedError"}}}))
        .user(s, a1)
        .part(json!({"type": "text", "text": "as user", "messageID": a1, "sessionID": s, "id": "prt_t5", "time": {"start": 1}}))
        // The other session events.
        .bus("session.diff", json!({"sessionID": s, "diff": [{"file": "a", "additions": 1, "deletions": 2, "status": "modified", "before": "x"}, null, "x", {}, []]}))
        .bus("session.diff", json!({"sessionID": s, "diff": []}))
        .bus("session.diff", json!({"sessionID": s, "diff": {"1": {"file": "a"}}}))
        .bus("session.diff", json!({}))
        .bus("message.removed", json!({"sessionID": s, "messageID": a1}))
        .bus("message.part.removed", json!({"sessionID": s, "messageID": a1, "partID": "prt_t1"}))
        .bus("file.edited", json!({"sessionID": s, "file": "/tmp/p/a.rs"}))
        .bus("file.edited", json!({"file": "/tmp/p/a.rs"}))
        .bus("file.watcher.updated", json!({"file": "/tmp/p/a.rs", "event": "change"}))
        .bus("todo.updated", json!({"sessionID": s, "todos": [{"content": "x", "status": "pending"}]}))
        .bus("command.executed", json!({"sessionID": s, "name": "init", "arguments": "", "messageID": u1}))
        .bus("dstream.plugin.dropped", json!({"sessionID": s, "count": 3}))
        .bus("dstream.plugin.dropped", json!({"count": 3}))
        .bus("plugin.added", json!({}))
        .bus("lsp.client.diagnostics", json!({"sessionID": s}))
        .bus("tui.toast.show", json!({"sessionID": "../x"}))
        .bus("foo.bar", json!({"sessionID": s}))
        .bus("global", json!({}))
        .bus("", json!({}))
        .bus(".x", json!({}))
        .bare("nodot", json!({"sessionID": s}))
        .bare("session.status", json!({"sessionID": s, "status": {"type": "busy"}}))
        .text(s, a1, "prt_t6", "compact me", false)
        .bus("session.compacted", json!({"sessionID": s}))
        .bus("session.compacted", json!({}))
        .text(s, a1, "prt_t7", "err", false)
        .bus("session.error", json!({"sessionID": s, "error": {"name": "ProviderAuthError", "data": {"message": "bad key"}}}))
        .bus("session.error", json!({"error": {"name": "E", "message": "m", "data": {"message": 5}}}))
        .bus("session.error", json!({"sessionID": s, "error": "str"}))
        // Idle, twice; then busy and idle again.
        .text(s, a1, "prt_t8", "idle soon", false)
        .bus("session.status", json!({"sessionID": s, "status": {"type": "idle"}}))
        .bus("session.idle", json!({"sessionID": s}))
        .bus("session.status", json!({"sessionID": s, "status": {"type": "busy"}}))
        .delta(s, a1, "prt_t8", " late")
        .bus("session.idle", json!({"sessionID": s}))
        .bus("session.idle", json!({}))
        .bus("session.status", json!({"status": {"type": "idle"}}))
        .bus("session.status", json!({"sessionID": s, "status": "idle"}))
        .after(s, "call_1", "bash", json!({"output": "late"}))
        // Text that is not ASCII: offsets count bytes.
        .text(s, a1, "prt_nb", "héllo", true)
        .text(s, a1, "prt_nb", "héllo wörld ✓", true)
        .delta(s, a1, "prt_nb", "日本")
        .bus("session.idle", json!({"sessionID": s}))
        // A duration that is no JSON number fails the call in both, after what it changed
        // (the open part stored, the call noted); the next calls show the same state.
        .text(s, a1, "prt_inf", "open", false)
        .tool(s, "call_inf", "bash", json!({"status": "completed", "time": {"start": -1.7e308, "end": 1.7e308}}))
        .tool(s, "call_inf", "bash", json!({"status": "completed", "time": {"start": 1, "end": 2}}))
        .tool(s, "call_inf", "bash", json!({"status": "error", "time": {"start": 1.7e308, "end": -1.7e308}}))
        .tool(s, "call_inf", "bash", json!({"status": "error", "time": {"start": 1, "end": 2}}))
        .bus("session.idle", json!({"sessionID": s}));
    // Subagents: one candidate task call, then two.
    let (c1, c2, c3) = ("ses_child1", "ses_child2", "ses_child3");
    q.user(s, "msg_u2")
        .tool(s, "call_t1", "task", json!({"status": "pending"}))
        .before(s, "call_t1", "task", json!({"subagent_type": "explore", "prompt": "look"}))
        .bus("session.created", json!({"sessionID": c1, "info": {"id": c1, "parentID": s, "agent": "explore", "title": "look (@explore subagent)"}}))
        .user(c1, "msg_c1u")
        .before(c1, "call_c1", "read", json!({"filePath": "a"}))
        .bus("session.created", json!({"info": {"id": c2, "parentID": c1}}))
        .before(c2, "call_c2", "read", json!({}))
        .tool(s, "call_t1", "task", json!({"status": "running", "input": {"subagent_type": "explore"}, "metadata": {"sessionId": c1}}))
        .tool(s, "call_t1", "task", json!({"status": "completed", "output": "found it", "metadata": {"sessionId": c1}, "time": {"start": 1, "end": 9}}))
        .after(s, "call_t1", "task", json!({"output": "found it", "metadata": {"sessionId": c1}}))
        .tool(s, "call_t2", "task", json!({"status": "pending"}))
        .tool(s, "call_t3", "task", json!({"status": "pending"}))
        .bus("session.created", json!({"info": {"id": c3, "parentID": s}}))
        .tool(s, "call_t2", "task", json!({"status": "running", "input": {"subagent_type": "general"}, "metadata": {"sessionId": c3}}))
        .tool(s, "call_t2", "task", json!({"status": "error", "error": "subagent failed", "input": {"subagent_type": "general"}}))
        .after(s, "call_t3", "task", json!({"output": "done", "metadata": {"sessionId": "ses_child4"}}))
        .before(s, "call_t4", "task", json!({"subagent_type": "x"}))
        .bus("session.created", json!({"info": {"id": "ses_child5", "parentID": s}}))
        .after(s, "call_t4", "task", json!({"output": "done"}))
        .bus("session.created", json!({"info": {"id": s, "parentID": s}}))
        .bus("session.created", json!({"info": {"id": "ses_orphan", "parentID": "../up"}}))
        // Permissions, as OpenCode before 1.x sent them too.
        .bus("permission.updated", json!({"id": "per_2", "sessionID": s, "type": "edit", "pattern": "*.rs", "callID": "call_t1", "messageID": a1, "title": "Edit"}))
        .bus("permission.replied", json!({"sessionID": s, "permissionID": "per_2", "response": "always"}))
        .bus("permission.replied", json!({"sessionID": s, "requestID": "per_2", "reply": false, "response": "r"}))
        .bus("permission.asked", json!({"id": "per_3", "sessionID": s, "permission": null, "type": "edit", "patterns": false, "pattern": "p", "tool": {"callID": 5, "messageID": null}, "callID": "call_t2"}))
        .bus("permission.asked", json!({"id": 5, "permission": false}))
        .bus("permission.replied", json!({"sessionID": s, "requestID": "per_3", "permissionID": "per_x", "reply": null}))
        .bus("permission.replied", json!({"requestID": "per_3"}))
        // Hook calls without a session, or with odd values.
        .hook("tool.execute.before", json!({"callID": "call_n", "tool": "task"}), json!({"args": "x"}))
        .hook("tool.execute.after", json!({"callID": "call_n", "tool": "task"}), json!({"metadata": {"exit": 2}}))
        .hook("tool.execute.before", json!(null), json!(null))
        .hook("tool.execute.after", json!([1]), json!("x"))
        .hook("tool.execute.before", json!({"sessionID": s, "callID": "call_t9", "tool": "task"}), json!({"args": {"subagent_type": 5}}))
        .hook("tool.execute.before", json!({"sessionID": s, "callID": "call_t9", "tool": "task"}), json!({"args": {"subagent_type": "later"}}))
        // Deleted with a part open, then seen again.
        .text(s, a1, "prt_t9", "bye", false)
        .bus("session.deleted", json!({"info": {"id": s, "title": "gone"}}))
        .after(s, "call_t9", "task", json!({"output": "late"}))
        .bus("session.deleted", json!({"sessionID": s}))
        .bus("session.deleted", json!({}));
    // Inputs that are not events.
    for raw in [
        json!([1, 2]),
        json!([]),
        json!("session.idle"),
        json!(5),
        json!(1.5),
        json!(null),
        json!(true),
        json!({}),
        json!({"hook": null, "type": "session.idle", "properties": {"sessionID": s}}),
        json!({"hook": 5}),
        json!({"hook": "tool.execute.during"}),
        json!({"hook": "event"}),
        json!({"hook": "event", "event": "x"}),
        json!({"hook": "event", "event": [1]}),
        json!({"hook": "event", "event": {}}),
        json!({"hook": "event", "event": {"type": 5, "id": "evt_x"}}),
        json!({"hook": "event", "event": {"type": "session.idle", "properties": [1]}}),
        json!({"hook": "event", "event": {"type": "session.idle", "properties": "x", "id": 5}}),
        json!({"type": "session.idle", "properties": {"sessionID": s}, "event": {"type": "x"}}),
        json!({"type": 5}),
        json!({"hook": "tool.execute.before"}),
        json!({"hook": "tool.execute.after", "input": {"sessionID": s}}),
    ] {
        q.raw(raw);
    }
    q.events
}

#[test]
fn maps_every_branch_as_the_lua_file_does() {
    let mut tally = Tally::default();
    for config in configs() {
        tally.compare("scenario", &config, &scenario("ses_main"));
    }
    // Configs that switch nothing off, and one that switches one.
    for config in [
        json!({"coalesce_text": true, "coalesce_tool_progress": null}),
        json!([false]),
        json!("coalesce_text"),
        json!({"coalesce_text": false}),
        json!({"coalesce_tool_progress": false}),
    ] {
        tally.compare("scenario", &config, &scenario("ses_main"));
    }
    // The durations that are no JSON numbers.
    assert!(tally.failed >= 7 * 2, "{tally:?}");
    eprintln!("{tally:?}");
}

/// Values that are odd at any field: null, the wrong type, floats, integers beyond `i64`,
/// ids that are not safe (a path, hidden, too long, not ASCII), empty tables.
fn odd_values() -> Vec<Json> {
    vec![
        json!(null),
        json!(true),
        json!(false),
        json!(0),
        json!(-1),
        json!(1.5),
        json!(18446744073709551615_u64),
        json!(""),
        json!("../x"),
        json!(".hidden"),
        json!("x".repeat(129)),
        json!("y".repeat(128)),
        json!("ses_é"),
        json!([]),
        json!([1, null, {"n": 18446744073709551615_u64}]),
        json!({}),
        json!({"end": null, "start": 1.5, "type": "idle", "sessionId": "ses_odd"}),
    ]
}

/// Every path into `v` (object fields and array items, at any depth).
fn paths(v: &Json, at: &mut Vec<String>, all: &mut Vec<Vec<String>>) {
    let children: Vec<(String, &Json)> = match v {
        Json::Object(m) => m.iter().map(|(k, v)| (k.clone(), v)).collect(),
        Json::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        _ => return,
    };
    for (k, child) in children {
        at.push(k);
        all.push(at.clone());
        paths(child, at, all);
        at.pop();
    }
}

fn set_path(v: &mut Json, path: &[String], to: Json) {
    let mut at = v;
    for k in path {
        at = match at {
            Json::Object(m) => m.get_mut(k).unwrap(),
            Json::Array(a) => &mut a[k.parse::<usize>().unwrap()],
            _ => unreachable!(),
        };
    }
    *at = to;
}

/// Each event of `events`, preceded by its variants with one field replaced by an odd value.
fn with_odd_values(events: &[Json]) -> Vec<Json> {
    let odd = odd_values();
    let mut seq = Vec::new();
    for e in events {
        let mut all = Vec::new();
        paths(e, &mut Vec::new(), &mut all);
        for path in &all {
            for v in &odd {
                let mut variant = e.clone();
                set_path(&mut variant, path, v.clone());
                seq.push(variant);
            }
        }
        seq.push(e.clone());
    }
    seq
}

#[test]
fn maps_odd_values_at_every_field_as_the_lua_file_does() {
    let mut tally = Tally::default();
    let seq = with_odd_values(&scenario("ses_odd"));
    for config in configs() {
        tally.compare("odd values", &config, &seq);
    }
    // One event of each kind of the captured sessions.
    let mut seen = std::collections::HashSet::new();
    let mut captured = Vec::new();
    for (_, seq) in fixtures() {
        for raw in seq {
            let e = &raw["event"];
            let key = format!(
                "{}/{}/{}",
                e["type"], e["properties"]["part"]["type"], raw["hook"]
            );
            if seen.insert(key) {
                captured.push(raw);
            }
        }
    }
    tally.compare(
        "odd values, captured",
        &json!(null),
        &with_odd_values(&captured),
    );
    eprintln!("{tally:?}");
}
