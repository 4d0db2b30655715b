//! The built-in `opencode` mapping, in Rust: the twin of `plugins/opencode.lua`, event for
//! event and call for call (a test, `lua/opencode_twin.rs`, runs both over the captured
//! sessions and every branch and holds them to the same output), without handing each event
//! to Lua and back. The Lua file stays the reference and the documentation of the mapping
//! (what each OpenCode event becomes, how text and tool progress are coalesced), and what a
//! user copies to change it: an `opencode.lua` in the plugin folder replaces this.
//!
//! The parts: [`value`] (reading the input as Lua does, building payloads), [`state`] (what
//! is remembered between calls, bounded as in Lua), [`text`] (text and reasoning parts),
//! [`tools`] (tool calls and permissions), [`bus`] (the other bus events), [`call`] (one
//! call's state and the events it makes); this file takes a call apart.
//!
//! Limits of the Lua host that are not the mapping's are not reproduced: its memory and
//! output allowances, and its 128 levels of table nesting in what it emits.

mod bus;
mod call;
mod state;
mod text;
mod tools;
mod value;

use serde_json::Value as Json;

use super::native_builtin::Mapping;
use call::{Config, Cx, Out};
use state::{Lineage, Sessions};
#[cfg(test)]
pub(crate) use state::{
    MAX_CALLS, MAX_MSGS, MAX_PARTS, MAX_PERMS, MAX_ROOTS, MAX_SESSIONS, MAX_TEXT_BYTES,
};
use value::Table;

/// The mapping for `[plugins.lua.opencode]` (null, or an object).
pub(super) fn new(config: &Json) -> Box<dyn Mapping> {
    let off = |key| config.get(key) == Some(&Json::Bool(false));
    Box::new(OpenCode {
        config: Config {
            coalesce_text: !off("coalesce_text"),
            coalesce_tools: !off("coalesce_tool_progress"),
        },
        lineage: Lineage::default(),
        sessions: Sessions::default(),
    })
}

struct OpenCode {
    config: Config,
    lineage: Lineage,
    sessions: Sessions,
}

impl Mapping for OpenCode {
    fn map(&mut self, raw: &Json, _source: &str) -> Result<Vec<Json>, String> {
        let mut cx = Cx {
            config: self.config,
            sessions: &mut self.sessions,
            out: Out {
                lineage: &mut self.lineage,
                hook: None,
                event_id: None,
                events: Vec::new(),
            },
        };
        // A call that fails (only a tool's duration that is no JSON number does) stores
        // nothing, but keeps what it changed before, as a Lua error does.
        cx.map(raw)?;
        Ok(cx.out.events)
    }
}

/// Families of OpenCode events about the server, the UI or the project rather than a
/// session's work: kept as unmapped, with the reason.
const SERVER_LEVEL: &[&str] = &[
    "plugin",
    "catalog",
    "reference",
    "integration",
    "lsp",
    "server",
    "installation",
    "ide",
    "tui",
    "mcp",
    "pty",
    "project",
    "vcs",
    "storage",
    "workspace",
    "config",
    "global",
];

impl<'r> Cx<'_, 'r> {
    /// A bus event (bare, or wrapped by the `event` hook) or a tool hook call.
    fn map(&mut self, raw: &'r Json) -> Result<(), String> {
        let fields = match raw {
            Json::Object(_) => Table::of(Some(raw)),
            // A table in Lua, without the fields looked for.
            Json::Array(_) => Table::of(None),
            _ => {
                self.out
                    .unmapped(None, None, None, "not an OpenCode event object");
                return Ok(());
            }
        };
        let hook = fields.get("hook");
        match hook.and_then(Json::as_str) {
            Some(h @ ("tool.execute.before" | "tool.execute.after")) => {
                self.out.hook = Some(h);
                return self.tool_hook(fields, h == "tool.execute.before");
            }
            Some("event") => {
                let event = fields.get("event");
                if value::is_table(event) {
                    return self.bus_event(Table::of(event), raw);
                }
                self.out.hook = Some("event");
                self.out
                    .unmapped(None, None, None, "event hook call without an event object");
                return Ok(());
            }
            _ => {}
        }
        // A hook that is null is not missing: only a missing one is a bare bus event.
        if hook.is_none() && fields.str("type").is_some() {
            return self.bus_event(fields, raw);
        }
        self.out.hook = hook.and_then(Json::as_str);
        let hint = if hook.is_some() {
            "OpenCode hook not known to this mapping"
        } else {
            "neither a bus event nor a tool hook call"
        };
        self.out.unmapped(None, None, None, hint);
        Ok(())
    }

    fn bus_event(&mut self, e: Table<'r>, raw: &'r Json) -> Result<(), String> {
        let t = e.str("type");
        let p = e.table("properties");
        self.out.event_id = e.str("id");
        self.out.hook = Some(t.unwrap_or("event"));
        let Some(t) = t else {
            let sid = p.id("sessionID");
            self.out
                .unmapped(sid, None, None, "bus event without a string type");
            return Ok(());
        };
        match t {
            "session.created" => self.session_created(p),
            "session.updated" => self.session_updated(p),
            "session.deleted" => self.session_deleted(p),
            "session.status" => self.session_status(p),
            "session.idle" => self.session_idle(p),
            "session.compacted" => self.session_compacted(p),
            "session.error" => self.session_error(p),
            "session.diff" => self.session_diff(p),
            "message.updated" => self.message_updated(p),
            "message.removed" => self.message_removed(p),
            "message.part.removed" => self.part_removed(p),
            "message.part.updated" => return self.part_updated(p, raw),
            "message.part.delta" => self.part_delta(p, raw),
            // `permission.updated`: OpenCode before 1.x.
            "permission.asked" | "permission.updated" => self.permission_asked(p),
            "permission.replied" => self.permission_replied(p),
            "file.edited" => self.file_edited(p),
            "file.watcher.updated" => self.file_watched(p),
            "todo.updated" => self.todo_updated(p),
            "command.executed" => self.command_executed(p),
            "dstream.plugin.dropped" => self.plugin_dropped(p),
            _ => {
                let sid = p.id("sessionID");
                let family = t.split('.').next().filter(|f| !f.is_empty());
                match family.filter(|f| SERVER_LEVEL.contains(f)) {
                    Some(family) => self.out.unmapped(
                        sid,
                        None,
                        Some(t),
                        format!("OpenCode {family} event: not part of the taxonomy"),
                    ),
                    None => self.out.unmapped(
                        sid,
                        None,
                        Some(t),
                        "OpenCode event type not known to this mapping",
                    ),
                }
            }
        }
        Ok(())
    }
}
