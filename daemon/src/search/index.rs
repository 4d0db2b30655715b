//! The index file, `<data_dir>/search/index.sqlite`: an SQLite FTS5 table that stores no text
//! (`content=''`), only the terms and their positions, plus a small row per event (time, type)
//! and per session (its name and how far it is indexed). A document's rowid is the session's
//! number and the event's LSN in one integer, so a session's documents are one rowid range.
//!
//! It is a cache derived from the logs: opened with a quick check, and deleted and created
//! anew whenever it cannot be opened, fails the check, has another schema version, or reports
//! damage later. Writes are batched in transactions; each batch records the sessions' indexed
//! LSNs in the same transaction as their documents, so a crash neither loses nor doubles one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::search::tool_uses::{self, ToolUses};
use crate::search::usage_rows::{self, UsageBatch};

/// Bumped whenever the schema or what is indexed changes: an older file is rebuilt.
const SCHEMA_VERSION: i64 = 4;
/// LSNs take the low bits of a document's rowid; the session's number the rest.
const LSN_BITS: u32 = 40;
pub const MAX_LSN: u64 = (1 << LSN_BITS) - 1;

const SCHEMA: &str = "
    CREATE TABLE sessions(sid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
                          indexed_lsn INTEGER NOT NULL);
    CREATE TABLE types(tid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
    CREATE TABLE docs(id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, tid INTEGER NOT NULL);
    CREATE VIRTUAL TABLE fts USING fts5(text, content='', contentless_delete=1);
    CREATE TABLE counts(docs INTEGER NOT NULL);
    INSERT INTO counts VALUES (0);
";

/// Version 3 is version 4 less `counts`, which it gets from one count of its documents: the
/// last time an open reads them all (a count at every open grew with the history).
const FROM_3: &str = "
    BEGIN;
    CREATE TABLE counts(docs INTEGER NOT NULL);
    INSERT INTO counts SELECT count(*) FROM docs;
    PRAGMA user_version = 4;
    COMMIT;
";

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("search index: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("search index: {0}")]
    Io(#[from] std::io::Error),
    #[error("search index failed its check: {0}")]
    Damaged(String),
}

impl IndexError {
    /// The file is damaged (or not a database at all): rebuild it rather than retry.
    pub fn is_damage(&self) -> bool {
        match self {
            IndexError::Damaged(_) => true,
            IndexError::Sqlite(e) => is_corrupt(e),
            IndexError::Io(_) => false,
        }
    }
}

/// Whether SQLite says the file is damaged (or not a database at all).
pub fn is_corrupt(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
    matches!(e.sqlite_error_code(), Some(DatabaseCorrupt | NotADatabase))
}

/// One event to index.
pub struct Doc {
    pub sid: i64,
    pub lsn: u64,
    pub timestamp: u64,
    pub event_type: String,
    pub text: String,
}

pub fn doc_id(sid: i64, lsn: u64) -> i64 {
    (sid << LSN_BITS) | lsn as i64
}

/// The LSN range of one session's documents, as rowids.
pub fn session_range(sid: i64) -> (i64, i64) {
    (doc_id(sid, 0), doc_id(sid, MAX_LSN))
}

pub fn split_id(id: i64) -> (i64, u64) {
    (id >> LSN_BITS, (id as u64) & MAX_LSN)
}

/// The files of the index at `dir`: the database and SQLite's WAL and shared-memory files.
pub fn files(dir: &Path) -> [PathBuf; 3] {
    let db = dir.join("index.sqlite");
    [
        db.with_extension("sqlite-wal"),
        db.with_extension("sqlite-shm"),
        db,
    ]
}

pub fn db_path(dir: &Path) -> PathBuf {
    dir.join("index.sqlite")
}

/// The index bytes on disk (database and WAL).
pub fn bytes_on_disk(dir: &Path) -> u64 {
    files(dir)
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum()
}

/// How much of an existing index is checked when it is opened.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Check {
    /// Its header and schema: the file was closed cleanly. Reading every page would cost
    /// each start CPU in proportion to the history (2 s of a core at a million events),
    /// taken from whatever else starts then; damage found later, by a write or a query,
    /// still has the file rebuilt from the logs.
    Header,
    /// Every page (`quick_check`) and FTS5's structure: the daemon stopped with it open.
    EveryPage,
}

/// The one writer of the index (the observer's thread).
pub struct Writer {
    conn: Connection,
    types: HashMap<String, i64>,
    dir: PathBuf,
}

impl Drop for Writer {
    /// A clean close: everything synced once, then no rebuild at the next start.
    fn drop(&mut self) {
        let synced = self
            .conn
            .execute_batch("PRAGMA synchronous = FULL; PRAGMA wal_checkpoint(TRUNCATE);");
        if synced.is_ok() {
            crate::search::boot::mark_closed(&self.dir);
        }
    }
}

impl Writer {
    /// Opens the index at `dir`, or creates it anew when it is missing, unreadable, damaged or
    /// of another version; the second value says why it was rebuilt, if it was.
    pub fn open(dir: &Path) -> Result<(Writer, Option<String>), IndexError> {
        // Owner-only, like the logs it is made from.
        crate::autostart::make_private_dir(dir)?;
        let existed = db_path(dir).exists();
        if let Some(why) = crate::search::boot::lost_with_machine(dir) {
            return Ok((Writer::create(dir)?, existed.then_some(why)));
        }
        let check = if crate::search::boot::closed_cleanly(dir) {
            Check::Header
        } else {
            Check::EveryPage
        };
        match Writer::open_existing(dir, check) {
            Ok(w) => {
                crate::search::boot::mark_open(dir)?;
                Ok((w, None))
            }
            Err(e) if e.is_damage() || matches!(e, IndexError::Sqlite(_)) => {
                let why = existed.then(|| e.to_string());
                Ok((Writer::create(dir)?, why))
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes the index's files and creates an empty index.
    pub fn create(dir: &Path) -> Result<Writer, IndexError> {
        // Owner-only, like the logs it is made from.
        crate::autostart::make_private_dir(dir)?;
        for f in files(dir) {
            match std::fs::remove_file(&f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        let conn = connect(dir, true)?;
        conn.execute_batch(&format!(
            "BEGIN; {SCHEMA} {} {} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;",
            usage_rows::SCHEMA,
            tool_uses::SCHEMA
        ))?;
        crate::search::boot::mark_open(dir)?;
        Ok(Writer {
            conn,
            types: HashMap::new(),
            dir: dir.to_path_buf(),
        })
    }

    fn open_existing(dir: &Path, check: Check) -> Result<Writer, IndexError> {
        let conn = connect(dir, false)?;
        let mut version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version == 3 {
            conn.execute_batch(FROM_3)?;
            version = 4;
        }
        if version != SCHEMA_VERSION {
            return Err(IndexError::Damaged(format!(
                "schema version {version}, not {SCHEMA_VERSION}"
            )));
        }
        if check == Check::EveryPage {
            let check: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
            if check != "ok" {
                return Err(IndexError::Damaged(check));
            }
            // FTS5's own structure is checked by its integrity-check; the b-trees by
            // quick_check.
            conn.execute(
                "INSERT INTO fts(fts, rank) VALUES('integrity-check', 0)",
                [],
            )
            .map_err(|e| IndexError::Damaged(e.to_string()))?;
        }
        let mut types = HashMap::new();
        {
            let mut stmt = conn.prepare("SELECT name, tid FROM types")?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get(1)?)))?;
            for row in rows {
                let (name, tid) = row?;
                types.insert(name, tid);
            }
        }
        Ok(Writer {
            conn,
            types,
            dir: dir.to_path_buf(),
        })
    }

    /// Every session the index knows: number, name, indexed LSN.
    pub fn sessions(&self) -> Result<Vec<(i64, String, u64)>, IndexError> {
        let mut stmt = self
            .conn
            .prepare("SELECT sid, name, indexed_lsn FROM sessions")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Numbers a session the index has not seen.
    pub fn add_session(&mut self, name: &str) -> Result<i64, IndexError> {
        self.conn.execute(
            "INSERT INTO sessions(name, indexed_lsn) VALUES (?1, 0)",
            params![name],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Stores `docs`, their `usage`, the tool requests and the sessions' new indexed LSNs in
    /// one transaction.
    pub fn write(
        &mut self,
        docs: &[Doc],
        usage: &UsageBatch,
        tools: &ToolUses,
        marks: &[(i64, u64)],
    ) -> Result<(), IndexError> {
        let tx = self.conn.transaction()?;
        usage.write(&tx)?;
        tools.write(&tx)?;
        {
            let mut fts = tx.prepare_cached("INSERT INTO fts(rowid, text) VALUES (?1, ?2)")?;
            let mut row = tx.prepare_cached("INSERT INTO docs(id, ts, tid) VALUES (?1, ?2, ?3)")?;
            for d in docs {
                let tid = match self.types.get(&d.event_type) {
                    Some(&tid) => tid,
                    None => {
                        tx.execute("INSERT INTO types(name) VALUES (?1)", [&d.event_type])?;
                        let tid = tx.last_insert_rowid();
                        self.types.insert(d.event_type.clone(), tid);
                        tid
                    }
                };
                let id = doc_id(d.sid, d.lsn);
                fts.execute(params![id, d.text])?;
                row.execute(params![id, d.timestamp as i64, tid])?;
            }
            if !docs.is_empty() {
                tx.prepare_cached("UPDATE counts SET docs = docs + ?1")?
                    .execute([docs.len() as i64])?;
            }
            let mut mark =
                tx.prepare_cached("UPDATE sessions SET indexed_lsn = ?2 WHERE sid = ?1")?;
            for &(sid, lsn) in marks {
                mark.execute(params![sid, lsn as i64])?;
            }
        }
        if let Err(e) = tx.commit() {
            // The transaction rolled back: forget the types it added.
            self.types.clear();
            return Err(e.into());
        }
        Ok(())
    }

    /// Removes a session's documents above `lsn` (all of them for 0) and sets its indexed LSN
    /// to `lsn`; with `forget`, the session too. Returns how many documents went.
    pub fn remove(&mut self, sid: i64, lsn: u64, forget: bool) -> Result<u64, IndexError> {
        let (lo, hi) = (doc_id(sid, lsn + 1), session_range(sid).1);
        let tx = self.conn.transaction()?;
        let name: Option<String> = tx
            .query_row("SELECT name FROM sessions WHERE sid = ?1", [sid], |r| {
                r.get(0)
            })
            .optional()?;
        if let Some(name) = &name {
            tool_uses::delete_above(&tx, name, lsn)?;
            // Usage is kept in sums, which cannot be cut at an LSN: only a whole session goes.
            if lsn == 0 {
                usage_rows::delete_session(&tx, name)?;
            }
        }
        tx.execute(
            "DELETE FROM fts WHERE rowid IN (SELECT id FROM docs WHERE id BETWEEN ?1 AND ?2)",
            params![lo, hi],
        )?;
        let n = tx.execute(
            "DELETE FROM docs WHERE id BETWEEN ?1 AND ?2",
            params![lo, hi],
        )?;
        tx.execute("UPDATE counts SET docs = docs - ?1", [n as i64])?;
        if forget {
            tx.execute("DELETE FROM sessions WHERE sid = ?1", [sid])?;
        } else {
            tx.execute(
                "UPDATE sessions SET indexed_lsn = ?2 WHERE sid = ?1",
                params![sid, lsn as i64],
            )?;
        }
        tx.commit()?;
        Ok(n as u64)
    }

    /// Documents in the index (kept in `counts` by every write and removal).
    pub fn doc_count(&self) -> Result<u64, IndexError> {
        let n: i64 = self
            .conn
            .query_row("SELECT docs FROM counts", [], |r| r.get(0))?;
        Ok(n as u64)
    }
}

fn connect(dir: &Path, create: bool) -> Result<Connection, IndexError> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(db_path(dir), flags)?;
    // A derived cache: it never syncs where a machine restart can be told (see
    // `search::boot`), else as NORMAL does; a daemon crash loses no write, the OS holds them.
    let sync = if crate::search::boot::boot_id().is_some() {
        "OFF"
    } else {
        "NORMAL"
    };
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync}; PRAGMA cache_size = -{CACHE_KIB};"
    ))?;
    Ok(conn)
}

/// SQLite's page cache per connection, KiB (its default is about 2 MB, for the writer and
/// each pooled reader alike): the daemon's memory should not grow with the index.
const CACHE_KIB: u32 = 1024;

/// A connection for queries (several may read while the writer writes).
pub fn reader(dir: &Path) -> Result<Connection, IndexError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(db_path(dir), flags)?;
    conn.execute_batch(&format!(
        "PRAGMA query_only = 1; PRAGMA cache_size = -{CACHE_KIB};"
    ))?;
    Ok(conn)
}

/// What narrows a query, besides its words.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub session: Option<String>,
    pub type_prefix: Option<String>,
    pub since_ms: Option<u64>,
}

