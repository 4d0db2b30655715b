//! Opening the data directory: take its lock, recover every log (in parallel), put back what
//! the write-ahead log holds beyond the logs' ends, and start the write-ahead log over.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use super::fsutil::{self, create_private_dir, save_range, sync_dir};
use super::gaps::Gaps;
use super::index::SparseIndex;
use super::recovery::{self, Damage};
use super::wal::Wal;
use super::{
    Quarantine, RecoveryNote, SessionMeta, SessionState, StoreError, StoreSettings, commit, record,
};

/// A session as recovery left it.
pub(crate) struct Recovered {
    pub id: String,
    pub path: PathBuf,
    pub state: SessionState,
    pub quarantine: Option<Quarantine>,
    pub note: Option<RecoveryNote>,
}

pub(crate) fn open_blocking(
    data_dir: &Path,
    settings: &StoreSettings,
) -> Result<(File, Wal, Vec<Recovered>), StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    create_private_dir(data_dir).map_err(ctx("creating the data directory"))?;
    let lock = fsutil::take_lock(data_dir)?;
    let sessions_dir = data_dir.join("sessions");
    let quarantine_dir = data_dir.join("quarantine");
    create_private_dir(&sessions_dir).map_err(ctx("creating the sessions directory"))?;
    create_private_dir(&quarantine_dir).map_err(ctx("creating the quarantine directory"))?;

    let mut ids = Vec::new();
    for entry in fs::read_dir(&sessions_dir).map_err(ctx("listing sessions"))? {
        let name = entry.map_err(ctx("listing sessions"))?.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
            continue;
        };
        if dstream_sdk::validate_session_id(id).is_ok() {
            ids.push(id.to_string());
        } else {
            tracing::warn!(file = ?name, "ignoring a log whose name is not a valid session id");
        }
    }

    // Recover logs in parallel: the work is reading and checksumming, one file per thread.
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(ids.len().max(1));
    let chunks: Vec<Vec<String>> = (0..threads)
        .map(|t| ids.iter().skip(t).step_by(threads).cloned().collect())
        .collect();
    let mut recovered = Vec::new();
    std::thread::scope(|scope| -> Result<(), StoreError> {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(|| {
                    chunk
                        .into_iter()
                        .map(|id| recover_session(&sessions_dir, &quarantine_dir, id, settings))
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        for h in handles {
            recovered.extend(h.join().map_err(|_| {
                StoreError::io("recovery", &io::Error::other("a recovery thread panicked"))
            })??);
        }
        Ok(())
    })?;
    let (wal, recovered) = replay_wal(data_dir, settings, recovered)?;
    Ok((lock, wal, recovered))
}

/// Puts back into the session logs whatever the write-ahead log holds beyond their ends (the
/// logs are synced only at checkpoints, so after a power loss the WAL may be ahead), then
/// starts the WAL over.
fn replay_wal(
    data_dir: &Path,
    settings: &StoreSettings,
    mut recovered: Vec<Recovered>,
) -> Result<(Wal, Vec<Recovered>), StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    let sessions_dir = data_dir.join("sessions");
    let quarantine_dir = data_dir.join("quarantine");
    let (mut wal, records) = Wal::open(&data_dir.join("wal"), settings.wal_bytes)
        .map_err(ctx("opening the write-ahead log"))?;
    let mut by_session: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
    for r in records {
        by_session.entry(r.session).or_default().push(r.line);
    }
    for (id, lines) in by_session {
        if dstream_sdk::validate_session_id(&id).is_err() {
            tracing::warn!(session = %id, "write-ahead log names an invalid session; skipped");
            continue;
        }
        let at = recovered.iter().position(|r| r.id == id);
        let (mut next, quarantined) = match at.map(|i| &recovered[i]) {
            Some(r) => (r.state.last_lsn + 1, r.quarantine.is_some()),
            None => (1, false),
        };
        let mut missing = Vec::new();
        let mut stray = Vec::new();
        for line in lines {
            match record::lsn_of(&line) {
                Some(lsn) if lsn < next => {}
                Some(lsn) if lsn == next && !quarantined => {
                    missing.extend_from_slice(&line);
                    next += 1;
                }
                _ => stray.extend_from_slice(&line),
            }
        }
        if !stray.is_empty() {
            // Nothing the WAL held is dropped: what cannot go back in order is kept aside.
            let to = quarantine_dir.join(format!("{id}.{}.wal", stamp()));
            fsutil::private_file()
                .write(true)
                .create_new(true)
                .open(&to)
                .and_then(|mut f| io::Write::write_all(&mut f, &stray).and_then(|()| f.sync_all()))
                .map_err(ctx("saving write-ahead records"))?;
            tracing::error!(session = %id, saved_to = %to.display(), "write-ahead records that do not continue the log were kept aside");
        }
        if missing.is_empty() {
            continue;
        }
        let path = sessions_dir.join(format!("{id}.jsonl"));
        let mut file = fsutil::private_file()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(ctx("replaying the write-ahead log"))?;
        io::Write::write_all(&mut file, &missing)
            .and_then(|()| file.sync_all())
            .map_err(ctx("replaying the write-ahead log"))?;
        tracing::info!(session = %id, bytes = missing.len(), "restored records from the write-ahead log");
        let again = recover_session(&sessions_dir, &quarantine_dir, id.clone(), settings)?;
        match at {
            Some(i) => recovered[i] = again,
            None => recovered.push(again),
        }
    }
    sync_dir(&sessions_dir).map_err(ctx("syncing the sessions directory"))?;
    wal.reset().map_err(ctx("restarting the write-ahead log"))?;
    Ok((wal, recovered))
}

