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

use crate::event::{Event, NewEvent};

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

// ---- hello ----

/// Who is on the other end of the socket, as the operating system reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerInfo {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub pid: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HelloResult {
    pub server: String,
    pub version: String,
    pub protocol: u32,
    pub max_frame_bytes: usize,
    pub fsync: String,
    pub peer: PeerInfo,
}

// ---- append ----

/// `J` is how the event's JSON fields are held (see [`NewEvent`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(
    serialize = "NewEvent<J>: Serialize",
    deserialize = "NewEvent<J>: Deserialize<'de>"
))]
pub struct AppendParams<J = Value> {
    pub session_id: String,
    pub event: NewEvent<J>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendResult {
    pub lsn: u64,
    pub id: String,
}

// ---- read ----

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_lsn: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadResult {
    pub events: Vec<Event>,
    /// Where the next `read` should start.
    pub next_lsn: u64,
    /// True when `next_lsn` is past the last committed event.
    pub up_to_date: bool,
    /// Set when the session is quarantined: the events end where the damage starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<QuarantineInfo>,
}

/// Why a session is quarantined and where its readable prefix ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantineInfo {
    pub reason: String,
    /// Byte offset in the log where the damage starts.
    pub offset: u64,
    /// Last LSN of the readable prefix (0 when nothing before the damage is readable).
    pub last_good_lsn: u64,
}

// ---- subscribe ----

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubscribeParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_lsn: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubscribeResult {
    pub subscription: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnsubscribeParams {
    pub subscription: String,
}

/// `event` notification.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventNotification {
    pub subscription: String,
    pub event: Event,
}

/// `caught_up`, `heartbeat`: the last LSN delivered on the subscription so far.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PositionNotification {
    pub subscription: String,
    pub lsn: u64,
}

/// `error`: the daemon ended the subscription because its feed failed (for example a record
/// of the log failed its checksum while being read).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorNotification {
    pub subscription: String,
    pub message: String,
}

/// Names of the notifications a subscription sends.
pub mod notifications {
    pub const EVENT: &str = "event";
    pub const CAUGHT_UP: &str = "caught_up";
    pub const HEARTBEAT: &str = "heartbeat";
    pub const LAGGED: &str = "lagged";
    pub const ERROR: &str = "error";
}

/// `lagged`: the subscriber fell behind the live feed; the daemon resumes from disk after
/// `last_sent_lsn`, so nothing is skipped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaggedNotification {
    pub subscription: String,
    pub last_sent_lsn: u64,
}

// ---- sessions ----

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub session_id: String,
    pub stream_id: String,
    pub first_ts: u64,
    pub last_ts: u64,
    pub last_lsn: u64,
    /// The last LSN that is synced to disk: `last_lsn` under `fsync = "always"`, up to an
    /// interval behind it otherwise. Only events up to here are relayed.
    #[serde(default)]
    pub durable_lsn: u64,
    /// Bytes in the log file.
    pub bytes: u64,
    /// Set when the session's log is damaged: it takes no appends until `repair`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<QuarantineInfo>,
    /// For a fork: the session it was forked from...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
    /// ...and the LSN it was forked at (its events up to here are the parent's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_lsn: Option<u64>,
}

// ---- gc ----

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GcParams {
    /// Only say what would be deleted.
    #[serde(default)]
    pub dry_run: bool,
}

/// A session past `retention.delete_after`: deleted (or to be, in a dry run), or kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GcSession {
    pub session_id: String,
    /// The timestamp of its last event (what its age is measured by).
    pub last_ts: u64,
    pub last_lsn: u64,
    pub bytes: u64,
    /// For a kept session: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_because: Option<String>,
}

/// What `gc` did, or would do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GcResult {
    pub dry_run: bool,
    /// `retention.delete_after` as configured.
    pub delete_after: String,
    /// Sessions whose last event is older than this (ms since the epoch) are past it.
    pub cutoff_ms: u64,
    /// Deleted (or, in a dry run, to be deleted).
    pub deleted: Vec<GcSession>,
    /// Past the cutoff but kept, each with its reason.
    pub kept: Vec<GcSession>,
    /// Bytes of the deleted sessions' logs.
    pub total_bytes: u64,
}

