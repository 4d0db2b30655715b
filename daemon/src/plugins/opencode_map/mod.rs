//! The built-in `opencode` mapping, in Rust: the twin of `plugins/opencode.lua`, event for
//! event and call for call (a test, `lua/opencode_twin.rs`, runs both over the captured
//! sessions and every branch and holds them to the same output), without handing each event
//! to Lua and back. The Lua file stays the reference and the documentation of the mapping
//! (what each OpenCode event becomes, how text and tool progress are coalesced), and what a
//! user copies to change it: an `opencode.lua` in the plugin folder replaces this.
//!
//! The parts: [`value`] (reading the input as Lua does, building payloads), [`state`] (what
//! is remembered between calls, bounded as in Lua), [`text`] (text and reasoning parts),
//! [`tools`] (tool calls and permissions), [`bus`] (the other bus events); this file takes a
//! call apart and builds the events.
//!
//! Limits of the Lua host that are not the mapping's are not reproduced: its memory and
//! output allowances, and its 128 levels of table nesting in what it emits.

mod bus;
mod state;
mod text;
mod tools;
mod value;

use serde_json::{Map, Value as Json};

use super::native_builtin::Mapping;
use state::{Lineage, Sessions};
use value::{Payload, Table};

const ACTOR: &str = "opencode";
/// Sessions remembered per generation (two generations are kept).
const MAX_SESSIONS: usize = 1024;
/// Lineage entries remembered per generation.
const MAX_ROOTS: usize = 8192;
/// Tool calls remembered per session between two idles.
const MAX_CALLS: usize = 1024;
// The Lua file's MAX_BUF (deltas buffered before they are joined) has no counterpart: each
// delta is appended to the part's text as it comes.

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

/// What `[plugins.lua.opencode]` switches; each only off by an explicit `false`.
#[derive(Clone, Copy)]
struct Config {
    coalesce_text: bool,
    coalesce_tools: bool,
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

/// One map call: the state it changes and the events it makes.
struct Cx<'m, 'r> {
    config: Config,
    sessions: &'m mut Sessions,
    out: Out<'m, 'r>,
}

/// The events of one call, and what each carries in its metadata.
struct Out<'m, 'r> {
    lineage: &'m mut Lineage,
    hook: Option<&'r str>,
    event_id: Option<&'r str>,
    events: Vec<Json>,
}

/// What an event sets beyond its session's defaults (the Lua file's `o`).
#[derive(Default)]
struct Extra {
    id: Option<String>,
    causation_id: Option<String>,
    /// Else the session's turn.
    correlation_id: Option<String>,
    /// Else "opencode".
    actor: Option<&'static str>,
    raw: Option<Json>,
    flushed_by: Option<&'static str>,
}

impl Extra {
    fn turn(turn: Option<String>) -> Extra {
        Extra {
            correlation_id: turn,
            ..Extra::default()
        }
    }

    fn caused(id: Option<String>, causation_id: Option<String>) -> Extra {
        Extra {
            id,
            causation_id,
            ..Extra::default()
        }
    }
}

impl Out<'_, '_> {
    /// One event (the Lua file's `out`): of session `sid` (none: the pipeline's fallback),
    /// whose turn `turn` is the default correlation.
    fn emit(
        &mut self,
        sid: Option<&str>,
        turn: Option<&str>,
        event_type: &str,
        payload: Payload,
        x: Extra,
    ) {
        let mut meta = Map::new();
        if let Some(hook) = self.hook {
            meta.insert("hook".into(), hook.into());
        }
        if let Some(id) = self.event_id {
            meta.insert("event_id".into(), id.into());
        }
        if let Some(why) = x.flushed_by {
            meta.insert("flushed_by".into(), why.into());
        }
        let mut e = Map::new();
        e.insert("type".into(), event_type.into());
        e.insert("payload".into(), payload.into_json());
        e.insert("actor".into(), x.actor.unwrap_or(ACTOR).into());
        e.insert("metadata".into(), Json::Object(meta));
        let mut correlation = x.correlation_id;
        if let Some(sid) = sid {
            e.insert("session_id".into(), sid.into());
            if let Some(root) = self.lineage.root_of(sid) {
                e.insert("stream_id".into(), root.into());
            }
            if correlation.is_none() {
                correlation = turn.map(str::to_owned);
            }
        }
        if let Some(c) = correlation {
            e.insert("correlation_id".into(), c.into());
        }
        if let Some(id) = x.id {
            e.insert("id".into(), id.into());
        }
        if let Some(c) = x.causation_id {
            e.insert("causation_id".into(), c.into());
        }
        if let Some(raw) = x.raw {
            e.insert("raw".into(), raw);
        }
        self.events.push(Json::Object(e));
    }

    /// An event kept as `unmapped`, with why.
    fn unmapped(
        &mut self,
        sid: Option<&str>,
        turn: Option<&str>,
        event_type: Option<&str>,
        hint: impl value::Field,
    ) {
        let payload = Payload::default()
            .with("source", "opencode")
            .with("event_type", event_type)
            .with("hint", hint);
        self.emit(sid, turn, "unmapped", payload, Extra::default());
    }
}

/// A fresh event id, as `host.ulid()` makes them.
fn ulid() -> String {
    ulid::Ulid::new().to_string()
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
