//! The journal of checkpoint ids, `checkpoints/ids`: one `<checkpoint id> <session>` line per
//! checkpoint opened, newest last, so that a decision or an await for an id no longer in
//! memory (decided before a restart, or forgotten since) finds its session's log.
//!
//! A hint, not a record: the logs are the record. It is cut back to its newest half past
//! [`JOURNAL_MAX_BYTES`], and losing a line only means that an old id is not found.
//! Blocking: every call here reads or writes the file.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::vfs::Vfs;

/// The journal is cut back to its newest half past this.
const JOURNAL_MAX_BYTES: u64 = 1 << 20;

pub(super) struct Journal {
    /// Through the store's file layer, so the power-loss simulation covers it with the logs.
    vfs: Arc<dyn Vfs>,
    path: PathBuf,
}

impl Journal {
    /// The journal of the checkpoint state in `dir`.
    pub fn new(vfs: Arc<dyn Vfs>, dir: &Path) -> Journal {
        Journal {
            vfs,
            path: dir.join("ids"),
        }
    }

    /// The ids the journal holds, as [`id_hash`]es (none if it cannot be read).
    pub fn ids(&self) -> HashSet<u64> {
        journaled_ids(&self.vfs.read(&self.path).unwrap_or_default())
    }

    /// Notes `id` of `session`, in the journal and in `journaled` (the ids it holds, which
    /// follow it when it is cut back).
    pub fn note(&self, journaled: &mut HashSet<u64>, id: &str, session: &str) {
        journaled.insert(id_hash(id));
        let appended = self
            .vfs
            .open(&self.path, crate::vfs::Open::Create)
            .and_then(|f| f.append(format!("{id} {session}\n").as_bytes()).map(|()| f))
            .and_then(|f| f.len());
        match appended {
            Ok(len) if len > JOURNAL_MAX_BYTES => {
                let keep = self
                    .vfs
                    .read(&self.path)
                    .ok()
                    .map(|bytes| newest_half(&bytes).to_vec());
                if let Some(keep) = keep {
                    let _ = self.vfs.write_atomic(&self.path, &keep);
                    *journaled = journaled_ids(&keep);
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot note a checkpoint id in checkpoints/ids"),
        }
    }

    /// The session of checkpoint `id`, from its newest line.
    pub fn session_of(&self, id: &str) -> Option<String> {
        let bytes = self.vfs.read(&self.path).ok()?;
        session_in(&bytes, id)
    }
}

/// A checkpoint id folded to 64 bits (ids are hashes already).
pub(super) fn id_hash(id: &str) -> u64 {
    id.get(3..19)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or_else(|| {
            let d = Sha256::digest(id.as_bytes());
            u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
        })
}

fn journaled_ids(journal: &[u8]) -> HashSet<u64> {
    String::from_utf8_lossy(journal)
        .lines()
        .filter_map(|l| l.split(' ').next())
        .filter(|id| id.starts_with("ck_"))
        .map(id_hash)
        .collect()
}

/// The newest half of `journal`, at most: the lines after the one holding its middle byte
/// (or, with no line end past the middle, the bytes from the middle on).
fn newest_half(journal: &[u8]) -> &[u8] {
    let half = journal.len() / 2;
    let start = memchr::memchr(b'\n', &journal[half..]).map_or(half, |i| half + i + 1);
    &journal[start..]
}

/// The session of `id` on its newest line in `journal`.
fn session_in(journal: &[u8], id: &str) -> Option<String> {
    let text = String::from_utf8_lossy(journal);
    text.lines().rev().find_map(|line| {
        let (i, session) = line.split_once(' ')?;
        (i == id).then(|| session.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::types::checkpoint_id;

    #[test]
    fn ids_fold_to_their_hex_or_a_hash() {
        let id = checkpoint_id("s", "k");
        assert_eq!(id_hash(&id), u64::from_str_radix(&id[3..19], 16).unwrap());
        assert_eq!(id_hash("ck_zz"), id_hash("ck_zz"));
        assert_ne!(id_hash("ck_zz"), id_hash("ck_zy"));
    }

    #[test]
    fn the_newest_line_names_the_session() {
        let j = b"ck_a s1\nck_b s2\nck_a s3\nbroken\n";
        assert_eq!(session_in(j, "ck_a").as_deref(), Some("s3"));
        assert_eq!(session_in(j, "ck_b").as_deref(), Some("s2"));
        assert_eq!(session_in(j, "ck_c"), None);
        assert_eq!(session_in(j, "broken"), None);
    }

    #[test]
    fn only_checkpoint_ids_are_counted() {
        let ids = journaled_ids(b"ck_a s1\nxx_b s2\n\nck_c s3");
        assert_eq!(ids, HashSet::from([id_hash("ck_a"), id_hash("ck_c")]));
    }

    #[test]
    fn cutting_back_keeps_whole_newest_lines() {
        let j = b"ck_1 s\nck_2 s\nck_3 s\nck_4 s\n";
        // The middle byte starts the third line: that line goes too.
        assert_eq!(newest_half(j), b"ck_4 s\n");
        assert_eq!(newest_half(b"ck_1 s\nck_22 s\nck_3 s\n"), b"ck_3 s\n");
        assert_eq!(newest_half(b"ck_1 s\nck_2 s\n"), b"");
        assert_eq!(newest_half(b"no newline"), b"wline");
        assert_eq!(newest_half(b""), b"");
    }

    #[test]
    fn a_long_journal_is_cut_back_and_still_finds_new_ids() {
        let tmp = tempfile::tempdir().unwrap();
        let journal = Journal::new(crate::vfs::os(), tmp.path());
        let mut held = HashSet::new();
        let line = format!("{} session-1\n", checkpoint_id("s", "0")).len() as u64;
        let n = JOURNAL_MAX_BYTES / line + 2;
        for i in 0..n {
            journal.note(&mut held, &checkpoint_id("s", &i.to_string()), "session-1");
        }
        let size = std::fs::metadata(tmp.path().join("ids")).unwrap().len();
        assert!(size <= JOURNAL_MAX_BYTES / 2 + line, "{size}");
        // The set in memory follows the file.
        assert_eq!(held, journal.ids());
        assert!(held.len() < n as usize);
        let newest = checkpoint_id("s", &(n - 1).to_string());
        assert!(held.contains(&id_hash(&newest)));
        assert!(!held.contains(&id_hash(&checkpoint_id("s", "0"))));
        assert_eq!(journal.session_of(&newest).as_deref(), Some("session-1"));
    }
}
