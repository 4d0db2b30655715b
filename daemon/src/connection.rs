//! One client connection: frames in, dispatch, replies and notifications out.
//!
//! Two queues feed the socket: `out` (bounded) carries replies made here and subscription
//! traffic; `acks` carries append acknowledgements, pushed straight from the session
//! writers, which must never wait on a client. That queue is bounded instead by the appends a
//! connection may have in flight (a permit each, given back once the reply is on the socket).
//! A client that stops reading stalls only itself and its own subscriptions (which then lag
//! and resume from disk); appends from everyone else go on.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{PeerInfo, codes};
use interprocess::local_socket::tokio::Stream;
use interprocess::local_socket::traits::StreamCommon as _;
use serde_json::value::RawValue;
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinHandle;

use crate::frame::{Frame, read_frame};
use crate::rpc::{self, Reply};
use crate::server::Context;

/// Appends one connection may have waiting for their acknowledgement.
const MAX_APPENDS_IN_FLIGHT: usize = 1024;

/// A connection's frame buffer grows to its largest frame; past this it is given back after
/// the frame is handled, so idle connections do not each keep their biggest frame's memory.
const KEPT_BUFFER_BYTES: usize = 64 * 1024;

/// JSON-RPC error sent (with id null) to a peer running as another user, before closing.
/// Not yet in `dstream_sdk::protocol::codes`.
pub const PEER_REFUSED: i64 = -32009;

/// An append acknowledgement on its way to the socket, holding its in-flight permit.
pub struct AckFrame {
    pub frame: Vec<u8>,
    /// Held until the frame is written; dropping it frees a place for another append.
    pub _in_flight: OwnedSemaphorePermit,
}

/// Per-connection state the methods may touch.
pub struct Connection {
    pub peer: PeerInfo,
    pub out: mpsc::Sender<Vec<u8>>,
    pub acks: mpsc::UnboundedSender<AckFrame>,
    pub in_flight: Arc<Semaphore>,
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

/// Why `peer` may not use this daemon: only the daemon's own user may, even if the socket's
/// mode was loosened (root is no exception). `None` when it may.
#[cfg(unix)]
fn refusal(peer: &PeerInfo) -> Option<String> {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let own = unsafe { libc::geteuid() };
    match peer.uid {
        Some(uid) if uid == own => None,
        Some(uid) => Some(format!(
            "peer refused: uid {uid} may not use this daemon; only uid {own} may"
        )),
        None => Some(format!(
            "peer refused: the peer's uid could not be verified; only uid {own} may use this daemon"
        )),
    }
}

#[cfg(not(unix))]
fn refusal(_peer: &PeerInfo) -> Option<String> {
    // A named pipe's default security descriptor already limits it to its creator.
    None
}

/// Tells a refused peer why, then lets the connection drop.
async fn refuse(stream: &Stream, message: String) {
    let frame = rpc::error_frame(None, &RpcError::new(PEER_REFUSED, message));
    let mut w = stream;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        w.write_all(&frame).await?;
        w.flush().await
    })
    .await;
}

pub async fn serve(stream: Stream, ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let peer = peer_of(&stream);
    if let Some(message) = refusal(&peer) {
        tracing::warn!(?peer, "refused a connection from another user");
        refuse(&stream, message).await;
        return;
    }
    tracing::debug!(?peer, "connection opened");
    ctx.stats.connections.fetch_add(1, Ordering::Relaxed);
    let stream = Arc::new(stream);
    let (out, out_rx) = mpsc::channel(ctx.config.subscriptions.outbound_frames);
    let (acks, acks_rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_frames(stream.clone(), out_rx, acks_rx));
    let mut conn = Connection {
        peer,
        out,
        acks,
        in_flight: Arc::new(Semaphore::new(MAX_APPENDS_IN_FLIGHT)),
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
                // `buf` holds the frame's first bytes: enough to find its id in.
                let id = rpc::salvage_id(&buf);
                if conn
                    .out
                    .send(rpc::error_frame(id.as_deref(), &err))
                    .await
                    .is_err()
                {
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
        if buf.capacity() > KEPT_BUFFER_BYTES {
            buf.clear();
            buf.shrink_to(KEPT_BUFFER_BYTES);
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
    let reply = rpc::dispatch(ctx, conn, &request.method, request.params, id.as_deref()).await;
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
        // Answered by the session writer through `conn.acks`.
        (Reply::Submitted, Some(_)) => Ok(()),
    }
}

async fn write_frames(
    stream: Arc<Stream>,
    mut out: mpsc::Receiver<Vec<u8>>,
    mut acks: mpsc::UnboundedReceiver<AckFrame>,
) {
    let mut w = BufWriter::with_capacity(64 * 1024, &*stream);
    let mut out_open = true;
    loop {
        // Acknowledgements first: they release in-flight permits and are what writers wait on.
        let frame = tokio::select! {
            biased;
            Some(ack) = acks.recv() => Outgoing::Ack(ack),
            f = out.recv(), if out_open => match f {
                Some(f) => Outgoing::Out(f),
                None => { out_open = false; continue; }
            },
            else => return,
        };
        if w.write_all(frame.bytes()).await.is_err() {
            return;
        }
        drop(frame);
        // Batch whatever else is ready into the same write.
        loop {
            let more = match acks.try_recv() {
                Ok(ack) => Outgoing::Ack(ack),
                Err(_) => match out.try_recv() {
                    Ok(f) => Outgoing::Out(f),
                    Err(_) => break,
                },
            };
            if w.write_all(more.bytes()).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
}

/// A frame taken from either queue.
enum Outgoing {
    Ack(AckFrame),
    Out(Vec<u8>),
}

impl Outgoing {
    fn bytes(&self) -> &[u8] {
        match self {
            Outgoing::Ack(a) => &a.frame,
            Outgoing::Out(f) => f,
        }
    }
}
