//! JSON-RPC parsing, method dispatch and reply encoding.

mod checkpoints;
mod storable;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dstream_sdk::RpcError;
use dstream_sdk::event::MAX_NESTING_DEPTH;
use dstream_sdk::protocol::{
    self, AppendParams, HelloResult, IngestParams, PROTOCOL_VERSION, PeerInfo, PluginsListResult,
    QueryParams, ReadParams, SessionInfo, StatsResult, SubscribeParams, UnsubscribeParams, codes,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use std::collections::HashMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use crate::follower::Follower;
pub use crate::jsonscan::nesting_depth;
use crate::jsonscan::string_end;
use crate::outbound::Outbound;
use crate::pipeline::{Ingest, IngestError};
use crate::plugins::PluginSet;
use crate::state::DaemonState;
use crate::store::{Ack, EventJson, QueryFilter, Session, StoreError};
use crate::subscription::Subscription;

/// Appends one connection may have waiting for their acknowledgement.
const MAX_APPENDS_IN_FLIGHT: usize = 1024;
/// `checkpoint.await`s one connection may have waiting at once.
const MAX_WAITING: usize = 1024;

/// What the methods know of the client calling them: who it is (from the OS), where its
/// replies go, and its subscriptions. Owned by its connection.
pub struct Caller {
    pub peer: PeerInfo,
    pub out: Outbound,
    in_flight: Arc<Semaphore>,
    subscriptions: HashMap<String, JoinHandle<()>>,
    /// Subscriptions and waiting requests still running (see `TaskCount`).
    tasks: Arc<AtomicUsize>,
    /// Requests answered later (`checkpoint.await`): ended with the connection.
    waiting: Vec<JoinHandle<()>>,
    /// Whether the agent this client sends events for was noted (once per connection).
    agent_noted: std::sync::atomic::AtomicBool,
    /// This connection among all of the daemon's: the pipeline serves clients in turn.
    id: u64,
    next_subscription: u64,
}

impl Caller {
    /// This client sends an agent's events (or waits for its decisions): note the agent.
    pub(crate) fn note_agent(&self, state: &DaemonState) {
        if !self
            .agent_noted
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            state.agents.note_client(self.peer.pid);
        }
    }

    pub fn new(peer: PeerInfo, out: Outbound) -> Caller {
        Caller {
            peer,
            out,
            in_flight: Arc::new(Semaphore::new(MAX_APPENDS_IN_FLIGHT)),
            subscriptions: HashMap::new(),
            tasks: Arc::default(),
            waiting: Vec::new(),
            agent_noted: Default::default(),
            id: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
            next_subscription: 0,
        }
    }

    fn new_subscription_id(&mut self) -> String {
        self.next_subscription += 1;
        format!("sub-{}", self.next_subscription)
    }

    /// Keeps a request that answers later, so it ends with the connection.
    fn keep_waiting(&mut self, task: JoinHandle<()>) {
        self.waiting.push(task);
    }

    /// Room for one more request that answers later (finished ones are forgotten first).
    fn may_wait(&mut self) -> Result<(), RpcError> {
        self.waiting.retain(|t| !t.is_finished());
        if self.waiting.len() >= MAX_WAITING {
            return Err(RpcError::new(
                codes::CONNECTION_LIMIT,
                format!("this connection already has {MAX_WAITING} checkpoint.await waiting"),
            ));
        }
        Ok(())
    }

    /// What this connection has under way, for its slot to see.
    pub fn work(&self) -> crate::slots::Work {
        crate::slots::Work {
            tasks: self.tasks.clone(),
            in_flight: self.in_flight.clone(),
            size: MAX_APPENDS_IN_FLIGHT,
        }
    }

    /// Counts a task (subscription, waiting request) as under way until the guard drops.
    fn count_task(&self) -> TaskCount {
        self.tasks.fetch_add(1, Ordering::Relaxed);
        TaskCount(self.tasks.clone())
    }

    /// Starts a subscription's feed, after its reply was sent.
    pub fn start(&mut self, sub: Subscription) {
        let count = self.count_task();
        self.subscriptions.insert(sub.id.clone(), sub.spawn(count));
    }
}

/// Held by a running task of a connection; dropped (also on abort) when it ends.
pub struct TaskCount(Arc<AtomicUsize>);

impl Drop for TaskCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        for (_, task) in self.subscriptions.drain() {
            task.abort();
        }
        for task in self.waiting.drain(..) {
            task.abort();
        }
    }
}

