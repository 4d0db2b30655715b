//! Tool calls, by callID, from the bus part's states and the tool hooks, and the permission
//! requests they raise. Events of one call point at each other through causation_id; the
//! first report of the outcome is the `execution.tool_result`, the other `tool_state`.

use serde_json::Value as Json;

use super::call::{Config, Cx, Extra, Out, ulid};
use super::state::{Perm, Phase, Session, ToolCall};
use super::value::{Payload, Table, duration, or};

/// Whether a tool's exit code says it went well (none, or not a number, does).
fn exit_ok(exit: Option<&Json>) -> bool {
    match exit {
        // Lua compares a float 0.0 equal to 0.
        Some(Json::Number(n)) => n.as_f64() == Some(0.0),
        _ => true,
    }
}

/// A completed call's outcome, as the after hook and the part's final state both report it:
/// the exit code and truncation from the metadata `md`, output and title from `report` (the
/// hook's output, or the part's state), and the task's subagent session if any.
fn completed(md: Table, report: Table, child: Option<&str>) -> Payload {
    let exit = md.get("exit");
    Payload::default()
        .with("ok", exit_ok(exit))
        .with("exit", exit)
        .with("output", report.get("output"))
        .with("title", report.get("title"))
        .with("truncated", md.get("truncated"))
        .with("child_session_id", child)
}

/// What a running or finished call says of a task's subagent.
fn note_child(c: Option<&mut ToolCall>, input: Table, metadata: Table) {
    let Some(c) = c else { return };
    if let Some(child) = metadata.id("sessionId") {
        c.child = Some(child.to_owned());
    }
    if c.agent.is_none() {
        c.agent = input.str("subagent_type").map(str::to_owned);
    }
}

/// The outcome of a tool call, reported by the after hook or the part's final state
/// (`fields` is the result's payload so far): the first report is the result, a later one
/// only its state. A task call's subagent is then done.
#[allow(clippy::too_many_arguments)]
fn finished(
    out: &mut Out,
    sid: Option<&str>,
    turn: Option<&str>,
    c: Option<&mut ToolCall>,
    call_id: Option<&str>,
    tool: Option<&str>,
    phase: Phase,
    mut fields: Payload,
) {
    fields.set("phase", phase.as_str());
    if let Some(result_id) = c.as_ref().and_then(|c| c.result_id.clone()) {
        let payload = Payload::default()
            .with("phase", phase.as_str())
            .with("tool", tool)
            .with("tool_use_id", call_id)
            .with("duration_ms", fields.get("duration_ms").cloned());
        let x = Extra::caused(None, Some(result_id));
        out.emit(sid, turn, "execution.tool_state", payload, x);
        return;
    }
    let id = ulid();
    fields.set("tool", tool);
    fields.set("tool_use_id", call_id);
    let spawned = tool == Some("task") && c.as_ref().is_some_and(|c| c.child.is_some());
    // What the agent event repeats of the result.
    let (echo_key, echo) = match phase {
        Phase::Completed => ("output", spawned.then(|| fields.get("output").cloned())),
        _ => ("error", spawned.then(|| fields.get("error").cloned())),
    };
    let causation = c.as_ref().and_then(|c| {
        (c.req_id.as_ref())
            .or(c.pending_id.as_ref())
            .or(c.running_id.as_ref())
            .cloned()
    });
    out.emit(
        sid,
        turn,
        "execution.tool_result",
        fields,
        Extra::caused(Some(id.clone()), causation),
    );
    let Some(c) = c else { return };
    c.result_id = Some(id.clone());
    c.status = Some(phase);
    let (Some(child), Some(echo)) = (c.child.as_deref(), echo) else {
        return;
    };
    let payload = Payload::default()
        .with("child_session_id", child)
        .with("tool_use_id", call_id)
        .with("agent", c.agent.as_deref())
        .with(echo_key, echo);
    let (event_type, payload) = match phase {
        Phase::Completed => ("agent.completed", payload),
        _ => ("agent.aborted", payload.with("reason", "error")),
    };
    out.emit(
        sid,
        turn,
        event_type,
        payload,
        Extra::caused(None, Some(id)),
    );
}

