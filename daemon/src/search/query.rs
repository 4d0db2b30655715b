//! Answering `search`: the index ranks the hits; each hit's event is then read back from its
//! log and its text extracted again for the snippet (the index stores no text). Blocking:
//! call it off the async workers.

use std::sync::atomic::Ordering;

use dstream_sdk::protocol::SearchHit;

use crate::search::extract::extract;
use crate::search::index::{self, Filter, QueryError};
use crate::search::snippet::{snippet, terms, to_fts};
use crate::search::{Search, SearchError};

/// Characters of text a snippet shows.
const SNIPPET_CHARS: usize = 160;
/// Query connections kept open between queries.
const POOL: usize = 4;

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
            Err(QueryError::Index(e)) => return Err(SearchError::Index(e.to_string())),
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
