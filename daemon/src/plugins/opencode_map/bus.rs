//! The bus events of sessions and messages, and the parts that are neither text nor tools.

use serde_json::Value as Json;

use super::call::{Cx, Extra, Out};
use super::state::{Kind, Msg, Session};
use super::value::{Payload, Table, or};

/// Parts kept as they are: the event type, and the fields of the part its payload carries.
const SIMPLE_PARTS: &[(&str, &str, &[&str])] = &[
    ("step-start", "execution.step_start", &["snapshot"]),
    ("patch", "files.patched", &["hash", "files"]),
    ("compaction", "lifecycle.session.compacting", &["auto"]),
    ("agent", "message.agent", &["name"]),
    (
        "subtask",
        "agent.handoff",
        &["agent", "description", "prompt", "command"],
    ),
    ("snapshot", "files.snapshot", &["snapshot"]),
    ("retry", "session.retry", &["attempt", "error"]),
];

/// The name and message of an error object.
fn error_fields(err: Table<'_>) -> (Option<&str>, Option<&str>) {
    let message = err.table("data").str("message").or(err.str("message"));
    (err.str("name"), message)
}

fn turn_of<'a>(s: &'a Option<&mut Session>) -> Option<&'a str> {
    s.as_deref().and_then(|s| s.turn.as_deref())
}

impl Session {
    /// The session went idle (`session.idle`, or a status of type idle): its open part is
    /// stored and the turn's state dropped.
    fn went_idle(&mut self, out: &mut Out, sid: &str, why: &'static str) {
        self.flush(out, sid, why, None);
        let payload = Payload::default().with("status", "idle");
        let turn = self.turn.as_deref();
        if self.idle {
            out.emit(
                Some(sid),
                turn,
                "lifecycle.session.status",
                payload,
                Extra::default(),
            );
        } else {
            out.emit(
                Some(sid),
                turn,
                "lifecycle.session.idle",
                payload,
                Extra::default(),
            );
            self.idle = true;
        }
        self.end_turn();
    }

    /// A part that is neither text nor a tool call: a step's end (with its usage), a file,
    /// one of [`SIMPLE_PARTS`], or one this mapping does not know.
    fn other_part(&mut self, out: &mut Out, sid: &str, part: Table, kind: Option<&str>) {
        let mid = part.str("messageID");
        let (role, turn) = self.msg_role(mid, part);
        if kind == Some("step-finish") {
            self.flush(out, sid, "step finish", mid);
            let payload = Payload::default()
                .with("reason", part.get("reason"))
                .with("cost", part.get("cost"))
                .with("tokens", part.get("tokens"))
                .with("snapshot", part.get("snapshot"))
                .with("message_id", mid)
                .with("part_id", part.get("id"));
            let x = Extra::turn(turn.clone());
            out.emit(
                Some(sid),
                self.turn.as_deref(),
                "execution.step_finish",
                payload,
                x,
            );
            // One model call: what `dstream usage` sums (the same fields as the other
            // agents').
            let tokens = part.table("tokens");
            let cache = tokens.table("cache");
            let m = mid.and_then(|mid| self.msgs.get(mid));
            let payload = Payload::default()
                .with("model", m.and_then(|m| m.model.clone()))
                .with("provider", m.and_then(|m| m.provider.clone()))
                .with("input_tokens", tokens.num("input"))
                .with("output_tokens", tokens.num("output"))
                .with("reasoning_tokens", tokens.num("reasoning"))
                .with("cache_read_input_tokens", cache.num("read"))
                .with("cache_creation_input_tokens", cache.num("write"))
                .with("cost_usd", part.num("cost"))
                .with("message_id", mid)
                .with("part_id", part.get("id"));
            let x = Extra::turn(turn);
            out.emit(Some(sid), self.turn.as_deref(), "usage.request", payload, x);
            return;
        }
        self.flush(out, sid, "next part", None);
        let session_turn = self.turn.as_deref();
        if kind == Some("file") {
            // Inline content stays in raw.
            let url = part.str("url").filter(|u| !u.starts_with("data:"));
            let payload = Payload::default()
                .with("role", role)
                .with("mime", part.get("mime"))
                .with("filename", part.get("filename"))
                .with("url", url)
                .with("message_id", mid)
                .with("part_id", part.get("id"));
            out.emit(
                Some(sid),
                session_turn,
                "message.file",
                payload,
                Extra::turn(turn),
            );
            return;
        }
        let Some((_, event_type, fields)) = SIMPLE_PARTS.iter().find(|(k, ..)| Some(*k) == kind)
        else {
            let hint = "part type not known to this mapping";
            out.unmapped(Some(sid), session_turn, Some("message.part.updated"), hint);
            return;
        };
        let mut payload = Payload::default()
            .with("message_id", mid)
            .with("part_id", part.get("id"));
        for &k in *fields {
            payload.set(k, part.get(k));
        }
        out.emit(
            Some(sid),
            session_turn,
            event_type,
            payload,
            Extra::turn(turn),
        );
    }
}

