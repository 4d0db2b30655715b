//! Events lost because the spool was full: one line each in `spool/overflow.jsonl`, written by
//! the writer that lost them, reported by the daemon (a `spool.overflow` event per session)
//! and then removed. Never silent: until a daemon reports them, `dstream doctor` counts them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Lines about events lost because the spool was full.
pub const OVERFLOW_FILE: &str = "overflow.jsonl";

/// One lost event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Note {
    pub(crate) at_ms: u64,
    pub(crate) source: String,
    #[serde(default)]
    pub(crate) session_id: Option<String>,
    pub(crate) bytes: u64,
}

/// Lost events of one session, summed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Lost {
    pub(crate) events: u64,
    pub(crate) bytes: u64,
    pub(crate) first_ms: u64,
    pub(crate) last_ms: u64,
    pub(crate) source: String,
}

/// How many lost events `spool_dir` holds notes of (a line that does not parse counts too).
pub(crate) fn count(spool_dir: &Path) -> u64 {
    std::fs::read(spool_dir.join(OVERFLOW_FILE))
        .map(|b| b.split(|c| *c == b'\n').filter(|l| !l.is_empty()).count() as u64)
        .unwrap_or(0)
}

/// The notes in `spool_dir`, summed per session (`None`: the writer knew no session; also
/// for lines that do not parse, which still count).
pub(crate) fn read(spool_dir: &Path) -> BTreeMap<Option<String>, Lost> {
    let mut out: BTreeMap<Option<String>, Lost> = BTreeMap::new();
    let Ok(bytes) = std::fs::read(spool_dir.join(OVERFLOW_FILE)) else {
        return out;
    };
    for line in bytes.split(|c| *c == b'\n').filter(|l| !l.is_empty()) {
        let note: Note = serde_json::from_slice(line).unwrap_or(Note {
            at_ms: 0,
            source: String::new(),
            session_id: None,
            bytes: line.len() as u64,
        });
        let lost = out.entry(note.session_id).or_default();
        lost.events += 1;
        lost.bytes += note.bytes;
        if lost.first_ms == 0 || (note.at_ms != 0 && note.at_ms < lost.first_ms) {
            lost.first_ms = note.at_ms;
        }
        lost.last_ms = lost.last_ms.max(note.at_ms);
        if lost.source.is_empty() {
            lost.source = note.source;
        }
    }
    out
}
