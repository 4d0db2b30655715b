//! Forking a session: a new session whose events 1..=k are its parent's and whose next append
//! takes k + 1.
//!
//! The fork is a copy, not a read-through: the parent's records 1..=k, read through its
//! archive and log (so LSNs are kept), each line as stored but saying the parent's
//! `session_id` (which the parent's own lines leave out), sealed again, go to a temporary
//! file, which is synced and indexed as it is written; a sidecar `<new>.fork` names the parent
//! and k. Then, under the store's session map lock (so no append can reach the new id
//! in between), the sidecar and the log are renamed into place, the folder synced after each,
//! and the session registered. The log's rename is the commit point: a crash before it leaves
//! only temporary files and perhaps a sidecar without a log, which the next start removes
//! ([`clean_leftovers`]). A copy keeps every later part (reads, recovery, the relay, repair,
//! retention) unaware of forks; it costs a sequential copy of the prefix, measured in the
//! commit that added it.

use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::StoreError;
use super::gaps::Gaps;
use super::index::{IndexEntry, SparseIndex};
use super::record;
use super::session::{Session, SessionMeta, SessionState};
use super::types::ForkOrigin;
use crate::vfs::{Open, Vfs};

/// What a fork made.
#[derive(Debug, Clone)]
pub struct ForkReport {
    pub session_id: String,
    pub origin: ForkOrigin,
    /// Bytes copied: the new log's length.
    pub bytes: u64,
    /// The last LSN in the new log (below `fork_lsn` only if the parent has a repair gap there).
    pub last_lsn: u64,
}

/// A temporary file of a fork in progress: `.<name>.forking` (a leading dot is never a
/// session id, so it cannot be mistaken for a log).
fn temp(path: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(".forking");
    crate::vfs::parent(path).join(name)
}

/// At start, before the logs are listed: a fork that did not reach its commit point leaves
/// temporary files and perhaps a sidecar (and gaps file) without a log; they go.
pub(crate) fn clean_leftovers(vfs: &dyn Vfs, sessions_dir: &Path) -> io::Result<()> {
    let mut removed = false;
    for name in vfs.list_dir(sessions_dir)? {
        let Some(name) = name.to_str() else { continue };
        let path = sessions_dir.join(name);
        if name.starts_with('.') && name.ends_with(".forking") {
            vfs.remove(&path)?;
            removed = true;
        } else if let Some(id) = name.strip_suffix(".fork") {
            let log = sessions_dir.join(format!("{id}.jsonl"));
            if !vfs.exists(&log) {
                tracing::info!(session = %id, "removing what an unfinished fork left");
                vfs.remove(&path)?;
                let gaps = log.with_extension("gaps");
                if vfs.exists(&gaps) {
                    vfs.remove(&gaps)?;
                }
                removed = true;
            }
        }
    }
    if removed {
        vfs.sync_dir(sessions_dir)?;
    }
    Ok(())
}

/// The copy of the parent's prefix 1..=`at`: where it ends, its index, the last record's LSN
/// and timestamp.
struct Prefix {
    end: u64,
    index: SparseIndex,
    last_lsn: u64,
    last_ts: u64,
}

/// Writes the parent's records 1..=`at` (read through its archive and log) as lines of a new
/// file at `to`, synced, indexed every `interval` bytes as the commit indexes a log. Each line
/// is the parent's as stored, but for its `session_id`, which the parent's own lines leave out
/// and the copy says; sealed again, each gets its own CRC.
fn copy_events(
    vfs: &dyn Vfs,
    parent: &Session,
    at: u64,
    to: &Path,
    interval: u64,
) -> Result<Prefix, StoreError> {
    let io_err = |e: io::Error| StoreError::io("writing the fork", &e);
    let out = vfs.open(to, Open::Truncate).map_err(io_err)?;
    let (mut end, mut from, mut last) = (0u64, 1u64, None);
    let mut index = SparseIndex::default();
    let mut line = Vec::new();
    while from <= at {
        let page = super::reader::read_range(parent, from, at, 4096, 8 << 20)?;
        let Some(tail) = page.last() else { break };
        from = tail.lsn + 1;
        let mut chunk = Vec::new();
        for e in &page {
            let offset = end + chunk.len() as u64;
            if index.last().is_none_or(|l| offset >= l.offset + interval) {
                index.push(IndexEntry { lsn: e.lsn, offset });
            }
            line.clear();
            e.write_with_session(&mut line);
            record::seal(&line, &mut chunk);
        }
        last = page.into_iter().last();
        out.write_at(&chunk, end).map_err(io_err)?;
        end += chunk.len() as u64;
    }
    out.sync().map_err(io_err)?;
    let corrupt = |reason: String| StoreError::Corrupt {
        session: parent.id.clone(),
        lsn: at,
        reason,
    };
    let last = last.ok_or_else(|| corrupt(format!("no record at or before lsn {at}")))?;
    #[derive(Deserialize)]
    struct Ts {
        timestamp: u64,
    }
    line.clear();
    last.write_to(&mut line);
    let ts: Ts = serde_json::from_slice(&line).map_err(|e| corrupt(e.to_string()))?;
    Ok(Prefix {
        end,
        index,
        last_lsn: last.lsn,
        last_ts: ts.timestamp,
    })
}

