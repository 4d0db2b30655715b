//! Finding Claude Code's transcripts: `<project>/<session>.jsonl`, and a session's subagents
//! in `<project>/<session>/subagents/agent-<id>.jsonl`, grouped by session.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::problem::Problem;

/// How deep a folder given on the command line is searched (the projects folder is two
/// levels above a subagent's transcript).
const MAX_DEPTH: usize = 6;

/// One session's transcripts: its own (when present) and its subagents'.
#[derive(Debug, Default)]
pub struct Transcript {
    pub session_id: String,
    pub main: Option<PathBuf>,
    /// `(agent id, file)`, by agent id.
    pub subagents: Vec<(String, PathBuf)>,
}

impl Transcript {
    /// Every file, the session's own first.
    pub fn files(&self) -> impl Iterator<Item = (Option<&str>, &Path)> {
        let main = self.main.as_deref().map(|p| (None, p));
        main.into_iter().chain(
            self.subagents
                .iter()
                .map(|(a, p)| (Some(a.as_str()), p.as_path())),
        )
    }

    /// The dstream sessions the transcripts go to: the session and its subagents'.
    pub fn sessions(&self) -> Vec<String> {
        let mut out = vec![self.session_id.clone()];
        for (agent, _) in &self.subagents {
            out.push(child_session(&self.session_id, agent));
        }
        out
    }
}

/// The session live capture (and the transcript mapping) gives a subagent.
pub fn child_session(session: &str, agent: &str) -> String {
    format!("{session}.agent-{agent}")
}

/// Claude Code's projects folder: `$CLAUDE_CONFIG_DIR/projects`, else `~/.claude/projects`.
pub fn default_root() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("projects"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".claude/projects"))
}

/// The transcripts under `paths` (files, or folders searched for `*.jsonl`), by session id.
/// What cannot be read or named is reported in `problems`.
pub fn transcripts(paths: &[PathBuf], problems: &mut Vec<Problem>) -> Vec<Transcript> {
    let mut files = Vec::new();
    for p in paths {
        match fs::metadata(p) {
            Ok(m) if m.is_dir() => walk(p, 0, &mut files, problems),
            Ok(_) => files.push(p.clone()),
            Err(e) => problems.push(Problem::file(p, format!("cannot read: {e}"))),
        }
    }
    let mut by_session: BTreeMap<String, Transcript> = BTreeMap::new();
    for f in files {
        let Some((session, agent)) = classify(&f) else {
            problems.push(Problem::file(
                &f,
                "its name is not a Claude Code session id: skipped".into(),
            ));
            continue;
        };
        let t = by_session
            .entry(session.clone())
            .or_insert_with(|| Transcript {
                session_id: session,
                ..Transcript::default()
            });
        match agent {
            Some(a) if !t.subagents.iter().any(|(x, _)| *x == a) => t.subagents.push((a, f)),
            Some(_) => {}
            None if t.main.is_none() => t.main = Some(f),
            None => {}
        }
    }
    let mut out: Vec<Transcript> = by_session.into_values().collect();
    for t in &mut out {
        t.subagents.sort();
    }
    out
}

fn walk(dir: &Path, depth: usize, files: &mut Vec<PathBuf>, problems: &mut Vec<Problem>) {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return problems.push(Problem::file(dir, format!("cannot read: {e}"))),
    };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        // A link to a folder is not followed: a loop must not make the search endless.
        let Ok(meta) = fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if depth < MAX_DEPTH {
                walk(&p, depth + 1, files, problems);
            }
        } else if p.extension().is_some_and(|x| x == "jsonl") {
            files.push(p);
        }
    }
}

/// `(session, agent)` of a transcript file: `<session>.jsonl`, or
/// `<session>/subagents/agent-<agent>.jsonl`. Names that are not valid session ids are none.
fn classify(file: &Path) -> Option<(String, Option<String>)> {
    let stem = file.file_stem()?.to_str()?;
    let valid = |s: &str| dstream_sdk::validate_session_id(s).is_ok();
    let parent = file.parent();
    let in_subagents = parent
        .and_then(Path::file_name)
        .is_some_and(|n| n == "subagents");
    if in_subagents && let Some(agent) = stem.strip_prefix("agent-") {
        let session = parent?.parent()?.file_name()?.to_str()?;
        let ok = valid(session) && valid(&child_session(session, agent));
        return ok.then(|| (session.to_string(), Some(agent.to_string())));
    }
    valid(stem).then(|| (stem.to_string(), None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_and_subagents_are_named_from_their_paths() {
        let c = |p: &str| classify(Path::new(p));
        assert_eq!(c("/p/-proj/abc-1.jsonl"), Some(("abc-1".into(), None)));
        assert_eq!(
            c("/p/-proj/abc-1/subagents/agent-a9.jsonl"),
            Some(("abc-1".into(), Some("a9".into())))
        );
        assert_eq!(c("/p/-proj/.hidden.jsonl"), None);
        assert_eq!(c("/p/-proj/with space.jsonl"), None);
    }

    #[test]
    fn a_folder_groups_a_session_with_its_subagents() {
        let dir = tempfile::tempdir().unwrap();
        let proj = dir.path().join("-tmp-project");
        fs::create_dir_all(proj.join("s1/subagents")).unwrap();
        fs::write(proj.join("s1.jsonl"), "{}\n").unwrap();
        fs::write(proj.join("s1/subagents/agent-x.jsonl"), "{}\n").unwrap();
        fs::write(proj.join("s1/subagents/agent-x.meta.json"), "{}").unwrap();
        fs::write(proj.join("s2.jsonl"), "{}\n").unwrap();
        let mut problems = Vec::new();
        let found = transcripts(&[dir.path().to_path_buf()], &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        let ids: Vec<_> = found.iter().map(|t| t.sessions()).collect();
        assert_eq!(ids, [vec!["s1", "s1.agent-x"], vec!["s2"]]);
    }
}
