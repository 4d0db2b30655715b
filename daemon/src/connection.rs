//! One client connection: frames in, dispatch, replies and notifications out.
//!
//! Replies and subscription traffic share one bounded outbound queue drained by a writer task.
//! A client that stops reading fills its own queue and stalls only its own subscriptions
//! (which then lag and resume from disk); appends from everyone else go on.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{PeerInfo, codes};
use interprocess::local_socket::tokio::Stream;
use interprocess::local_socket::traits::StreamCommon as _;
use serde_json::value::RawValue;
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::frame::{Frame, read_frame};
use crate::rpc::{self, Reply};
use crate::server::Context;

/// Per-connection state the methods may touch.
pub struct Connection {
    pub peer: PeerInfo,
    pub out: mpsc::Sender<Vec<u8>>,
    pub subscriptions: HashMap<String, JoinHandle<()>>,
    next_subscription: u64,
}

impl Connection {
    pub fn new_subscription_id(&mut self) -> String {
        self.next_subscription += 1;
        format!("sub-{}", self.next_subscription)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        for (_, task) in self.subscriptions.drain() {
            task.abort();
        }
    }
}

fn peer_of(stream: &Stream) -> PeerInfo {
    match stream.peer_creds() {
        #[cfg(unix)]
        Ok(c) => PeerInfo {
            uid: c.euid(),
            gid: c.egid(),
            pid: c.pid(),
        },
        #[cfg(not(unix))]
        Ok(c) => PeerInfo {
            uid: None,
            gid: None,
            pid: c.pid().map(|p| p as i32),
        },
        Err(e) => {
            tracing::warn!(error = %e, "the OS did not report the peer's credentials");
            PeerInfo {
                uid: None,
                gid: None,
                pid: None,
            }
        }
    }
}

pub async fn serve(stream: Stream, ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let peer = peer_of(&stream);
    tracing::debug!(?peer, "connection opened");
    ctx.stats.connections.fetch_add(1, Ordering::Relaxed);
    let stream = Arc::new(stream);
    let (out, out_rx) = mpsc::channel(ctx.config.subscriptions.outbound_frames);
    let writer = tokio::spawn(write_frames(stream.clone(), out_rx));
    let mut conn = Connection {
        peer,
        out,
        subscriptions: HashMap::new(),
        next_subscription: 0,
    };

    let mut reader = BufReader::with_capacity(64 * 1024, &*stream);
    let mut buf = Vec::new();
    let max = ctx.config.daemon.max_frame_bytes;
    loop {
        let frame = tokio::select! {
            f = read_frame(&mut reader, max, &mut buf) => f,
            _ = shutdown.changed() => break,
        };
        match frame {
            Ok(Frame::Eof) | Err(_) => break,
            Ok(Frame::TooLong { bytes }) => {
                ctx.stats.frame_errors.fetch_add(1, Ordering::Relaxed);
                let err = RpcError::new(
                    codes::FRAME_TOO_LARGE,
                    format!(
                        "frame of {bytes} bytes exceeds the limit of {max} bytes; it was discarded"
                    ),
                );
                if conn.out.send(rpc::error_frame(None, &err)).await.is_err() {
                    break;
                }
            }
            Ok(Frame::Line) if buf.iter().all(u8::is_ascii_whitespace) => {}
            Ok(Frame::Line) => {
                if handle_line(&ctx, &mut conn, &buf).await.is_err() {
                    break;
                }
            }
        }
    }
    drop(conn); // ends subscriptions and, once pending replies are out, the writer
    let _ = writer.await;
    ctx.stats.connections.fetch_sub(1, Ordering::Relaxed);
}

/// Parses one request and answers it. `Err` means the connection is gone.
async fn handle_line(ctx: &Arc<Context>, conn: &mut Connection, line: &[u8]) -> Result<(), ()> {
    let request = match rpc::parse_request(line) {
        Ok(r) => r,
        Err((id, err)) => {
            ctx.stats.frame_errors.fetch_add(1, Ordering::Relaxed);
            return conn
                .out
                .send(rpc::error_frame(id.as_deref(), &err))
                .await
                .map_err(drop);
        }
    };
    let id: Option<Box<RawValue>> = request.id.map(|r| r.to_owned());
    let reply = rpc::dispatch(ctx, conn, &request.method, request.params).await;
    match (reply, id) {
        (Reply::Subscribed(sub), id) => {
            // The reply goes out before the feed starts, so it precedes every notification.
            let sub_id = sub.id.clone();
            if let Some(id) = &id {
                let frame = rpc::reply_frame(Some(id), rpc::subscribed(&sub_id));
                conn.out.send(frame).await.map_err(drop)?;
            }
            conn.subscriptions.insert(sub_id, sub.spawn());
            Ok(())
        }
        // A request without an id is a notification: carried out, not answered.
        (_, None) => Ok(()),
        (Reply::Now(result), Some(id)) => conn
            .out
            .send(rpc::reply_frame(Some(&id), result))
            .await
            .map_err(drop),
        (Reply::Later(pending), Some(id)) => {
            let out = conn.out.clone();
            tokio::spawn(async move {
                let result = pending.await;
                let _ = out.send(rpc::reply_frame(Some(&id), result)).await;
            });
            Ok(())
        }
    }
}

async fn write_frames(stream: Arc<Stream>, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut w = BufWriter::with_capacity(64 * 1024, &*stream);
    while let Some(frame) = rx.recv().await {
        if w.write_all(&frame).await.is_err() {
            return;
        }
        // Batch whatever else is ready into the same write.
        while let Ok(frame) = rx.try_recv() {
            if w.write_all(&frame).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
}
