//! The async client: one connection, many requests in flight, subscriptions routed by id.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use interprocess::local_socket::tokio::Stream;
use interprocess::local_socket::traits::tokio::Stream as _;
use interprocess::local_socket::{GenericFilePath, ToFsName};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use crate::event::{Event, NewEvent};
use crate::protocol::*;

/// Largest frame the client will buffer from the daemon.
const MAX_INCOMING_FRAME: usize = 256 * 1024 * 1024;

/// What can go wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no dstream daemon is running at {} ({cause}); start one with `dstream daemon`", path.display())]
    NotRunning { path: PathBuf, cause: io::Error },
    #[error("i/o error talking to the daemon: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Rpc(#[from] RpcError),
    #[error("unexpected reply from the daemon: {0}")]
    Protocol(String),
    #[error("the connection to the daemon closed")]
    Closed,
}

impl Error {
    /// The JSON-RPC error code, when the daemon refused the request.
    pub fn code(&self) -> Option<i64> {
        match self {
            Error::Rpc(e) => Some(e.code),
            _ => None,
        }
    }
}

/// One item of a subscription's feed.
#[derive(Debug, Clone, PartialEq)]
pub enum SubscriptionItem {
    Event(Box<Event>),
    /// Replay reached the live tail; `lsn` is the last one delivered so far.
    CaughtUp {
        lsn: u64,
    },
    /// The subscriber fell behind; the daemon resumes from disk after `last_sent_lsn`.
    Lagged {
        last_sent_lsn: u64,
    },
    Heartbeat {
        lsn: u64,
    },
}

type Reply = Result<Value, Error>;
type SubSender = mpsc::UnboundedSender<Result<SubscriptionItem, Error>>;

struct Pending {
    reply: oneshot::Sender<Reply>,
    /// For `subscribe`: routed before the reply is handed over, so no notification is missed.
    subscription: Option<SubSender>,
}

#[derive(Default)]
struct Routes {
    pending: HashMap<u64, Pending>,
    subscriptions: HashMap<String, SubSender>,
    closed: bool,
}

struct Shared {
    routes: Mutex<Routes>,
    next_id: AtomicU64,
    outgoing: mpsc::UnboundedSender<Vec<u8>>,
}

/// An async connection to the daemon. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

impl Client {
    /// Connects to the socket at [`crate::socket::default_socket_path`].
    pub async fn connect_default() -> Result<Client, Error> {
        Client::connect(crate::socket::default_socket_path()).await
    }

