//! Sessions: hello, append, read, subscribe and its notifications, listing, gc, fork,
//! repair, query, compress.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{Event, NewEvent};

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
    /// Only events whose text matches this search query (through the search index; the
    /// best 1,000 matches are filtered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueryResult {
    /// Matching events, ordered by session id, then LSN.
    pub events: Vec<Event>,
    /// True when `limit` cut the result short.
    pub truncated: bool,
}
