//! The wire protocol: JSON-RPC 2.0, one JSON object per line (`\n`), UTF-8.
//!
//! Requests carry an `id`; the daemon answers each with a response carrying the same `id`.
//! Server-initiated messages (subscription traffic) are notifications without an `id`:
//! `event`, `caught_up`, `lagged`, `heartbeat` and `error`, each with a `subscription` field
//! (see [`notifications`]).
//!
//! Method names ([`methods`], [`Method`]) and the shapes below are stable; new optional fields
//! may be added.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Protocol revision reported by `hello`.
pub const PROTOCOL_VERSION: u32 = 1;
/// Default largest frame (one line) the daemon accepts: 16 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// JSON-RPC error codes: the standard ones, then dstream's application codes.
pub mod codes {
    /// Invalid JSON, or a frame that is not UTF-8.
    pub const PARSE_ERROR: i64 = -32700;
    /// Valid JSON that is not a JSON-RPC request object.
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Missing or wrongly typed parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;

    /// The daemon is stopping and takes no new work.
    pub const SHUTTING_DOWN: i64 = -32000;
    /// A session or stream id that is empty, too long, or not file-name safe.
    pub const INVALID_SESSION_ID: i64 = -32001;
    /// The session has no events (and no log file).
    pub const SESSION_NOT_FOUND: i64 = -32002;
    /// The frame was longer than the daemon's `max_frame_bytes`; it was discarded.
    pub const FRAME_TOO_LARGE: i64 = -32003;
    /// Writing or syncing the log failed (for example a full disk); nothing was acknowledged.
    pub const STORAGE_FAILED: i64 = -32004;
    /// The session's log was found corrupt and moved aside; it takes no appends until repaired.
    pub const SESSION_QUARANTINED: i64 = -32005;
    /// `unsubscribe` named a subscription this connection does not have.
    pub const UNKNOWN_SUBSCRIPTION: i64 = -32006;
    /// A stored record failed its checksum while being read.
    pub const CORRUPT_RECORD: i64 = -32007;
    /// The daemon holds as much client data in memory as it may; try again shortly.
    pub const OVERLOADED: i64 = -32008;
    /// The connecting process runs as another user than the daemon.
    pub const PEER_REFUSED: i64 = -32009;
    /// No checkpoint has that id (or it was decided long ago and is no longer held).
    pub const CHECKPOINT_NOT_FOUND: i64 = -32010;
    /// The checkpoint was already decided; the message names the first decision.
    pub const CHECKPOINT_DECIDED: i64 = -32011;
    /// The checkpoint's request is still being written; try again shortly.
    pub const CHECKPOINT_NOT_READY: i64 = -32012;
    /// A checkpoint decision came from an agent's process (or one it started): an agent may
    /// not release its own brake.
    pub const DECISION_FROM_AGENT: i64 = -32013;
    /// The daemon serves `daemon.max_connections` busy connections already; retry shortly.
    pub const TOO_MANY_CONNECTIONS: i64 = -32014;
    /// This connection holds its limit of subscriptions or waiting `checkpoint.await`s.
    pub const CONNECTION_LIMIT: i64 = -32015;
    /// `fork` named a new session id that already exists (has events or a log).
    pub const SESSION_EXISTS: i64 = -32016;
    /// The session was deleted (by retention); `data` says when (`deleted_at_ms`) and why
    /// (`reason`). Its id takes no appends.
    pub const SESSION_GONE: i64 = -32017;
    /// `search` or `reindex` while search is off (`[search] enabled = false`), or its index
    /// cannot be opened; the message says which.
    pub const SEARCH_UNAVAILABLE: i64 = -32018;
}