/// The JSON bytes of a result, or an error.
pub type RpcResult = Result<Vec<u8>, RpcError>;

pub enum Reply {
    Now(RpcResult),
    /// Handed to a session writer, which answers once the event is durable; later requests
    /// on the connection are not held up by it.
    Submitted,
    /// A new subscription: the connection sends the reply, then starts the feed, so the reply
    /// comes before every notification.
    Subscribed(Subscription),
}

/// A request, borrowed from its frame.
#[derive(Debug)]
pub struct Request<'a> {
    pub id: Option<&'a RawValue>,
    pub method: String,
    pub params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

type ParseFailure = (Option<Box<RawValue>>, RpcError);

/// Deepest nesting a request frame may have: an event's fields (at most [`MAX_NESTING_DEPTH`])
/// sit a few levels down in it. Checked before serde_json (limit 128) parses the frame, so a
/// deeper frame gets a clear error rather than "recursion limit exceeded".
pub const MAX_FRAME_DEPTH: usize = MAX_NESTING_DEPTH + 8;

/// Checks a frame is a JSON-RPC 2.0 request. On failure, the id (when one could be read) and
/// the error to answer with.
pub fn parse_request(line: &[u8]) -> Result<Request<'_>, ParseFailure> {
    let text = std::str::from_utf8(line).map_err(|e| {
        (
            salvage_id(line),
            RpcError::new(
                codes::PARSE_ERROR,
                format!(
                    "frame is not valid UTF-8 (bad byte at offset {})",
                    e.valid_up_to()
                ),
            ),
        )
    })?;
    let depth = nesting_depth(line);
    if depth > MAX_FRAME_DEPTH {
        // Only `params` (or a stray member) can nest in a request object.
        let code = match line.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => codes::INVALID_PARAMS,
            _ => codes::INVALID_REQUEST,
        };
        return Err((
            salvage_id(line),
            RpcError::new(
                code,
                format!(
                    "request nests {depth} levels of arrays and objects; the limit is \
                     {MAX_FRAME_DEPTH} for a request, and {MAX_NESTING_DEPTH} for an event's \
                     payload, metadata and raw"
                ),
            ),
        ));
    }
    let value: &RawValue = serde_json::from_str(text).map_err(|e| {
        (
            salvage_id(line),
            RpcError::new(codes::PARSE_ERROR, format!("invalid JSON: {e}")),
        )
    })?;
    let invalid = |id: Option<&RawValue>, msg: &str| {
        (
            id.map(|i| i.to_owned()),
            RpcError::new(codes::INVALID_REQUEST, msg),
        )
    };
    match value.get().trim_start().as_bytes().first() {
        Some(b'{') => {}
        Some(b'[') => {
            return Err(invalid(
                None,
                "batch requests are not supported; send one request object per line",
            ));
        }
        _ => return Err(invalid(None, "a request must be a JSON object")),
    }
    let env: Envelope = serde_json::from_str(value.get()).map_err(|e| {
        (
            salvage_id(line),
            RpcError::new(codes::INVALID_REQUEST, format!("invalid request: {e}")),
        )
    })?;
    let id = env.id.filter(|i| i.get() != "null");
    if let Some(i) = id
        && !matches!(i.get().as_bytes()[0], b'"' | b'-' | b'0'..=b'9')
    {
        return Err(invalid(None, "id must be a string, a number or null"));
    }
    if env.jsonrpc.is_some_and(|v| v.get() != "\"2.0\"") {
        return Err(invalid(id, "jsonrpc must be \"2.0\""));
    }
    let method = match env.method.map(|m| serde_json::from_str::<String>(m.get())) {
        Some(Ok(m)) => m,
        Some(Err(_)) => return Err(invalid(id, "method must be a string")),
        None => return Err(invalid(id, "missing method")),
    };
    Ok(Request {
        id,
        method,
        params: env.params.filter(|p| p.get() != "null"),
    })
}

