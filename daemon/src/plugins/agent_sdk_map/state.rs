//! What the mapping remembers between calls: each session's turn, the blocks of the message
//! being streamed, its tool calls and subagents, and the session ids seen; all bounded in two
//! generations as the Lua file bounds them.

use std::collections::{HashMap, HashSet};
use std::mem;

use serde_json::Value as Json;

/// Sessions remembered, per generation (two generations), as the Lua's `MAX_SESSIONS`.
pub(in crate::plugins) const MAX_SESSIONS: usize = 1024;
/// Session ids remembered for created/resumed, per generation, as the Lua's `MAX_KNOWN`.
pub(in crate::plugins) const MAX_KNOWN: usize = 8192;
/// Tool calls remembered per session within a turn, as the Lua's `MAX_CALLS`.
pub(in crate::plugins) const MAX_CALLS: usize = 1024;

/// What is remembered of one session (a subagent's is a session of its own).
#[derive(Default)]
pub(super) struct Session {
    /// The uuid of the turn's first message: every event's correlation_id.
    pub(super) turn: Option<String>,
    /// The content blocks of the message being streamed, by their index.
    pub(super) blocks: HashMap<BlockKey, Block>,
    pub(super) message_id: Option<String>,
    /// Message ids whose stream events were seen: their `assistant` message is compact.
    pub(super) streamed: HashSet<String>,
    /// Tool call id -> id of the call's last chunk (what its tool-result is caused by).
    pub(super) calls: HashMap<String, String>,
    /// Tool call id -> the subagent session it spawned. Outlives the turn, as in the Lua.
    pub(super) children: HashMap<String, String>,
}

impl Session {
    /// The Lua's `fresh(s)` at a `result`: the turn is over; the subagents are not.
    pub(super) fn end_turn(&mut self) {
        *self = Session {
            children: mem::take(&mut self.children),
            ..Session::default()
        };
    }

    /// The Lua's `remember_call`: at most MAX_CALLS, then it starts over.
    pub(super) fn remember_call(&mut self, id: &str, event_id: String) {
        if let Some(last) = self.calls.get_mut(id) {
            *last = event_id;
            return;
        }
        if self.calls.len() >= MAX_CALLS {
            self.calls.clear();
        }
        self.calls.insert(id.to_owned(), event_id);
    }
}

/// A content block being streamed.
#[derive(Default)]
pub(super) struct Block {
    pub(super) block_type: Option<String>,
    pub(super) id: Option<String>,
    pub(super) name: Option<String>,
    /// The tool call's JSON so far; `None` for a block that is not a tool call.
    pub(super) json: Option<String>,
    /// Id of the block's last chunk.
    pub(super) chunk: Option<String>,
}

/// A block's `index` as a Lua table key. Lua 5.4 stores a float with an integer value as that
/// integer (1.0 and 1 are one key, as are -0.0 and 0); a string is a key of its own; JSON
/// null is a (light userdata) key too. A table (array or object) is absent: the message is a
/// fresh table every call, so no later call can look one up.
#[derive(PartialEq, Eq, Hash)]
pub(super) enum BlockKey {
    Int(i64),
    /// The bits of a float with a fraction, or beyond i64 (JSON has no NaN; -0.0 is 0).
    Float(u64),
    Str(String),
    Bool(bool),
    Null,
}

impl BlockKey {
    pub(super) fn of(v: Option<&Json>) -> Option<BlockKey> {
        Some(match v? {
            Json::Null => BlockKey::Null,
            Json::Bool(b) => BlockKey::Bool(*b),
            Json::String(s) => BlockKey::Str(s.clone()),
            Json::Number(n) => match n.as_i64() {
                Some(i) => BlockKey::Int(i),
                None => {
                    let f = n.as_f64()?;
                    // -2^63 <= f < 2^63: exactly an i64 when it has no fraction.
                    let two_63 = -(i64::MIN as f64);
                    if f.fract() == 0.0 && (-two_63..two_63).contains(&f) {
                        BlockKey::Int(f as i64)
                    } else {
                        BlockKey::Float(f.to_bits())
                    }
                }
            },
            Json::Array(_) | Json::Object(_) => return None,
        })
    }
}

/// Two generations of sessions, as the Lua's `state(sid)`: one is looked up in the current
/// generation, then moved from the old one; a full current generation becomes the old one.
#[derive(Default)]
pub(super) struct Sessions {
    current: HashMap<String, Session>,
    old: HashMap<String, Session>,
}

impl Sessions {
    /// The session `id`, made current (the error cannot happen: it was just inserted).
    pub(super) fn get(&mut self, id: &str) -> Result<&mut Session, String> {
        if !self.current.contains_key(id) {
            let s = self.old.remove(id).unwrap_or_default();
            if self.current.len() >= MAX_SESSIONS {
                self.old = mem::take(&mut self.current);
            }
            self.current.insert(id.to_owned(), s);
        }
        self.current
            .get_mut(id)
            .ok_or_else(|| "internal: a session state was lost".to_string())
    }
}

/// Session ids seen in a system init, in two generations (a lookup does not move one).
#[derive(Default)]
pub(super) struct Known {
    current: HashSet<String>,
    old: HashSet<String>,
}

impl Known {
    pub(super) fn seen_before(&mut self, id: &str) -> bool {
        if self.current.contains(id) || self.old.contains(id) {
            return true;
        }
        if self.current.len() >= MAX_KNOWN {
            self.old = mem::take(&mut self.current);
        }
        self.current.insert(id.to_owned());
        false
    }
}