    /// Connects to the daemon's socket at `path`.
    pub async fn connect(path: impl AsRef<Path>) -> Result<Client, Error> {
        let path = path.as_ref();
        let name = path
            .to_fs_name::<GenericFilePath>()
            .map_err(|cause| Error::NotRunning {
                path: path.into(),
                cause,
            })?;
        let stream = Stream::connect(name)
            .await
            .map_err(|cause| Error::NotRunning {
                path: path.into(),
                cause,
            })?;
        // `&Stream` reads and writes, so one Arc serves both directions.
        let stream = Arc::new(stream);
        let (outgoing, outgoing_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            routes: Mutex::new(Routes::default()),
            next_id: AtomicU64::new(1),
            outgoing,
        });
        tokio::spawn(write_loop(stream.clone(), outgoing_rx));
        tokio::spawn(read_loop(stream, shared.clone()));
        Ok(Client { shared })
    }

    /// Sends any method with any params and returns the raw result.
    pub async fn call_raw(&self, method: &str, params: Value) -> Result<Value, Error> {
        self.send_request(method, params, None).await
    }

    /// Sends a method and decodes its result.
    pub async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, Error> {
        let params = serde_json::to_value(params).map_err(|e| Error::Protocol(e.to_string()))?;
        let value = self.call_raw(method, params).await?;
        serde_json::from_value(value).map_err(|e| Error::Protocol(format!("{method}: {e}")))
    }

    /// Puts a request on the wire now and returns the receiver of its reply, so that requests
    /// issued one after another reach the daemon in that order even when awaited later.
    fn start_request(
        &self,
        method: &str,
        params: Value,
        subscription: Option<SubSender>,
    ) -> Result<oneshot::Receiver<Reply>, Error> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        {
            let mut routes = self.shared.routes.lock().unwrap();
            if routes.closed {
                return Err(Error::Closed);
            }
            routes.pending.insert(
                id,
                Pending {
                    reply,
                    subscription,
                },
            );
        }
        let mut frame = serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": id, "method": method, "params": params
        }))
        .map_err(|e| Error::Protocol(e.to_string()))?;
        frame.push(b'\n');
        if self.shared.outgoing.send(frame).is_err() {
            self.shared.routes.lock().unwrap().pending.remove(&id);
            return Err(Error::Closed);
        }
        Ok(rx)
    }

    async fn send_request(
        &self,
        method: &str,
        params: Value,
        subscription: Option<SubSender>,
    ) -> Result<Value, Error> {
        let rx = self.start_request(method, params, subscription)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Sends an append at once and returns a future for its acknowledgement: appends sent
    /// this way on one client get LSNs in the order of the calls, while many are in flight.
    pub fn append_pipelined(
        &self,
        session_id: &str,
        event: NewEvent,
    ) -> Result<impl Future<Output = Result<AppendResult, Error>> + Send + 'static, Error> {
        let params = serde_json::to_value(AppendParams {
            session_id: session_id.into(),
            event,
        })
        .map_err(|e| Error::Protocol(e.to_string()))?;
        let rx = self.start_request("append", params, None)?;
        Ok(async move {
            let value = rx.await.map_err(|_| Error::Closed)??;
            serde_json::from_value(value).map_err(|e| Error::Protocol(format!("append: {e}")))
        })
    }

    pub async fn hello(&self) -> Result<HelloResult, Error> {
        self.call("hello", &json!({})).await
    }

    /// Appends one event; returns once the daemon has made it durable (per its fsync policy).
    pub async fn append(&self, session_id: &str, event: NewEvent) -> Result<AppendResult, Error> {
        self.call(
            "append",
            &AppendParams {
                session_id: session_id.into(),
                event,
            },
        )
        .await
    }

    /// Reads up to `limit` events from `from_lsn` on.
    pub async fn read(
        &self,
        session_id: &str,
        from_lsn: u64,
        limit: Option<usize>,
    ) -> Result<ReadResult, Error> {
        let params = ReadParams {
            session_id: session_id.into(),
            from_lsn: Some(from_lsn),
            limit,
        };
        self.call("read", &params).await
    }

    /// Replays the session from `from_lsn`, then follows it live, gap-free.
    pub async fn subscribe(&self, session_id: &str, from_lsn: u64) -> Result<Subscription, Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let params = serde_json::to_value(SubscribeParams {
            session_id: session_id.into(),
            from_lsn: Some(from_lsn),
        })
        .map_err(|e| Error::Protocol(e.to_string()))?;
        let result = self.send_request("subscribe", params, Some(tx)).await?;
        let result: SubscribeResult =
            serde_json::from_value(result).map_err(|e| Error::Protocol(e.to_string()))?;
        Ok(Subscription {
            id: result.subscription,
            rx,
            client: self.clone(),
        })
    }

    pub async fn sessions(&self) -> Result<Vec<SessionInfo>, Error> {
        let r: SessionsListResult = self.call("sessions.list", &json!({})).await?;
        Ok(r.sessions)
    }

    pub async fn session(&self, session_id: &str) -> Result<SessionInfo, Error> {
        self.call(
            "sessions.get",
            &SessionsGetParams {
                session_id: session_id.into(),
            },
        )
        .await
    }

    pub async fn query(&self, params: &QueryParams) -> Result<QueryResult, Error> {
        self.call("query", params).await
    }

    pub async fn stats(&self) -> Result<StatsResult, Error> {
        self.call("stats", &json!({})).await
    }
}

/// A live subscription. Items arrive in LSN order, each event exactly once.
pub struct Subscription {
    id: String,
    rx: mpsc::UnboundedReceiver<Result<SubscriptionItem, Error>>,
    client: Client,
}

impl Subscription {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The next item; `None` once the connection is gone.
    pub async fn next(&mut self) -> Option<Result<SubscriptionItem, Error>> {
        self.rx.recv().await
    }