fn skip_ws(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The request id of a frame that could not be parsed (invalid, too deep, or cut short: an
/// oversize frame's first bytes), so the error reply reaches the caller: the value of the
/// first top-level `"id"` member, if it is a complete string or number. One linear pass,
/// no recursion.
pub fn salvage_id(frame: &[u8]) -> Option<Box<RawValue>> {
    let mut i = skip_ws(frame, 0);
    if frame.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let (mut depth, mut expect_key) = (1usize, true);
    while i < frame.len() {
        match frame[i] {
            b'"' => {
                let end = string_end(frame, i)?;
                if depth == 1 && expect_key {
                    let colon = skip_ws(frame, end);
                    if frame.get(colon) != Some(&b':') {
                        return None;
                    }
                    let value = skip_ws(frame, colon + 1);
                    if &frame[i..end] == b"\"id\"" {
                        return id_at(frame, value);
                    }
                    expect_key = false;
                    i = value;
                } else {
                    i = end;
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return None;
                }
            }
            b',' if depth == 1 => expect_key = true,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The string or number starting at `frame[i]`, if it is complete and valid JSON.
fn id_at(frame: &[u8], i: usize) -> Option<Box<RawValue>> {
    let end = match frame.get(i)? {
        b'"' => string_end(frame, i)?,
        b'-' | b'0'..=b'9' => {
            let len = frame[i..]
                .iter()
                .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                .count();
            // A number running to the end of a cut frame may be cut too.
            match frame.get(i + len) {
                Some(b',' | b'}') => {}
                Some(b) if b.is_ascii_whitespace() => {}
                _ => return None,
            }
            i + len
        }
        _ => return None,
    };
    serde_json::from_slice(&frame[i..end]).ok()
}

pub fn reply_frame(id: Option<&RawValue>, result: RpcResult) -> Vec<u8> {
    match result {
        Ok(json) => {
            let id = id.map_or("null", |i| i.get());
            let mut f = Vec::with_capacity(json.len() + id.len() + 40);
            f.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
            f.extend_from_slice(id.as_bytes());
            f.extend_from_slice(b",\"result\":");
            f.extend_from_slice(&json);
            f.extend_from_slice(b"}\n");
            f
        }
        Err(e) => error_frame(id, &e),
    }
}

pub fn error_frame(id: Option<&RawValue>, err: &RpcError) -> Vec<u8> {
    let id = id.map_or("null", |i| i.get());
    let err = serde_json::to_string(err).unwrap_or_else(|_| "{}".into());
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{err}}}\n").into_bytes()
}

fn params<T: DeserializeOwned>(params: Option<&RawValue>) -> Result<T, RpcError> {
    let text = params.map_or("{}", |p| p.get());
    serde_json::from_str(text)
        .map_err(|e| RpcError::new(codes::INVALID_PARAMS, format!("invalid params: {e}")))
}

fn to_json<T: serde::Serialize>(value: &T) -> RpcResult {
    serde_json::to_vec(value).map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))
}

fn check_session_id(id: &str, what: &str) -> Result<(), RpcError> {
    dstream_sdk::validate_session_id(id).map_err(|e| {
        RpcError::new(
            codes::INVALID_SESSION_ID,
            format!("invalid {what} {id:?}: {e}"),
        )
    })
}

pub fn store_error(e: StoreError) -> RpcError {
    let code = match &e {
        StoreError::NotFound(_) => codes::SESSION_NOT_FOUND,
        StoreError::NotQuarantined(_) => codes::INVALID_PARAMS,
        StoreError::Quarantined { .. } => codes::SESSION_QUARANTINED,
        StoreError::Corrupt { .. } => codes::CORRUPT_RECORD,
        StoreError::ShuttingDown => codes::SHUTTING_DOWN,
        StoreError::Io { .. } | StoreError::Failed { .. } | StoreError::Locked { .. } => {
            codes::STORAGE_FAILED
        }
    };
    RpcError::new(code, e.to_string())
}

/// Carries out one request. `charge` is the request's share of the memory budget for
/// clients: an append holds it until the event is committed, other methods until they return.
pub async fn dispatch(
    state: &Arc<DaemonState>,
    caller: &mut Caller,
    method: &str,
    raw: Option<&RawValue>,
    id: Option<&RawValue>,
    charge: OwnedSemaphorePermit,
) -> Reply {
    let now = |r: RpcResult| Reply::Now(r);
    let repaired: Option<Box<RawValue>>;
    let (raw, shape) = match storable::check(method, raw) {
        Ok(shape) => (raw, shape),
        // An agent's event is what the agent sent: what readers could not parse (a lone
        // surrogate, 1e999) is repaired rather than refused, so a tool call in it is still
        // decided instead of failing open.
        Err(e) if method == "ingest" => {
            repaired = raw
                .and_then(|r| crate::lossy_json::parse(r.get()))
                .and_then(|(v, _)| serde_json::value::to_raw_value(&v).ok());
            match storable::check(method, repaired.as_deref()) {
                Ok(shape) if repaired.is_some() => (repaired.as_deref(), shape),
                _ => return now(Err(e)),
            }
        }
        Err(e) => return now(Err(e)),
    };
    match method {
        "append" => match append(state, caller, raw, id, charge).await {
            Ok(reply) => reply,
            Err(e) => now(Err(e)),
        },
        "hello" => now(hello(state, caller)),
        "read" => now(read(state, raw).await),
        "subscribe" => match subscribe(state, caller, raw) {
            Ok(sub) => Reply::Subscribed(sub),
            Err(e) => now(Err(e)),
        },
        "unsubscribe" => now(unsubscribe(caller, raw)),
        "sessions.list" => now(sessions_list(state)),
        "sessions.get" => now(sessions_get(state, raw)),
        "query" => now(query(state, raw).await),
        "stats" => now(stats(state)),
        "repair" => now(repair(state, raw).await),
        "ingest" => match storable::charge_parse(state, shape, charge) {
            Ok(charge) => match ingest(state, caller, raw, id, charge).await {
                Ok(reply) => reply,
                Err(e) => now(Err(e)),
            },
            Err(e) => now(Err(e)),
        },
        "relay.status" => now(to_json(&state.relay.status().await)),
        "relay.retry" => now(to_json(
            &serde_json::json!({"enabled": state.relay.retry()}),
        )),
        "plugins.list" => now(to_json(&plugins_list(state, &state.pipeline.plugins()))),
        "checkpoint.request" => now(checkpoints::request(state, raw).await),
        "checkpoint.resolve" => now(checkpoints::resolve(state, caller, raw).await),
        "checkpoint.list" => now(checkpoints::list(state, raw).await),
        "checkpoint.await" => match checkpoints::wait(state, caller, raw, id) {
            Ok(reply) => reply,
            Err(e) => now(Err(e)),
        },
        "plugins.reload" => {
            let pipeline = state.pipeline.clone();
            match tokio::task::spawn_blocking(move || pipeline.reload()).await {
                Ok(set) => now(to_json(&plugins_list(state, &set))),
                Err(e) => now(Err(RpcError::new(codes::INTERNAL_ERROR, e.to_string()))),
            }
        }
        other => now(Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("unknown method {other:?}"),
        ))),
    }
}

