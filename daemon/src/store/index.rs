//! The sparse LSN index: every few KiB of log, the LSN and byte offset of the line starting
//! there, so a read from any LSN seeks close to it in O(log n) and scans at most one interval.
//!
//! On disk (`<session>.idx`) it is a flat array of little-endian `(lsn: u64, offset: u64)`
//! pairs. It is a cache: never synced, checked against the log at start, rebuilt when missing
//! or wrong.

use std::io;
use std::path::Path;

use crate::vfs::Vfs;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub lsn: u64,
    pub offset: u64,
}

pub const ENTRY_BYTES: usize = 16;

impl IndexEntry {
    pub fn to_bytes(self) -> [u8; ENTRY_BYTES] {
        let mut b = [0u8; ENTRY_BYTES];
        b[..8].copy_from_slice(&self.lsn.to_le_bytes());
        b[8..].copy_from_slice(&self.offset.to_le_bytes());
        b
    }
    fn from_bytes(b: &[u8]) -> IndexEntry {
        IndexEntry {
            lsn: u64::from_le_bytes(b[..8].try_into().unwrap()),
            offset: u64::from_le_bytes(b[8..16].try_into().unwrap()),
        }
    }
}

/// In-memory sparse index of one session log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SparseIndex {
    entries: Vec<IndexEntry>,
}

impl SparseIndex {
    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    pub fn last(&self) -> Option<IndexEntry> {
        self.entries.last().copied()
    }

    pub fn push(&mut self, entry: IndexEntry) {
        debug_assert!(
            self.entries
                .last()
                .is_none_or(|l| l.lsn < entry.lsn && l.offset < entry.offset)
        );
        self.entries.push(entry);
    }

    /// The entry to start scanning from to find `lsn`: the last one at or before it.
    pub fn seek(&self, lsn: u64) -> IndexEntry {
        let i = self.entries.partition_point(|e| e.lsn <= lsn);
        if i == 0 {
            IndexEntry { lsn: 1, offset: 0 }
        } else {
            self.entries[i - 1]
        }
    }

    /// Loads an index file; entries must be strictly increasing or the file is ignored.
    pub fn load(vfs: &dyn Vfs, path: &Path) -> io::Result<Option<SparseIndex>> {
        let bytes = match vfs.read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // A torn final entry is just dropped; the index is a cache.
        let entries: Vec<IndexEntry> = bytes
            .chunks_exact(ENTRY_BYTES)
            .map(IndexEntry::from_bytes)
            .collect();
        let increasing = entries
            .windows(2)
            .all(|w| w[0].lsn < w[1].lsn && w[0].offset < w[1].offset);
        let starts_right = entries.first().is_none_or(|e| e.lsn == 1 && e.offset == 0);
        Ok((increasing && starts_right).then_some(SparseIndex { entries }))
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.entries.iter().flat_map(|e| e.to_bytes()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seek_finds_the_entry_at_or_before() {
        let mut idx = SparseIndex::default();
        for (lsn, offset) in [(1, 0), (10, 4000), (20, 8100)] {
            idx.push(IndexEntry { lsn, offset });
        }
        assert_eq!(idx.seek(1).offset, 0);
        assert_eq!(idx.seek(9).offset, 0);
        assert_eq!(idx.seek(10).offset, 4000);
        assert_eq!(idx.seek(19).offset, 4000);
        assert_eq!(idx.seek(1000).offset, 8100);
    }

    #[test]
    fn a_scrambled_index_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.idx");
        let mut bytes = IndexEntry { lsn: 1, offset: 0 }.to_bytes().to_vec();
        bytes.extend(
            IndexEntry {
                lsn: 9,
                offset: 500,
            }
            .to_bytes(),
        );
        bytes.extend(
            IndexEntry {
                lsn: 5,
                offset: 900,
            }
            .to_bytes(),
        );
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(SparseIndex::load(&crate::vfs::OsVfs, &path).unwrap(), None);
        std::fs::write(&path, &bytes[..40]).unwrap(); // two entries and a torn third
        assert_eq!(
            SparseIndex::load(&crate::vfs::OsVfs, &path)
                .unwrap()
                .unwrap()
                .entries()
                .len(),
            2
        );
    }
}
