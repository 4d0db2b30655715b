//! Reading OpenCode's SQLite database (`opencode.db`, OpenCode 1.x) read-only, one session at a
//! time, into the shape `opencode export <session>` prints: `{info, messages: [{info, parts}]}`.
//! OpenCode may be running: the database is opened read-only and never locked for long.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde_json::{Map, Value as Json, json};

use super::problem::Problem;

/// An open database.
pub struct Db {
    conn: Connection,
    pub path: PathBuf,
}

/// A session's id and its parent's (a subagent's session has one).
pub struct SessionRow {
    pub id: String,
    pub parent_id: Option<String>,
}

/// The first bytes of every SQLite database file.
pub const MAGIC: &[u8] = b"SQLite format 3\0";

impl Db {
    /// Opens `path` read-only and checks it has OpenCode's tables.
    pub fn open(path: &Path) -> Result<Db, String> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(path, flags).map_err(|e| format!("cannot open: {e}"))?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(|e| format!("cannot open: {e}"))?;
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' \
                 AND name IN ('session', 'message', 'part')",
                [],
                |r| r.get(0),
            )
            .map_err(|e| format!("not a readable SQLite database: {e}"))?;
        if tables != 3 {
            return Err("not an OpenCode database (no session, message and part tables)".into());
        }
        Ok(Db {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// Every session, oldest first.
    pub fn sessions(&self) -> Result<Vec<SessionRow>, String> {
        let read = || -> rusqlite::Result<Vec<SessionRow>> {
            let mut q = self
                .conn
                .prepare("SELECT id, parent_id FROM session ORDER BY time_created, id")?;
            q.query_map([], |r| {
                Ok(SessionRow {
                    id: r.get(0)?,
                    parent_id: r.get(1)?,
                })
            })?
            .collect()
        };
        read().map_err(|e| {
            format!("cannot list sessions (an OpenCode version this import does not know?): {e}")
        })
    }

    /// Session `id` in the export's shape; `None` (with the problem) when it cannot be read.
    /// A message or part whose stored data is not JSON is kept as its text.
    pub fn export(&self, id: &str, problems: &mut Vec<Problem>) -> Option<Json> {
        match self.read_export(id, problems) {
            Ok(Some(e)) => Some(e),
            Ok(None) => {
                problems.push(self.problem(id, "the session is gone from the database".into()));
                None
            }
            Err(e) => {
                problems.push(self.problem(id, format!("cannot read the session: {e}")));
                None
            }
        }
    }

    fn problem(&self, session: &str, what: String) -> Problem {
        Problem::file(&self.path, format!("session {session}: {what}"))
    }

    fn read_export(&self, id: &str, problems: &mut Vec<Problem>) -> rusqlite::Result<Option<Json>> {
        // One snapshot for the session's three reads, so a running OpenCode cannot tear it.
        self.conn.execute_batch("BEGIN")?;
        let out = self.read_in_snapshot(id, problems);
        let _ = self.conn.execute_batch("COMMIT");
        out
    }

    fn read_in_snapshot(
        &self,
        id: &str,
        problems: &mut Vec<Problem>,
    ) -> rusqlite::Result<Option<Json>> {
        let info = self
            .conn
            .query_row(
                "SELECT id, project_id, parent_id, slug, directory, title, version, agent, model, \
                 cost, tokens_input, tokens_output, tokens_reasoning, tokens_cache_read, \
                 tokens_cache_write, time_created, time_updated FROM session WHERE id = ?1",
                [id],
                |r| {
                    let model: Option<String> = r.get(8)?;
                    Ok(json!({
                        "id": r.get::<_, String>(0)?,
                        "projectID": r.get::<_, Option<String>>(1)?,
                        "parentID": r.get::<_, Option<String>>(2)?,
                        "slug": r.get::<_, Option<String>>(3)?,
                        "directory": r.get::<_, Option<String>>(4)?,
                        "title": r.get::<_, Option<String>>(5)?,
                        "version": r.get::<_, Option<String>>(6)?,
                        "agent": r.get::<_, Option<String>>(7)?,
                        "model": model.map(|m| serde_json::from_str(&m).unwrap_or(Json::String(m))),
                        "cost": r.get::<_, Option<f64>>(9)?,
                        "tokens": {
                            "input": r.get::<_, Option<i64>>(10)?,
                            "output": r.get::<_, Option<i64>>(11)?,
                            "reasoning": r.get::<_, Option<i64>>(12)?,
                            "cache": {
                                "read": r.get::<_, Option<i64>>(13)?,
                                "write": r.get::<_, Option<i64>>(14)?,
                            },
                        },
                        "time": {
                            "created": r.get::<_, Option<i64>>(15)?,
                            "updated": r.get::<_, Option<i64>>(16)?,
                        },
                    }))
                },
            )
            .optional()?;
        let Some(info) = info else {
            return Ok(None);
        };
        let mut parts: HashMap<String, Vec<Json>> = HashMap::new();
        let mut q = self.conn.prepare(
            "SELECT id, message_id, data FROM part WHERE session_id = ?1 ORDER BY message_id, id",
        )?;
        let mut rows = q.query([id])?;
        while let Some(r) = rows.next()? {
            let (part_id, message_id): (String, String) = (r.get(0)?, r.get(1)?);
            let data: String = r.get(2)?;
            let part = self.with_ids(id, &part_id, data, problems, |m| {
                m.insert("messageID".into(), json!(message_id));
            });
            parts.entry(message_id).or_default().push(part);
        }
        let mut messages = Vec::new();
        let mut q = self.conn.prepare(
            "SELECT id, data FROM message WHERE session_id = ?1 ORDER BY time_created, id",
        )?;
        let mut rows = q.query([id])?;
        while let Some(r) = rows.next()? {
            let message_id: String = r.get(0)?;
            let data: String = r.get(1)?;
            let info = self.with_ids(id, &message_id, data, problems, |_| {});
            let parts = parts.remove(&message_id).unwrap_or_default();
            messages.push(json!({"info": info, "parts": parts}));
        }
        Ok(Some(json!({"info": info, "messages": messages})))
    }

    /// A stored row's data with its ids added as the export has them; its text when it is not a
    /// JSON object (reported, and mapped as `unmapped`).
    fn with_ids(
        &self,
        session: &str,
        id: &str,
        data: String,
        problems: &mut Vec<Problem>,
        more: impl FnOnce(&mut Map<String, Json>),
    ) -> Json {
        match serde_json::from_str::<Json>(&data) {
            Ok(Json::Object(mut m)) => {
                m.insert("id".into(), json!(id));
                m.insert("sessionID".into(), json!(session));
                more(&mut m);
                Json::Object(m)
            }
            _ => {
                problems.push(self.problem(
                    session,
                    format!("{id}: its data is not a JSON object: kept as unmapped"),
                ));
                Json::String(data)
            }
        }
    }
}