impl Session {
    /// A `message.part.updated` of a tool part: its state pending, running, completed or
    /// error.
    pub(super) fn tool_part(
        &mut self,
        out: &mut Out,
        config: Config,
        sid: &str,
        part: Table,
    ) -> Result<(), String> {
        let st = part.table("state");
        let status = st.str("status");
        let call_id = part.str("callID");
        let tool = part.str("tool");
        if call_id.is_none_or(|id| self.calls.get(id).is_none()) {
            self.flush(out, sid, "next part", None);
        }
        let mut c = call_id.map(|id| self.calls.note(id));
        if let Some(c) = c.as_deref_mut()
            && c.tool.is_none()
        {
            c.tool = tool.map(str::to_owned);
        }
        let mid = part.str("messageID");
        let pid = part.str("id");
        let turn = mid
            .and_then(|mid| self.msgs.get(mid)?.turn.clone())
            .or_else(|| self.turn.clone());
        let session_turn = self.turn.as_deref();
        let md = st.table("metadata");
        let input = st.table("input");
        match status {
            Some("pending") => {
                if config.coalesce_tools && c.as_ref().is_some_and(|c| c.status.is_some()) {
                    return Ok(()); // a repeat
                }
                let id = ulid();
                let payload = Payload::default()
                    .with("phase", "pending")
                    .with("tool", tool)
                    .with("tool_use_id", call_id)
                    .with("message_id", mid)
                    .with("part_id", pid);
                let x = Extra {
                    id: Some(id.clone()),
                    ..Extra::turn(turn)
                };
                out.emit(Some(sid), session_turn, "execution.tool_use", payload, x);
                if let Some(c) = c {
                    c.pending_id.get_or_insert(id);
                    c.status.get_or_insert(Phase::Pending);
                }
            }
            Some("running") => {
                note_child(c.as_deref_mut(), input, md);
                let first = !c
                    .as_ref()
                    .is_some_and(|c| c.status == Some(Phase::Running) || c.result_id.is_some());
                if !first && config.coalesce_tools {
                    return Ok(()); // progress: the final state has it all
                }
                let id = ulid();
                let causation = c
                    .as_ref()
                    .and_then(|c| c.req_id.as_ref().or(c.pending_id.as_ref()).cloned());
                let child = c.as_ref().and_then(|c| c.child.as_deref());
                let payload = Payload::default()
                    .with("phase", "running")
                    .with("tool", tool)
                    .with("tool_use_id", call_id)
                    .with("input", st.get("input"))
                    .with("title", st.get("title"))
                    .with("child_session_id", child.or(md.id("sessionId")))
                    .with("message_id", mid)
                    .with("part_id", pid)
                    .with("update", (!first).then_some(true))
                    .with("output", md.str("output").filter(|_| !first));
                let x = Extra {
                    id: Some(id.clone()),
                    causation_id: causation,
                    ..Extra::turn(turn)
                };
                out.emit(Some(sid), session_turn, "execution.tool_use", payload, x);
                if let Some(c) = c
                    && first
                {
                    c.running_id = Some(id);
                    c.status = Some(Phase::Running);
                }
            }
            Some(state @ ("completed" | "error")) => {
                note_child(c.as_deref_mut(), input, md);
                let (phase, fields) = if state == "completed" {
                    let child = c.as_ref().and_then(|c| c.child.as_deref());
                    let fields = completed(md, st, child)
                        .with("duration_ms", duration(st.table("time"))?)
                        .with("message_id", mid)
                        .with("part_id", pid);
                    (Phase::Completed, fields)
                } else {
                    let fields = Payload::default()
                        .with("ok", false)
                        .with("error", st.get("error"))
                        .with("duration_ms", duration(st.table("time"))?)
                        .with("message_id", mid)
                        .with("part_id", pid);
                    (Phase::Failed, fields)
                };
                finished(
                    out,
                    Some(sid),
                    session_turn,
                    c,
                    call_id,
                    tool,
                    phase,
                    fields,
                );
            }
            _ => out.unmapped(
                Some(sid),
                session_turn,
                Some("message.part.updated"),
                "tool part with an unknown state",
            ),
        }
        Ok(())
    }
}

