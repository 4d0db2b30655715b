//! "Always allow" grants: an approval with a scope (`session` or `project`) lets calls like
//! the approved one run without asking, until the grant expires.
//!
//! Grants are in the decision events of the logs, and in `checkpoints/grants.json` (written
//! atomically) so that they survive a restart without a scan of every log. Memory holds the
//! grants in force under a lock of their own: matching a tool call against them never waits
//! for the checkpoint table.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::policy;
use crate::util::time::now_ms;
use crate::vfs::Vfs;

/// An "always allow": calls like the approved one run without asking, in the session (or the
/// project directory) until it expires. Never stronger than a deny.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    pub checkpoint_id: String,
    /// `session` or `project`.
    pub scope: String,
    pub session_id: String,
    #[serde(default)]
    pub cwd: Option<String>,
    pub tool: String,
    #[serde(default)]
    pub input_glob: Option<String>,
    pub expires_ms: u64,
}

impl Grant {
    /// Whether this grant, at `now`, allows a call of `tool` in `session` (run in `cwd`)
    /// with `input`; a shell command is covered only if every simple command of it is
    /// (see [`policy::grant_covers`]).
    fn covers(
        &self,
        now: u64,
        session: &str,
        cwd: Option<&str>,
        tool: &str,
        input: Option<&Json>,
    ) -> bool {
        self.expires_ms > now
            && self.tool.eq_ignore_ascii_case(tool)
            && match self.scope.as_str() {
                "session" => self.session_id == session,
                "project" => self.cwd.is_some() && self.cwd.as_deref() == cwd,
                _ => false,
            }
            && self
                .input_glob
                .as_ref()
                .is_none_or(|glob| policy::grant_covers(glob, input))
    }
}

pub struct Grants {
    /// Through the store's file layer, so the power-loss simulation covers it with the logs.
    vfs: Arc<dyn Vfs>,
    path: PathBuf,
    /// How long a new grant lasts.
    ttl_ms: Mutex<u64>,
    in_force: Mutex<Vec<Grant>>,
    /// Held while `grants.json` is written, so that writes never cross and the last one
    /// written holds the newest grants.
    saving: Mutex<()>,
}

impl Grants {
    /// The grants in force saved in `dir`. Blocking. A file that cannot be parsed is logged
    /// and leaves no grant in force; one that cannot be read is an error.
    pub fn load(vfs: Arc<dyn Vfs>, dir: &Path, ttl_ms: u64) -> std::io::Result<Grants> {
        let path = dir.join("grants.json");
        let in_force = match vfs.read(&path) {
            Ok(bytes) => {
                let grants: Vec<Grant> = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                    tracing::error!(error = %e, "checkpoints/grants.json is unreadable; no grants in force");
                    Vec::new()
                });
                let now = now_ms();
                grants.into_iter().filter(|g| g.expires_ms > now).collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(Grants {
            vfs,
            path,
            ttl_ms: Mutex::new(ttl_ms),
            in_force: Mutex::new(in_force),
            saving: Mutex::new(()),
        })
    }

    pub fn ttl_ms(&self) -> u64 {
        *self.ttl_ms.lock().unwrap()
    }

    pub fn set_ttl_ms(&self, ms: u64) {
        *self.ttl_ms.lock().unwrap() = ms;
    }

    /// The grant in force that allows this call, if any.
    pub fn find(
        &self,
        session: &str,
        cwd: Option<&str>,
        tool: &str,
        input: Option<&Json>,
    ) -> Option<Grant> {
        let now = now_ms();
        // Copied out: matching may parse a shell command, which is not done under the lock.
        let in_force = self.in_force.lock().unwrap().clone();
        in_force
            .into_iter()
            .find(|g| g.covers(now, session, cwd, tool, input))
    }

    /// Puts `grant` in force (in memory; [`Grants::save`] makes it last), dropping the
    /// expired ones.
    pub fn add(&self, grant: Grant) {
        let now = now_ms();
        let mut in_force = self.in_force.lock().unwrap();
        in_force.retain(|x| x.expires_ms > now);
        in_force.push(grant);
    }

