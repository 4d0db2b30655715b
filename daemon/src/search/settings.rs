//! `[search]`: whether the full-text index is kept.

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchConfig {
    /// Index committed events and answer `search`; off stops the indexing thread.
    pub enabled: bool,
    /// While appends arrive faster than this (per second, daemon-wide), the index lets them
    /// pass and catches up from the logs after; 0 never does (see `search::pace`).
    pub busy_appends_per_sec: u64,
}
