//! "New since I last looked": the last LSN a person viewed in each session, kept in
//! `$XDG_STATE_HOME/dstream/replay-seen.json` (else `~/.local/state/dstream/`). It is the
//! viewer's memory, not the daemon's, so it lives with the user's state, not in the data
//! directory. Bounded: the least recently viewed sessions are forgotten past `MAX_SESSIONS`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Sessions remembered at most (~100 bytes each on disk).
const MAX_SESSIONS: usize = 2000;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub lsn: u64,
    /// When it was viewed (ms since the epoch), to forget the oldest first.
    pub at_ms: u64,
}

/// The file's whole content: session id → what was last seen of it.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SeenFile {
    sessions: BTreeMap<String, Seen>,
}

/// Where the file is.
pub fn default_path() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| dstream_sdk::socket::home_dir().join(".local").join("state"));
    base.join("dstream").join("replay-seen.json")
}

impl SeenFile {
    /// The file as it is; empty when missing or unreadable (it is only a convenience).
    pub fn load(path: &Path) -> SeenFile {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    pub fn get(&self, session: &str) -> Option<Seen> {
        self.sessions.get(session).copied()
    }

    /// Records `lsn` as seen in `session` (never lowering what was seen before).
    pub fn mark(&mut self, session: &str, lsn: u64, now_ms: u64) {
        let seen = self.sessions.entry(session.to_string()).or_default();
        seen.lsn = seen.lsn.max(lsn);
        seen.at_ms = now_ms;
        while self.sessions.len() > MAX_SESSIONS {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.at_ms)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.sessions.remove(&k),
                None => break,
            };
        }
    }

    /// Writes the file whole under a temporary name and renames it over the old one, so a
    /// crash leaves the old file or the new. Read, mark and save at once: two viewers
    /// closing at the same moment may still lose one mark, which only shows old events as new.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(
            ".replay-seen.{}.{}",
            std::process::id(),
            ulid::Ulid::new()
        ));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec(self)?)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_only_rise_and_the_oldest_sessions_go_first() {
        let mut f = SeenFile::default();
        f.mark("a", 10, 1);
        f.mark("a", 4, 2);
        assert_eq!(f.get("a"), Some(Seen { lsn: 10, at_ms: 2 }));
        for i in 0..MAX_SESSIONS {
            f.mark(&format!("s{i}"), 1, 10 + i as u64);
        }
        assert_eq!(f.sessions.len(), MAX_SESSIONS);
        assert!(f.get("a").is_none(), "the least recently viewed went");
        assert!(f.get("s0").is_some());
    }

    #[test]
    fn a_saved_file_reads_back_and_a_broken_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/dstream/replay-seen.json");
        let mut f = SeenFile::default();
        f.mark("s", 7, 1);
        f.save(&path).unwrap();
        assert_eq!(SeenFile::load(&path).get("s").map(|s| s.lsn), Some(7));
        std::fs::write(&path, b"{not json").unwrap();
        assert!(SeenFile::load(&path).get("s").is_none());
    }
}
