//! Remote stops: a session whose agent was stopped from afar (a signed `abort` on the relay's
//! control stream). Until a person prompts that agent again, every tool call it makes is denied.
//!
//! One small file per stopped session (`checkpoints/stopped/<session>`, holding who stopped it
//! and why), written atomically, so a stop survives a daemon restart and memory holds only the
//! sessions stopped now.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::vfs::Vfs;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stop {
    pub reason: String,
    pub decided_by: String,
    pub at_ms: u64,
}

pub struct Stops {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    stopped: Mutex<HashMap<String, Stop>>,
}

impl Stops {
    /// Loads the stops in force from `dir` (created if missing).
    pub fn open(vfs: Arc<dyn Vfs>, dir: PathBuf) -> io::Result<Stops> {
        if !vfs.exists(&dir) {
            vfs.create_dir_all(&dir)?;
            vfs.sync_dir(crate::vfs::parent(&dir))?;
        }
        let mut stopped = HashMap::new();
        for name in vfs.list_dir(&dir)? {
            let name = name.to_string_lossy().into_owned();
            if dstream_sdk::validate_session_id(&name).is_err() {
                continue;
            }
            let path = dir.join(&name);
            match vfs.read(&path).map(|b| serde_json::from_slice::<Stop>(&b)) {
                Ok(Ok(stop)) => {
                    stopped.insert(name, stop);
                }
                _ => {
                    tracing::warn!(file = %path.display(), "unreadable remote stop ignored")
                }
            }
        }
        Ok(Stops {
            vfs,
            dir,
            stopped: Mutex::new(stopped),
        })
    }

    /// Stops `session` (durably, before it returns).
    pub fn stop(&self, session: &str, stop: Stop) -> io::Result<()> {
        let bytes = serde_json::to_vec(&stop).map_err(io::Error::other)?;
        self.vfs.write_atomic(&self.dir.join(session), &bytes)?;
        self.stopped
            .lock()
            .unwrap()
            .insert(session.to_string(), stop);
        Ok(())
    }

    /// The stop in force for `session`, if any.
    pub fn get(&self, session: &str) -> Option<Stop> {
        self.stopped.lock().unwrap().get(session).cloned()
    }

    /// A person prompted the agent again: its calls run as policy says.
    pub fn clear(&self, session: &str) {
        if self.stopped.lock().unwrap().remove(session).is_some()
            && let Err(e) = self.vfs.remove(&self.dir.join(session))
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(%session, error = %e, "cannot remove the remote stop marker");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_survives_a_reopen_until_it_is_cleared() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("stopped");
        let stops = Stops::open(crate::vfs::os(), dir.clone()).unwrap();
        let s = Stop {
            reason: "enough".into(),
            decided_by: "remote:phone".into(),
            at_ms: 1,
        };
        stops.stop("sess-1", s.clone()).unwrap();
        assert_eq!(
            Stops::open(crate::vfs::os(), dir.clone())
                .unwrap()
                .get("sess-1"),
            Some(s)
        );
        stops.clear("sess-1");
        assert_eq!(stops.get("sess-1"), None);
        assert_eq!(
            Stops::open(crate::vfs::os(), dir).unwrap().get("sess-1"),
            None
        );
    }
}
