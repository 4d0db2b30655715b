//! What the mapping remembers between calls: the lineage of sessions, and per session its
//! current turn, its open text part, its messages, tool calls and permissions. Everything is
//! bounded as in the Lua file: two generations of sessions and of lineage entries (the older
//! dropped when the younger fills), and a session's calls forgotten past [`MAX_CALLS`].

use std::collections::HashMap;

use serde_json::Value as Json;

/// Sessions remembered per generation (two generations are kept).
const MAX_SESSIONS: usize = 1024;
/// Lineage entries remembered per generation.
const MAX_ROOTS: usize = 8192;
/// Tool calls remembered per session between two idles.
const MAX_CALLS: usize = 1024;
// The Lua file's MAX_BUF (deltas buffered before they are joined) has no counterpart: each
// delta is appended to the part's text as it comes.

/// Child session -> the root of its lineage (its stream).
#[derive(Default)]
pub(super) struct Lineage {
    young: HashMap<String, String>,
    old: HashMap<String, String>,
}

impl Lineage {
    pub fn root_of(&self, sid: &str) -> Option<&str> {
        self.young
            .get(sid)
            .or_else(|| self.old.get(sid))
            .map(String::as_str)
    }

    pub fn set_root(&mut self, sid: &str, root: String) {
        if let Some(r) = self.young.get_mut(sid) {
            *r = root;
            return;
        }
        // Nothing leaves the young generation but by turning old, so its size is Lua's count.
        if self.young.len() >= MAX_ROOTS {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(sid.to_owned(), root);
    }
}

/// The sessions' states, in two generations.
#[derive(Default)]
pub(super) struct Sessions {
    young: HashMap<String, Session>,
    old: HashMap<String, Session>,
    /// Sessions the young generation took in; one deleted since still counts, as in Lua.
    admitted: usize,
}

impl Sessions {
    /// The state of `sid` (the Lua file's `state(sid)`): made if new, moved up if old.
    pub fn state(&mut self, sid: &str) -> &mut Session {
        if !self.young.contains_key(sid) {
            let s = self.old.remove(sid).unwrap_or_default();
            if self.admitted >= MAX_SESSIONS {
                self.old = std::mem::take(&mut self.young);
                self.admitted = 0;
            }
            self.admitted += 1;
            return self.young.entry(sid.to_owned()).or_insert(s);
        }
        self.young.entry(sid.to_owned()).or_default()
    }

    /// The state of `sid`, if it is one (the Lua file's `sid and state(sid)`).
    pub fn state_of(&mut self, sid: Option<&str>) -> Option<&mut Session> {
        sid.map(|sid| self.state(sid))
    }

    pub fn forget(&mut self, sid: &str) {
        self.young.remove(sid);
        self.old.remove(sid);
    }
}

/// One session's state.
#[derive(Default)]
pub(super) struct Session {
    /// The id of the user message the current work answers (kept when the turn ends, for
    /// late events).
    pub turn: Option<String>,
    /// Whether `lifecycle.session.idle` was stored since the session last did something.
    pub idle: bool,
    /// The text or reasoning part being coalesced. Every new part first stores the open
    /// one, so there is at most one (the Lua file keeps a list).
    pub open: Option<OpenPart>,
    /// Part id -> the text already stored for it.
    pub flushed: HashMap<String, String>,
    /// Part id -> its kind, for deltas that arrive after the part was stored.
    pub kinds: HashMap<String, Kind>,
    pub msgs: HashMap<String, Msg>,
    pub calls: Calls,
    /// Permission id -> the request event, for the reply.
    pub perms: HashMap<String, Perm>,
}

impl Session {
    /// The turn is over: what only a turn needs goes (the Lua file's `fresh`); the turn id
    /// and the idle mark stay.
    pub fn end_turn(&mut self) {
        *self = Session {
            turn: self.turn.take(),
            idle: self.idle,
            ..Session::default()
        };
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Text,
    Reasoning,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Reasoning => "reasoning",
        }
    }
}

/// A message, from its `message.updated`.
pub(super) struct Msg {
    /// "user", or the role OpenCode gave (by default "assistant").
    pub role: String,
    pub turn: Option<String>,
    pub completed: bool,
    /// As the message gave them (any JSON value), for `usage.request`.
    pub model: Option<Json>,
    pub provider: Option<Json>,
}

impl Msg {
    pub fn new(role: &str, turn: Option<&str>) -> Msg {
        Msg {
            role: role.to_owned(),
            turn: turn.map(str::to_owned),
            completed: false,
            model: None,
            provider: None,
        }
    }
}

/// A text or reasoning part whose updates and deltas are folded into one chunk.
pub(super) struct OpenPart {
    pub id: String,
    pub kind: Kind,
    pub message_id: Option<String>,
    pub role: String,
    pub turn: Option<String>,
    /// The part's text so far (the Lua file joins buffered deltas into it; here each is
    /// appended as it comes, the same text).
    pub text: String,
    /// How many source events the chunk stands for.
    pub n: usize,
    /// The last source event, stored with the chunk when something else flushes it.
    pub raw: Option<Json>,
}

impl OpenPart {
    pub fn new(
        id: &str,
        kind: Kind,
        message_id: Option<&str>,
        role: String,
        turn: Option<String>,
        stored: Option<&String>,
    ) -> OpenPart {
        OpenPart {
            id: id.to_owned(),
            kind,
            message_id: message_id.map(str::to_owned),
            role,
            turn,
            text: stored.cloned().unwrap_or_default(),
            n: 0,
            raw: None,
        }
    }
}

/// Where a tool call stands: its first report of each kind, and the result.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Pending,
    Running,
    Completed,
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Running => "running",
            Phase::Completed => "completed",
            Phase::Failed => "failed",
        }
    }
}

/// One tool call, by callID: the ids of its events, so that later ones point at them.
#[derive(Default)]
pub(super) struct ToolCall {
    pub tool: Option<String>,
    pub status: Option<Phase>,
    pub pending_id: Option<String>,
    pub req_id: Option<String>,
    pub running_id: Option<String>,
    pub result_id: Option<String>,
    /// A task call's subagent session, and its agent.
    pub child: Option<String>,
    pub agent: Option<String>,
}

/// A session's tool calls since it last went idle.
#[derive(Default)]
pub(super) struct Calls(HashMap<String, ToolCall>);

impl Calls {
    pub fn get(&self, id: &str) -> Option<&ToolCall> {
        self.0.get(id)
    }

    /// The call `id`, remembered from now on (the Lua file's `call`): past [`MAX_CALLS`],
    /// every call remembered so far is forgotten.
    pub fn note(&mut self, id: &str) -> &mut ToolCall {
        if !self.0.contains_key(id) && self.0.len() >= MAX_CALLS {
            self.0.clear();
        }
        self.0.entry(id.to_owned()).or_default()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut ToolCall)> {
        self.0.iter_mut()
    }
}

/// A permission request: its event, and its tool call.
pub(super) struct Perm {
    pub event_id: String,
    pub call: Option<String>,
}