pub(crate) fn stamp() -> u64 {
    commit::now_ms()
}

pub(crate) fn recover_session(
    sessions_dir: &Path,
    quarantine_dir: &Path,
    id: String,
    settings: &StoreSettings,
) -> Result<Recovered, StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    let path = sessions_dir.join(format!("{id}.jsonl"));
    let idx_path = path.with_extension("idx");
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(ctx("opening a log"))?;
    let loaded = SparseIndex::load(&idx_path).unwrap_or_else(|e| {
        tracing::warn!(session = %id, error = %e, "index unreadable; rebuilding");
        None
    });
    let gaps = Gaps::load(&path.with_extension("gaps")).map_err(ctx("reading a gaps file"))?;
    let scan = recovery::scan(
        &file,
        loaded.as_ref(),
        settings.verify_on_start,
        settings.index_interval_bytes,
        &gaps,
    )
    .map_err(ctx("scanning a log"))?;
    let meta = SessionMeta {
        stream_id: scan.stream_id.clone(),
        first_ts: scan.first_ts,
        last_ts: scan.last_ts,
        bytes: scan.good_len,
    };
    let mut note = None;
    match scan.damage {
        Damage::Corrupt { reason, offset } => {
            // The log stays where it is: its good prefix is readable, and `repair` moves the
            // damaged part aside. Nothing is rewritten until someone asks for that.
            tracing::error!(session = %id, %reason, offset, "corrupt log quarantined; run `dstream repair {id}`");
            let quarantine = Quarantine {
                reason: reason.clone(),
                offset,
                last_good_lsn: scan.last_lsn,
            };
            let state = SessionState {
                last_lsn: scan.last_lsn,
                len: scan.good_len,
                index: scan.index,
                meta,
                gaps,
            };
            return Ok(Recovered {
                id: id.clone(),
                path,
                state,
                quarantine: Some(quarantine),
                note: Some(RecoveryNote::Quarantined {
                    session: id,
                    reason,
                    offset,
                }),
            });
        }
        Damage::TornTail { reason } => {
            let saved_to = quarantine_dir.join(format!("{id}.{}.tail", stamp()));
            let cut_bytes = scan.file_len - scan.good_len;
            save_range(&file, scan.good_len, cut_bytes, &saved_to)
                .map_err(ctx("saving a torn tail"))?;
            file.set_len(scan.good_len)
                .and_then(|()| file.sync_all())
                .map_err(ctx("cutting a torn tail"))?;
            tracing::warn!(session = %id, %reason, cut_bytes, saved_to = %saved_to.display(), "torn tail cut off");
            note = Some(RecoveryNote::TornTail {
                session: id.clone(),
                reason,
                cut_bytes,
                saved_to,
                last_lsn: scan.last_lsn,
            });
        }
        Damage::None => {}
    }
    if scan.index_rebuilt || note.is_some() {
        write_index(&idx_path, &scan.index).map_err(ctx("writing an index"))?;
    }
    let state = SessionState {
        last_lsn: scan.last_lsn,
        len: scan.good_len,
        index: scan.index,
        meta,
        gaps,
    };
    Ok(Recovered {
        id,
        path,
        state,
        quarantine: None,
        note,
    })
}

fn write_index(path: &Path, index: &SparseIndex) -> io::Result<()> {
    let tmp = path.with_extension("idx.tmp");
    fsutil::private_file()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?
        .write_all(&index.to_bytes())?;
    fs::rename(&tmp, path)
}