fn plugins_list(state: &DaemonState, set: &PluginSet) -> PluginsListResult {
    PluginsListResult {
        dir: set.dir.display().to_string(),
        plugins: set.infos(),
        errors: set.errors.clone(),
        redaction: Some(state.pipeline.redaction().stats()),
    }
}

/// Longest `source` name: it also names the fallback session `<source>-unassigned`.
const MAX_SOURCE_LEN: usize = 64;

async fn ingest(
    state: &Arc<DaemonState>,
    caller: &Caller,
    raw: Option<&RawValue>,
    id: Option<&RawValue>,
    charge: OwnedSemaphorePermit,
) -> Result<Reply, RpcError> {
    let p: IngestParams<Box<RawValue>> = params(raw)?;
    caller.note_agent(state);
    if p.source.is_empty()
        || p.source.len() > MAX_SOURCE_LEN
        || !p
            .source
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            format!(
                "invalid source {:?}: 1 to {MAX_SOURCE_LEN} letters, digits, '-', '_' or '.'",
                p.source
            ),
        ));
    }
    if let Some(s) = &p.session_id {
        check_session_id(s, "session_id")?;
    }
    let depth = nesting_depth(p.event.get().as_bytes());
    if depth > MAX_NESTING_DEPTH {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            format!(
                "event nests {depth} levels of arrays and objects; the limit is {MAX_NESTING_DEPTH}"
            ),
        ));
    }
    let permit = caller
        .in_flight
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| RpcError::new(codes::SHUTTING_DOWN, "the connection is closing"))?;
    let out = caller.out.clone();
    let id = id.map(|i| i.to_owned());
    let done: crate::pipeline::Done = Box::new(move |result| {
        drop(charge);
        let Some(id) = id else { return };
        let result = match result {
            Ok(r) => to_json(&r),
            Err(IngestError::Store(e)) => Err(store_error(e)),
            Err(IngestError::Stopped) => Err(RpcError::new(
                codes::SHUTTING_DOWN,
                "the daemon is shutting down",
            )),
        };
        let _ = out.send_now(reply_frame(Some(&id), result), permit);
    });
    let watch = caller.out.clone();
    state
        .pipeline
        .ingest(Ingest {
            client: caller.id,
            source: p.source,
            raw: p.event,
            session_id: p.session_id,
            reply_by_ms: p.reply_by_ms,
            gone: Some(Box::new(move || watch.is_closed())),
            done,
        })
        .await;
    Ok(Reply::Submitted)
}

