//! What the checks share: a check's outcome, what every check may look at, and how paths are
//! shown (quoted as a shell would need them, so a fix can be pasted).

use std::path::PathBuf;

use dstream_daemon::Config;
use dstream_sdk::protocol::{
    BudgetsResult, HelloResult, PluginsListResult, RelayStatusResult, StatsResult,
};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    /// The command (or the one edit) that fixes it; `None` when it is fine.
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// What every check may look at: the paths in force, and the daemon if it answered.
pub struct Context {
    pub config: Config,
    pub socket: PathBuf,
    pub data_dir: PathBuf,
    pub daemon: Option<Answers>,
}

/// This CLI's version: what the daemon and the hooks' binaries should say too.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The daemon's answers, asked once.
pub struct Answers {
    pub hello: HelloResult,
    pub plugins: Result<PluginsListResult, String>,
    pub relay: Result<RelayStatusResult, String>,
    pub stats: Result<StatsResult, String>,
    pub budgets: Result<BudgetsResult, String>,
}

/// `path` as one shell word, for a fix to paste.
pub fn sh(path: &std::path::Path) -> String {
    crate::cli::install::shell::quote(&path.display().to_string())
}