/// A deleted session's tombstone, as `sessions.list` with `all` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoneInfo {
    pub session_id: String,
    pub deleted_at_ms: u64,
    pub reason: String,
    pub last_lsn: u64,
    pub last_ts: u64,
    pub bytes_freed: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionsListParams {
    /// Also list deleted sessions (their tombstones).
    #[serde(default)]
    pub all: bool,
}

// ---- fork ----

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForkParams {
    /// The session to fork.
    pub session_id: String,
    /// Its events 1..=at_lsn become the fork's; the fork's next append takes at_lsn + 1.
    pub at_lsn: u64,
    /// The new session's id; by default `<session_id>.fork-<ulid>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_session_id: Option<String>,
}

/// What `fork` made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkResult {
    pub session_id: String,
    pub forked_from: String,
    pub fork_lsn: u64,
    /// The fork's lineage: its parent's.
    pub stream_id: String,
    /// Bytes of the parent's log copied.
    pub bytes: u64,
}

// ---- repair ----

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RepairParams {
    pub session_id: String,
}

/// What `repair` did to a quarantined session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepairResult {
    pub session_id: String,
    /// Valid records kept in the log, each with its original LSN.
    pub kept_records: u64,
    /// Damaged bytes moved out of the log...
    pub moved_bytes: u64,
    /// ...to this file, next to the log.
    pub moved_to: String,
    /// Inclusive LSN ranges no longer in the log.
    pub lost_lsns: Vec<(u64, u64)>,
    /// LSN of the `log.recovered` event the repair appended; appends continue after it.
    pub resumed_at: u64,
}

/// `compress` params: the session to compress now (up to its last synced event).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompressParams {
    pub session_id: String,
}

/// What `compress` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressResult {
    pub session_id: String,
    /// False when everything synced was compressed already.
    pub compressed: bool,
    /// The archive holds LSNs 1 to this.
    pub upto_lsn: u64,
    /// Log bytes the archive replaces, and its own size.
    pub log_bytes: u64,
    pub archive_bytes: u64,
    /// Whether the file system took the replaced bytes back (some cannot punch holes).
    pub freed: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionsListResult {
    pub sessions: Vec<SessionInfo>,
    /// Deleted sessions, when asked for with `all`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gone: Vec<GoneInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionsGetParams {
    pub session_id: String,
}

// ---- query ----

/// Filters for `query`; every one is optional and they combine with AND.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct QueryParams {
    /// Only this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Only events of this lineage (root session), across all its sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    /// Only types starting with this, e.g. `execution.` or `checkpoint.requested`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Inclusive lower bound on `timestamp` (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Exclusive upper bound on `timestamp` (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueryResult {
    /// Matching events, ordered by session id, then LSN.
    pub events: Vec<Event>,
    /// True when `limit` cut the result short.
    pub truncated: bool,
}

// ---- stats ----

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatsResult {
    pub version: String,
    pub uptime_ms: u64,
    pub pid: u32,
    pub fsync: String,
    pub sessions: u64,
    pub quarantined_sessions: u64,
    pub connections: u64,
    pub subscriptions: u64,
    pub appends: u64,
    pub bytes_written: u64,
    pub fsyncs: u64,
    pub lagged: u64,
    pub frame_errors: u64,
    /// Resident memory of the daemon in bytes, where the OS reports it.
    pub rss_bytes: Option<u64>,
    /// Session logs open now (at most `store.max_open_files`).
    #[serde(default)]
    pub open_files: u64,
    /// Bytes of requests held for clients now (at most `daemon.max_client_memory_bytes`).
    #[serde(default)]
    pub client_memory_bytes: u64,
    /// Requests refused because that budget was spent.
    #[serde(default)]
    pub overloaded: u64,
    /// Raw source events taken by `ingest`.
    #[serde(default)]
    pub ingested: u64,
    /// Per-plugin counters, as in `plugins.list`.
    #[serde(default)]
    pub plugins: Vec<PluginInfo>,
    /// Checkpoints waiting for a decision.
    #[serde(default)]
    pub pending_checkpoints: u64,
    /// The relay to a remote Durable Streams server.
    #[serde(default)]
    pub relay: RelayTotals,
    /// Events hooks spooled while no daemon ran: what waits, and what the drain did.
    #[serde(default)]
    pub spool: SpoolStats,
}

