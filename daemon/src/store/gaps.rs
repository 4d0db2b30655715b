//! LSN gaps a repair left in a log, so that everything else can keep insisting on `prev + 1`.
//!
//! A repair moves damaged records out of a log but never renumbers the good ones after them
//! and never hands out an LSN again: readers may have seen any of them. The jumps it leaves
//! are listed in `<session>.gaps` (small JSON, written atomically before the log is rewritten),
//! with the first LSN the session may use next. Any jump not listed is still corruption.

use std::io;
use std::path::Path;

use crate::vfs::Vfs;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gaps {
    /// `(before, after)`: the record with LSN `after` may follow the one with LSN `before`.
    pub jumps: Vec<(u64, u64)>,
    /// No append may take an LSN below this one.
    pub next_lsn: u64,
}

impl Gaps {
    pub fn allows(&self, before: u64, after: u64) -> bool {
        after == before + 1 || self.jumps.contains(&(before, after))
    }

    /// Loads `path`; a missing file means no gaps.
    pub fn load(vfs: &dyn Vfs, path: &Path) -> io::Result<Gaps> {
        match vfs.read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(io::Error::other),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Gaps::default()),
            Err(e) => Err(e),
        }
    }

    /// Writes `path` atomically and durably.
    pub fn save(&self, vfs: &dyn Vfs, path: &Path) -> io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(io::Error::other)?;
        vfs.write_atomic(path, &bytes)
    }
}
