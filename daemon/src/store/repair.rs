//! Repairing a quarantined log: keep every valid record, move everything else aside, and make
//! sure no LSN is ever handed out twice.
//!
//! Steps, each safe to be interrupted: (1) the damaged bytes are written to
//! `<id>.<ms>.bad` next to the log and synced, so nothing is lost whatever happens next; (2) the
//! LSN jumps the repair leaves, and the first LSN the session may use next, go to
//! `<id>.gaps` (atomic); (3) the log is rewritten with the valid records and renamed into
//! place; (4) it is recovered again like any log at start.

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::StoreError;
use super::gaps::Gaps;
use super::open::{Recovered, recover_session, stamp};
use super::record;
use super::session::Quarantine;
use super::types::StoreSettings;
use crate::vfs::{Open, Vfs};

/// What a repair did.
#[derive(Debug, Clone, Serialize)]
pub struct RepairReport {
    /// Valid records kept in the log.
    pub kept_records: u64,
    /// Bytes moved out of the log.
    pub moved_bytes: u64,
    /// Where they went.
    pub moved_to: PathBuf,
    /// LSN ranges (inclusive) no longer in the log.
    pub lost_lsns: Vec<(u64, u64)>,
    /// LSN of the `log.recovered` event the repair appended; appends continue after it.
    pub resumed_at: u64,
}

pub(crate) fn repair_log(
    vfs: &dyn Vfs,
    sessions_dir: &Path,
    id: &str,
    quarantine: &Quarantine,
    settings: &StoreSettings,
) -> Result<(RepairReport, Recovered), StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    let path = sessions_dir.join(format!("{id}.jsonl"));
    let gaps_path = path.with_extension("gaps");
    let data = vfs.read(&path).map_err(ctx("reading the log to repair"))?;
    let old = Gaps::load(vfs, &gaps_path).map_err(ctx("reading a gaps file"))?;
    // What an archive holds is not the log's to repair: the log is read (and rewritten) from
    // where the archive ends, the part before it staying a hole.
    let floor = super::archive::Archive::open(vfs, &super::archive::path_for(&path))
        .map_err(ctx("reading the session's archive"))?
        .map_or((0, 0), |a| (a.footer.covers_bytes, a.footer.upto_lsn));

    let mut kept = Vec::with_capacity(data.len());
    let mut bad = Vec::new();
    let mut kept_records = 0;
    let mut last = floor.1;
    let mut jumps = old.jumps.clone();
    let mut lost = Vec::new();
    let mut lines_after_prefix = 0u64;
    // The highest LSN any line may have carried, damaged ones included.
    let mut upper = 0u64;
    let mut at = (floor.0 as usize).min(data.len());
    while at < data.len() {
        let end = memchr::memchr(b'\n', &data[at..]).map_or(data.len(), |i| at + i + 1);
        let line = &data[at..end];
        if at as u64 >= quarantine.offset {
            lines_after_prefix += 1;
        }
        let valid = line
            .strip_suffix(b"\n")
            .and_then(|l| record::open(l).ok())
            .map(|(lsn, _)| lsn)
            .filter(|&lsn| lsn > last);
        match valid {
            Some(lsn) => {
                if !old.allows(last, lsn) {
                    jumps.push((last, lsn));
                    lost.push((last + 1, lsn - 1));
                }
                kept.extend_from_slice(line);
                kept_records += 1;
                last = lsn;
            }
            None => {
                // A damaged line may have held an LSN above every good one (after a recorded
                // gap, say): its own prefix if still readable, else at least one more.
                upper = upper.max(record::lsn_of(line).unwrap_or(0)).max(upper + 1);
                bad.extend_from_slice(line);
            }
        }
        upper = upper.max(last);
        at = end;
    }
    // Every line past the good prefix may have carried one LSN, and LSNs were dense: nothing
    // at or below this bound is handed out again.
    let highest = last
        .max(upper)
        .max(quarantine.last_good_lsn + lines_after_prefix)
        .max(old.next_lsn.saturating_sub(1));
    let next_lsn = highest + 1;
    if next_lsn != last + 1 {
        jumps.push((last, next_lsn));
        lost.push((last + 1, next_lsn - 1));
    }

    let moved_to = sessions_dir.join(format!("{id}.{}.bad", stamp()));
    let moved_to = super::fsutil::write_new_unique(vfs, &moved_to, &bad)
        .map_err(ctx("saving the damaged bytes"))?;
    Gaps { jumps, next_lsn }
        .save(vfs, &gaps_path)
        .map_err(ctx("writing the gaps file"))?;
    let tmp = path.with_extension("jsonl.repair");
    vfs.open(&tmp, Open::Truncate)
        .and_then(|f| {
            f.write_at(&kept, floor.0)?;
            f.sync()
        })
        .and_then(|()| vfs.rename(&tmp, &path))
        .and_then(|()| vfs.sync_dir(sessions_dir))
        .map_err(ctx("rewriting the log"))?;
    let _ = vfs.remove(&path.with_extension("idx"));
    tracing::warn!(session = %id, moved_bytes = bad.len(), moved_to = %moved_to.display(), kept_records, "repaired a quarantined log");

    let recovered = recover_session(
        vfs,
        sessions_dir,
        &sessions_dir.with_file_name("quarantine"),
        id.to_string(),
        settings,
    )?;
    if let Some(q) = &recovered.quarantine {
        return Err(StoreError::Quarantined {
            session: id.into(),
            reason: format!("still damaged after repair: {}", q.reason),
        });
    }
    let report = RepairReport {
        kept_records,
        moved_bytes: bad.len() as u64,
        moved_to,
        lost_lsns: lost,
        resumed_at: 0,
    };
    Ok((report, recovered))
}
