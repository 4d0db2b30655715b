//! What the mapping remembers between calls: the lineage of sessions, and per session its
//! current turn, its open text part, its messages, tool calls and permissions. Everything is
//! bounded as in the Lua file: two generations of sessions and of lineage entries (the older
//! dropped when the younger fills), and each of a session's tables (calls, parts, messages,
//! permissions, stored text) forgotten whole when a new entry would pass its bound.

use std::collections::HashMap;

use serde_json::Value as Json;

/// Sessions remembered per generation (two generations are kept).
pub(crate) const MAX_SESSIONS: usize = 1024;
/// Lineage entries remembered per generation.
pub(crate) const MAX_ROOTS: usize = 8192;
/// Tool calls remembered per session between two idles.
pub(crate) const MAX_CALLS: usize = 1024;
/// Parts (their stored text, their kind) remembered per session between two idles.
pub(crate) const MAX_PARTS: usize = 4096;
/// Messages remembered per session between two idles.
pub(crate) const MAX_MSGS: usize = 4096;
/// Permission requests awaiting their reply, per session between two idles.
pub(crate) const MAX_PERMS: usize = 1024;
/// Bytes of stored part text remembered per session between two idles.
pub(crate) const MAX_TEXT_BYTES: usize = 8 << 20;
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
    pub flushed: Texts,
    /// Part id -> its kind, for deltas that arrive after the part was stored.
    pub kinds: Bounded<Kind, MAX_PARTS>,
    pub msgs: Bounded<Msg, MAX_MSGS>,
    pub calls: Calls,
    /// Permission id -> the request event, for the reply.
    pub perms: Bounded<Perm, MAX_PERMS>,
}

/// One of a session's tables, bounded as its calls are (the Lua file's `remember`): a new key
/// past `MAX` forgets every key held so far. What is forgotten costs a later event a link (its
/// turn, its cause) or makes a part's next chunk its whole text again, never an event.
pub(super) struct Bounded<V, const MAX: usize>(HashMap<String, V>);

impl<V, const MAX: usize> Default for Bounded<V, MAX> {
    fn default() -> Self {
        Bounded(HashMap::new())
    }
}

impl<V, const MAX: usize> Bounded<V, MAX> {
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.get(key)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.0.get_mut(key)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// Sets `key`; true when that first forgot every other key.
    pub fn insert(&mut self, key: String, value: V) -> bool {
        let forgot = self.make_room(&key);
        self.0.insert(key, value);
        forgot
    }

    /// The entry of `key`, made if new (the Lua file's `call`).
    pub fn note(&mut self, key: &str) -> &mut V
    where
        V: Default,
    {
        self.make_room(key);
        self.0.entry(key.to_owned()).or_default()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut V)> {
        self.0.iter_mut()
    }

    /// Forgets every key when `key` is new and the table is full; true if it did.
    fn make_room(&mut self, key: &str) -> bool {
        let forget = !self.0.contains_key(key) && self.0.len() >= MAX;
        if forget {
            self.0.clear();
        }
        forget
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        self.0.remove(key)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// Part id -> the text stored for it, bounded in parts and in bytes (the Lua file's
/// `remember_text`).
#[derive(Default)]
pub(super) struct Texts {
    parts: Bounded<String, MAX_PARTS>,
    bytes: usize,
}

impl Texts {
    pub fn get(&self, part: &str) -> Option<&String> {
        self.parts.get(part)
    }

    /// `text` is what is stored of `part` now. Past [`MAX_TEXT_BYTES`] every other part's
    /// text is forgotten first.
    pub fn remember(&mut self, part: String, text: String) {
        let len = text.len();
        let held = self.parts.get(&part).map_or(0, String::len);
        let mut bytes = self.bytes - held + len;
        if bytes > MAX_TEXT_BYTES {
            self.parts = Bounded::default();
            bytes = len;
        }
        if self.parts.insert(part, text) {
            bytes = len;
        }
        self.bytes = bytes;
    }

    #[cfg(test)]
    pub fn held(&self) -> (usize, usize) {
        (self.parts.len(), self.bytes)
    }
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

/// A session's tool calls since it last went idle: past [`MAX_CALLS`], every call remembered
/// so far is forgotten.
pub(super) type Calls = Bounded<ToolCall, MAX_CALLS>;

/// A permission request: its event, and its tool call.
pub(super) struct Perm {
    pub event_id: String,
    pub call: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_past_its_bound_forgets_whole_and_starts_again() {
        let mut t: Bounded<usize, 3> = Bounded::default();
        for i in 0..3 {
            assert!(!t.insert(format!("k{i}"), i));
        }
        assert!(!t.insert("k1".into(), 10), "a known key is no new entry");
        assert!(t.insert("k3".into(), 3));
        assert_eq!((t.len(), t.get("k0"), t.get("k3")), (1, None, Some(&3)));
        t.remove("k3");
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn stored_text_stays_within_its_bounds_in_parts_and_bytes() {
        let mut texts = Texts::default();
        for i in 0..MAX_PARTS + 5 {
            texts.remember(format!("p{i}"), "ab".into());
        }
        assert_eq!(texts.held(), (5, 10));
        let mut texts = Texts::default();
        let big = "x".repeat(MAX_TEXT_BYTES / 3);
        for i in 0..4 {
            texts.remember(format!("b{i}"), big.clone());
            assert!(texts.held().1 <= MAX_TEXT_BYTES);
        }
        assert_eq!(
            texts.held(),
            (1, big.len()),
            "the fourth text forgot the others"
        );
        // A part longer than the bound is still remembered, alone.
        texts.remember("b3".into(), "y".repeat(MAX_TEXT_BYTES + 1));
        assert_eq!(texts.held(), (1, MAX_TEXT_BYTES + 1));
        texts.remember("b3".into(), "z".into());
        assert_eq!(texts.held(), (1, 1));
    }
}