/// The spool, in `stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpoolStats {
    /// Spool files waiting to be drained, and their bytes.
    pub pending_files: u64,
    pub pending_bytes: u64,
    /// Events lost because the spool was full, not yet reported in their sessions.
    pub overflow_pending: u64,
    /// Since the daemon started: events drained, files drained, damaged parts moved aside,
    /// files refused (another user's), lost events reported.
    pub drained_events: u64,
    pub drained_files: u64,
    pub damaged: u64,
    pub refused: u64,
    pub overflow_reported: u64,
    /// Why the last drain stopped early, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

// ---- relay ----

/// `relay.status`: where each relayed session stands on the remote server.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RelayStatusResult {
    /// `[relay] url` is set.
    pub enabled: bool,
    /// `{url}/{prefix}`, the streams' common base.
    pub target: Option<String>,
    /// Why the relay cannot run at all (a missing token variable), if so.
    pub error: Option<String>,
    /// Most lag first.
    pub streams: Vec<RelayStreamStatus>,
    pub totals: RelayTotals,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RelayStreamStatus {
    pub session_id: String,
    /// The newest event in the local log.
    pub local_lsn: u64,
    /// Every event up to this one is on the remote stream.
    pub acked_lsn: u64,
    pub lag: u64,
    /// `live`, `catching_up`, `backing_off`, `failed` or `closed`.
    pub state: String,
    /// When backing off: milliseconds until the next try.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_try_in_ms: Option<u64>,
    /// When backing off or failed: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Bytes of events the server acknowledged.
    pub bytes_sent: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RelayTotals {
    pub enabled: bool,
    pub streams: u64,
    pub lag_events: u64,
    pub failed_streams: u64,
    pub events_sent: u64,
    pub bytes_sent: u64,
    pub batches: u64,
    pub retries: u64,
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

/// A word that names none of an enum's variants (see [`Action`], [`OnTimeout`],
/// [`CheckpointState`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {word:?}")]
pub struct UnknownWord {
    /// What the word was to name, e.g. `action`.
    pub kind: &'static str,
    pub word: String,
}

words! {
    /// What is done with a tool call.
    Action = "action" {
        /// Run it.
        Allow = "allow",
        /// Refuse it.
        Deny = "deny",
        /// Let the agent ask its user as it normally would (or hold it at a checkpoint).
        Ask = "ask",
    }
}

impl Action {
    /// How strict the action is: of several verdicts on one call the strictest wins,
    /// deny over ask over allow.
    pub const fn strictness(self) -> u8 {
        match self {
            Action::Allow => 1,
            Action::Ask => 2,
            Action::Deny => 3,
        }
    }
}

words! {
    /// What a checkpoint's deadline decides when nobody did.
    OnTimeout = "on_timeout" {
        Allow = "allow",
        Deny = "deny",
    }
}

impl OnTimeout {
    /// The action the deadline's decision takes.
    pub const fn action(self) -> Action {
        match self {
            OnTimeout::Allow => Action::Allow,
            OnTimeout::Deny => Action::Deny,
        }
    }
}

words! {
    /// Where a checkpoint stands.
    CheckpointState = "checkpoint state" {
        /// Its request is being written to the log; a client sees it as pending.
        Recording = "recording",
        /// Waiting for a person.
        Pending = "pending",
        Approved = "approved",
        Rejected = "rejected",
        /// Its deadline passed and decided it (see [`OnTimeout`]).
        Expired = "expired",
    }
}

impl CheckpointState {
    /// Not decided yet.
    pub const fn is_pending(self) -> bool {
        matches!(self, CheckpointState::Pending | CheckpointState::Recording)
    }
}

// ---- ingest ----

/// A raw event from an agent's hook, for the pipeline to map, filter and store.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestParams<J = Value> {
    /// Who sent it: `claude-code`, `opencode`, `claude-agent-sdk`, or any name a plugin claims.
    pub source: String,
    /// The source event exactly as the agent produced it.
    pub event: J,
    /// The session to store it in when the mapping does not name one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// When the client stops waiting for the decision (ms since the epoch). A tool call the
    /// daemon gets to only later has run already (the hook gave up and the agent went on): it
    /// is recorded as `checkpoint.bypassed`, never as if a decision had stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_by_ms: Option<u64>,
}

/// One event that an ingest stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestedEvent {
    pub lsn: u64,
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub session_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IngestResult {
    /// The stored events, in the order they were appended (none when plugins dropped them all).
    pub events: Vec<IngestedEvent>,
    /// For a tool call: what policy and plugins decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// The verdict on a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// `allow`, `deny` or `ask` (let the agent ask its user as it normally would).
    pub action: Action,
    /// Why, for the agent and the person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who decided: a plugin's name, a rule, or a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// The tool input to use instead of the original, when the decider edited it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// For `ask`: the checkpoint that holds the call until a person decides (await it with
    /// `checkpoint.await`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointInfo>,
    /// Set when the agent should also end its turn, where it can (a remote stop): Claude
    /// Code gets `"continue": false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop: bool,
}

impl Decision {
    /// `action`, decided by `decided_by`, with no reason given.
    pub fn new(action: Action, decided_by: impl Into<String>) -> Decision {
        Decision {
            action,
            reason: None,
            decided_by: Some(decided_by.into()),
            updated_input: None,
            checkpoint: None,
            stop: false,
        }
    }

    /// Allow, because `reason`, decided by `decided_by`.
    pub fn allow(reason: impl Into<String>, decided_by: impl Into<String>) -> Decision {
        Decision::new(Action::Allow, decided_by).because(reason)
    }

    /// Deny, because `reason`, decided by `decided_by`.
    pub fn deny(reason: impl Into<String>, decided_by: impl Into<String>) -> Decision {
        Decision::new(Action::Deny, decided_by).because(reason)
    }

    /// Ask, because `reason`, decided by `decided_by`.
    pub fn ask(reason: impl Into<String>, decided_by: impl Into<String>) -> Decision {
        Decision::new(Action::Ask, decided_by).because(reason)
    }

    /// The same decision, saying why.
    pub fn because(mut self, reason: impl Into<String>) -> Decision {
        self.reason = Some(reason.into());
        self
    }
}

// ---- checkpoints ----

/// One choice a person may pick for a checkpoint. On the wire either a plain string (its id;
/// `reject` denies, anything else allows) or an object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "OptionWire")]
pub struct CheckpointOption {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// `allow` or `deny`: what picking it does to the call.
    pub action: String,
    /// `session` or `project`: picking it also allows matching calls for the rest of the
    /// session (or in the project directory) until the grant expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OptionWire {
    Id(String),
    Full {
        id: String,
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        action: Option<String>,
        #[serde(default)]
        scope: Option<String>,
    },
}

impl From<OptionWire> for CheckpointOption {
    fn from(w: OptionWire) -> Self {
        let default_action = |id: &str| if id == "reject" { "deny" } else { "allow" }.to_string();
        match w {
            OptionWire::Id(id) => CheckpointOption {
                action: default_action(&id),
                id,
                label: None,
                scope: None,
            },
            OptionWire::Full {
                id,
                label,
                action,
                scope,
            } => CheckpointOption {
                action: action.unwrap_or_else(|| default_action(&id)),
                id,
                label,
                scope,
            },
        }
    }
}

/// `checkpoint.request`: hold something until a person decides. For SDK and FFI callers; an
/// agent's tool calls get theirs through `ingest` and the policy.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRequestParams {
    pub session_id: String,
    /// Stable per thing asked about (a tool call id, say): the same key gets the same
    /// checkpoint, never a second one.
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// One line for the person deciding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The choices (default: approve, reject).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<CheckpointOption>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// `allow` or `deny` (the decision applied at the deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<String>,
}