fn hello(state: &DaemonState, caller: &Caller) -> RpcResult {
    to_json(&HelloResult {
        server: "dstream".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        protocol: PROTOCOL_VERSION,
        max_frame_bytes: state.config().daemon.max_frame_bytes,
        fsync: state.config().store.fsync.as_str().into(),
        peer: caller.peer.clone(),
    })
}

async fn append(
    state: &Arc<DaemonState>,
    caller: &Caller,
    raw: Option<&RawValue>,
    id: Option<&RawValue>,
    charge: OwnedSemaphorePermit,
) -> Result<Reply, RpcError> {
    let p: AppendParams<Box<RawValue>> = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    if let Some(s) = &p.event.stream_id {
        check_session_id(s, "event.stream_id")?;
    }
    crate::store::validate_event(&p.event).map_err(|m| RpcError::new(codes::INVALID_PARAMS, m))?;
    if crate::event_types::daemon_only(&p.event.event_type) {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            crate::event_types::refusal(&p.event.event_type),
        ));
    }
    // Every reader must be able to parse what is stored, inside its own frame.
    for (name, value) in [
        ("event.payload", &p.event.payload),
        ("event.metadata", &p.event.metadata),
        ("event.raw", &p.event.raw),
    ] {
        let depth = value
            .as_ref()
            .map_or(0, |v| nesting_depth(v.get().as_bytes()));
        if depth > MAX_NESTING_DEPTH {
            return Err(RpcError::new(
                codes::INVALID_PARAMS,
                format!(
                    "{name} nests {depth} levels of arrays and objects; the limit is \
                     {MAX_NESTING_DEPTH}"
                ),
            ));
        }
    }
    // Waits only when this connection already has its fill of appends in flight.
    let permit = caller
        .in_flight
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| RpcError::new(codes::SHUTTING_DOWN, "the connection is closing"))?;
    let out = caller.out.clone();
    let id = id.map(|i| i.to_owned());
    let ack = Ack::new(move |result| {
        drop(charge); // the event's bytes are in the log now, or refused
        let Some(id) = id else { return };
        let result =
            result.map(|a| format!("{{\"lsn\":{},\"id\":\"{}\"}}", a.lsn, a.id).into_bytes());
        let frame = reply_frame(Some(&id), result.map_err(store_error));
        let _ = out.send_now(frame, permit);
    });
    // Checkpoint events must be on disk before anyone acts on them, whatever the policy.
    let must_sync = p.event.event_type.starts_with("checkpoint.");
    state.store.append(&p.session_id, p.event, must_sync, ack);
    Ok(Reply::Submitted)
}

fn event_array(events: &[EventJson], out: &mut Vec<u8>) {
    out.push(b'[');
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let start = out.len();
        e.write_to(out);
        crate::jsonscan::readable_tail(out, start); // an event stored before the check
    }
    out.push(b']');
}

fn clamp_limit(state: &DaemonState, limit: Option<usize>) -> Result<usize, RpcError> {
    match limit {
        None => Ok(state.config().read.default_limit),
        Some(0) => Err(RpcError::new(
            codes::INVALID_PARAMS,
            "limit must be at least 1",
        )),
        Some(n) => Ok(n.min(state.config().read.max_limit)),
    }
}

async fn read(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: ReadParams = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    let limit = clamp_limit(state, p.limit)?;
    let page = state
        .store
        .read(&p.session_id, p.from_lsn.unwrap_or(1), limit)
        .await
        .map_err(store_error)?;
    let mut out = Vec::with_capacity(page.events.len() * 300 + 64);
    out.extend_from_slice(b"{\"events\":");
    event_array(&page.events, &mut out);
    out.extend_from_slice(
        format!(
            ",\"next_lsn\":{},\"up_to_date\":{}",
            page.next_lsn, page.up_to_date
        )
        .as_bytes(),
    );
    if let Some(q) = &page.quarantined {
        out.extend_from_slice(b",\"quarantined\":");
        out.extend_from_slice(&to_json(&quarantine_info(q))?);
    }
    out.push(b'}');
    Ok(out)
}

