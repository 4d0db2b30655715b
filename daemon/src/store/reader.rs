//! Reading committed events back: seek with the sparse index, read forward with positional
//! reads, check every record's checksum and LSN on the way.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;

use super::error::StoreError;
use super::record;
use super::session::{EventJson, Session};

/// A `read` reply stops growing past this many bytes of events (the client pages on with
/// `next_lsn`), so one reply never needs more memory than this plus one event.
const READ_REPLY_BYTES: usize = 32 << 20;

/// One page of a `read`.
pub struct ReadPage {
    pub events: Vec<EventJson>,
    pub next_lsn: u64,
    pub up_to_date: bool,
    /// Set for a quarantined session: the events end where the damage starts.
    pub quarantined: Option<super::session::Quarantine>,
}

/// Reads up to `limit` events with `from_lsn <= lsn <= upto`, in order, stopping early once
/// they add up to `max_bytes` (always at least one). `upto` must be committed (its record is
/// complete), so the reader never looks at a line being written.
pub fn read_range(
    session: &Session,
    from_lsn: u64,
    upto: u64,
    limit: usize,
    max_bytes: usize,
) -> Result<Vec<EventJson>, StoreError> {
    let from_lsn = from_lsn.max(1);
    if from_lsn > upto || limit == 0 {
        return Ok(Vec::new());
    }
    // Held for the whole read: the log's first part may be freed once an archive holds it.
    let archive = session.archive.read().unwrap();
    let Some(a) = archive.as_deref() else {
        return read_log(session, from_lsn, upto, limit, max_bytes, None);
    };
    let (upto_lsn, covers) = (a.footer.upto_lsn, a.footer.covers_bytes);
    if from_lsn <= upto_lsn {
        let mut out = a.read(&session.id, from_lsn, upto.min(upto_lsn), limit, max_bytes)?;
        let bytes: usize = out.iter().map(EventJson::len).sum();
        if upto <= upto_lsn || out.len() >= limit || bytes >= max_bytes {
            return Ok(out);
        }
        let rest = read_log(
            session,
            upto_lsn + 1,
            upto,
            limit - out.len(),
            max_bytes - bytes,
            Some((upto_lsn + 1, covers)),
        )?;
        out.extend(rest);
        return Ok(out);
    }
    read_log(
        session,
        from_lsn,
        upto,
        limit,
        max_bytes,
        Some((upto_lsn + 1, covers)),
    )
}

/// [`read_range`] in the log itself; `floor` is where the log's readable part begins (the
/// first LSN after the archive, and its offset), when an archive holds what comes before.
fn read_log(
    session: &Session,
    from_lsn: u64,
    upto: u64,
    limit: usize,
    max_bytes: usize,
    floor: Option<(u64, u64)>,
) -> Result<Vec<EventJson>, StoreError> {
    let mut start = session.index.read().unwrap().seek(from_lsn);
    if let Some((lsn, offset)) = floor
        && start.offset < offset
    {
        start = super::index::IndexEntry { lsn, offset };
    }
    let file = session
        .read_handle()
        .map_err(|e| StoreError::io("opening the log for reading", &e))?;
    let corrupt = |lsn: u64, reason: String| StoreError::Corrupt {
        session: session.id.clone(),
        lsn,
        reason,
    };

    let name = session.log_name.clone();
    let mut out = Vec::with_capacity(limit.min(1024));
    let mut bytes = 0;
    let mut expected = start.lsn;
    let mut offset = start.offset;
    let mut carry: Vec<u8> = Vec::new();
    let mut chunk_size = 64 * 1024;
    loop {
        let mut buf = std::mem::take(&mut carry);
        let have = buf.len();
        buf.resize(have + chunk_size, 0);
        let n = file
            .read_at(&mut buf[have..], offset)
            .map_err(|e| StoreError::io("reading the log", &e))?;
        if n == 0 {
            return Err(corrupt(
                expected,
                format!("the log ends before lsn {expected}"),
            ));
        }
        buf.truncate(have + n);
        offset += n as u64;
        let chunk = Bytes::from(buf);
        let mut line_start = 0;
        while let Some(nl) = memchr::memchr(b'\n', &chunk[line_start..]) {
            let line = &chunk[line_start..line_start + nl];
            let (lsn, body) = record::open(line).map_err(|e| {
                corrupt(expected, format!("{e:?} in the record for lsn {expected}"))
            })?;
            if lsn != expected && !session.gaps.allows(expected - 1, lsn) {
                return Err(corrupt(
                    expected,
                    format!("found lsn {lsn} where lsn {expected} belongs"),
                ));
            }
            if lsn >= from_lsn {
                bytes += body.len();
                out.push(EventJson::new(lsn, chunk.slice_ref(body), &name));
                if lsn >= upto || out.len() >= limit || bytes >= max_bytes {
                    return Ok(out);
                }
            }
            expected = lsn + 1;
            line_start += nl + 1;
        }
        carry = chunk[line_start..].to_vec();
        // A line longer than the chunk: read more of it at once next time.
        chunk_size = (chunk_size * 2).min(16 << 20).max(carry.len());
    }
}