/// `checkpoint.await`: wait until the checkpoint is decided or expired.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointAwaitParams {
    pub id: String,
    /// The checkpoint's session: lets the daemon find a checkpoint it no longer holds in
    /// memory in that session's log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Give up waiting after this long and return the checkpoint as it stands (pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `checkpoint.resolve`: decide. The first valid decision wins.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointResolveParams {
    pub id: String,
    /// `approve`, `reject`, or the id of one of the checkpoint's options.
    pub decision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The input to run instead (an edited command, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

/// `checkpoint.list`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointListParams {
    /// `pending`, `approved`, `rejected` or `expired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Only calls of this tool (any letter case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Newest first (default: oldest first).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub newest_first: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckpointListResult {
    /// Oldest first (or newest first when asked).
    pub checkpoints: Vec<CheckpointInfo>,
    /// How many matched in all: more than `checkpoints` holds when the limit cut the list.
    #[serde(default)]
    pub total: usize,
}

/// How a checkpoint was decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointDecision {
    /// `approve`, `reject`, an option's id, or the default applied at the deadline.
    pub decision: String,
    /// `allow` or `deny`.
    pub action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The edited input, when the person changed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// `user:<name>` (from the OS credentials of the deciding client), `rule:<n>`, or `timeout`.
    pub decided_by: String,
    pub decided_ms: u64,
    /// The id of the event that recorded the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
}

