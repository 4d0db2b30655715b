//! One client connection: frames in, each charged to the daemon's memory budget for clients,
//! dispatched to `rpc`; replies, acknowledgements and notifications out through one
//! byte-bounded queue (see `outbound`), written by a task of its own. A client that stops
//! reading stalls only itself and its own subscriptions (which then lag and resume from
//! disk); appends from everyone else go on.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{PeerInfo, codes};
use interprocess::local_socket::tokio::Stream;
use interprocess::local_socket::traits::StreamCommon as _;
use serde_json::value::RawValue;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::frame::{Frame, read_frame};
use crate::outbound::{self, Outbound};
use crate::rpc::{self, Caller, Reply};
use crate::slots::SlotGuard;
use crate::state::{DaemonState, Held};

/// A connection's frame buffer is given back down to this after a bigger frame, so an idle
/// connection does not keep the largest frame it ever read.
const KEPT_BUFFER_BYTES: usize = 64 * 1024;

pub fn peer_of(stream: &Stream) -> PeerInfo {
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
pub async fn refuse(stream: &Stream, code: i64, message: String) {
    let frame = rpc::error_frame(None, &RpcError::new(code, message));
    let mut w = stream;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        w.write_all(&frame).await?;
        w.flush().await
    })
    .await;
}

pub async fn serve(
    stream: Stream,
    state: Arc<DaemonState>,
    mut shutdown: watch::Receiver<bool>,
    slot: SlotGuard,
) {
    let peer = peer_of(&stream);
    if let Some(message) = refusal(&peer) {
        tracing::warn!(?peer, "refused a connection from another user");
        refuse(&stream, codes::PEER_REFUSED, message).await;
        return;
    }
    tracing::debug!(?peer, "connection opened");
    state.stats.connections.fetch_add(1, Ordering::Relaxed);
    let stream = Arc::new(stream);
    let (out, out_rx) = Outbound::new(state.config().subscriptions.outbound_bytes);
    let writer = tokio::spawn(write_frames(stream.clone(), out_rx));
    let mut caller = Caller::new(peer, out);
    slot.watch(caller.work());

    let mut reader = BufReader::with_capacity(64 * 1024, &*stream);
    let mut buf = Vec::new();
    // The frame buffer is client memory too: charged while it grows (see `frame`).
    let mut held = state.memory.held();
    let max = state.config().daemon.max_frame_bytes;
    let idle = Duration::from_millis(state.config().daemon.idle_timeout_ms);
    let mut deadline = Instant::now() + idle; // for the first frame: from the connection on
    let mut first = true;
    loop {
        let frame = tokio::select! {
            f = next_frame(&mut reader, max, &mut buf, &mut held, &slot, &mut deadline, first, idle) => f,
            _ = shutdown.changed() => break,
            _ = slot.slot.evicted.notified() => {
                tracing::debug!(peer = ?caller.peer, "connection closed to make room for a new one");
                let err = RpcError::new(
                    codes::TOO_MANY_CONNECTIONS,
                    format!(
                        "closed to make room for a new connection: the daemon serves at most {} \
                         (daemon.max_connections) and this one held nothing",
                        state.slots.max()
                    ),
                );
                let _ = caller.out.send(rpc::error_frame(None, &err)).await;
                break;
            }
        };
        if matches!(
            frame,
            Ok(Frame::Line | Frame::TooLong { .. } | Frame::Overloaded { .. })
        ) {
            slot.frame_done(); // before its reply can reach the client
        }
        let sent = match frame {
            Ok(Frame::Eof) | Err(_) => break,
            Ok(Frame::Overloaded { bytes }) => {
                state.stats.overloaded.fetch_add(1, Ordering::Relaxed);
                let id = rpc::salvage_id(&buf);
                let err = overloaded(
                    &state,
                    &format!("this frame ({bytes} bytes so far) was discarded"),
                );
                caller.out.send(rpc::error_frame(id.as_deref(), &err)).await
            }
            Ok(Frame::TooLong { bytes }) => {
                state.stats.frame_errors.fetch_add(1, Ordering::Relaxed);
                let err = RpcError::new(
                    codes::FRAME_TOO_LARGE,
                    format!(
                        "frame of {bytes} bytes exceeds the limit of {max} bytes; it was discarded"
                    ),
                );
                let id = rpc::salvage_id(&buf);
                caller.out.send(rpc::error_frame(id.as_deref(), &err)).await
            }
            Ok(Frame::Line) if buf.iter().all(u8::is_ascii_whitespace) => Ok(()),
            Ok(Frame::Line) => {
                caller.alone = reader.buffer().is_empty();
                handle_line(&state, &mut caller, &buf).await
            }
        };
        if sent.is_err() {
            break;
        }
        first = false;
        slot.framed();
        if buf.capacity() > KEPT_BUFFER_BYTES {
            buf.clear();
            buf.shrink_to(KEPT_BUFFER_BYTES);
        }
        if !held.resize(buf.capacity()) {
            buf = Vec::new();
            held.resize(0);
        }
    }
    drop(caller); // ends subscriptions and, once pending replies are out, the writer
    let _ = writer.await;
    state.stats.connections.fetch_sub(1, Ordering::Relaxed);
    // The slot is free before the socket closes: a client that saw this connection end may
    // count on its place (a hook connecting next, or a test counting connections).
    drop(slot);
    drop(reader);
    drop(stream);
}

