//! OpenCode's sessions for an import: found in its database (read by `opencode_db`) or in JSON
//! files `opencode export <session>` wrote, both in the export's shape `{info, messages: [{info,
//! parts}]}`; every part becomes a line for the `opencode-export` mapping, after one line for
//! the session itself. A child session (a `task` subagent) is its own session whose stream is
//! the root of its parent chain, as live capture makes it.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value as Json, json};

use super::lines::Line;
use super::opencode_db::{self, Db};
use super::problem::Problem;
use super::unit::Unit;

/// How far up a parent chain the root is looked for (a loop in the data must not hang).
const MAX_DEPTH: usize = 64;

/// OpenCode's database: `$XDG_DATA_HOME/opencode/opencode.db`, else
/// `~/.local/share/opencode/opencode.db`.
pub fn default_db() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".local/share"))
        })?;
    Some(data.join("opencode/opencode.db"))
}

/// Where one session is read from.
enum Origin {
    Db(Rc<Db>),
    File(PathBuf),
}

struct Found {
    id: String,
    parent: Option<String>,
    origin: Origin,
}

/// The sessions under `paths`: databases, export files, or folders holding either (a folder's
/// `opencode.db` or `opencode/opencode.db`, and its `*.json` files). The same session found
/// twice is imported once, from the first place.
pub fn units(paths: &[PathBuf], problems: &mut Vec<Problem>) -> Vec<Unit> {
    let mut found: Vec<Found> = Vec::new();
    for p in paths {
        match fs::metadata(p) {
            Ok(m) if m.is_dir() => {
                for db in [p.join("opencode.db"), p.join("opencode/opencode.db")] {
                    if db.is_file() {
                        from_db(&db, &mut found, problems);
                    }
                }
                let mut files: Vec<PathBuf> = match fs::read_dir(p) {
                    Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
                    Err(e) => {
                        problems.push(Problem::file(p, format!("cannot read: {e}")));
                        continue;
                    }
                };
                files.retain(|f| f.extension().is_some_and(|x| x == "json") && f.is_file());
                files.sort();
                for f in files {
                    from_file(&f, &mut found, problems);
                }
            }
            Ok(_) if is_sqlite(p) => from_db(p, &mut found, problems),
            Ok(_) => from_file(p, &mut found, problems),
            Err(e) => problems.push(Problem::file(p, format!("cannot read: {e}"))),
        }
    }
    let mut seen = std::collections::HashSet::new();
    found.retain(|f| seen.insert(f.id.clone()));
    let parents: HashMap<String, Option<String>> = found
        .iter()
        .map(|f| (f.id.clone(), f.parent.clone()))
        .collect();
    found
        .into_iter()
        .map(|f| {
            let root = root_of(&f.id, &parents);
            let id = f.id.clone();
            Unit {
                session_id: f.id.clone(),
                sessions: vec![f.id],
                load: Box::new(move |problems| {
                    let (export, label) = match &f.origin {
                        Origin::Db(db) => (db.export(&id, problems), db.path.clone()),
                        Origin::File(file) => (read_export(file, problems), file.clone()),
                    };
                    match export {
                        Some(e) => export_lines(&e, &label, root.as_deref(), problems),
                        None => Vec::new(),
                    }
                }),
            }
        })
        .collect()
}

fn is_sqlite(path: &Path) -> bool {
    let mut head = [0u8; 16];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|_| head == opencode_db::MAGIC)
}

fn from_db(path: &Path, found: &mut Vec<Found>, problems: &mut Vec<Problem>) {
    let opened = Db::open(path).and_then(|db| Ok((db.sessions()?, Rc::new(db))));
    let (sessions, db) = match opened {
        Ok(o) => o,
        Err(e) => return problems.push(Problem::file(path, e)),
    };
    for s in sessions {
        if !valid(&s.id) {
            problems.push(Problem::file(
                path,
                format!("session {:?} is not a valid session id: skipped", s.id),
            ));
            continue;
        }
        found.push(Found {
            id: s.id,
            parent: s.parent_id.filter(|p| valid(p)),
            origin: Origin::Db(db.clone()),
        });
    }
}

fn from_file(path: &Path, found: &mut Vec<Found>, problems: &mut Vec<Problem>) {
    let Some(export) = read_export(path, problems) else {
        return;
    };
    let info = &export["info"];
    match info["id"].as_str().filter(|id| valid(id)) {
        Some(id) => found.push(Found {
            id: id.to_string(),
            parent: info["parentID"]
                .as_str()
                .filter(|p| valid(p))
                .map(String::from),
            origin: Origin::File(path.to_path_buf()),
        }),
        None => problems.push(Problem::file(
            path,
            "not an `opencode export` file (no valid info.id): skipped".into(),
        )),
    }
}

/// An export file, parsed; `None` (with the problem) when it is not one.
fn read_export(path: &Path, problems: &mut Vec<Problem>) -> Option<Json> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            problems.push(Problem::file(path, format!("cannot read: {e}")));
            return None;
        }
    };
    match serde_json::from_slice::<Json>(&bytes) {
        Ok(e) if e["info"].is_object() && e["messages"].is_array() => Some(e),
        Ok(_) => {
            problems.push(Problem::file(
                path,
                "not an `opencode export` file (no info and messages): skipped".into(),
            ));
            None
        }
        Err(e) => {
            problems.push(Problem::file(path, format!("not JSON ({e}): skipped")));
            None
        }
    }
}

