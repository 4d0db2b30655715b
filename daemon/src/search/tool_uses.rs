//! Every stored tool request by `(session, tool_use_id)`, so a tool result whose request the
//! pipeline no longer remembers (after a restart, a spooled or imported result, a user who
//! hooked only some events) is joined to it by one point query instead of reading the log.
//! Written with the documents, in the same transaction, so it is exactly as caught up as the
//! session's indexed LSN says.

use memchr::memmem;
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Deserialize;

pub const SCHEMA: &str = "
    CREATE TABLE tool_uses(session TEXT NOT NULL, tool_use_id TEXT NOT NULL,
        event_id TEXT NOT NULL, lsn INTEGER NOT NULL,
        PRIMARY KEY(session, tool_use_id)) WITHOUT ROWID;
";

/// The tool requests of a batch: (session, tool_use_id, event id, lsn).
#[derive(Default)]
pub struct ToolUses {
    rows: Vec<(String, String, String, u64)>,
}

#[derive(Deserialize)]
struct Request {
    #[serde(rename = "type")]
    event_type: String,
    id: String,
    lsn: u64,
    session_id: String,
    #[serde(default)]
    payload: Payload,
}

#[derive(Deserialize, Default)]
struct Payload {
    #[serde(default)]
    tool_use_id: Option<String>,
}

impl ToolUses {
    /// One stored event (its JSON): kept when it is a tool request with a `tool_use_id`.
    pub fn add(&mut self, json: &[u8]) {
        // Most events are not requests: skip them without parsing (the searcher built once).
        static REQUEST: std::sync::LazyLock<memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memmem::Finder::new(b"\"execution.tool_use\""));
        if REQUEST.find(json).is_none() {
            return;
        }
        let Ok(r) = serde_json::from_slice::<Request>(json) else {
            return;
        };
        if r.event_type != "execution.tool_use" {
            return;
        }
        if let Some(tool_use_id) = r.payload.tool_use_id {
            self.rows.push((r.session_id, tool_use_id, r.id, r.lsn));
        }
    }

    /// Adds the batch, in the caller's transaction (the latest request of an id wins).
    pub fn write(&self, tx: &Transaction) -> rusqlite::Result<()> {
        let mut insert =
            tx.prepare_cached("INSERT OR REPLACE INTO tool_uses VALUES (?1, ?2, ?3, ?4)")?;
        for (session, tool_use_id, id, lsn) in &self.rows {
            insert.execute(params![session, tool_use_id, id, *lsn as i64])?;
        }
        Ok(())
    }
}

/// Forgets a session's requests above `lsn` (all of them for 0), as its documents go.
pub fn delete_above(tx: &Transaction, session: &str, lsn: u64) -> rusqlite::Result<()> {
    tx.execute(
        "DELETE FROM tool_uses WHERE session = ?1 AND lsn > ?2",
        params![session, lsn as i64],
    )?;
    Ok(())
}

/// The event id of the request `tool_use_id` in `session`, if indexed.
pub fn find(
    conn: &Connection,
    session: &str,
    tool_use_id: &str,
) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached("SELECT event_id FROM tool_uses WHERE session = ?1 AND tool_use_id = ?2")?
        .query_row(params![session, tool_use_id], |r| r.get(0))
        .optional()
}

#[cfg(test)]
mod tests {
    use crate::search::tool_uses::*;

    #[test]
    fn requests_are_kept_and_found_and_cut_with_their_session() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        let mut batch = ToolUses::default();
        batch.add(br#"{"lsn":3,"id":"E3","type":"execution.tool_use","session_id":"s","stream_id":"s","timestamp":1,"payload":{"tool_use_id":"tu_1","tool":"Bash"}}"#);
        batch.add(br#"{"lsn":4,"id":"E4","type":"execution.tool_result","session_id":"s","stream_id":"s","timestamp":1,"payload":{"tool_use_id":"tu_1"}}"#);
        batch.add(br#"{"lsn":5,"id":"E5","type":"execution.tool_use","session_id":"s","stream_id":"s","timestamp":1,"payload":{"tool_use_id":"tu_2"}}"#);
        assert_eq!(batch.rows.len(), 2, "results are not requests");
        let tx = conn.transaction().unwrap();
        batch.write(&tx).unwrap();
        tx.commit().unwrap();
        assert_eq!(find(&conn, "s", "tu_1").unwrap().as_deref(), Some("E3"));
        assert_eq!(find(&conn, "other", "tu_1").unwrap(), None);
        let tx = conn.transaction().unwrap();
        delete_above(&tx, "s", 4).unwrap();
        tx.commit().unwrap();
        assert_eq!(find(&conn, "s", "tu_1").unwrap().as_deref(), Some("E3"));
        assert_eq!(
            find(&conn, "s", "tu_2").unwrap(),
            None,
            "cut with its event"
        );
    }
}