/// What is made off the async workers before the fork is registered.
pub(super) struct Prepared {
    pub(super) state: SessionState,
    pub(super) origin: ForkOrigin,
    /// Temporary file → final name, in the order they are renamed (the log last).
    pub(super) renames: Vec<(PathBuf, PathBuf)>,
}

pub(super) fn prepare(
    vfs: &dyn Vfs,
    parent: &Session,
    at: u64,
    new_log: &Path,
    index_interval: u64,
) -> Result<Prepared, StoreError> {
    // Read through the parent's archive and log alike: a compressed parent's first part is in
    // its archive (its log there is a hole).
    let log_tmp = temp(new_log);
    let prefix = copy_events(vfs, parent, at, &log_tmp, index_interval).inspect_err(|_| {
        let _ = vfs.remove(&log_tmp);
    })?;
    let mut renames = Vec::new();
    let result = (|| {
        let origin = ForkOrigin {
            forked_from: parent.id.clone(),
            fork_lsn: at,
            forked_at_ms: crate::util::time::now_ms(),
        };
        // The parent's repair gaps below the fork point, and one up to it if the parent's last
        // record there is below it: the fork's next append takes `at + 1` whatever happened.
        let parent_gaps = parent.gaps.clone();
        let mut gaps = Gaps {
            jumps: parent_gaps
                .jumps
                .iter()
                .copied()
                .filter(|&(_, after)| after <= prefix.last_lsn)
                .collect(),
            next_lsn: at + 1,
        };
        if prefix.last_lsn < at {
            gaps.jumps.push((prefix.last_lsn, at + 1));
        }
        if !gaps.jumps.is_empty() {
            let to = new_log.with_extension("gaps");
            let tmp = temp(&to);
            renames.push((tmp.clone(), to));
            let bytes = serde_json::to_vec(&gaps).map_err(io::Error::other)?;
            write_synced(vfs, &tmp, &bytes)?;
        }
        let sidecar = new_log.with_extension("fork");
        let tmp = temp(&sidecar);
        renames.push((tmp.clone(), sidecar));
        let bytes = serde_json::to_vec(&origin).map_err(io::Error::other)?;
        write_synced(vfs, &tmp, &bytes)?;
        renames.push((log_tmp.clone(), new_log.to_path_buf()));
        Ok::<_, io::Error>((origin, gaps))
    })();
    let (origin, gaps) = match result {
        Ok(made) => made,
        Err(e) => {
            remove_temps(vfs, &renames);
            return Err(StoreError::io("writing the fork", &e));
        }
    };
    let parent_meta = parent.meta();
    let state = SessionState {
        last_lsn: prefix.last_lsn,
        len: prefix.end,
        index: prefix.index,
        meta: SessionMeta {
            stream_id: parent_meta.stream_id.or_else(|| Some(parent.id.clone())),
            first_ts: parent_meta.first_ts,
            last_ts: prefix.last_ts,
            bytes: prefix.end,
        },
        gaps,
        archive: None,
        fork: Some(origin.clone()),
    };
    Ok(Prepared {
        state,
        origin,
        renames,
    })
}

fn write_synced(vfs: &dyn Vfs, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let f = vfs.open(path, Open::Truncate)?;
    f.write_at(bytes, 0)?;
    f.sync()
}

pub(super) fn remove_temps(vfs: &dyn Vfs, renames: &[(PathBuf, PathBuf)]) {
    for (tmp, _) in renames {
        let _ = vfs.remove(tmp);
    }
}

/// A default name for a fork of `parent`: `<parent>.fork-<ulid>`, the parent's part shortened
/// if the whole would be too long for a session id.
pub fn default_fork_id(parent: &str) -> String {
    let suffix = format!(".fork-{}", ulid::Ulid::new().to_string().to_lowercase());
    let room = dstream_sdk::event::MAX_SESSION_ID_LEN - suffix.len();
    let mut head = parent;
    while head.len() > room {
        head = &head[..head.len() - 1];
    }
    format!("{head}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ids_are_valid_session_ids() {
        let id = default_fork_id("abc");
        assert!(id.starts_with("abc.fork-"));
        assert!(dstream_sdk::validate_session_id(&id).is_ok());
        let long = "x".repeat(128);
        let id = default_fork_id(&long);
        assert!(dstream_sdk::validate_session_id(&id).is_ok(), "{id}");
    }
}