/// Bytes at the end of a log that a read may take on the calling (async) thread: written
/// moments ago, so in the page cache, and few enough that checking them takes well under a
/// millisecond. Further back, or from an archive, a read goes to the blocking pool.
const HOT_TAIL_BYTES: u64 = 1 << 20;

/// Whether a read from `from_lsn` touches only the log's hot tail (see [`HOT_TAIL_BYTES`]).
pub(crate) fn reads_hot_tail(session: &Session, from_lsn: u64) -> bool {
    let archived = session
        .archive
        .read()
        .unwrap()
        .as_ref()
        .is_some_and(|a| from_lsn <= a.footer.upto_lsn);
    if archived {
        return false;
    }
    let start = session.index.read().unwrap().seek(from_lsn).offset;
    let len = session.meta.lock().unwrap().bytes;
    len.saturating_sub(start) <= HOT_TAIL_BYTES
}

pub(crate) fn read_page(
    session: &Arc<Session>,
    from_lsn: u64,
    limit: usize,
) -> Result<ReadPage, StoreError> {
    let committed = session.committed_lsn();
    let from_lsn = from_lsn.max(1);
    let events = read_range(session, from_lsn, committed, limit, READ_REPLY_BYTES)?;
    let next_lsn = events.last().map_or(from_lsn, |e| e.lsn + 1);
    Ok(ReadPage {
        events,
        next_lsn,
        up_to_date: next_lsn > committed,
        quarantined: session.quarantine().cloned(),
    })
}

/// Filters of `query`, combined with AND.
#[derive(Debug, Clone, Default)]
pub struct QueryFilter {
    pub session_id: Option<String>,
    pub stream_id: Option<String>,
    pub type_prefix: Option<String>,
    pub actor: Option<String>,
    pub since_ms: Option<u64>,
    pub until_ms: Option<u64>,
}

#[derive(Deserialize)]
struct Filterable<'a> {
    #[serde(rename = "type", borrow)]
    event_type: Cow<'a, str>,
    #[serde(default, borrow)]
    actor: Option<Cow<'a, str>>,
    #[serde(borrow)]
    stream_id: Cow<'a, str>,
    timestamp: u64,
}

impl QueryFilter {
    fn matches(&self, e: &Filterable) -> bool {
        self.stream_id.as_deref().is_none_or(|s| e.stream_id == s)
            && self
                .type_prefix
                .as_deref()
                .is_none_or(|p| e.event_type.starts_with(p))
            && self
                .actor
                .as_deref()
                .is_none_or(|a| e.actor.as_deref() == Some(a))
            && self.since_ms.is_none_or(|t| e.timestamp >= t)
            && self.until_ms.is_none_or(|t| e.timestamp < t)
    }

