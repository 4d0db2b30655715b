//! Opening the data directory: take its lock, recover every log (in parallel), put back what
//! the write-ahead log holds beyond the logs' ends, and start the write-ahead log over.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::archive::{self, Archive};
use super::error::StoreError;
use super::fork;
use super::fsutil::{self, save_range};
use super::gaps::Gaps;
use super::index::{IndexEntry, SparseIndex};
use super::recovery::{self, Damage};
use super::session::{Quarantine, SessionMeta, SessionState};
use super::tombstone::{self, Tombstone};
use super::types::ForkOrigin;
use super::types::{RecoveryNote, StoreSettings};
use super::wal::{Opened, Wal, WalEntry, WalRecord};
use crate::vfs::{Open, Vfs, VfsFileRef, VfsLock};

/// A session as recovery left it.
pub(crate) struct Recovered {
    pub id: String,
    pub path: PathBuf,
    pub state: SessionState,
    pub quarantine: Option<Quarantine>,
    pub note: Option<RecoveryNote>,
    /// LSNs a lease covered that the log does not hold: never to be used.
    pub lease_gap: Option<(u64, u64)>,
}

/// The data directory's lock, the write-ahead log, every session as recovery left it, and
/// the tombstones of deleted sessions.
pub(crate) type OpenedStore = (VfsLock, Wal, Vec<Recovered>, HashMap<String, Tombstone>);

pub(crate) fn open_blocking(
    vfs: &dyn Vfs,
    data_dir: &Path,
    settings: &StoreSettings,
) -> Result<OpenedStore, StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    if !vfs.exists(data_dir) {
        vfs.create_dir_all(data_dir)
            .and_then(|()| vfs.sync_dir(crate::vfs::parent(data_dir)))
            .map_err(ctx("creating the data directory"))?;
    }
    let lock = fsutil::take_lock(vfs, data_dir)?;
    let sessions_dir = data_dir.join("sessions");
    let quarantine_dir = data_dir.join("quarantine");
    for (dir, what) in [
        (&sessions_dir, "creating the sessions directory"),
        (&quarantine_dir, "creating the quarantine directory"),
    ] {
        if !vfs.exists(dir) {
            vfs.create_dir_all(dir).map_err(ctx(what))?;
            // The directory's own entry, so that files synced into it are reachable.
            vfs.sync_dir(data_dir).map_err(ctx(what))?;
        }
    }

    // The WAL first: it puts back every synced record at its place in its log, over whatever
    // a power failure left there, before the logs are checked.
    let Opened {
        mut wal,
        records,
        legacy,
    } = Wal::open(vfs, &data_dir.join("wal"), settings.wal_bytes)
        .map_err(ctx("opening the write-ahead log"))?;
    keep_legacy_records(vfs, &quarantine_dir, legacy)?;
    let mut leases = replay_wal(vfs, &sessions_dir, records)?;
    // After the replay, which may have written a deleted session's lines back.
    let gone =
        tombstone::finish_deletions(vfs, &sessions_dir).map_err(ctx("finishing a deletion"))?;
    leases.retain(|id, _| !gone.contains_key(id));

    fork::clean_leftovers(vfs, &sessions_dir).map_err(ctx("removing an unfinished fork"))?;
    let mut ids = Vec::new();
    for name in vfs
        .list_dir(&sessions_dir)
        .map_err(ctx("listing sessions"))?
    {
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
    ids.sort_unstable();
    let threads = match vfs.concurrent() {
        true => std::thread::available_parallelism().map_or(2, |n| n.get()),
        false => 1,
    }
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
                        .filter_map(|id| {
                            match recover_session(vfs, &sessions_dir, &quarantine_dir, id, settings)
                            {
                                // Left alone (and not followed): the log says so.
                                Err(StoreError::Io { context, .. }) if context == SYMLINKED_LOG => {
                                    None
                                }
                                other => Some(other),
                            }
                        })
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
    honour_leases(vfs, &sessions_dir, leases, &mut recovered)?;
    vfs.sync_dir(&sessions_dir)
        .map_err(ctx("syncing the sessions directory"))?;
    wal.reset().map_err(ctx("restarting the write-ahead log"))?;
    Ok((lock, wal, recovered, gone))
}