/// Declares the method names once: a constant each in [`methods`], and the [`Method`] enum
/// with its name, parsing and the list of all of them, so that none can be left out of one.
macro_rules! methods {
    ($($(#[$doc:meta])* $variant:ident = $konst:ident = $name:literal;)*) => {
        /// The name of each method the daemon answers, as sent in a request's `method`.
        pub mod methods {
            $($(#[$doc])* pub const $konst: &str = $name;)*
        }

        /// A method the daemon answers. Its name on the wire is [`Method::as_str`]; a name
        /// parses back with [`str::parse`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Method {
            $($(#[$doc])* $variant,)*
        }

        impl Method {
            /// Every method, in the order declared.
            pub const ALL: &[Method] = &[$(Method::$variant),*];

            /// The method's name on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Method::$variant => methods::$konst,)*
                }
            }
        }

        impl std::str::FromStr for Method {
            type Err = UnknownMethod;

            fn from_str(name: &str) -> Result<Method, UnknownMethod> {
                match name {
                    $(methods::$konst => Ok(Method::$variant),)*
                    _ => Err(UnknownMethod(name.to_string())),
                }
            }
        }
    };
}

methods! {
    /// `hello`: who the daemon is, its limits, and who it sees calling.
    Hello = HELLO = "hello";
    /// `append`: stores one event in a session.
    Append = APPEND = "append";
    /// `read`: a page of a session's events from an LSN on.
    Read = READ = "read";
    /// `subscribe`: replays a session, then follows it live.
    Subscribe = SUBSCRIBE = "subscribe";
    /// `unsubscribe`: ends a subscription of this connection.
    Unsubscribe = UNSUBSCRIBE = "unsubscribe";
    /// `sessions.list`: every session.
    SessionsList = SESSIONS_LIST = "sessions.list";
    /// `sessions.get`: one session.
    SessionsGet = SESSIONS_GET = "sessions.get";
    /// `query`: events across sessions, filtered.
    Query = QUERY = "query";
    /// `repair`: moves a quarantined session's damage aside and reopens it.
    Repair = REPAIR = "repair";
    /// `fork`: a new session whose first events are another's, up to an LSN.
    Fork = FORK = "fork";
    /// `gc`: deletes the sessions past `retention.delete_after` now (or says which would go).
    Gc = GC = "gc";
    /// `stats`: the daemon's counters.
    Stats = STATS = "stats";
    /// `ingest`: a raw agent event, through the plugin pipeline.
    Ingest = INGEST = "ingest";
    /// `relay.status`: the relay's state, per session.
    RelayStatus = RELAY_STATUS = "relay.status";
    /// `relay.retry`: the relay tries every stream again now.
    RelayRetry = RELAY_RETRY = "relay.retry";
    /// `plugins.list`: the plugins loaded and the files that failed.
    PluginsList = PLUGINS_LIST = "plugins.list";
    /// `plugins.reload`: loads the plugin folder again.
    PluginsReload = PLUGINS_RELOAD = "plugins.reload";
    /// `checkpoint.request`: opens a checkpoint.
    CheckpointRequest = CHECKPOINT_REQUEST = "checkpoint.request";
    /// `checkpoint.await`: waits for a checkpoint's decision.
    CheckpointAwait = CHECKPOINT_AWAIT = "checkpoint.await";
    /// `checkpoint.resolve`: decides a checkpoint.
    CheckpointResolve = CHECKPOINT_RESOLVE = "checkpoint.resolve";
    /// `checkpoint.list`: checkpoints, by state and session.
    CheckpointList = CHECKPOINT_LIST = "checkpoint.list";
    /// `compress`: compresses a session's log now (zstd frames; reads stay the same).
    Compress = COMPRESS = "compress";
    /// `usage`: tokens and cost, summed by day, week, month, session, model, project or agent.
    Usage = USAGE = "usage";
    /// `budgets`: each configured budget and what its current period has spent.
    Budgets = BUDGETS = "budgets";
    /// `search`: events across sessions by their text, ranked, with snippets.
    Search = SEARCH = "search";
    /// `reindex`: drops the search index and builds it again from the logs.
    Reindex = REINDEX = "reindex";
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A method name the daemon does not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown method {0:?}")]
pub struct UnknownMethod(pub String);

/// A request frame as the client sends it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub jsonrpc: String,
    pub id: Value,
    pub method: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub params: Value,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} (code {code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// Any frame the daemon sends: a response (has `id`) or a notification (has `method`).
#[derive(Debug, Clone, Deserialize)]
pub struct ServerFrame {
    #[serde(default)]
    pub id: Option<Value>,
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default)]
    pub error: Option<RpcError>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub params: Option<Value>,
}

/// Declares an enum whose variants are words on the wire: each serialized as its word, parsed
/// back with [`str::parse`], listed in `ALL`, so that a word is spelled once.
macro_rules! words {
    ($(#[$doc:meta])* $name:ident = $label:literal { $($(#[$vdoc:meta])* $variant:ident = $word:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $word)] $variant,)*
        }

        impl $name {
            /// Every word, in the order declared.
            pub const ALL: &[$name] = &[$($name::$variant),*];

            /// The word on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownWord;

            fn from_str(word: &str) -> Result<$name, UnknownWord> {
                match word {
                    $($word => Ok($name::$variant),)*
                    _ => Err(UnknownWord {
                        kind: $label,
                        word: word.to_string(),
                    }),
                }
            }
        }
    };
}

mod agent;
mod search;
mod session;
mod status;

pub use agent::*;
pub use search::*;
pub use session::*;
pub use status::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_round_trips_through_its_name() {
        for &m in Method::ALL {
            assert_eq!(m.as_str().parse::<Method>(), Ok(m), "{m:?}");
            assert_eq!(m.to_string(), m.as_str());
        }
        let mut names: Vec<&str> = Method::ALL.iter().map(|m| m.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Method::ALL.len(), "two methods share a name");
        assert_eq!(Method::Append.as_str(), methods::APPEND);
        assert_eq!(methods::CHECKPOINT_AWAIT, "checkpoint.await");
    }

    #[test]
    fn unknown_names_are_refused() {
        for name in [
            "",
            "no.such.method",
            "Append",
            "append ",
            " hello",
            "sessions",
            "relay.",
        ] {
            let e = name.parse::<Method>().unwrap_err();
            assert_eq!(e, UnknownMethod(name.to_string()));
            assert_eq!(e.to_string(), format!("unknown method {name:?}"));
        }
    }

    #[test]
    fn words_are_their_wire_strings_both_ways() {
        fn check<W>(all: &[W], words: &[&str])
        where
            W: Copy + std::fmt::Debug + PartialEq + Serialize + std::fmt::Display,
            W: for<'de> Deserialize<'de> + std::str::FromStr<Err = UnknownWord>,
        {
            assert_eq!(all.len(), words.len());
            for (&w, &word) in all.iter().zip(words) {
                assert_eq!(serde_json::to_value(w).unwrap(), Value::from(word));
                assert_eq!(serde_json::from_value::<W>(Value::from(word)).unwrap(), w);
                assert_eq!(word.parse::<W>(), Ok(w));
                assert_eq!(w.to_string(), word);
            }
            for bad in ["", "Allow", "DENY", "approve", " pending"] {
                assert!(bad.parse::<W>().is_err(), "{bad:?}");
                assert!(
                    serde_json::from_value::<W>(Value::from(bad)).is_err(),
                    "{bad:?}"
                );
            }
        }
        check(Action::ALL, &["allow", "deny", "ask"]);
        check(OnTimeout::ALL, &["allow", "deny"]);
        check(
            CheckpointState::ALL,
            &["recording", "pending", "approved", "rejected", "expired"],
        );
        assert_eq!(
            "maybe".parse::<Action>().unwrap_err().to_string(),
            "unknown action \"maybe\""
        );
    }

    #[test]
    fn strictness_orders_deny_ask_allow() {
        assert!(Action::Deny.strictness() > Action::Ask.strictness());
        assert!(Action::Ask.strictness() > Action::Allow.strictness());
        assert_eq!(OnTimeout::Allow.action(), Action::Allow);
        assert_eq!(OnTimeout::Deny.action(), Action::Deny);
        let pending: Vec<_> = CheckpointState::ALL
            .iter()
            .filter(|s| s.is_pending())
            .collect();
        assert_eq!(
            pending,
            [&CheckpointState::Recording, &CheckpointState::Pending]
        );
    }

    #[test]
    fn a_decision_is_written_as_before() {
        let d = Decision::deny("no", "rule:rules[0]");
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            serde_json::json!({"action": "deny", "reason": "no", "decided_by": "rule:rules[0]"})
        );
        let d = Decision {
            stop: true,
            ..Decision::new(Action::Ask, "x")
        };
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            serde_json::json!({"action": "ask", "decided_by": "x", "stop": true})
        );
        let back: Decision =
            serde_json::from_str(r#"{"action":"allow","reason":"r","decided_by":"b"}"#).unwrap();
        assert_eq!(back, Decision::allow("r", "b"));
    }

    #[test]
    fn a_checkpoint_is_written_as_before() {
        let text = r#"{"id":"ck_1","session_id":"s","key":"k","state":"expired","summary":"ls","options":[{"id":"approve","action":"allow"}],"created_ms":1,"deadline_ms":2,"on_timeout":"deny","lsn":3,"decision":{"decision":"deny","action":"deny","decided_by":"timeout","decided_ms":2},"delivered":false}"#;
        let info: CheckpointInfo = serde_json::from_str(text).unwrap();
        assert_eq!(info.state, CheckpointState::Expired);
        assert_eq!(info.on_timeout, OnTimeout::Deny);
        assert_eq!(info.decision.as_ref().unwrap().action, Action::Deny);
        assert!(!info.is_pending());
        assert_eq!(serde_json::to_string(&info).unwrap(), text);
    }
}