    /// Whether the stored event `e` passes every filter but the session.
    pub fn matches_json(&self, e: &EventJson) -> bool {
        let mut json = Vec::with_capacity(e.len());
        e.write_to(&mut json);
        serde_json::from_slice::<Filterable>(&json).is_ok_and(|f| self.matches(&f))
    }

    /// Whether a session active over `[first_ts, last_ts]` can hold a match at all.
    fn may_match_session(&self, first_ts: u64, last_ts: u64) -> bool {
        self.since_ms.is_none_or(|t| last_ts >= t) && self.until_ms.is_none_or(|t| first_ts < t)
    }
}

pub(crate) fn query(
    sessions: &[Arc<Session>],
    filter: &QueryFilter,
    limit: usize,
) -> Result<(Vec<EventJson>, bool), StoreError> {
    const PAGE: usize = 4096;
    let mut out = Vec::new();
    let mut bytes = 0;
    let mut json = Vec::new();
    for session in sessions {
        let meta = session.meta();
        if !filter.may_match_session(meta.first_ts, meta.last_ts) {
            continue;
        }
        let name = session.log_name.clone();
        let committed = session.committed_lsn();
        let mut from = 1;
        while from <= committed {
            let page = read_range(session, from, committed, PAGE, 8 << 20)?;
            let Some(last) = page.last() else { break };
            from = last.lsn + 1;
            for event in page {
                json.clear();
                event.write_to(&mut json);
                let fields: Filterable =
                    serde_json::from_slice(&json).map_err(|e| StoreError::Corrupt {
                        session: session.id.clone(),
                        lsn: event.lsn,
                        reason: format!("stored event is not an event envelope: {e}"),
                    })?;
                if filter.matches(&fields) {
                    // Like `read`, a reply stops at READ_REPLY_BYTES (then `truncated`).
                    if out.len() == limit || bytes >= READ_REPLY_BYTES {
                        return Ok((out, true));
                    }
                    bytes += json.len();
                    // A copy: a slice would pin its whole read chunk for a sparse match.
                    let body = Bytes::copy_from_slice(&json[..json.len() - 1]);
                    out.push(EventJson::new(event.lsn, body, &name));
                }
            }
        }
    }
    Ok((out, false))
}

/// Calls `visit` with every committed event (its JSON, newline-terminated) stored at or after
/// `since_ms` by the store's clock, session by session. Sessions last active before then are
/// skipped, and within a session the first such event is found by binary search on the LSN,
/// so the cost follows the events since then, not the history. Timestamps within a session
/// only grow unless the clock steps back; a caller that fears that asks from a little earlier.
pub(crate) fn scan_since(
    sessions: &[Arc<Session>],
    since_ms: u64,
    visit: &mut dyn FnMut(&[u8]),
) -> Result<(), StoreError> {
    #[derive(Deserialize)]
    struct Stamp {
        timestamp: u64,
    }
    let mut json = Vec::new();
    let stamp_at = |session: &Session, lsn: u64, json: &mut Vec<u8>| {
        let page = read_range(session, lsn, session.committed_lsn(), 1, 1)?;
        let Some(event) = page.first() else {
            return Ok::<_, StoreError>(None);
        };
        json.clear();
        event.write_to(json);
        let ts = serde_json::from_slice::<Stamp>(json).map_or(0, |s| s.timestamp);
        Ok(Some((event.lsn, ts)))
    };
    for session in sessions {
        if session.meta().last_ts < since_ms {
            continue;
        }
        let committed = session.committed_lsn();
        // The first LSN whose event is not older than `since_ms`.
        let (mut lo, mut hi) = (1, committed + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match stamp_at(session, mid, &mut json)? {
                Some((lsn, ts)) if ts < since_ms => lo = lsn + 1,
                Some(_) | None => hi = mid,
            }
        }
        let mut from = lo;
        while from <= committed {
            let page = read_range(session, from, committed, 1024, 8 << 20)?;
            let Some(last) = page.last() else { break };
            from = last.lsn + 1;
            for event in &page {
                json.clear();
                event.write_to(&mut json);
                visit(&json);
            }
        }
    }
    Ok(())
}
