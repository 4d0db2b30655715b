//! `[search]`: whether the full-text index is kept.

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchConfig {
    /// Index committed events and answer `search`; off stops the indexing thread.
    pub enabled: bool,
}
