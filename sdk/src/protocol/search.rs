//! `search` and `reindex`: full-text search over every session's events.

use serde::{Deserialize, Serialize};

/// `search` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SearchParams {
    /// FTS5 syntax: words, `"a phrase"`, `AND` / `OR` / `NOT`, `prefix*`, parentheses. A word
    /// with punctuation (`x.txt`, `foo-bar`) is matched as a phrase.
    pub query: String,
    /// Only this session's events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Only events whose type starts with this (`execution.`, `user.input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_prefix: Option<String>,
    /// Only events stamped at or after this time (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// At most this many hits (default 20, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// One event that matched, best first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    pub session_id: String,
    pub lsn: u64,
    pub timestamp: u64,
    #[serde(rename = "type")]
    pub event_type: String,
    /// About 160 characters of the event's text around the first match, on one line.
    pub snippet: String,
    /// Byte ranges `[start, end)` in `snippet` of the words that matched.
    pub highlights: Vec<[usize; 2]>,
    /// Relevance (bm25): higher is better.
    pub score: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    pub hits: Vec<SearchHit>,
    /// Events in the index, and committed events not indexed yet.
    pub indexed_events: u64,
    pub behind_by: u64,
}

/// `reindex`: the index was dropped and built again from the logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReindexResult {
    pub sessions: u64,
    /// Events with text, now in the index.
    pub events: u64,
    pub elapsed_ms: u64,
}

/// The search index, in `stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchStats {
    pub enabled: bool,
    pub indexed_events: u64,
    /// Committed events not indexed yet.
    pub behind_by: u64,
    /// The index file and its WAL.
    pub index_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The index is letting a burst of appends pass and will catch up from the logs after.
    #[serde(default)]
    pub waiting_out_burst: bool,
    /// Bursts of appends it has let pass since the daemon started.
    #[serde(default)]
    pub bursts_waited_out: u64,
}
