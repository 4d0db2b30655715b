//! The async client: one connection, many requests in flight, subscriptions routed by id.

use std::collections::HashMap;
use std::io;
use std::path::Path;
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

mod error;

pub use error::Error;

/// Largest frame the client will buffer from the daemon.
const MAX_INCOMING_FRAME: usize = 256 * 1024 * 1024;

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
            .map_err(|cause| Error::connecting(path, cause))?;
        let stream = Stream::connect(name)
            .await
            .map_err(|cause| Error::connecting(path, cause))?;
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

    /// Connects to the daemon at `path`, starting one first if none answers (see
    /// [`crate::autostart`]); `dstream` is the program to start it with (default:
    /// `$DSTREAM_BIN`, else `dstream` on `PATH`).
    pub async fn connect_or_start(
        path: impl AsRef<Path>,
        dstream: Option<&Path>,
    ) -> Result<Client, Error> {
        let path = path.as_ref();
        match Client::connect(path).await {
            Err(Error::NotRunning { .. }) => {
                let (socket, program) = (path.to_path_buf(), dstream.map(Path::to_path_buf));
                tokio::task::spawn_blocking(move || {
                    crate::autostart::start_daemon(program.as_deref(), &socket)
                })
                .await
                .map_err(|e| Error::Io(io::Error::other(e)))?
                .map_err(|cause| Error::NotStarted {
                    path: path.into(),
                    cause,
                })?;
                Client::connect(path).await
            }
            other => other,
        }
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
        let frame = request_frame(id, method, &params)?;
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
        let rx = self.start_request(methods::APPEND, params, None)?;
        Ok(async move {
            let value = rx.await.map_err(|_| Error::Closed)??;
            serde_json::from_value(value)
                .map_err(|e| Error::Protocol(format!("{}: {e}", methods::APPEND)))
        })
    }

    /// Sends an ingest at once and returns a future for its result, like
    /// [`Client::append_pipelined`]: the daemon's pipeline takes a connection's ingests in the
    /// order they were sent, while many are in flight (what `dstream import` needs to go
    /// faster than one round trip and one sync per line).
    pub fn ingest_pipelined(
        &self,
        params: &IngestParams,
    ) -> Result<impl Future<Output = Result<IngestResult, Error>> + Send + 'static, Error> {
        let params = serde_json::to_value(params).map_err(|e| Error::Protocol(e.to_string()))?;
        let rx = self.start_request(methods::INGEST, params, None)?;
        Ok(async move {
            let value = rx.await.map_err(|_| Error::Closed)??;
            serde_json::from_value(value)
                .map_err(|e| Error::Protocol(format!("{}: {e}", methods::INGEST)))
        })
    }

    pub async fn hello(&self) -> Result<HelloResult, Error> {
        self.call(methods::HELLO, &json!({})).await
    }

    /// Appends one event; returns once the daemon has made it durable (per its fsync policy).
    pub async fn append(&self, session_id: &str, event: NewEvent) -> Result<AppendResult, Error> {
        self.call(
            methods::APPEND,
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
        self.call(methods::READ, &params).await
    }

    /// Replays the session from `from_lsn`, then follows it live, gap-free.
    pub async fn subscribe(&self, session_id: &str, from_lsn: u64) -> Result<Subscription, Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let params = serde_json::to_value(SubscribeParams {
            session_id: session_id.into(),
            from_lsn: Some(from_lsn),
        })
        .map_err(|e| Error::Protocol(e.to_string()))?;
        let result = self
            .send_request(methods::SUBSCRIBE, params, Some(tx))
            .await?;
        let result: SubscribeResult =
            serde_json::from_value(result).map_err(|e| Error::Protocol(e.to_string()))?;
        Ok(Subscription {
            id: result.subscription,
            rx,
            client: self.clone(),
        })
    }

    pub async fn sessions(&self) -> Result<Vec<SessionInfo>, Error> {
        let r: SessionsListResult = self.call(methods::SESSIONS_LIST, &json!({})).await?;
        Ok(r.sessions)
    }

    /// Every session, and the tombstones of deleted ones.
    pub async fn sessions_all(&self) -> Result<SessionsListResult, Error> {
        self.call(methods::SESSIONS_LIST, &SessionsListParams { all: true })
            .await
    }

    /// Deletes the sessions past `retention.delete_after` now, or (`dry_run`) says which
    /// would go and which are kept, and why.
    pub async fn gc(&self, dry_run: bool) -> Result<GcResult, Error> {
        self.call(methods::GC, &GcParams { dry_run }).await
    }

    pub async fn session(&self, session_id: &str) -> Result<SessionInfo, Error> {
        self.call(
            methods::SESSIONS_GET,
            &SessionsGetParams {
                session_id: session_id.into(),
            },
        )
        .await
    }

    pub async fn query(&self, params: &QueryParams) -> Result<QueryResult, Error> {
        self.call(methods::QUERY, params).await
    }

    /// Repairs a quarantined session: moves the damage aside, keeps every valid record, and
    /// reopens it for appends above every LSN it ever handed out.
    pub async fn repair(&self, session_id: &str) -> Result<RepairResult, Error> {
        self.call(
            methods::REPAIR,
            &RepairParams {
                session_id: session_id.into(),
            },
        )
        .await
    }

    /// Forks `session_id` at `at_lsn` into a new session (named `new_session_id`, or
    /// `<session_id>.fork-<ulid>`): its events 1..=at_lsn are the parent's, its next append
    /// takes at_lsn + 1.
    pub async fn fork(
        &self,
        session_id: &str,
        at_lsn: u64,
        new_session_id: Option<&str>,
    ) -> Result<ForkResult, Error> {
        self.call(
            methods::FORK,
            &ForkParams {
                session_id: session_id.into(),
                at_lsn,
                new_session_id: new_session_id.map(Into::into),
            },
        )
        .await
    }

    pub async fn stats(&self) -> Result<StatsResult, Error> {
        self.call(methods::STATS, &json!({})).await
    }

    /// Tokens and cost of the model calls recorded, summed by `params.by`.
    pub async fn usage(&self, params: &UsageParams) -> Result<UsageResult, Error> {
        self.call(methods::USAGE, params).await
    }

    /// Each configured budget and what its current period has spent.
    pub async fn budgets(&self) -> Result<BudgetsResult, Error> {
        self.call(methods::BUDGETS, &serde_json::json!({})).await
    }

    /// Events across sessions whose text matches `params.query`, best first.
    pub async fn search(&self, params: &SearchParams) -> Result<SearchResult, Error> {
        self.call(methods::SEARCH, params).await
    }

    /// Drops the search index and builds it again from the logs; answers when it is done.
    pub async fn reindex(&self) -> Result<ReindexResult, Error> {
        self.call(methods::REINDEX, &json!({})).await
    }

    /// Opens a checkpoint (or finds the one `params.key` already has) once it is durable.
    pub async fn checkpoint_request(
        &self,
        params: &CheckpointRequestParams,
    ) -> Result<CheckpointInfo, Error> {
        self.call(methods::CHECKPOINT_REQUEST, params).await
    }

    /// Waits until the checkpoint is decided (or `timeout_ms` passes: then still pending).
    pub async fn checkpoint_await(
        &self,
        params: &CheckpointAwaitParams,
    ) -> Result<CheckpointInfo, Error> {
        self.call(methods::CHECKPOINT_AWAIT, params).await
    }

    /// Decides a checkpoint; the first decision wins, a later one is an error naming it.
    pub async fn checkpoint_resolve(
        &self,
        params: &CheckpointResolveParams,
    ) -> Result<CheckpointInfo, Error> {
        self.call(methods::CHECKPOINT_RESOLVE, params).await
    }

    pub async fn checkpoint_list(
        &self,
        params: &CheckpointListParams,
    ) -> Result<Vec<CheckpointInfo>, Error> {
        Ok(self.checkpoint_list_page(params).await?.checkpoints)
    }

    /// [`Client::checkpoint_list`], with how many matched in all.
    pub async fn checkpoint_list_page(
        &self,
        params: &CheckpointListParams,
    ) -> Result<CheckpointListResult, Error> {
        self.call(methods::CHECKPOINT_LIST, params).await
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

    /// The next item; `None` once the connection is gone or after the item that ended the
    /// subscription (an `Err`).
    pub async fn next(&mut self) -> Option<Result<SubscriptionItem, Error>> {
        self.rx.recv().await
    }

    /// Asks the daemon to stop this subscription.
    pub async fn unsubscribe(self) -> Result<(), Error> {
        let params = UnsubscribeParams {
            subscription: self.id.clone(),
        };
        let _: Value = self.client.call(methods::UNSUBSCRIBE, &params).await?;
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

/// One request line. The `id` comes right after `"jsonrpc"`, so a daemon that has to discard
/// an oversized frame can still read the id from its first bytes and answer that request.
fn request_frame(id: u64, method: &str, params: &Value) -> Result<Vec<u8>, Error> {
    let method = serde_json::to_string(method).map_err(|e| Error::Protocol(e.to_string()))?;
    let params = serde_json::to_string(params).map_err(|e| Error::Protocol(e.to_string()))?;
    let mut frame = Vec::with_capacity(48 + method.len() + params.len());
    frame.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    frame.extend_from_slice(id.to_string().as_bytes());
    frame.extend_from_slice(b",\"method\":");
    frame.extend_from_slice(method.as_bytes());
    frame.extend_from_slice(b",\"params\":");
    frame.extend_from_slice(params.as_bytes());
    frame.extend_from_slice(b"}\n");
    Ok(frame)
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
        let mut routes = shared.routes.lock().unwrap();
        if method == "error" {
            // The feed failed and the daemon ended it: the error is the last item, and
            // dropping the sender ends the subscriber's stream after it.
            if let Some(tx) = routes.subscriptions.remove(sub) {
                let _ = tx.send(decode_notification(&method, params));
            }
        } else if let Some(tx) = routes.subscriptions.get(sub) {
            let _ = tx.send(decode_notification(&method, params));
        }
        return;
    }
    let id = frame.id.as_ref().and_then(Value::as_u64);
    let mut routes = shared.routes.lock().unwrap();
    let Some(pending) = id.and_then(|id| routes.pending.remove(&id)) else {
        // An error that names no request we are waiting for. If it names one we issued, that
        // call was already settled (or given up on) and the reply is stale. Otherwise (id null,
        // as for a frame the daemon discarded, or never issued) it belongs to one of the
        // pending calls, but there is no telling which: fail them all rather than let the one
        // it answers wait forever.
        let issued = id.is_some_and(|id| id < shared.next_id.load(Ordering::Relaxed));
        if let (Some(err), false) = (frame.error, issued) {
            for (_, p) in routes.pending.drain() {
                let _ = p.reply.send(Err(Error::Rpc(err.clone())));
            }
        }
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
        notifications::EVENT => {
            let n: EventNotification = serde_json::from_value(params).map_err(bad)?;
            SubscriptionItem::Event(Box::new(n.event))
        }
        notifications::CAUGHT_UP => {
            let n: PositionNotification = serde_json::from_value(params).map_err(bad)?;
            SubscriptionItem::CaughtUp { lsn: n.lsn }
        }
        notifications::HEARTBEAT => {
            let n: PositionNotification = serde_json::from_value(params).map_err(bad)?;
            SubscriptionItem::Heartbeat { lsn: n.lsn }
        }
        notifications::ERROR => {
            let n: ErrorNotification = serde_json::from_value(params).map_err(bad)?;
            return Err(Error::SubscriptionFailed(n.message));
        }
        notifications::LAGGED => {
            let n: LaggedNotification = serde_json::from_value(params).map_err(bad)?;
            SubscriptionItem::Lagged {
                last_sent_lsn: n.last_sent_lsn,
            }
        }
        other => return Err(Error::Protocol(format!("unknown notification {other:?}"))),
    })
}

