//! How far a drain got, so that a daemon killed in the middle of one ingests every spooled
//! event exactly once after its restart.
//!
//! Before a batch of a file's records goes to the pipeline, `spool/drain.state` is written
//! durably: the file, the index of the batch's first record (every record before it is
//! stored) and the time. Each stored event carries `metadata.spool_id = "<file>#<index>"`.
//! If the daemon dies before the file is done, the next drain of that file skips the records
//! before `first`, and of the batch it was in, the ones whose events are in the store: found
//! by scanning only what was stored since the batch began.

use std::collections::HashSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::write::sync_dir;
use crate::store::Store;

const STATE_FILE: &str = "drain.state";
/// Looked back this far before a batch's start, in case the clock stepped back meanwhile.
const CLOCK_MARGIN_MS: u64 = 60_000;

/// A drain under way: `file`'s records before `first` are stored; the batch from `first`
/// began at `begun_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DrainState {
    pub(crate) file: String,
    pub(crate) first: usize,
    pub(crate) begun_ms: u64,
}

fn path(spool_dir: &Path) -> PathBuf {
    spool_dir.join(STATE_FILE)
}

/// The drain under way when the last daemon stopped, if one was.
pub(crate) fn load(spool_dir: &Path) -> Option<DrainState> {
    let bytes = std::fs::read(path(spool_dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Records `state`, durably, before its batch goes to the pipeline.
pub(crate) fn save(spool_dir: &Path, state: &DrainState) -> io::Result<()> {
    let tmp = spool_dir.join(".drain.state.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(state).map_err(io::Error::other)?)?;
    f.sync_data()?;
    std::fs::rename(&tmp, path(spool_dir))?;
    sync_dir(spool_dir)
}

/// No drain under way (the file it named is gone).
pub(crate) fn clear(spool_dir: &Path) -> io::Result<()> {
    match std::fs::remove_file(path(spool_dir)) {
        Ok(()) => sync_dir(spool_dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The spool id an event stored from record `index` of `file` carries.
pub(crate) fn spool_id(file: &str, index: usize) -> String {
    format!("{file}#{index}")
}

/// The records of `state.file` whose events the store holds, among those stored since the
/// batch began. Blocking.
pub(crate) fn stored_records(store: &Store, state: &DrainState) -> io::Result<HashSet<usize>> {
    #[derive(Deserialize)]
    struct Meta {
        #[serde(default)]
        metadata: Option<SpoolMeta>,
    }
    #[derive(Deserialize)]
    struct SpoolMeta {
        #[serde(default)]
        spool_id: Option<String>,
    }
    let needle = format!("\"spool_id\":\"{}#", state.file);
    let prefix = format!("{}#", state.file);
    let mut found = HashSet::new();
    store
        .scan_since(
            state.begun_ms.saturating_sub(CLOCK_MARGIN_MS),
            &mut |json| {
                // Most events are not from this file: a byte search skips them unparsed.
                if !json.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    return;
                }
                let id = serde_json::from_slice::<Meta>(json)
                    .ok()
                    .and_then(|m| m.metadata?.spool_id);
                if let Some(index) = id
                    .as_deref()
                    .and_then(|id| id.strip_prefix(&prefix))
                    .and_then(|i| i.parse().ok())
                {
                    found.insert(index);
                }
            },
        )
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(found)
}
