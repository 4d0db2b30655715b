//! What the daemon reports about itself: `stats` and the relay's state.

use serde::{Deserialize, Serialize};

use super::*;

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
    /// Appends committed on the thread that took the request (a lone client's), without the
    /// hand-over to the commit thread.
    #[serde(default)]
    pub direct_appends: u64,
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
    /// The HTTP listener (the OTLP receiver).
    #[serde(default)]
    pub http: HttpStats,
    /// The full-text search index.
    #[serde(default)]
    pub search: SearchStats,
}

/// The HTTP listener, in `stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpStats {
    /// Where it listens (`127.0.0.1:4438`), when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Why it does not listen, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off: Option<String>,
    /// The file holding the listener's token (readable by its owner only), for clients that
    /// log in with it (`dstream open`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    /// OTLP log records received, and metric data points.
    pub otlp_records: u64,
    pub otlp_metric_points: u64,
    /// Requests refused for their Host, Origin or token.
    pub refused: u64,
    /// `[otlp] forward_to`, when requests are forwarded there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_to: Option<String>,
    /// Requests delivered to it; dropped (its queue full, or refused by it); failed attempts
    /// (each retry counts), and the last failure.
    #[serde(default)]
    pub forwarded: u64,
    #[serde(default)]
    pub forward_dropped: u64,
    #[serde(default)]
    pub forward_errors: u64,
    /// Body bytes waiting to be forwarded (at most 8 MiB).
    #[serde(default)]
    pub forward_queued_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_last_error: Option<String>,
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

/// `usage` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UsageParams {
    /// `day` [default], `week`, `month`, `session`, `model`, `project` or `agent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Only this session's lineage (the session and its subagents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Inclusive lower bound on the events' `timestamp` (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Exclusive upper bound on the events' `timestamp` (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    /// Read the logs even where the search index could answer (slower, the same answer).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scan: bool,
}

/// One row of `usage`: a group's model calls, tokens by kind, and cost in millionths of a
/// dollar (integers, so sums are exact).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRow {
    pub key: String,
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_usd_micros: u64,
}

/// A session whose agent reported a total that differs from the sum of its model calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageMismatch {
    pub session_id: String,
    pub reported_usd_micros: u64,
    pub counted_usd_micros: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageResult {
    pub by: String,
    pub rows: Vec<UsageRow>,
    pub total: UsageRow,
    #[serde(default)]
    pub mismatches: Vec<UsageMismatch>,
    /// The budgets configured, with what their current period has spent.
    #[serde(default)]
    pub budgets: Vec<BudgetStatus>,
    /// Where the sums came from: `index` (the search index's usage tables) or `logs`.
    #[serde(default)]
    pub source: String,
}

/// One `[[budgets]]` entry and where it stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStatus {
    pub name: String,
    /// `session`, `day`, `week` or `project`.
    pub scope: String,
    /// `notify`, `ask` or `deny`.
    pub action: String,
    pub limit_usd_micros: u64,
    /// The current period (`2026-11-25`, `2026-W48`), or for `session` and `project` budgets
    /// the lineage or folder nearest its limit.
    pub key: String,
    pub spent_usd_micros: u64,
    pub crossed: bool,
    /// The crossing is recorded (`usage.budget_exceeded`).
    pub recorded: bool,
    /// False while the daemon is still summing the logs after a start.
    pub ready: bool,
}

/// `budgets` result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetsResult {
    pub budgets: Vec<BudgetStatus>,
}