#[cfg(all(test, unix))]
mod tests {
    //! The client against a scripted stand-in for the daemon on a real Unix socket, for replies
    //! a healthy daemon rarely sends. The real daemon is exercised in the `dstream-tests` crate.

    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::path::PathBuf;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// A socket path of its own, removed when dropped.
    struct SocketPath(PathBuf);

    impl Drop for SocketPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// Listens on a fresh socket and runs `script` on the first connection, on a thread. Lines
    /// the script receives are passed back on the returned channel.
    fn fake_daemon(
        script: impl FnOnce(&mut dyn FnMut() -> String, &mut UnixStream) + Send + 'static,
    ) -> (SocketPath, std::sync::mpsc::Receiver<String>) {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "dstream-sdk-test-{}-{}.sock",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let (seen_tx, seen) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut next_line = || {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let _ = seen_tx.send(line.clone());
                line
            };
            script(&mut next_line, &mut stream);
            // Hold the connection open until the client goes away.
            while !next_line().is_empty() {}
        });
        (SocketPath(path), seen)
    }

    async fn within<T>(f: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .expect("the client hung")
    }

    #[tokio::test]
    async fn an_error_without_a_usable_id_fails_every_pending_call() {
        let (path, seen) = fake_daemon(|next_line, stream| {
            next_line();
            next_line();
            // What the daemon answers to a frame it had to discard without reading its id.
            stream
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32003,\"message\":\"frame of 9000 bytes exceeds the limit of 4096 bytes\"}}\n")
                .unwrap();
            let hello = next_line();
            assert!(hello.starts_with("{\"jsonrpc\":\"2.0\",\"id\":3,"));
            // A late error for a call already settled is stale: it must not touch call 3.
            stream
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32603,\"message\":\"late\"}}\n")
                .unwrap();
            stream
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"ok\":true}}\n")
                .unwrap();
        });
        let client = Client::connect(&path.0).await.unwrap();
        let first = client
            .append_pipelined("s", NewEvent::new("small"))
            .unwrap();
        let second = client.append_pipelined("s", NewEvent::new("big")).unwrap();
        for ack in [within(first).await, within(second).await] {
            match ack {
                Err(Error::Rpc(e)) => {
                    assert_eq!(e.code, codes::FRAME_TOO_LARGE);
                    assert!(e.message.contains("4096"), "{e}");
                }
                other => panic!("expected the daemon's error, got {other:?}"),
            }
        }
        // The connection stays usable.
        let hello = within(client.call_raw(methods::HELLO, json!({})))
            .await
            .unwrap();
        assert_eq!(hello, json!({"ok": true}));

        // Every request frame starts with the version, then the id.
        let first_line = seen.recv().unwrap();
        assert!(
            first_line
                .starts_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"append\",\"params\":{"),
            "{first_line}"
        );
        assert!(first_line.ends_with("}\n"));
        let frame: Value = serde_json::from_str(&first_line).unwrap();
        assert_eq!(frame["params"]["session_id"], "s");
        assert_eq!(frame["params"]["event"]["type"], "small");
        let second_line = seen.recv().unwrap();
        assert!(
            second_line.starts_with("{\"jsonrpc\":\"2.0\",\"id\":2,"),
            "{second_line}"
        );
    }

    #[tokio::test]
    async fn an_error_notification_is_the_last_item_of_its_subscription() {
        let (path, _seen) = fake_daemon(|next_line, stream| {
            assert!(next_line().contains("\"method\":\"subscribe\""));
            stream
                .write_all(concat!(
                    "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"subscription\":\"sub-1\"}}\n",
                    "{\"jsonrpc\":\"2.0\",\"method\":\"caught_up\",\"params\":{\"subscription\":\"sub-1\",\"lsn\":0}}\n",
                    "{\"jsonrpc\":\"2.0\",\"method\":\"error\",\"params\":{\"subscription\":\"sub-1\",\"message\":\"checksum mismatch at lsn 1\"}}\n",
                ).as_bytes())
                .unwrap();
        });
        let client = Client::connect(&path.0).await.unwrap();
        let mut sub = within(client.subscribe("s", 1)).await.unwrap();
        assert_eq!(
            within(sub.next()).await.unwrap().unwrap(),
            SubscriptionItem::CaughtUp { lsn: 0 }
        );
        match within(sub.next()).await {
            Some(Err(Error::SubscriptionFailed(m))) => {
                assert_eq!(m, "checksum mismatch at lsn 1")
            }
            other => panic!("expected the feed's error, got {other:?}"),
        }
        assert!(within(sub.next()).await.is_none(), "the subscription ended");
    }

    #[test]
    fn a_daemon_error_displays_once_with_no_source_to_repeat_it() {
        let e = Error::Rpc(RpcError::new(codes::INVALID_SESSION_ID, "bad id"));
        assert_eq!(e.to_string(), "bad id (code -32001)");
        assert!(std::error::Error::source(&e).is_none());
        let e = Error::Io(io::Error::other("broken pipe"));
        assert!(std::error::Error::source(&e).is_none());
    }
}