    /// Asks the daemon to stop this subscription.
    pub async fn unsubscribe(self) -> Result<(), Error> {
        let params = UnsubscribeParams {
            subscription: self.id.clone(),
        };
        let _: Value = self.client.call("unsubscribe", &params).await?;
        Ok(())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.client
            .shared
            .routes
            .lock()
            .unwrap()
            .subscriptions
            .remove(&self.id);
    }
}

async fn write_loop(stream: Arc<Stream>, mut rx: mpsc::UnboundedReceiver<Vec<u8>>) {
    let mut send = &*stream;
    while let Some(frame) = rx.recv().await {
        if send.write_all(&frame).await.is_err() {
            break;
        }
    }
}

async fn read_loop(stream: Arc<Stream>, shared: Arc<Shared>) {
    let mut reader = BufReader::with_capacity(64 * 1024, &*stream);
    let mut line = Vec::new();
    let reason = loop {
        line.clear();
        match (&mut reader)
            .take(MAX_INCOMING_FRAME as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) => break Error::Closed,
            Ok(_) if line.last() != Some(&b'\n') => {
                break Error::Protocol("frame from the daemon too long or cut off".into());
            }
            Ok(_) => {}
            Err(e) => break Error::Io(e),
        }
        match serde_json::from_slice::<ServerFrame>(&line) {
            Ok(frame) => route(&shared, frame),
            Err(e) => break Error::Protocol(format!("undecodable frame: {e}")),
        }
    };
    let mut routes = shared.routes.lock().unwrap();
    routes.closed = true;
    for (_, p) in routes.pending.drain() {
        let _ = p.reply.send(Err(copy_error(&reason)));
    }
    for (_, s) in routes.subscriptions.drain() {
        let _ = s.send(Err(copy_error(&reason)));
    }
}

fn copy_error(e: &Error) -> Error {
    match e {
        Error::Closed => Error::Closed,
        other => Error::Protocol(other.to_string()),
    }
}

fn route(shared: &Shared, frame: ServerFrame) {
    if let Some(method) = frame.method {
        let params = frame.params.unwrap_or(Value::Null);
        let Some(sub) = params.get("subscription").and_then(Value::as_str) else {
            return;
        };
        let routes = shared.routes.lock().unwrap();
        if let Some(tx) = routes.subscriptions.get(sub) {
            let _ = tx.send(decode_notification(&method, params.clone()));
        }
        return;
    }
    let Some(id) = frame.id.as_ref().and_then(Value::as_u64) else {
        return;
    };
    let mut routes = shared.routes.lock().unwrap();
    let Some(pending) = routes.pending.remove(&id) else {
        return;
    };
    let reply = match (frame.result, frame.error) {
        (_, Some(err)) => Err(Error::Rpc(err)),
        (Some(result), None) => {
            if let (Some(tx), Some(sub)) = (
                pending.subscription,
                result.get("subscription").and_then(Value::as_str),
            ) {
                routes.subscriptions.insert(sub.to_string(), tx);
            }
            Ok(result)
        }
        (None, None) => Err(Error::Protocol(
            "response with neither result nor error".into(),
        )),
    };
    let _ = pending.reply.send(reply);
}

fn decode_notification(method: &str, params: Value) -> Result<SubscriptionItem, Error> {
    let bad = |e: serde_json::Error| Error::Protocol(format!("{method} notification: {e}"));
    Ok(match method {
        "event" => {
            let n: EventNotification = serde_json::from_value(params).map_err(bad)?;
            SubscriptionItem::Event(Box::new(n.event))
        }
        "caught_up" => {
            let n: PositionNotification = serde_json::from_value(params).map_err(bad)?;
            SubscriptionItem::CaughtUp { lsn: n.lsn }
        }
        "heartbeat" => {
            let n: PositionNotification = serde_json::from_value(params).map_err(bad)?;
            SubscriptionItem::Heartbeat { lsn: n.lsn }
        }
        "lagged" => {
            let n: LaggedNotification = serde_json::from_value(params).map_err(bad)?;
            SubscriptionItem::Lagged {
                last_sent_lsn: n.last_sent_lsn,
            }
        }
        other => return Err(Error::Protocol(format!("unknown notification {other:?}"))),
    })
}