fn valid(id: &str) -> bool {
    dstream_sdk::validate_session_id(id).is_ok()
}

/// The top of `id`'s parent chain (its parent's parent, …), or `None` for a session without a
/// parent. A parent not found is taken as the root, as live capture does.
fn root_of(id: &str, parents: &HashMap<String, Option<String>>) -> Option<String> {
    let mut at = parents.get(id)?.clone()?;
    for _ in 0..MAX_DEPTH {
        match parents.get(&at) {
            Some(Some(up)) => at = up.clone(),
            _ => break,
        }
    }
    Some(at)
}

/// The lines of one exported session: the session first, then each message's parts in order.
pub fn export_lines(
    export: &Json,
    file: &Path,
    root: Option<&str>,
    problems: &mut Vec<Problem>,
) -> Vec<Line> {
    let info = &export["info"];
    let Some(session) = info["id"].as_str() else {
        problems.push(Problem::file(file, "no session id: skipped".into()));
        return Vec::new();
    };
    let session_time = info["time"]["created"].as_i64();
    let header = |key: &str, ms: Option<i64>| {
        json!({
            "file": file.to_string_lossy(), "session_id": session, "root_id": root,
            "import_id": format!("{session}:{key}"), "timestamp": ms.and_then(iso),
        })
    };
    let mut lines = vec![Line {
        import_id: format!("{session}:session"),
        order: String::new(),
        event: json!({"export": header("session", session_time), "session": info}),
        garbage: false,
    }];
    for m in export["messages"].as_array().into_iter().flatten() {
        let message = &m["info"];
        let message_id = message["id"].as_str().unwrap_or("message");
        let message_time = message["time"]["created"].as_i64().or(session_time);
        let parts = m["parts"].as_array().map(Vec::as_slice).unwrap_or_default();
        if parts.is_empty() {
            lines.push(Line {
                import_id: format!("{session}:{message_id}"),
                order: String::new(),
                event: json!({"export": header(message_id, message_time), "message": message}),
                garbage: !message.is_object(),
            });
        }
        for (i, part) in parts.iter().enumerate() {
            let key = match part["id"].as_str() {
                Some(id) => id.to_string(),
                None => format!("{message_id}:{i}"),
            };
            let ms = part["time"]["start"].as_i64().or(message_time);
            lines.push(Line {
                import_id: format!("{session}:{key}"),
                order: String::new(),
                event: json!({"export": header(&key, ms), "message": message, "part": part}),
                garbage: !part.is_object() || !message.is_object(),
            });
        }
    }
    lines
}

/// Milliseconds since the epoch as ISO 8601 (what transcripts use); none when out of range.
fn iso(ms: i64) -> Option<String> {
    let ms = u64::try_from(ms).ok()?;
    let at = UNIX_EPOCH.checked_add(Duration::from_millis(ms))?;
    Some(humantime::format_rfc3339_millis(at).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_stream_is_the_top_of_its_parent_chain() {
        let parents: HashMap<String, Option<String>> = [
            ("a", None),
            ("b", Some("a")),
            ("c", Some("b")),
            ("d", Some("gone")),
            ("x", Some("y")),
            ("y", Some("x")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.map(String::from)))
        .collect();
        assert_eq!(root_of("a", &parents), None);
        assert_eq!(root_of("c", &parents).as_deref(), Some("a"));
        assert_eq!(root_of("d", &parents).as_deref(), Some("gone"));
        assert!(root_of("x", &parents).is_some(), "a loop ends");
    }

    #[test]
    fn an_export_gives_the_session_then_each_part() {
        let export = json!({
            "info": {"id": "ses_1", "time": {"created": 1_700_000_000_000i64}},
            "messages": [
                {"info": {"id": "msg_1", "role": "user", "time": {"created": 1_700_000_000_100i64}},
                 "parts": [{"id": "prt_1", "type": "text", "text": "hi"}]},
                {"info": {"id": "msg_2", "role": "assistant"}, "parts": [
                    {"id": "prt_2", "type": "text", "text": "yes", "time": {"start": 1_700_000_000_500i64}},
                    "not an object"
                ]},
                {"info": {"id": "msg_3", "role": "assistant"}, "parts": []},
            ]
        });
        let mut problems = Vec::new();
        let lines = export_lines(&export, Path::new("f.json"), Some("root"), &mut problems);
        let ids: Vec<_> = lines.iter().map(|l| l.import_id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "ses_1:session",
                "ses_1:prt_1",
                "ses_1:prt_2",
                "ses_1:msg_2:1",
                "ses_1:msg_3"
            ]
        );
        assert_eq!(
            lines[1].event["export"]["timestamp"],
            "2023-11-14T22:13:20.100Z"
        );
        assert_eq!(
            lines[2].event["export"]["timestamp"],
            "2023-11-14T22:13:20.500Z"
        );
        assert_eq!(lines[2].event["export"]["root_id"], "root");
        assert!(lines[3].garbage && !lines[2].garbage);
    }
}
