//! Durable Streams reads of local sessions: `GET` and `HEAD /v1/stream/{session_id}` speak the
//! read side of the protocol over a session's events, as an `application/json` stream whose
//! messages are the stored events (as the relay sends them): catch-up from an `offset`
//! (`offset`), `live=long-poll` (here) and `live=sse` (`sse`), `Stream-Next-Offset`,
//! `Stream-Up-To-Date`, `Stream-Cursor`, `ETag` / `If-None-Match`. A stream closes
//! (`Stream-Closed: true`) once its session is archived: a Claude Code session resumes after
//! `SessionEnd`, so an ended one stays open. Writes are not taken here (405): events come
//! through the socket, the hooks and the OTLP receiver.

mod closing;
mod offset;
mod reply;
mod sse;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::event_json::EventJson;
use crate::http::app::App;
use crate::http::streams::closing::{ARCHIVED, archived_at};
use crate::http::streams::offset::Offset;
use crate::http::streams::reply::{CLOSED, CURSOR, NEXT_OFFSET, Refused, UP_TO_DATE, protect, set};
use crate::store::Store;
use crate::util::time::now_ms;

/// Events per catch-up response (the store caps the bytes too); `Stream-Up-To-Date` is left
/// out when more remain. Large, because the official client's one-shot read (`live: false`)
/// takes a single response.
const PAGE_EVENTS: usize = 10_000;
/// How long a long-poll waits for an event.
const LONG_POLL: Duration = Duration::from_secs(20);

/// The query parameters the protocol defines; others are ignored.
#[derive(Default)]
struct Params {
    offset: Option<String>,
    live: Option<String>,
    cursor: Option<String>,
}

fn params(raw: Option<&str>) -> Params {
    let mut p = Params::default();
    for pair in raw.unwrap_or("").split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        // Offsets and cursors this server gives need no escaping; `%2D1` is `-1` escaped.
        let v = v.replace("%2D", "-").replace("%2d", "-");
        match k {
            "offset" => p.offset = Some(v),
            "live" => p.live = Some(v),
            "cursor" => p.cursor = Some(v),
            _ => {}
        }
    }
    p
}

/// The session's committed LSN, or the answer for a session there is no stream for.
fn committed(store: &Store, id: &str) -> Result<u64, Refused> {
    if dstream_sdk::validate_session_id(id).is_err() {
        return Err(Refused(
            StatusCode::BAD_REQUEST,
            "not a valid session id".into(),
        ));
    }
    match store.get(id).map(|s| s.committed_lsn()) {
        Some(lsn) if lsn > 0 => Ok(lsn),
        _ => Err(Refused(StatusCode::NOT_FOUND, "no such session".into())),
    }
}

pub async fn head(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    let tail = match committed(&app.store, &id) {
        Ok(t) => t,
        Err(r) => return r.into_response(),
    };
    let mut r = StatusCode::OK.into_response();
    let h = r.headers_mut();
    protect(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    set(h, NEXT_OFFSET, &offset::encode(tail));
    if archived_at(&app.store, &id, tail).await {
        set(h, CLOSED, "true");
    }
    r
}

pub async fn get(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let p = params(query.as_deref());
    let tail = match committed(&app.store, &id) {
        Ok(t) => t,
        Err(r) => return r.into_response(),
    };
    let start = match offset::parse(p.offset.as_deref()) {
        Ok(Offset::Now) => Offset::Now,
        Ok(Offset::After(lsn)) if lsn > tail => {
            let why = "offset is beyond the end of the stream";
            return Refused(StatusCode::BAD_REQUEST, why.into()).into_response();
        }
        Ok(o) => o,
        Err(e) => return Refused(StatusCode::BAD_REQUEST, e).into_response(),
    };
    match p.live.as_deref() {
        None | Some("") => catch_up(&app, &id, start, tail, &headers).await,
        Some("long-poll") => long_poll(&app, &id, start, p.cursor.as_deref()).await,
        Some("sse") => {
            let after = match start {
                Offset::Now => tail,
                Offset::After(lsn) => lsn,
            };
            sse::respond(&app, id, after, p.cursor)
        }
        Some(other) => Refused(
            StatusCode::BAD_REQUEST,
            format!(
                "live={:?}: expected long-poll or sse",
                other.chars().take(32).collect::<String>()
            ),
        )
        .into_response(),
    }
}

/// A JSON array of the events, as the protocol's JSON mode answers.
fn json_array(events: &[EventJson]) -> Vec<u8> {
    let mut body = Vec::with_capacity(2 + events.iter().map(|e| e.len() + 1).sum::<usize>());
    body.push(b'[');
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        e.write_to(&mut body);
    }
    body.push(b']');
    body
}

