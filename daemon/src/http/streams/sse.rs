//! `live=sse`: a session's events as Server-Sent Events. Each `data` event carries a JSON array
//! of stored events (up to a batch while catching up, one at a time live), each followed by a
//! `control` event with `streamNextOffset`, `streamCursor`, `upToDate` and, once the session is
//! archived, `streamClosed` (the stream then ends). The response ends after about a minute, as
//! the protocol asks, and the client reconnects from the last `streamNextOffset`: a follower
//! (log, then the hub) means nothing is skipped or sent twice across that.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use serde_json::json;
use tokio::sync::mpsc;

use crate::event_json::EventJson;
use crate::follower::{Follow, Follower};
use crate::http::app::App;
use crate::http::streams::closing::{ARCHIVED, archived_at};
use crate::http::streams::offset::{cursor as cursor_now, encode};
use crate::http::streams::reply::protect;
use crate::util::time::now_ms;

/// How long one response lasts before the client is made to reconnect.
const LIFETIME: Duration = Duration::from_secs(60);
/// Events (and bytes) per `data` event while catching up.
const BATCH_EVENTS: usize = 256;
const BATCH_BYTES: usize = 256 << 10;
/// Frames queued for a slow client: with the batch cap, the bytes a response may hold.
const QUEUED_FRAMES: usize = 4;

pub fn respond(app: &Arc<App>, id: String, after: u64, cursor: Option<String>) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(QUEUED_FRAMES);
    let follower = Follower::new(app.store.clone(), &app.hub, &id, after + 1);
    let store = app.store.clone();
    tokio::spawn(async move {
        let session = store.get(&id);
        let tail = move || session.as_ref().map_or(0, |s| s.committed_lsn());
        // Already at the end of an archived session: say it is closed, and end.
        if after >= tail() && archived_at(&store, &id, after).await {
            let cursor = cursor_now(now_ms(), cursor.as_deref());
            let _ = tx
                .send(Bytes::from(control_frame(after, &cursor, true, true)))
                .await;
            return;
        }
        run(follower, after, cursor, tail, tx).await;
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|frame| (Ok::<_, std::convert::Infallible>(frame), rx))
    });
    let mut r = Response::new(Body::from_stream(body));
    let h = r.headers_mut();
    protect(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r
}

/// A `data` event with `events` as one JSON array (stored events are one line each).
fn data_frame(events: &[EventJson]) -> Vec<u8> {
    let mut out = b"event: data\ndata: [".to_vec();
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        e.write_to(&mut out);
    }
    out.extend_from_slice(b"]\n\n");
    out
}

fn control_frame(next: u64, cursor: &str, up_to_date: bool, closed: bool) -> Vec<u8> {
    let mut c = json!({"streamNextOffset": encode(next), "streamCursor": cursor});
    if up_to_date {
        c["upToDate"] = json!(true);
    }
    if closed {
        c["streamClosed"] = json!(true);
    }
    format!("event: control\ndata: {c}\n\n").into_bytes()
}

async fn run(
    mut follower: Follower,
    mut last: u64,
    client_cursor: Option<String>,
    tail: impl Fn() -> u64,
    tx: mpsc::Sender<Bytes>,
) {
    let cursor = cursor_now(now_ms(), client_cursor.as_deref());
    let deadline = Instant::now() + LIFETIME;
    let mut batch: Vec<EventJson> = Vec::new();
    let mut bytes = 0;
    let mut caught_up = false;
    loop {
        let item = match tokio::time::timeout_at(deadline.into(), follower.next()).await {
            Err(_) | Ok(Err(_)) => return,
            Ok(Ok(item)) => item,
        };
        match item {
            Follow::Event(e) => {
                bytes += e.len();
                batch.push(e);
                if !caught_up && batch.len() < BATCH_EVENTS && bytes < BATCH_BYTES {
                    continue;
                }
            }
            Follow::CaughtUp(_) => caught_up = true,
            Follow::Lagged { .. } => continue,
        }
        let closed = batch.last().is_some_and(|e| e.is_type(ARCHIVED));
        if let Some(e) = batch.last() {
            last = e.lsn;
            let frame = data_frame(&batch);
            if tx.send(Bytes::from(frame)).await.is_err() {
                return;
            }
        }
        let up_to_date = caught_up && last >= tail();
        let frame = control_frame(last, &cursor, up_to_date, closed && up_to_date);
        if tx.send(Bytes::from(frame)).await.is_err() || (closed && up_to_date) {
            return;
        }
        batch.clear();
        bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use crate::http::streams::sse::control_frame;

    #[test]
    fn a_control_event_names_the_offset_and_the_cursor() {
        let f = String::from_utf8(control_frame(7, "42", true, false)).unwrap();
        assert!(f.starts_with("event: control\ndata: {"), "{f}");
        assert!(f.ends_with("}\n\n"), "{f}");
        let json: serde_json::Value =
            serde_json::from_str(f.trim_start_matches("event: control\ndata: ").trim()).unwrap();
        assert_eq!(json["streamNextOffset"], "00000000000000000007");
        assert_eq!(json["streamCursor"], "42");
        assert_eq!(json["upToDate"], true);
        assert!(json.get("streamClosed").is_none());
    }
}
