//! The markers of sessions with open checkpoints: `checkpoints/open/<session>`, holding the
//! LSN of its log to scan from, say which logs to read at start, so that a restart rebuilds
//! the pending set without reading every session ever written.
//!
//! A marker is written (durably) before the session's first open request is appended, and
//! removed only after its last open checkpoint is decided, so a crash between the two leaves
//! an extra marker (a scan that finds nothing), never a lost request. Blocking: every call
//! here touches the file system.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::types::CheckpointError;
use crate::vfs::Vfs;

pub(super) struct Markers {
    /// Through the store's file layer, so the power-loss simulation covers them with the logs.
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
}

impl Markers {
    /// The markers of the checkpoint state in `dir` (in `dir/open`, which must exist).
    pub fn new(vfs: Arc<dyn Vfs>, dir: &Path) -> Markers {
        Markers {
            vfs,
            dir: dir.join("open"),
        }
    }

    /// Marks `session` open from `from` on, durably.
    pub fn write(&self, session: &str, from: u64) -> Result<(), CheckpointError> {
        let path = self.dir.join(session);
        self.vfs
            .write_atomic(&path, from.to_string().as_bytes())
            .map_err(|source| CheckpointError::Io { path, source })
    }

    /// `session` has nothing open any more. Not synced: a marker that comes back after a
    /// crash is dropped at the next start, once its session's log shows nothing open.
    pub fn remove(&self, session: &str) {
        let _ = self.vfs.remove(&self.dir.join(session));
    }

    /// The sessions marked, with the LSN to scan each from (1 if unreadable). A file that is
    /// not a session's (a leftover `.x.tmp` of an interrupted write, say) is removed.
    pub fn list(&self) -> std::io::Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        for name in self.vfs.list_dir(&self.dir)? {
            let path = self.dir.join(&name);
            let Some(session) = name.to_str().map(str::to_string) else {
                continue;
            };
            if dstream_sdk::validate_session_id(&session).is_err() {
                let _ = self.vfs.remove(&path);
                continue;
            }
            let from = self
                .vfs
                .read(&path)
                .ok()
                .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<u64>().ok())
                .unwrap_or(1);
            out.push((session, from));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_name_sessions_and_where_to_scan_from() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("open")).unwrap();
        let markers = Markers::new(crate::vfs::os(), tmp.path());
        markers.write("s1", 42).unwrap();
        markers.write("s2", 7).unwrap();
        std::fs::write(tmp.path().join("open/s3"), b"garbage").unwrap();
        std::fs::write(tmp.path().join("open/.s1.3.tmp"), b"1").unwrap();
        markers.remove("s2");
        markers.remove("never-marked");
        let mut found = markers.list().unwrap();
        found.sort();
        assert_eq!(found, [("s1".to_string(), 42), ("s3".to_string(), 1)]);
        // The leftover temporary file is gone.
        assert!(!tmp.path().join("open/.s1.3.tmp").exists());
    }
}
