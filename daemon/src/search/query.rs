//! Answering `search`: the index ranks the hits; each hit's event is then read back from its
//! log and its text extracted again for the snippet (the index stores no text). And `usage`,
//! when the index can answer it exactly. Blocking: call it off the async workers.

use std::sync::atomic::Ordering;

use dstream_sdk::protocol::{SearchHit, UsageResult};

use crate::pipeline::joins::ToolIndex;
use crate::search::extract::extract;
use crate::search::index::{self, Filter, QueryError};
use crate::search::observer::Command;
use crate::search::snippet::{snippet, terms, to_fts};
use crate::search::usage_rows::{self, HOUR_MS};
use crate::search::{Search, SearchError};

/// Characters of text a snippet shows.
const SNIPPET_CHARS: usize = 160;
/// Query connections kept open between queries.
const POOL: usize = 4;
/// How long `usage` waits for the index to take in what was committed before it was asked;
/// past it, the logs are read.
const CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Search {
    /// The best `limit` events matching `query` (FTS5 syntax, see [`crate::search::snippet`]).
    pub fn search_blocking(
        &self,
        query: &str,
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<SearchHit>, SearchError> {
        if !self.enabled() {
            return Err(SearchError::Disabled);
        }
        let fts = to_fts(query);
        if fts.trim().is_empty() {
            return Err(SearchError::Syntax {
                query: query.into(),
                detail: "it has no words".into(),
            });
        }
        let Some((generation, conn)) = self.reader()? else {
            // Not created yet (the first start): nothing is indexed, `behind_by` says so.
            return Ok(Vec::new());
        };
        let rows = index::query(&conn, &fts, filter, limit);
        let rows = match rows {
            Ok(rows) => {
                self.give_back(generation, conn);
                rows
            }
            Err(QueryError::Syntax(detail)) => {
                self.give_back(generation, conn);
                return Err(SearchError::Syntax {
                    query: query.into(),
                    detail,
                });
            }
            Err(QueryError::Index(e)) => {
                if e.is_damage() {
                    self.found_damage(generation, &e);
                }
                return Err(SearchError::Index(e.to_string()));
            }
        };
        let terms = terms(&fts);
        let mut hits = Vec::with_capacity(rows.len());
        for row in rows {
            // A session deleted since it was indexed leaves the index at the next sweep.
            let Some(session) = self.store.get(&row.session) else {
                continue;
            };
            let text = crate::store::read_range(&session, row.lsn, row.lsn, 1, usize::MAX)
                .ok()
                .and_then(|page| page.into_iter().next())
                .filter(|e| e.lsn == row.lsn)
                .and_then(|e| {
                    let mut json = Vec::with_capacity(e.len());
                    e.write_to(&mut json);
                    extract(&json)
                })
                .map(|e| e.text)
                .unwrap_or_default();
            let (snippet, marks) = snippet(&text, &terms, SNIPPET_CHARS);
            hits.push(SearchHit {
                session_id: row.session,
                lsn: row.lsn,
                timestamp: row.timestamp,
                event_type: row.event_type,
                snippet,
                highlights: marks.into_iter().map(|(a, b)| [a, b]).collect(),
                score: row.score,
            });
        }
        Ok(hits)
    }

    /// A query connection on the current index file; `None` while there is no file yet.
    /// `usage` from the index, when it can answer exactly: search is on, the range falls on
    /// whole hours, and every session is indexed up to the event it had committed when asked
    /// (waiting up to [`CATCH_UP_WAIT`] for that). `None` otherwise (the caller reads the
    /// logs).
    pub fn usage_blocking(
        &self,
        by: &str,
        session: Option<&str>,
        since_ms: u64,
        until_ms: Option<u64>,
    ) -> Option<UsageResult> {
        let whole_hours =
            since_ms.is_multiple_of(HOUR_MS) && until_ms.is_none_or(|u| u.is_multiple_of(HOUR_MS));
        if !self.enabled() || !whole_hours || !self.indexed_up_to_now(CATCH_UP_WAIT) {
            return None;
        }
        let (generation, conn) = self.reader().ok().flatten()?;
        let result = usage_rows::query(&conn, by, session, since_ms, until_ms);
        self.give_back(generation, conn);
        match result {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(error = %e, "usage from the search index failed; reading the logs");
                if index::is_corrupt(&e) {
                    self.found_damage(generation, &e);
                }
                None
            }
        }
    }

    /// Whether every session gets indexed up to what it has committed now, within `wait`.
    fn indexed_up_to_now(&self, wait: std::time::Duration) -> bool {
        let targets: Vec<(String, u64)> = self
            .store
            .sessions()
            .iter()
            .map(|s| (s.id.clone(), s.committed_lsn()))
            .collect();
        let deadline = std::time::Instant::now() + wait;
        loop {
            let behind = {
                let indexed = self.shared.indexed.lock().unwrap();
                targets
                    .iter()
                    .any(|(id, lsn)| indexed.get(id).copied().unwrap_or(0) < *lsn)
            };
            if !behind {
                return true;
            }
            if std::time::Instant::now() >= deadline || !self.enabled() {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// A tool request by `tool_use_id` (see [`ToolIndex`]).
    fn find_tool_request(&self, session: &str, tool_use_id: &str) -> Result<String, u64> {
        if !self.enabled() {
            return Err(0);
        }
        // Read before the query: what the query then sees holds at least this much.
        let indexed = self
            .shared
            .indexed
            .lock()
            .unwrap()
            .get(session)
            .copied()
            .unwrap_or(0);
        // Requests are written with the documents that move the mark: a session not marked
        // has none in the file, and asking SQLite (a read transaction, its file locks) would
        // only cost the pipeline's thread for every result of a new session.
        if indexed == 0 {
            return Err(0);
        }
        let Ok(Some((generation, conn))) = self.reader() else {
            return Err(0);
        };
        let found = crate::search::tool_uses::find(&conn, session, tool_use_id);
        self.give_back(generation, conn);
        match found {
            Ok(Some(id)) => Ok(id),
            Ok(None) => Err(indexed),
            Err(e) => {
                if index::is_corrupt(&e) {
                    self.found_damage(generation, &e);
                }
                Err(0)
            }
        }
    }

    /// Has the thread rebuild the file of `generation` when a query found it damaged (it is
    /// opened without reading every page after a clean close; see `index::Check`).
    fn found_damage(&self, generation: u64, e: &dyn std::fmt::Display) {
        if let Some(r) = self.running.lock().unwrap().as_ref() {
            let _ = r.commands.send(Command::Damaged {
                generation,
                why: e.to_string(),
            });
        }
    }

    fn reader(&self) -> Result<Option<(u64, rusqlite::Connection)>, SearchError> {
        let generation = self.shared.generation.load(Ordering::Relaxed);
        {
            let mut pool = self.readers.lock().unwrap();
            while let Some((g, conn)) = pool.pop() {
                if g == generation {
                    return Ok(Some((g, conn)));
                }
            }
        }
        if !index::db_path(&self.dir).exists() {
            return Ok(None);
        }
        index::reader(&self.dir)
            .map(|c| Some((generation, c)))
            .map_err(|e| SearchError::Index(e.to_string()))
    }

    fn give_back(&self, generation: u64, conn: rusqlite::Connection) {
        let mut pool = self.readers.lock().unwrap();
        if pool.len() < POOL && generation == self.shared.generation.load(Ordering::Relaxed) {
            pool.push((generation, conn));
        }
    }
}

impl ToolIndex for Search {
    fn tool_request(&self, session: &str, tool_use_id: &str) -> Result<String, u64> {
        self.find_tool_request(session, tool_use_id)
    }
}