impl<'r> Cx<'_, 'r> {
    /// A `tool.execute.before` hook call (which waits for the daemon's decision: the phase
    /// policy decides on) or `tool.execute.after`.
    pub(super) fn tool_hook(&mut self, raw: Table<'r>, before: bool) -> Result<(), String> {
        let input = raw.table("input");
        let output = raw.table("output");
        let sid = input.id("sessionID");
        let call_id = input.str("callID");
        let tool = input.str("tool");
        let (turn, mut c) = match sid.map(|sid| self.sessions.state(sid)) {
            Some(s) => {
                s.idle = false;
                (s.turn.as_deref(), call_id.map(|id| s.calls.note(id)))
            }
            None => (None, None),
        };
        if let Some(c) = c.as_deref_mut()
            && c.tool.is_none()
        {
            c.tool = tool.map(str::to_owned);
        }
        if before {
            let id = ulid();
            let payload = Payload::default()
                .with("phase", "requested")
                .with("tool", tool)
                .with("tool_use_id", call_id)
                .with("input", output.get("args"));
            let causation = c.as_ref().and_then(|c| c.pending_id.clone());
            let x = Extra::caused(Some(id.clone()), causation);
            self.out.emit(sid, turn, "execution.tool_use", payload, x);
            if let Some(c) = c {
                c.req_id = Some(id);
                if tool == Some("task") && c.agent.is_none() {
                    let args = output.table("args");
                    c.agent = args.str("subagent_type").map(str::to_owned);
                }
            }
            return Ok(());
        }
        let md = output.table("metadata");
        note_child(c.as_deref_mut(), input.table("args"), md);
        let fields = completed(md, output, c.as_ref().and_then(|c| c.child.as_deref()));
        let phase = Phase::Completed;
        finished(&mut self.out, sid, turn, c, call_id, tool, phase, fields);
        Ok(())
    }

    /// `permission.asked` (`permission.updated` before OpenCode 1.x).
    pub(super) fn permission_asked(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        let s = self.sessions.state_of(sid);
        let tool = p.table("tool");
        let call_id = tool.str("callID").or(p.str("callID"));
        let causation = s.as_deref().zip(call_id).and_then(|(s, id)| {
            let c = s.calls.get(id)?;
            c.req_id.as_ref().or(c.pending_id.as_ref()).cloned()
        });
        let id = ulid();
        let pid = p.str("id");
        let payload = Payload::default()
            .with("permission_id", pid)
            .with("permission", or(p.get("permission"), p.get("type")))
            .with("patterns", or(p.get("patterns"), p.get("pattern")))
            .with("always", p.get("always"))
            .with("title", p.get("title"))
            .with("metadata", p.get("metadata"))
            .with("tool_use_id", call_id)
            .with("message_id", or(tool.get("messageID"), p.get("messageID")));
        let turn = s.as_deref().and_then(|s| s.turn.as_deref());
        let x = Extra::caused(Some(id.clone()), causation);
        self.out
            .emit(sid, turn, "execution.permission_requested", payload, x);
        if let (Some(s), Some(pid)) = (s, pid) {
            let perm = Perm {
                event_id: id,
                call: call_id.map(str::to_owned),
            };
            s.perms.insert(pid.to_owned(), perm);
        }
    }

    pub(super) fn permission_replied(&mut self, p: Table<'r>) {
        let sid = p.id("sessionID");
        let mut s = self.sessions.state_of(sid);
        let pid = p.str("requestID").or(p.str("permissionID"));
        let asked = s
            .as_deref_mut()
            .zip(pid)
            .and_then(|(s, pid)| s.perms.remove(pid));
        let (event_id, call) = asked.map_or((None, None), |a| (Some(a.event_id), a.call));
        let payload = Payload::default()
            .with("permission_id", pid)
            .with("reply", or(p.get("reply"), p.get("response")))
            .with("tool_use_id", call);
        let turn = s.as_deref().and_then(|s| s.turn.as_deref());
        let x = Extra::caused(None, event_id);
        self.out
            .emit(sid, turn, "execution.permission_replied", payload, x);
    }
}