/// Writes every line the write-ahead log holds back at its offset in its session's log (the
/// logs are synced only at checkpoints, so after a power loss the WAL may be ahead of them,
/// and their unsynced tails may be torn or hold holes). Returns each session's lease.
fn replay_wal(
    vfs: &dyn Vfs,
    sessions_dir: &Path,
    records: Vec<WalRecord>,
) -> Result<HashMap<String, u64>, StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    let mut leases: HashMap<String, u64> = HashMap::new();
    let mut logs: HashMap<String, (VfsFileRef, u64)> = HashMap::new();
    for r in records {
        if dstream_sdk::validate_session_id(&r.session).is_err() {
            tracing::warn!(session = %r.session, "write-ahead log names an invalid session; skipped");
            continue;
        }
        match r.entry {
            WalEntry::Lease { upto } => {
                let lease = leases.entry(r.session).or_default();
                *lease = (*lease).max(upto);
            }
            WalEntry::Line { offset, line } => {
                if !logs.contains_key(&r.session) {
                    let path = sessions_dir.join(format!("{}.jsonl", r.session));
                    let file = vfs
                        .open(&path, Open::Create)
                        .map_err(ctx("replaying the write-ahead log"))?;
                    logs.insert(r.session.clone(), (file, 0));
                }
                let (file, bytes) = logs.get_mut(&r.session).expect("inserted above");
                file.write_at(&line, offset)
                    .map_err(ctx("replaying the write-ahead log"))?;
                *bytes += line.len() as u64;
            }
        }
    }
    let mut logs: Vec<_> = logs.into_iter().collect();
    logs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for (id, (file, bytes)) in logs {
        file.sync().map_err(ctx("replaying the write-ahead log"))?;
        tracing::debug!(session = %id, bytes, "wrote back records from the write-ahead log");
    }
    vfs.sync_dir(sessions_dir)
        .map_err(ctx("syncing the sessions directory"))?;
    Ok(leases)
}

/// A session may have acknowledged LSNs up to its lease before the power failed and lost them
/// with the unsynced tail: it resumes above the lease, and the gap is recorded (the gaps file
/// first, so that even a crash right now cannot hand those LSNs out again).
fn honour_leases(
    vfs: &dyn Vfs,
    sessions_dir: &Path,
    leases: HashMap<String, u64>,
    recovered: &mut Vec<Recovered>,
) -> Result<(), StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    let mut leases: Vec<(String, u64)> = leases.into_iter().collect();
    leases.sort();
    for (id, upto) in leases {
        let at = match recovered.iter().position(|r| r.id == id) {
            Some(at) => at,
            None => {
                // Its log never reached the disk: an empty one keeps the session (and its gap).
                let path = sessions_dir.join(format!("{id}.jsonl"));
                vfs.open(&path, Open::Create)
                    .and_then(|f| f.sync())
                    .map_err(ctx("recreating a lost log"))?;
                recovered.push(Recovered {
                    id: id.clone(),
                    path,
                    state: SessionState::default(),
                    quarantine: None,
                    note: None,
                    lease_gap: None,
                });
                recovered.len() - 1
            }
        };
        let r = &mut recovered[at];
        let last = r.state.last_lsn;
        let next = r.state.gaps.next_lsn.max(last + 1);
        if upto < next {
            continue;
        }
        let mut gaps = r.state.gaps.clone();
        gaps.jumps.push((last, upto + 1));
        gaps.next_lsn = upto + 1;
        gaps.save(vfs, &r.path.with_extension("gaps"))
            .map_err(ctx("writing a gaps file"))?;
        r.state.gaps = gaps;
        tracing::warn!(session = %id, first = next, last = upto, "events after lsn {last} may have been acknowledged and lost with unsynced data; lsns up to {upto} will not be used");
        r.lease_gap = Some((next, upto));
    }
    Ok(())
}

/// Records of a write-ahead log of the first format carry no offsets to replay by (it is
/// found only after an upgrade that did not stop the daemon cleanly): nothing is dropped,
/// each session's lines are kept aside in the quarantine folder, and the log says where.
fn keep_legacy_records(
    vfs: &dyn Vfs,
    quarantine_dir: &Path,
    legacy: Vec<(String, Vec<u8>)>,
) -> Result<(), StoreError> {
    let mut by_session: HashMap<String, Vec<u8>> = HashMap::new();
    for (id, line) in legacy {
        by_session.entry(id).or_default().extend_from_slice(&line);
    }
    let mut by_session: Vec<_> = by_session.into_iter().collect();
    by_session.sort_unstable();
    for (id, lines) in by_session {
        if dstream_sdk::validate_session_id(&id).is_err() {
            continue;
        }
        let to = quarantine_dir.join(format!("{id}.{}.wal", stamp()));
        let to = fsutil::write_new_unique(vfs, &to, &lines)
            .map_err(|e| StoreError::io("saving write-ahead records", &e))?;
        tracing::error!(session = %id, saved_to = %to.display(), "a write-ahead log of an older dstream held records; they are kept aside, not replayed");
    }
    Ok(())
}