/// Reads the next frame, within the idle timeout: the first frame must be done `idle` after
/// the connection opened, each later one `idle` after its first byte arrived.
#[allow(clippy::too_many_arguments)]
async fn next_frame(
    reader: &mut BufReader<&Stream>,
    max: usize,
    buf: &mut Vec<u8>,
    held: &mut Held,
    slot: &SlotGuard,
    deadline: &mut Instant,
    first: bool,
    idle: Duration,
) -> std::io::Result<Frame> {
    if !first {
        // Between frames a connection may stay silent as long as it likes (a subscriber).
        if reader.fill_buf().await?.is_empty() {
            return Ok(Frame::Eof);
        }
        *deadline = Instant::now() + idle;
    }
    slot.busy();
    let mut grow = |capacity: usize| held.resize(capacity);
    match tokio::time::timeout_at(*deadline, read_frame(reader, max, buf, &mut grow)).await {
        Ok(frame) => frame,
        Err(_) => {
            tracing::debug!("closed a connection that did not finish a frame in time");
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no complete frame within daemon.idle_timeout_ms",
            ))
        }
    }
}

fn overloaded(state: &DaemonState, what: &str) -> RpcError {
    RpcError::new(
        codes::OVERLOADED,
        format!(
            "the daemon holds its limit of memory for clients (daemon.max_client_memory_bytes = \
             {}); {what}, try again shortly",
            state.config().daemon.max_client_memory_bytes
        ),
    )
}

/// Parses one request and answers it. `Err` means the connection is gone.
async fn handle_line(
    state: &Arc<DaemonState>,
    caller: &mut Caller,
    line: &[u8],
) -> Result<(), outbound::Closed> {
    let Some(charge) = state.memory.try_charge(line.len()) else {
        state.stats.overloaded.fetch_add(1, Ordering::Relaxed);
        let err = overloaded(state, "this request was not carried out");
        let id = rpc::salvage_id(line);
        return caller.out.send(rpc::error_frame(id.as_deref(), &err)).await;
    };
    let request = match rpc::parse_request(line) {
        Ok(r) => r,
        Err((id, err)) => {
            state.stats.frame_errors.fetch_add(1, Ordering::Relaxed);
            return caller.out.send(rpc::error_frame(id.as_deref(), &err)).await;
        }
    };
    let id: Option<Box<RawValue>> = request.id.map(|r| r.to_owned());
    let reply = rpc::dispatch(
        state,
        caller,
        &request.method,
        request.params,
        id.as_deref(),
        charge,
    )
    .await;
    match (reply, id) {
        (Reply::Subscribed(sub), id) => {
            // The reply goes out before the feed starts, so it precedes every notification.
            if let Some(id) = &id {
                let frame = rpc::reply_frame(Some(id), rpc::subscribed(&sub.id));
                caller.out.send(frame).await?;
            }
            caller.start(sub);
            Ok(())
        }
        // A request without an id is a notification: carried out, not answered.
        (_, None) => Ok(()),
        (Reply::Now(result), Some(id)) => {
            caller.out.send(rpc::reply_frame(Some(&id), result)).await
        }
        // Answered by the commit thread through the outbound queue.
        (Reply::Submitted, Some(_)) => Ok(()),
    }
}

async fn write_frames(stream: Arc<Stream>, mut out: mpsc::UnboundedReceiver<outbound::Frame>) {
    let mut w = BufWriter::with_capacity(64 * 1024, &*stream);
    while let Some(frame) = out.recv().await {
        if w.write_all(&frame.bytes).await.is_err() {
            return;
        }
        drop(frame);
        // Batch whatever else is ready into the same write.
        while let Ok(more) = out.try_recv() {
            if w.write_all(&more.bytes).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
}