impl<'r> Cx<'_, 'r> {
    /// An event of session `sid` in its current turn; the session is remembered from now on,
    /// as the Lua file's `state(sid)` does.
    fn in_turn(&mut self, sid: Option<&str>, event_type: &str, payload: Payload, x: Extra) {
        let s = self.sessions.state_of(sid);
        let turn = turn_of(&s);
        self.out.emit(sid, turn, event_type, payload, x);
    }

    pub(super) fn session_created(&mut self, p: Table<'r>) {
        let info = p.table("info");
        let sid = info.id("id").or(p.id("sessionID"));
        let parent = info.id("parentID");
        if let (Some(sid), Some(parent)) = (sid, parent) {
            let root = self
                .out
                .lineage
                .root_of(parent)
                .unwrap_or(parent)
                .to_owned();
            self.out.lineage.set_root(sid, root);
        }
        let s = self.sessions.state_of(sid);
        let payload = Payload::default()
            .with("title", info.get("title"))
            .with("slug", info.get("slug"))
            .with("directory", info.get("directory"))
            .with("project_id", info.get("projectID"))
            .with("version", info.get("version"))
            .with("parent_id", parent)
            .with("agent", info.get("agent"));
        let turn = turn_of(&s);
        self.out.emit(
            sid,
            turn,
            "lifecycle.session.created",
            payload,
            Extra::default(),
        );
        let (Some(sid), Some(parent)) = (sid, parent) else {
            return;
        };
        let ps = self.sessions.state(parent);
        // The task call that made it, when there is exactly one candidate.
        let mut candidates = ps.calls.iter_mut().filter(|(_, c)| {
            c.tool.as_deref() == Some("task") && c.child.is_none() && c.result_id.is_none()
        });
        let call_id = match (candidates.next(), candidates.next()) {
            (Some((id, c)), None) => {
                c.child = Some(sid.to_owned());
                Some(id.clone())
            }
            _ => None,
        };
        let payload = Payload::default()
            .with("child_session_id", sid)
            .with("agent", info.get("agent"))
            .with("title", info.get("title"))
            .with("tool_use_id", call_id);
        let turn = ps.turn.as_deref();
        self.out.emit(
            Some(parent),
            turn,
            "agent.spawned",
            payload,
            Extra::default(),
        );
    }

    pub(super) fn session_updated(&mut self, p: Table<'r>) {
        let info = p.table("info");
        let sid = info.id("id").or(p.id("sessionID"));
        let s = self.sessions.state_of(sid);
        let model = info.table("model");
        let payload = Payload::default()
            .with("title", info.get("title"))
            .with("agent", info.get("agent"))
            .with("parent_id", info.get("parentID"))
            .with("model", or(model.get("id"), model.get("modelID")))
            .with("provider", model.get("providerID"))
            .with("cost", info.get("cost"))
            .with("tokens", info.get("tokens"))
            .with("summary", info.get("summary"))
            .with("archived", info.table("time").get("archived"));
        let turn = turn_of(&s);
        self.out.emit(
            sid,
            turn,
            "lifecycle.session.updated",
            payload,
            Extra::default(),
        );
    }

    pub(super) fn session_deleted(&mut self, p: Table<'r>) {
        let info = p.table("info");
        let sid = info.id("id").or(p.id("sessionID"));
        let mut s = self.sessions.state_of(sid);
        if let (Some(s), Some(sid)) = (s.as_deref_mut(), sid) {
            s.flush(&mut self.out, sid, "session.deleted", None);
        }
        let payload = Payload::default()
            .with("reason", "deleted")
            .with("title", info.get("title"));
        let turn = turn_of(&s);
        self.out.emit(
            sid,
            turn,
            "lifecycle.session.ended",
            payload,
            Extra::default(),
        );
        if let Some(sid) = sid {
            self.sessions.forget(sid);
        }
    }

    pub(super) fn session_status(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        let status = p.table("status");
        let kind = status.str("type");
        let mut s = self.sessions.state_of(sid);
        if let (Some(s), Some(sid)) = (s.as_deref_mut(), sid) {
            if kind == Some("idle") {
                s.went_idle(&mut self.out, sid, "session.status");
                return;
            }
            s.idle = false;
        }
        let turn = turn_of(&s);
        if kind == Some("retry") {
            let payload = Payload::default()
                .with("attempt", status.get("attempt"))
                .with("message", status.get("message"))
                .with("next", status.get("next"));
            self.out
                .emit(sid, turn, "session.retry", payload, Extra::default());
        } else {
            let payload = Payload::default().with("status", kind);
            self.out.emit(
                sid,
                turn,
                "lifecycle.session.status",
                payload,
                Extra::default(),
            );
        }
    }

    pub(super) fn session_idle(&mut self, p: Table<'r>) {
        match p.id("sessionID") {
            Some(sid) => {
                let s = self.sessions.state(sid);
                s.went_idle(&mut self.out, sid, "session.idle");
            }
            None => {
                let payload = Payload::default().with("status", "idle");
                self.out.emit(
                    None,
                    None,
                    "lifecycle.session.idle",
                    payload,
                    Extra::default(),
                );
            }
        }
    }

    pub(super) fn session_compacted(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        let mut s = self.sessions.state_of(sid);
        if let (Some(s), Some(sid)) = (s.as_deref_mut(), sid) {
            s.flush(&mut self.out, sid, "session.compacted", None);
        }
        let turn = turn_of(&s);
        let payload = Payload::default();
        self.out.emit(
            sid,
            turn,
            "lifecycle.session.compacted",
            payload,
            Extra::default(),
        );
    }

    pub(super) fn session_error(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        let mut s = self.sessions.state_of(sid);
        if let (Some(s), Some(sid)) = (s.as_deref_mut(), sid) {
            s.flush(&mut self.out, sid, "session.error", None);
        }
        // An abort also marks the assistant message (message.updated with `error`):
        // agent.aborted is stored from there, once.
        let (name, message) = error_fields(p.table("error"));
        let payload = Payload::default()
            .with("error", name)
            .with("message", message);
        let turn = turn_of(&s);
        self.out
            .emit(sid, turn, "session.error", payload, Extra::default());
    }

    pub(super) fn session_diff(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        // Lua's ipairs: the items of an array, none of an object.
        let files: Vec<Json> = match p.get("diff") {
            Some(Json::Array(items)) => items
                .iter()
                .map(|d| {
                    let d = Table::of(Some(d));
                    Payload::default()
                        .with("file", d.get("file"))
                        .with("additions", d.get("additions"))
                        .with("deletions", d.get("deletions"))
                        .with("status", d.get("status"))
                        .into_json()
                })
                .collect(),
            _ => Vec::new(),
        };
        let payload = Payload::default().with("files", Json::Array(files));
        self.in_turn(sid, "files.diff", payload, Extra::default());
    }

    pub(super) fn message_updated(&mut self, p: Table<'r>) {
        let info = p.table("info");
        let sid = info.id("sessionID").or(p.id("sessionID"));
        let mut s = self.sessions.state_of(sid);
        let mid = info.str("id");
        let role = info.str("role");
        let known = s
            .as_deref()
            .zip(mid)
            .is_some_and(|(s, mid)| s.msgs.contains_key(mid));
        if let Some(s) = s.as_deref_mut() {
            s.idle = false;
        }
        let model_info = info.table("model");
        let model = or(info.get("modelID"), model_info.get("modelID"));
        let provider = or(info.get("providerID"), model_info.get("providerID"));
        let mut payload = Payload::default()
            .with("role", role)
            .with("message_id", mid)
            .with("parent_id", info.get("parentID"))
            .with("agent", info.get("agent"))
            .with("model", model)
            .with("provider", provider);
        if role == Some("user") {
            if let (Some(s), Some(mid)) = (s.as_deref_mut(), mid) {
                s.turn = Some(mid.to_owned());
                if !known {
                    s.msgs.insert(mid.to_owned(), Msg::new("user", Some(mid)));
                }
            }
            let turn = turn_of(&s);
            self.out
                .emit(sid, turn, "message.updated", payload, Extra::default());
            return;
        }
        let turn = info
            .str("parentID")
            .map(str::to_owned)
            .or_else(|| turn_of(&s).map(str::to_owned));
        let mut m = None;
        if let (Some(s), Some(sid), Some(mid)) = (s.as_deref_mut(), sid, mid) {
            if !known {
                s.flush(&mut self.out, sid, "next message", None);
                let msg = Msg::new(role.unwrap_or("assistant"), turn.as_deref());
                s.msgs.insert(mid.to_owned(), msg);
            }
            if let Some(m) = s.msgs.get_mut(mid) {
                m.model = payload.get("model").cloned();
                m.provider = payload.get("provider").cloned();
            }
            m = s.msgs.get(mid).map(|m| m.completed);
        }
        payload.set("finish", info.get("finish"));
        payload.set("cost", info.get("cost"));
        payload.set("tokens", info.get("tokens"));
        let (error, error_message) = error_fields(info.table("error"));
        payload.set("error", error);
        payload.set("error_message", error_message);
        let done = info.table("time").get("completed").is_some();
        if !done || m == Some(true) {
            let x = Extra::turn(turn);
            let session_turn = turn_of(&s);
            self.out
                .emit(sid, session_turn, "message.updated", payload, x);
            return;
        }
        if let (Some(s), Some(sid)) = (s.as_deref_mut(), sid) {
            s.flush(&mut self.out, sid, "message completed", mid);
            if let Some(m) = mid.and_then(|mid| s.msgs.get_mut(mid)) {
                m.completed = true;
            }
        }
        let session_turn = turn_of(&s);
        let aborted = error == Some("MessageAbortedError");
        let x = Extra::turn(turn.clone());
        self.out
            .emit(sid, session_turn, "message.completed", payload, x);
        if aborted {
            let payload = Payload::default()
                .with("reason", "aborted")
                .with("message_id", mid);
            self.out.emit(
                sid,
                session_turn,
                "agent.aborted",
                payload,
                Extra::turn(turn),
            );
        }
    }

    pub(super) fn message_removed(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        let payload = Payload::default().with("message_id", p.get("messageID"));
        self.in_turn(sid, "message.removed", payload, Extra::default());
    }

    pub(super) fn part_removed(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        let payload = Payload::default()
            .with("message_id", p.get("messageID"))
            .with("part_id", p.get("partID"));
        self.in_turn(sid, "message.part_removed", payload, Extra::default());
    }

    pub(super) fn part_updated(&mut self, p: Table<'r>, raw: &'r Json) -> Result<(), String> {
        let part = p.table("part");
        let Some(sid) = part.id("sessionID").or(p.id("sessionID")) else {
            let t = Some("message.part.updated");
            let hint = "part without a valid session id";
            self.out.unmapped(None, None, t, hint);
            return Ok(());
        };
        let config = self.config;
        let s = self.sessions.state(sid);
        s.idle = false;
        let out = &mut self.out;
        match part.get("type").and_then(Json::as_str) {
            Some("text") => s.text_part(out, config, sid, part, Kind::Text, p, raw),
            Some("reasoning") => s.text_part(out, config, sid, part, Kind::Reasoning, p, raw),
            Some("tool") => return s.tool_part(out, config, sid, part),
            kind => s.other_part(out, sid, part, kind),
        }
        Ok(())
    }

    pub(super) fn part_delta(&mut self, p: Table<'r>, raw: &'r Json) {
        let Some(sid) = p.id("sessionID") else {
            let t = Some("message.part.delta");
            let hint = "delta without a valid session id";
            self.out.unmapped(None, None, t, hint);
            return;
        };
        let s = self.sessions.state(sid);
        s.idle = false;
        s.part_delta(&mut self.out, self.config, sid, p, raw);
    }

    pub(super) fn file_edited(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        let payload = Payload::default()
            .with("file", p.get("file"))
            .with("change", "edited");
        self.in_turn(sid, "files.changed", payload, Extra::default());
    }

    pub(super) fn file_watched(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        let payload = Payload::default()
            .with("file", p.get("file"))
            .with("change", p.get("event"))
            .with("watcher", true);
        self.in_turn(sid, "files.changed", payload, Extra::default());
    }

    pub(super) fn todo_updated(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        let payload = Payload::default().with("todos", p.get("todos"));
        self.in_turn(sid, "todo.updated", payload, Extra::default());
    }

    pub(super) fn command_executed(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        let payload = Payload::default()
            .with("name", p.get("name"))
            .with("arguments", p.get("arguments"))
            .with("message_id", p.get("messageID"));
        let x = Extra {
            actor: Some("user"),
            ..Extra::default()
        };
        self.in_turn(sid, "user.command", payload, x);
    }

    /// Sent by the dstream OpenCode plugin itself when its queue overflowed.
    pub(super) fn plugin_dropped(&mut self, p: Table<'r>) {
        let payload = Payload::default()
            .with("count", p.get("count"))
            .with("by", "opencode plugin");
        let sid = p.id("sessionID");
        self.out
            .emit(sid, None, "log.dropped", payload, Extra::default());
    }
}