fn subscribe(
    state: &Arc<DaemonState>,
    caller: &mut Caller,
    raw: Option<&RawValue>,
) -> Result<Subscription, RpcError> {
    let p: SubscribeParams = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    let most = state.config().daemon.max_subscriptions_per_connection;
    caller.subscriptions.retain(|_, t| !t.is_finished());
    if caller.subscriptions.len() >= most {
        return Err(RpcError::new(
            codes::CONNECTION_LIMIT,
            format!(
                "this connection already holds {most} subscriptions \
                 (daemon.max_subscriptions_per_connection); unsubscribe first"
            ),
        ));
    }
    let session = state.store.session(&p.session_id);
    if session.quarantine_reason().is_some() {
        return Err(store_error(state.store.missing(&p.session_id)));
    }
    // The follower registers on the live stream before it reads the log: see `follower`.
    let from = p.from_lsn.unwrap_or(1);
    Ok(Subscription {
        id: caller.new_subscription_id(),
        follower: Follower::new(state.store.clone(), &state.hub, &p.session_id, from),
        out: caller.out.clone(),
        heartbeat: Duration::from_millis(state.config().subscriptions.heartbeat_ms),
        state: state.clone(),
    })
}

/// The result of a successful `subscribe`.
pub fn subscribed(id: &str) -> RpcResult {
    Ok(format!("{{\"subscription\":\"{id}\"}}").into_bytes())
}

fn unsubscribe(caller: &mut Caller, raw: Option<&RawValue>) -> RpcResult {
    let p: UnsubscribeParams = params(raw)?;
    match caller.subscriptions.remove(&p.subscription) {
        Some(task) => {
            task.abort();
            Ok(b"{\"unsubscribed\":true}".to_vec())
        }
        None => Err(RpcError::new(
            codes::UNKNOWN_SUBSCRIPTION,
            format!("no subscription {:?} on this connection", p.subscription),
        )),
    }
}

fn session_info(s: &Session) -> SessionInfo {
    let meta = s.meta();
    SessionInfo {
        session_id: s.id.clone(),
        stream_id: meta.stream_id.unwrap_or_else(|| s.id.clone()),
        first_ts: meta.first_ts,
        last_ts: meta.last_ts,
        last_lsn: s.committed_lsn(),
        durable_lsn: s.durable_lsn(),
        bytes: meta.bytes,
        quarantined: s.quarantine().map(quarantine_info),
    }
}

fn quarantine_info(q: &crate::store::Quarantine) -> protocol::QuarantineInfo {
    protocol::QuarantineInfo {
        reason: q.reason.clone(),
        offset: q.offset,
        last_good_lsn: q.last_good_lsn,
    }
}

fn sessions_list(state: &DaemonState) -> RpcResult {
    let sessions: Vec<SessionInfo> = state
        .store
        .sessions()
        .iter()
        .map(|s| session_info(s))
        .collect();
    to_json(&protocol::SessionsListResult { sessions })
}

fn sessions_get(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: protocol::SessionsGetParams = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    match state.store.get(&p.session_id) {
        Some(s) if s.committed_lsn() > 0 || s.quarantine().is_some() => to_json(&session_info(&s)),
        _ => Err(store_error(state.store.missing(&p.session_id))),
    }
}

async fn query(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: QueryParams = params(raw)?;
    if let Some(s) = &p.session_id {
        check_session_id(s, "session_id")?;
    }
    if let Some(s) = &p.stream_id {
        check_session_id(s, "stream_id")?;
    }
    let limit = clamp_limit(state, p.limit)?;
    let filter = QueryFilter {
        session_id: p.session_id,
        stream_id: p.stream_id,
        type_prefix: p.type_prefix,
        actor: p.actor,
        since_ms: p.since_ms,
        until_ms: p.until_ms,
    };
    let (events, truncated) = state
        .store
        .query(filter, limit)
        .await
        .map_err(store_error)?;
    let mut out = Vec::with_capacity(events.len() * 300 + 64);
    out.extend_from_slice(b"{\"events\":");
    event_array(&events, &mut out);
    out.extend_from_slice(format!(",\"truncated\":{truncated}}}").as_bytes());
    Ok(out)
}

