//! The spool: events a hook (or the OpenCode plugin) could not hand to a daemon, kept in
//! `<data_dir>/spool/` until a daemon drains them.
//!
//! Layout, shared with the OpenCode plugin (`scripts/opencode/dstream.js`) and `dstream doctor`:
//! - `spool/<name>.jsonl`: one file per writer run, never changed once it has this name. A
//!   writer writes `.<name>.part` (mode 0600), syncs it, renames it and syncs the folder, so a
//!   `.jsonl` file is whole. Names start with the time in nanoseconds (20 digits), so sorting
//!   them sorts the writes in time.
//! - each line is one [`SpoolRecord`]; the line order is the order of the events.
//! - `spool/overflow.jsonl`: one line per event lost because the spool was full
//!   (`{"at_ms","source","session_id","bytes"}`), until a daemon reports them.
//! - `spool/damaged/`: what a drain could not read (a torn or corrupt tail), moved aside.
//! - `spool/drain.state`: how far a drain got (see [`journal`]).
//!
//! [`write`] is the writers' side (no daemon, no runtime); [`drain`] the daemon's.

pub(crate) mod drain;
mod journal;
mod overflow;
mod read;
pub mod write;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The spool folder of a data directory.
pub fn spool_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("spool")
}

pub use overflow::OVERFLOW_FILE;
/// Where unreadable parts of spool files are moved.
pub const DAMAGED_DIR: &str = "damaged";
/// The version of [`SpoolRecord`] this build writes and reads.
pub const RECORD_VERSION: u32 = 1;

/// One spooled event, one line of a spool file.
#[derive(Debug, Serialize, Deserialize)]
pub struct SpoolRecord<E> {
    /// [`RECORD_VERSION`].
    pub v: u32,
    /// When the writer got the event from the agent (ms since the epoch).
    pub received_ms: u64,
    /// The `source` an `ingest` would have named (`claude-code`, `opencode`, …).
    pub source: String,
    /// The session hint an `ingest` would have given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// What the writer answered the agent, when it decided the call itself: `"deny"` when
    /// a fail-closed hook refused it (then the call did not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered: Option<String>,
    /// The agent's event, as an `ingest` would have sent it.
    pub event: E,
}

/// A pending spool file's name: a `.jsonl` file not hidden.
pub(crate) fn is_pending_name(name: &str) -> bool {
    name.ends_with(".jsonl") && !name.starts_with('.') && name != OVERFLOW_FILE
}

/// A file a writer was still writing (or died writing).
pub(crate) fn is_part_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".jsonl.part")
}

/// What is waiting in a spool folder (read from disk, so it works with no daemon).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backlog {
    /// Spool files waiting to be drained (including ones still being written).
    pub files: u64,
    pub bytes: u64,
    /// Events lost because the spool was full, not yet reported by a daemon.
    pub overflow_events: u64,
    /// Files (or parts of files) moved aside as unreadable.
    pub damaged_files: u64,
}

/// Counts what waits in `data_dir`'s spool.
pub fn backlog(data_dir: &Path) -> Backlog {
    let dir = spool_dir(data_dir);
    let mut b = Backlog::default();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if is_pending_name(&name) || is_part_name(&name) {
                b.files += 1;
                b.bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    b.overflow_events = overflow::count(&dir);
    b.damaged_files = std::fs::read_dir(dir.join(DAMAGED_DIR))
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    b
}