/// The context of the error for a log that is a symlink (skipped at start).
const SYMLINKED_LOG: &str = "a session log is a symbolic link";

pub(crate) fn stamp() -> u64 {
    crate::util::time::now_ms()
}

pub(crate) fn recover_session(
    vfs: &dyn Vfs,
    sessions_dir: &Path,
    quarantine_dir: &Path,
    id: String,
    settings: &StoreSettings,
) -> Result<Recovered, StoreError> {
    let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
    let path = sessions_dir.join(format!("{id}.jsonl"));
    let idx_path = path.with_extension("idx");
    let file = match vfs.open(&path, Open::Existing) {
        Err(e) if crate::vfs::is_symlink_refusal(&e) => {
            tracing::error!(session = %id, path = %path.display(), "this log is a symbolic link: it is not followed, and the session is skipped");
            return Err(StoreError::io(SYMLINKED_LOG, &e));
        }
        opened => opened.map_err(ctx("opening a log"))?,
    };
    let loaded = SparseIndex::load(vfs, &idx_path).unwrap_or_else(|e| {
        tracing::warn!(session = %id, error = %e, "index unreadable; rebuilding");
        None
    });
    let gaps = Gaps::load(vfs, &path.with_extension("gaps")).map_err(ctx("reading a gaps file"))?;
    let fork = ForkOrigin::load(vfs, &path).unwrap_or_else(|e| {
        tracing::warn!(session = %id, error = %e, "fork sidecar unreadable; the session is shown as no fork");
        None
    });
    // A compression that stopped before its rename left only a temporary file.
    let zst = archive::path_for(&path);
    let _ = vfs.remove(&zst.with_extension("zst.tmp"));
    // The log's first part may be a hole now: its events are in the archive. An archive that
    // cannot be read is the only copy of them: quarantine, never guess.
    let archive = match Archive::open(vfs, &zst) {
        Ok(a) => a.map(Arc::new),
        Err(e) => {
            tracing::error!(session = %id, error = %e, "the session's archive cannot be read");
            return Err(StoreError::io("reading a session's archive", &e));
        }
    };
    let floor = archive.as_ref().map(|a| IndexEntry {
        lsn: a.footer.upto_lsn + 1,
        offset: a.footer.covers_bytes,
    });
    let scan = recovery::scan_from(
        &*file,
        &id,
        loaded.as_ref(),
        settings.verify_on_start,
        settings.index_interval_bytes,
        &gaps,
        floor,
    )
    .map_err(ctx("scanning a log"))?;
    let mut meta = SessionMeta {
        stream_id: scan.stream_id.clone(),
        first_ts: scan.first_ts,
        last_ts: scan.last_ts,
        bytes: scan.good_len,
    };
    if let Some(a) = &archive {
        meta.first_ts = a.footer.first_ts;
        meta.last_ts = meta.last_ts.max(a.footer.last_ts);
        if meta.stream_id.is_none() {
            meta.stream_id = a.footer.stream_id.clone();
        }
    }
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
                archive,
                fork,
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
                lease_gap: None,
            });
        }
        Damage::TornTail { reason } => {
            let saved_to = quarantine_dir.join(format!("{id}.{}.tail", stamp()));
            let cut_bytes = scan.file_len - scan.good_len;
            let saved_to = save_range(vfs, &*file, scan.good_len, cut_bytes, &saved_to)
                .map_err(ctx("saving a torn tail"))?;
            file.set_len(scan.good_len)
                .and_then(|()| file.sync())
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
        write_index(vfs, &idx_path, &scan.index).map_err(ctx("writing an index"))?;
    }
    let state = SessionState {
        last_lsn: scan.last_lsn,
        len: scan.good_len,
        index: scan.index,
        meta,
        gaps,
        archive,
        fork,
    };
    Ok(Recovered {
        id,
        path,
        state,
        quarantine: None,
        note,
        lease_gap: None,
    })
}

/// Replaces an index file. Not synced: it is a cache, checked against the log at every start.
fn write_index(vfs: &dyn Vfs, path: &Path, index: &SparseIndex) -> io::Result<()> {
    let tmp = path.with_extension("idx.tmp");
    vfs.open(&tmp, Open::Truncate)?
        .write_at(&index.to_bytes(), 0)?;
    vfs.rename(&tmp, path)
}