async fn repair(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: protocol::RepairParams = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    let r = state
        .store
        .repair(&p.session_id)
        .await
        .map_err(store_error)?;
    to_json(&protocol::RepairResult {
        session_id: p.session_id,
        kept_records: r.kept_records,
        moved_bytes: r.moved_bytes,
        moved_to: r.moved_to.display().to_string(),
        lost_lsns: r.lost_lsns,
        resumed_at: r.resumed_at,
    })
}

fn stats(state: &DaemonState) -> RpcResult {
    let s = state.store.stats();
    let (sessions, quarantined_sessions) = state.store.counts();
    let relaxed = Ordering::Relaxed;
    to_json(&StatsResult {
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_ms: state.started.elapsed().as_millis() as u64,
        pid: std::process::id(),
        fsync: state.config().store.fsync.as_str().into(),
        sessions,
        quarantined_sessions,
        connections: state.stats.connections.load(relaxed),
        subscriptions: state.stats.subscriptions.load(relaxed),
        appends: s.appends.load(relaxed),
        bytes_written: s.bytes_written.load(relaxed),
        fsyncs: s.fsyncs.load(relaxed),
        lagged: state.stats.lagged.load(relaxed),
        frame_errors: state.stats.frame_errors.load(relaxed),
        rss_bytes: crate::state::rss_bytes(),
        open_files: state.store.open_files() as u64,
        client_memory_bytes: state.memory.in_use() as u64,
        overloaded: state.stats.overloaded.load(relaxed),
        ingested: state.pipeline.ingested.load(relaxed),
        plugins: state.pipeline.plugins().infos(),
        pending_checkpoints: state.checkpoints.pending_count() as u64,
        relay: state.relay.totals(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(frame: &str) -> Option<String> {
        salvage_id(frame.as_bytes()).map(|v| v.get().to_owned())
    }

    #[test]
    fn depth_counts_brackets_outside_strings_only() {
        assert_eq!(nesting_depth(b"1"), 0);
        assert_eq!(nesting_depth(b"\"[[{\""), 0);
        assert_eq!(nesting_depth(b"{}"), 1);
        assert_eq!(nesting_depth(br#"{"a":[1,{"b":"]]\"[["}],"c":[[[]]]}"#), 4);
        assert_eq!(nesting_depth(br#"["\\",["\\\"[",[]]]"#), 3);
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(nesting_depth(deep.as_bytes()), 100_000);
        // Unterminated input is counted as far as it goes.
        assert_eq!(nesting_depth(b"[[\"[[[["), 2);
    }

    #[test]
    fn the_top_level_id_is_found_in_broken_or_cut_frames() {
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":77,"method":"append","params":{"x":"#).as_deref(),
            Some("77")
        );
        assert_eq!(
            id(r#"{ "id" : "a\"b" , "method": }"#).as_deref(),
            Some(r#""a\"b""#)
        );
        assert_eq!(
            id(r#"{"params":{"id":1},"x":["id",2],"id":-3.5e2,"#).as_deref(),
            Some("-3.5e2")
        );
        assert_eq!(id(r#"{"k":"\"id\":5","id":6}"#).as_deref(), Some("6"));
        // Not at the top level, not a string or number, cut short, or absent.
        assert_eq!(id(r#"{"params":{"id":1}}"#), None);
        assert_eq!(id(r#"{"id":null,"method":"x"}"#), None);
        assert_eq!(id(r#"{"id":{"a":1}}"#), None);
        assert_eq!(id(r#"{"id":12"#), None);
        assert_eq!(id(r#"{"id":"abc"#), None);
        assert_eq!(id(r#"[{"id":1}]"#), None);
        assert_eq!(id("hello"), None);
        assert_eq!(id(r#"{"id":1x}"#), None);
    }

    #[test]
    fn parse_errors_carry_the_salvaged_id() {
        let (id, e) = parse_request(br#"{"jsonrpc":"2.0","id":9,"method":"hello","#).unwrap_err();
        assert_eq!(id.unwrap().get(), "9");
        assert_eq!(e.code, codes::PARSE_ERROR);

        let frame = format!(
            r#"{{"jsonrpc":"2.0","id":"deep","method":"append","params":{}1{}}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        let (id, e) = parse_request(frame.as_bytes()).unwrap_err();
        assert_eq!(id.unwrap().get(), "\"deep\"");
        assert_eq!(e.code, codes::INVALID_PARAMS);
        assert!(e.message.contains("nests 301 levels"), "{}", e.message);
    }
}