/// One hit, best first.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub session: String,
    pub lsn: u64,
    pub timestamp: u64,
    pub event_type: String,
    /// Higher is better (FTS5's bm25, negated).
    pub score: f64,
}

/// Why a query failed: its syntax (the user's to fix), or the index.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{0}")]
    Syntax(String),
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// Matches ranked per query, at most: the latest this many (by session number, then LSN) of
/// a query that matches more. bm25 costs a lookup per match, so a word in half of a million
/// events would otherwise take a second; this bounds every query's ranking work.
pub const RANK_WINDOW: usize = 20_000;

/// The best `limit` documents matching the FTS5 query `fts`, ranked among the latest
/// [`RANK_WINDOW`] matches.
pub fn query(
    conn: &Connection,
    fts: &str,
    filter: &Filter,
    limit: usize,
) -> Result<Vec<Row>, QueryError> {
    // Inner: walk the matches newest rowid first (FTS5 iterates rowids in either order and
    // stops at the LIMIT), with the filters that need the event's row; outer: rank those, then
    // name the best few.
    let mut inner = String::from("SELECT fts.rowid AS id, bm25(fts) AS score FROM fts");
    if filter.type_prefix.is_some() || filter.since_ms.is_some() {
        inner += " JOIN docs d ON d.id = fts.rowid JOIN types t ON t.tid = d.tid";
    }
    inner += " WHERE fts MATCH ?1";
    let mut args: Vec<rusqlite::types::Value> = vec![fts.to_string().into()];
    if let Some(name) = &filter.session {
        let sid: Option<i64> = conn
            .query_row("SELECT sid FROM sessions WHERE name = ?1", [name], |r| {
                r.get(0)
            })
            .optional()
            .map_err(IndexError::from)?;
        let Some(sid) = sid else {
            return Ok(Vec::new());
        };
        let (lo, hi) = session_range(sid);
        inner += &format!(
            " AND fts.rowid BETWEEN ?{} AND ?{}",
            args.len() + 1,
            args.len() + 2
        );
        args.extend([lo.into(), hi.into()]);
    }
    if let Some(since) = filter.since_ms {
        inner += &format!(" AND d.ts >= ?{}", args.len() + 1);
        args.push((since as i64).into());
    }
    if let Some(prefix) = &filter.type_prefix {
        let n = args.len() + 1;
        inner += &format!(" AND substr(t.name, 1, length(?{n})) = ?{n}");
        args.push(prefix.clone().into());
    }
    inner += &format!(" ORDER BY fts.rowid DESC LIMIT {RANK_WINDOW}");
    let sql = format!(
        "SELECT m.id, m.score, d.ts, t.name, s.name FROM \
         (SELECT id, score FROM ({inner}) ORDER BY score, id DESC LIMIT {limit}) m \
         JOIN docs d ON d.id = m.id JOIN types t ON t.tid = d.tid \
         JOIN sessions s ON s.sid = (m.id >> 40) ORDER BY m.score, m.id DESC"
    );
    // An index being created at this moment (the first start, a rebuild) has no tables yet:
    // nothing is indexed, which `behind_by` says; it is not the query's fault.
    let built: bool = conn
        .query_row(
            "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE name = 'fts')",
            [],
            |r| r.get(0),
        )
        .map_err(|e| QueryError::Index(e.into()))?;
    if !built {
        return Ok(Vec::new());
    }
    // The SQL is fixed and known good: a plain SQLITE_ERROR comes from FTS5 parsing the
    // user's query ("fts5: syntax error near …", "unterminated string", …). Damage and I/O
    // have codes of their own.
    let syntax = |e: rusqlite::Error| match &e {
        rusqlite::Error::SqliteFailure(f, Some(m)) if f.code == rusqlite::ErrorCode::Unknown => {
            QueryError::Syntax(m.clone())
        }
        _ => QueryError::Index(e.into()),
    };
    let mut stmt = conn.prepare_cached(&sql).map_err(syntax)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(args), |r| {
            let (_, lsn) = split_id(r.get(0)?);
            Ok(Row {
                lsn,
                score: -r.get::<_, f64>(1)?,
                timestamp: r.get::<_, i64>(2)? as u64,
                event_type: r.get(3)?,
                session: r.get(4)?,
            })
        })
        .map_err(syntax)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(syntax)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(sid: i64, lsn: u64, t: &str, text: &str) -> Doc {
        Doc {
            sid,
            lsn,
            timestamp: lsn * 10,
            event_type: t.into(),
            text: text.into(),
        }
    }

    #[test]
    fn the_document_count_is_kept_and_an_index_from_before_it_is_counted_once() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _) = Writer::open(dir.path()).unwrap();
        let a = w.add_session("a").unwrap();
        let docs: Vec<Doc> = (1..=5).map(|lsn| doc(a, lsn, "t", "words")).collect();
        let none = UsageBatch::default();
        w.write(&docs, &none, &Default::default(), &[(a, 5)])
            .unwrap();
        assert_eq!(w.doc_count().unwrap(), 5);
        assert_eq!(w.remove(a, 3, false).unwrap(), 2);
        assert_eq!(w.doc_count().unwrap(), 3);
        // The file as version 3 left it: no `counts`.
        w.conn
            .execute_batch("DROP TABLE counts; PRAGMA user_version = 3;")
            .unwrap();
        drop(w);
        let (w, why) = Writer::open(dir.path()).unwrap();
        assert_eq!(why, None, "opened, not rebuilt");
        assert_eq!(w.doc_count().unwrap(), 3);
        assert_eq!(w.sessions().unwrap(), [(a, "a".to_string(), 3)]);
    }

    #[test]
    fn documents_are_found_filtered_removed_and_a_damaged_file_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, why) = Writer::open(dir.path()).unwrap();
        assert_eq!(why, None);
        let a = w.add_session("a").unwrap();
        let b = w.add_session("b").unwrap();
        w.write(
            &[
                doc(a, 1, "user.input", "find the needle"),
                doc(a, 2, "execution.tool_use", "grep needle src/x.txt"),
                doc(b, 7, "user.input", "no match here"),
            ],
            &UsageBatch::default(),
            &Default::default(),
            &[(a, 2), (b, 7)],
        )
        .unwrap();
        let r = reader(dir.path()).unwrap();
        let hits = query(&r, "needle", &Filter::default(), 10).unwrap();
        assert_eq!(hits.len(), 2);
        assert!(hits.iter().all(|h| h.session == "a"));
        let f = Filter {
            type_prefix: Some("execution.".into()),
            ..Filter::default()
        };
        let hits = query(&r, "\"x.txt\"", &f, 10).unwrap();
        assert_eq!((hits[0].lsn, hits[0].timestamp), (2, 20));
        let f = Filter {
            session: Some("b".into()),
            since_ms: Some(70),
            ..Filter::default()
        };
        assert_eq!(query(&r, "match", &f, 10).unwrap()[0].lsn, 7);
        assert!(matches!(
            query(&r, "needle AND", &f, 10),
            Err(QueryError::Syntax(_))
        ));
        assert_eq!(w.remove(a, 1, false).unwrap(), 1);
        assert_eq!(
            query(&r, "needle", &Filter::default(), 10).unwrap().len(),
            1
        );
        assert_eq!(w.sessions().unwrap()[0], (a, "a".to_string(), 1));
        assert_eq!(w.doc_count().unwrap(), 2);
        drop((w, r));
        std::fs::write(db_path(dir.path()), b"garbage, not a database").unwrap();
        let (w, why) = Writer::open(dir.path()).unwrap();
        assert!(why.is_some());
        assert_eq!(w.doc_count().unwrap(), 0);
    }

    #[test]
    fn a_query_matching_more_than_the_window_ranks_the_latest_and_stays_exact_below_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _) = Writer::open(dir.path()).unwrap();
        let (old, new) = (w.add_session("old").unwrap(), w.add_session("new").unwrap());
        let n = RANK_WINDOW as u64 + 500;
        let mut docs = vec![doc(old, 1, "t", "common rare rare rare")];
        docs.extend((1..=n).map(|lsn| doc(new, lsn, "t", "common words here")));
        w.write(
            &docs,
            &UsageBatch::default(),
            &Default::default(),
            &[(old, 1), (new, n)],
        )
        .unwrap();
        let r = reader(dir.path()).unwrap();
        // The best match of `common` is the old event, outside the latest RANK_WINDOW matches.
        let hits = query(&r, "common", &Filter::default(), 3).unwrap();
        assert_eq!(hits.len(), 3);
        assert!(hits.iter().all(|h| h.session == "new"), "{hits:?}");
        // Narrowed to fewer matches than the window, the ranking is exact again.
        let f = Filter {
            session: Some("old".into()),
            ..Filter::default()
        };
        assert_eq!(query(&r, "common", &f, 3).unwrap()[0].lsn, 1);
        assert_eq!(query(&r, "rare", &Filter::default(), 3).unwrap().len(), 1);
    }

    /// Fills an index with documents that all hold "needle", and spoils the bytes of the
    /// back half of its file (the documents' pages; the schema's come first).
    fn spoiled_index(dir: &Path, close_cleanly: bool) {
        let (mut w, _) = Writer::open(dir).unwrap();
        let s = w.add_session("s").unwrap();
        let docs: Vec<Doc> = (1..=5000)
            .map(|i| {
                doc(
                    s,
                    i,
                    "user.input",
                    &format!("needle word{i} other{}", i * 7),
                )
            })
            .collect();
        w.write(
            &docs,
            &UsageBatch::default(),
            &Default::default(),
            &[(s, 5000)],
        )
        .unwrap();
        if close_cleanly {
            drop(w);
        } else {
            // What a crash leaves: the writes in the file, the open marker in place.
            w.conn
                .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                .unwrap();
            std::mem::forget(w);
        }
        let path = db_path(dir);
        let mut bytes = std::fs::read(&path).unwrap();
        let half = bytes.len() / 2;
        for b in &mut bytes[half..] {
            *b = 0xA5;
        }
        std::fs::write(&path, bytes).unwrap();
    }

    #[test]
    fn an_index_left_open_is_checked_at_open_one_closed_cleanly_when_a_query_reads_it() {
        let crashed = tempfile::tempdir().unwrap();
        spoiled_index(crashed.path(), false);
        let (w, why) = Writer::open(crashed.path()).unwrap();
        assert!(
            why.is_some(),
            "a damaged index left open is rebuilt at open"
        );
        assert_eq!(w.doc_count().unwrap(), 0);

        let clean = tempfile::tempdir().unwrap();
        spoiled_index(clean.path(), true);
        let (_w, why) = Writer::open(clean.path()).unwrap();
        assert_eq!(why, None, "a cleanly closed index opens on its header");
        let r = reader(clean.path()).unwrap();
        match query(&r, "needle", &Filter::default(), 10) {
            Err(QueryError::Index(e)) => assert!(e.is_damage(), "{e}"),
            other => panic!("the damage is not reported: {other:?}"),
        }
    }
}
