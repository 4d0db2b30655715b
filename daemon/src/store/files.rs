//! Open session logs, at most `cap` at a time (least recently used closed first), so the
//! descriptors a daemon holds follow the sessions in use, not every session it has seen.
//!
//! One handle per log serves both the commit thread (it appends) and readers (positional reads
//! need no cursor). An evicted handle closes once the last reader holding it lets go.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::vfs::{Open, Vfs, VfsFileRef};

pub struct FileCache {
    cap: usize,
    vfs: Arc<dyn Vfs>,
    inner: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    tick: u64,
    open: HashMap<String, (VfsFileRef, u64)>,
}

impl FileCache {
    pub fn new(cap: usize, vfs: Arc<dyn Vfs>) -> FileCache {
        FileCache {
            cap: cap.max(1),
            vfs,
            inner: Mutex::new(Lru::default()),
        }
    }

    /// The open handle of `session`'s log at `path`, opening it (creating it when `create`)
    /// if needed. Returns whether the file was created by this call.
    pub fn get(&self, session: &str, path: &Path, create: bool) -> io::Result<(VfsFileRef, bool)> {
        let mut lru = self.inner.lock().unwrap();
        lru.tick += 1;
        let tick = lru.tick;
        if let Some((file, used)) = lru.open.get_mut(session) {
            *used = tick;
            return Ok((file.clone(), false));
        }
        let existed = !create || self.vfs.exists(path);
        let how = if create { Open::Create } else { Open::Existing };
        let file = self.vfs.open(path, how)?;
        if lru.open.len() >= self.cap {
            // A linear scan: eviction happens only when a cold session is touched, and the
            // cap is small (hundreds), so this is cheaper than keeping an ordered structure.
            if let Some(oldest) = lru
                .open
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            {
                lru.open.remove(&oldest);
            }
        }
        lru.open.insert(session.to_string(), (file.clone(), tick));
        Ok((file, !existed))
    }

    /// Forgets `session`'s handle (its file was replaced).
    pub fn forget(&self, session: &str) {
        self.inner.lock().unwrap().open.remove(session);
    }

    /// How many logs are open now.
    pub fn open_count(&self) -> usize {
        self.inner.lock().unwrap().open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_holds_more_than_cap_and_reopens_on_demand() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(3, crate::vfs::os());
        for i in 0..10 {
            let path = dir.path().join(format!("s{i}.jsonl"));
            let (_, created) = cache.get(&format!("s{i}"), &path, true).unwrap();
            assert!(created);
            assert!(cache.open_count() <= 3);
        }
        let (_, created) = cache.get("s0", &dir.path().join("s0.jsonl"), true).unwrap();
        assert!(!created, "an evicted log is reopened, not created again");
        assert!(
            cache
                .get("sx", &dir.path().join("sx.jsonl"), false)
                .is_err()
        );
    }
}