/// A checkpoint as clients see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    pub id: String,
    pub session_id: String,
    pub key: String,
    /// `recording` (being written), `pending`, `approved`, `rejected` or `expired`.
    pub state: CheckpointState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The tool's input (in lists and awaits that ask for detail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    pub summary: String,
    pub options: Vec<CheckpointOption>,
    pub created_ms: u64,
    pub deadline_ms: u64,
    /// `allow` or `deny`, applied at the deadline.
    pub on_timeout: OnTimeout,
    /// The rule that asked, if a rule did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// LSN of the `checkpoint.requested` event in the session's log.
    #[serde(default)]
    pub lsn: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<CheckpointDecision>,
    /// Whether a waiting client has been handed the decision.
    #[serde(default)]
    pub delivered: bool,
}

impl CheckpointInfo {
    pub fn is_pending(&self) -> bool {
        self.state.is_pending()
    }
}

// ---- plugins ----

/// One plugin as the daemon runs it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginInfo {
    pub name: String,
    /// `lua` or `native`.
    pub kind: String,
    /// `builtin`, or the file it was loaded from.
    pub origin: String,
    /// Sources it maps (empty for a filter or a sink).
    #[serde(default)]
    pub sources: Vec<String>,
    /// Which of `map`, `process`, `decide`, `on_event` it defines.
    #[serde(default)]
    pub hooks: Vec<String>,
    /// `active`, or `disabled` after repeated failures (until it is reloaded).
    pub state: String,
    /// Why it is disabled, or the last error of a newer version of its file that failed to
    /// load (the last good version keeps running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub calls: u64,
    pub errors: u64,
    /// Time spent in the plugin, in microseconds.
    pub micros: u64,
}

/// A plugin file that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginLoadError {
    pub file: String,
    pub error: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PluginsListResult {
    /// The plugin folder in use.
    pub dir: String,
    pub plugins: Vec<PluginInfo>,
    /// Files in the folder that failed to load; earlier good versions stay in `plugins`.
    #[serde(default)]
    pub errors: Vec<PluginLoadError>,
    /// The built-in redaction (not a plugin: it cannot be disabled), since the daemon started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redaction: Option<RedactionStatus>,
}

/// What redaction did since the daemon started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedactionStatus {
    /// Events that went through it (every stored event).
    pub events: u64,
    /// Events in which something was redacted.
    pub redacted: u64,
    /// Events whose content was withheld because redaction failed (each with a
    /// `plugin.error` in its session).
    pub failures: u64,
    /// Time spent redacting, in microseconds (all events).
    #[serde(default)]
    pub micros: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
}

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