    /// Writes the grants in force to `grants.json`, durably. Blocking (it syncs the file). A
    /// failure is logged: the grants are in the log too, they only would not survive a
    /// restart.
    pub fn save(&self) {
        let _saving = self.saving.lock().unwrap();
        let grants = self.in_force.lock().unwrap().clone();
        let bytes = serde_json::to_vec_pretty(&grants).unwrap_or_default();
        if let Err(e) = self.vfs.write_atomic(&self.path, &bytes) {
            tracing::error!(error = %e, path = %self.path.display(), "cannot save the grants");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grant(scope: &str, tool: &str, glob: Option<&str>, expires_ms: u64) -> Grant {
        Grant {
            checkpoint_id: "ck_1".into(),
            scope: scope.into(),
            session_id: "s1".into(),
            cwd: Some("/proj".into()),
            tool: tool.into(),
            input_glob: glob.map(str::to_string),
            expires_ms,
        }
    }

    #[test]
    fn a_session_grant_covers_its_session_only() {
        let g = grant("session", "Bash", None, 100);
        assert!(g.covers(99, "s1", None, "Bash", None));
        assert!(g.covers(
            99,
            "s1",
            Some("/elsewhere"),
            "bash",
            Some(&json!({"command": "ls"}))
        ));
        assert!(!g.covers(99, "s2", Some("/proj"), "Bash", None));
        assert!(!g.covers(99, "s1", None, "Edit", None));
    }

    #[test]
    fn a_project_grant_covers_its_directory_in_any_session() {
        let g = grant("project", "Bash", None, 100);
        assert!(g.covers(99, "s2", Some("/proj"), "Bash", None));
        assert!(!g.covers(99, "s1", Some("/proj/sub"), "Bash", None));
        assert!(!g.covers(99, "s1", None, "Bash", None));
        // A project grant without a directory covers nothing.
        let mut none = g.clone();
        none.cwd = None;
        assert!(!none.covers(99, "s1", None, "Bash", None));
        // Nor does a scope it does not know.
        let odd = grant("everywhere", "Bash", None, 100);
        assert!(!odd.covers(99, "s1", Some("/proj"), "Bash", None));
    }

    #[test]
    fn a_grant_ends_when_it_expires() {
        let g = grant("session", "Bash", None, 100);
        assert!(g.covers(99, "s1", None, "Bash", None));
        assert!(!g.covers(100, "s1", None, "Bash", None));
        assert!(!g.covers(101, "s1", None, "Bash", None));
    }

    #[test]
    fn a_grant_with_a_glob_covers_the_inputs_it_matches() {
        let g = grant("session", "Bash", Some("git *"), 100);
        assert!(g.covers(
            0,
            "s1",
            None,
            "Bash",
            Some(&json!({"command": "git status"}))
        ));
        assert!(!g.covers(0, "s1", None, "Bash", Some(&json!({"command": "rm -rf /"}))));
        // No input to match: not covered.
        assert!(!g.covers(0, "s1", None, "Bash", None));
    }

    fn grants_in(dir: &Path) -> Grants {
        Grants::load(crate::vfs::os(), dir, 60_000).unwrap()
    }

    #[test]
    fn grants_are_found_by_the_call_they_allow() {
        let tmp = tempfile::tempdir().unwrap();
        let grants = grants_in(tmp.path());
        let later = now_ms() + 60_000;
        grants.add(grant("session", "Bash", Some("git *"), later));
        let call = json!({"command": "git push"});
        let found = grants.find("s1", None, "Bash", Some(&call));
        assert_eq!(found.map(|g| g.checkpoint_id).as_deref(), Some("ck_1"));
        let other = json!({"command": "curl x | sh"});
        assert_eq!(grants.find("s1", None, "Bash", Some(&other)), None);
    }

    #[test]
    fn saved_grants_survive_a_reload_and_expired_ones_do_not() {
        let tmp = tempfile::tempdir().unwrap();
        let grants = grants_in(tmp.path());
        let later = now_ms() + 60_000;
        grants.add(grant("session", "Bash", None, 1));
        grants.add(grant("project", "Edit", None, later));
        grants.save();
        // The expired grant was dropped when the new one came.
        let reloaded = grants_in(tmp.path());
        assert_eq!(
            *reloaded.in_force.lock().unwrap(),
            [grant("project", "Edit", None, later)]
        );
        // Saved expired ones are dropped at load.
        let old = serde_json::to_vec(&[grant("session", "Bash", None, 1)]).unwrap();
        std::fs::write(tmp.path().join("grants.json"), old).unwrap();
        assert!(grants_in(tmp.path()).in_force.lock().unwrap().is_empty());
    }

    #[test]
    fn a_broken_grants_file_leaves_no_grant_and_no_error() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("grants.json"), b"{not json").unwrap();
        assert!(grants_in(tmp.path()).in_force.lock().unwrap().is_empty());
        assert!(
            grants_in(&tmp.path().join("absent"))
                .find("s1", None, "Bash", None)
                .is_none()
        );
    }

    #[test]
    fn the_lifetime_of_new_grants_can_change() {
        let tmp = tempfile::tempdir().unwrap();
        let grants = grants_in(tmp.path());
        assert_eq!(grants.ttl_ms(), 60_000);
        grants.set_ttl_ms(5);
        assert_eq!(grants.ttl_ms(), 5);
    }
}
