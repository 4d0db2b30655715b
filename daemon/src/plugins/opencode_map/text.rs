//! Text and reasoning parts: a user's prompt is `user.input`; the assistant's streaming
//! (updates carrying the whole text so far, deltas carrying the next piece) is folded into
//! one `message.chunk` per part, stored when the part ends or something else comes first.
//! With `coalesce_text = false`, every source event is a chunk of its own.

use serde_json::Value as Json;

use super::call::{Config, Extra, Out};
use super::state::{Kind, OpenPart, Session};
use super::value::{Payload, Table, copy, is_table};

impl Session {
    /// The role and turn of the message `mid`. Of an unknown message (its message.updated
    /// was missed): OpenCode gives assistant text parts a `time`, user prompt parts none.
    pub(super) fn msg_role(&self, mid: Option<&str>, part: Table) -> (String, Option<String>) {
        if let Some(m) = mid.and_then(|mid| self.msgs.get(mid)) {
            return (m.role.clone(), m.turn.clone());
        }
        if is_table(part.get("time")) {
            ("assistant".into(), self.turn.clone())
        } else {
            ("user".into(), mid.map(str::to_owned))
        }
    }

    /// A `message.part.updated` of a text or reasoning part; `props` is the bus event's
    /// properties, `raw` the whole input.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn text_part(
        &mut self,
        out: &mut Out,
        config: Config,
        sid: &str,
        part: Table,
        kind: Kind,
        props: Table,
        raw: &Json,
    ) {
        let pid = part.str("id");
        let mid = part.str("messageID");
        let (role, turn) = self.msg_role(mid, part);
        let text = part.str("text");
        if role == "user" {
            let payload = Payload::default()
                .with("text", text)
                .with("message_id", mid)
                .with("part_id", pid)
                .with("synthetic", part.get("synthetic"));
            let x = Extra {
                actor: Some("user"),
                ..Extra::turn(turn)
            };
            out.emit(Some(sid), self.turn.as_deref(), "user.input", payload, x);
            return;
        }
        // A present `end`, even null, ends the part.
        let ended = part.table("time").get("end").is_some();
        if let Some(pid) = pid {
            match self.kinds.get_mut(pid) {
                Some(k) => *k = kind,
                None => {
                    self.kinds.insert(pid.to_owned(), kind);
                }
            }
        }
        let pid = match pid {
            Some(pid) if config.coalesce_text => pid,
            _ => {
                let payload = Payload::default()
                    .with("role", role)
                    .with("kind", kind.as_str())
                    .with("message_id", mid)
                    .with("part_id", pid)
                    .with("text", text)
                    .with("delta", props.str("delta"))
                    .with("final", ended);
                let turn_default = self.turn.as_deref();
                out.emit(
                    Some(sid),
                    turn_default,
                    "message.chunk",
                    payload,
                    Extra::turn(turn),
                );
                return;
            }
        };
        if self.open.as_ref().is_none_or(|p| p.id != pid) {
            self.flush(out, sid, "next part", None);
        }
        let stored = &self.flushed;
        let p = self
            .open
            .get_or_insert_with(|| OpenPart::new(pid, kind, mid, role, turn, stored.get(pid)));
        if let Some(text) = text {
            p.text.clear();
            p.text.push_str(text);
        }
        p.n += 1;
        if ended {
            if let Some(p) = self.open.take() {
                self.store_part(out, sid, p, None);
            }
        } else {
            // Folded into the part's chunk, stored when it ends.
            p.raw = Some(copy(raw));
        }
    }

    /// A `message.part.delta`: the next piece of a part's text (or of another field).
    pub(super) fn part_delta(
        &mut self,
        out: &mut Out,
        config: Config,
        sid: &str,
        props: Table,
        raw: &Json,
    ) {
        let pid = props.str("partID");
        let mid = props.str("messageID");
        let delta = props.str("delta");
        let field = props.str("field").unwrap_or("text");
        let open = pid.and_then(|pid| self.open.as_ref().filter(|p| p.id == pid));
        let kind = open
            .map(|p| p.kind)
            .or_else(|| pid.and_then(|pid| self.kinds.get(pid).copied()));
        let turn = open
            .and_then(|p| p.turn.clone())
            .or_else(|| mid.and_then(|mid| self.msgs.get(mid)?.turn.clone()))
            .or_else(|| self.turn.clone());
        let (Some(pid), Some(delta), true, "text") = (pid, delta, config.coalesce_text, field)
        else {
            let role = open.map_or("assistant", |p| p.role.as_str());
            let payload = Payload::default()
                .with("role", role)
                .with("kind", kind.map(Kind::as_str))
                .with("field", field)
                .with("message_id", mid)
                .with("part_id", pid)
                .with("delta", delta)
                .with("final", false);
            out.emit(
                Some(sid),
                self.turn.as_deref(),
                "message.chunk",
                payload,
                Extra::turn(turn),
            );
            return;
        };
        if open.is_none() {
            self.flush(out, sid, "next part", None);
        }
        let stored = &self.flushed;
        let p = self.open.get_or_insert_with(|| {
            let kind = kind.unwrap_or(Kind::Text);
            OpenPart::new(pid, kind, mid, "assistant".into(), turn, stored.get(pid))
        });
        p.text.push_str(delta);
        p.n += 1;
        p.raw = Some(copy(raw));
    }

    /// Stores the open part (of message `mid`, if given); `why` names the trigger.
    pub(super) fn flush(&mut self, out: &mut Out, sid: &str, why: &'static str, mid: Option<&str>) {
        let of_mid = |p: &mut OpenPart| mid.is_none() || p.message_id.as_deref() == mid;
        if let Some(p) = self.open.take_if(of_mid) {
            self.store_part(out, sid, p, Some(why));
        }
    }

    /// Stores one coalesced part: its whole text, or after a part already stored, only what
    /// was added (with its offset), or the whole text again if it changed. `flushed_by` is
    /// none when the part's own final event stores it.
    fn store_part(
        &mut self,
        out: &mut Out,
        sid: &str,
        p: OpenPart,
        flushed_by: Option<&'static str>,
    ) {
        let OpenPart {
            id,
            kind,
            message_id,
            role,
            turn,
            text,
            n,
            raw,
        } = p;
        let mut payload = Payload::default()
            .with("role", role)
            .with("kind", kind.as_str())
            .with("message_id", message_id)
            .with("part_id", id.as_str())
            .with("final", true)
            .with("coalesced", n);
        match self.flushed.get(&id) {
            Some(prev) => {
                if text.as_bytes().starts_with(prev.as_bytes()) {
                    if text.len() == prev.len() {
                        return; // nothing new: already stored
                    }
                    // Lua cuts bytes (here at a character boundary: both are UTF-8).
                    let added = String::from_utf8_lossy(&text.as_bytes()[prev.len()..]);
                    payload.set("text", added.into_owned());
                    payload.set("offset", prev.len());
                } else {
                    payload.set("text", text.as_str());
                    payload.set("replaces", true);
                }
            }
            None => payload.set("text", text.as_str()),
        }
        self.flushed.remember(id, text);
        let x = Extra {
            raw: flushed_by.and(raw),
            flushed_by,
            ..Extra::turn(turn)
        };
        out.emit(Some(sid), self.turn.as_deref(), "message.chunk", payload, x);
    }
}