/// Events after `after`: a page, with where to go on from and whether that is the end.
struct Page {
    events: Vec<EventJson>,
    next: u64,
    up_to_date: bool,
    closed: bool,
}

async fn page(app: &App, id: &str, after: u64) -> Result<Page, Refused> {
    let read = app
        .store
        .read(id, after + 1, PAGE_EVENTS)
        .await
        .map_err(|e| Refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let next = read.events.last().map_or(after, |e| e.lsn);
    let up_to_date = read.up_to_date;
    let closed = up_to_date
        && match read.events.last() {
            Some(e) => e.is_type(ARCHIVED),
            None => after > 0 && archived_at(&app.store, id, after).await,
        };
    Ok(Page {
        events: read.events,
        next,
        up_to_date,
        closed,
    })
}

fn answer(status: StatusCode, page: &Page, body: Vec<u8>, cursor: Option<String>) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    protect(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    set(h, NEXT_OFFSET, &offset::encode(page.next));
    if page.up_to_date {
        set(h, UP_TO_DATE, "true");
    }
    if page.closed {
        set(h, CLOSED, "true");
    }
    if let Some(c) = cursor {
        set(h, CURSOR, &c);
    }
    r
}

async fn catch_up(app: &App, id: &str, start: Offset, tail: u64, headers: &HeaderMap) -> Response {
    let after = match start {
        // The tail, and nothing else: no data, no ETag.
        Offset::Now => {
            let closed = archived_at(&app.store, id, tail).await;
            let page = Page {
                events: Vec::new(),
                next: tail,
                up_to_date: true,
                closed,
            };
            return answer(StatusCode::OK, &page, b"[]".to_vec(), None);
        }
        Offset::After(lsn) => lsn,
    };
    let page = match page(app, id, after).await {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let etag = format!(
        "\"{id}:{}:{}\"",
        offset::encode(after),
        offset::encode(page.next)
    );
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut r = if matches {
        answer(StatusCode::NOT_MODIFIED, &page, Vec::new(), None)
    } else {
        answer(StatusCode::OK, &page, json_array(&page.events), None)
    };
    if let Ok(v) = HeaderValue::from_str(&etag) {
        r.headers_mut().insert(header::ETAG, v);
    }
    r
}

async fn long_poll(app: &App, id: &str, start: Offset, cursor: Option<&str>) -> Response {
    // Subscribed before looking at the tail, so an event committed in between wakes it.
    let mut hub = app.hub.subscribe();
    let tail = app.store.get(id).map_or(0, |s| s.committed_lsn());
    let after = match start {
        Offset::Now => tail,
        Offset::After(lsn) => lsn,
    };
    let cursor = || Some(offset::cursor(now_ms(), cursor));
    if after >= tail {
        if archived_at(&app.store, id, tail).await {
            let page = Page {
                events: Vec::new(),
                next: tail,
                up_to_date: true,
                closed: true,
            };
            return answer(StatusCode::NO_CONTENT, &page, Vec::new(), cursor());
        }
        let arrived = tokio::time::timeout(LONG_POLL, async {
            loop {
                match hub.recv().await {
                    Ok(c) if *c.session == *id => return,
                    Ok(_) => {}
                    // Fell behind: whatever it missed is in the log.
                    Err(_) => return,
                }
            }
        })
        .await;
        if arrived.is_err() {
            let page = Page {
                events: Vec::new(),
                next: after,
                up_to_date: true,
                closed: false,
            };
            return answer(StatusCode::NO_CONTENT, &page, Vec::new(), cursor());
        }
    }
    match page(app, id, after).await {
        Ok(page) => {
            let body = json_array(&page.events);
            answer(StatusCode::OK, &page, body, cursor())
        }
        Err(r) => r.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::params;

    #[test]
    fn the_protocol_parameters_are_read_and_others_ignored() {
        let p = params(Some("cursor=7&live=sse&offset=%2D1&x=y"));
        assert_eq!(p.offset.as_deref(), Some("-1"));
        assert_eq!(p.live.as_deref(), Some("sse"));
        assert_eq!(p.cursor.as_deref(), Some("7"));
        let none = params(None);
        assert!(none.offset.is_none() && none.live.is_none());
    }
}
