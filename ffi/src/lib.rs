//! The C ABI of dstream: a client library for programs that call C (C, C++, Node through
//! koffi, Python through ctypes, …), built on the Rust SDK, so the protocol lives in one place.
//!
//! Conventions (after rustls-ffi):
//! - opaque handles (`ds_client`), the `ds_` prefix, a `ds_result` code from every call that
//!   can fail, and a thread-local message for the last failure: `ds_last_error(buf, cap)`
//!   returns the size it needs (NUL included), so ask with `cap = 0`, then copy;
//! - strings the library returns are freed only with `ds_string_free`;
//! - every export checks its pointers for NULL and stops panics at its boundary
//!   (`DS_ERR_PANIC`);
//! - every call works from any thread, and calls on one client from several threads at once
//!   are safe: each blocks only itself (the client drives its connection on a small runtime
//!   of its own), so a long `ds_checkpoint_await` never holds up an append on another thread.
//!
//! The header, `ffi/include/dstream.h`, is generated from this file by cbindgen (see the
//! crate's test `the_committed_header_is_current`).

#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

use dstream_sdk::protocol::methods;
use dstream_sdk::{Client, Error, NewEvent, SubscriptionItem};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// What a call did.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ds_result {
    DS_OK = 0,
    /// A required pointer was NULL.
    DS_ERR_NULL = 1,
    /// A string was not valid UTF-8.
    DS_ERR_UTF8 = 2,
    /// A JSON argument was not valid JSON, or not the expected shape.
    DS_ERR_JSON = 3,
    /// No daemon at the socket (or it refused this user).
    DS_ERR_CONNECT = 4,
    /// The daemon refused the request; the last error names its JSON-RPC code and message.
    DS_ERR_RPC = 5,
    /// A wait ended before its result (`ds_checkpoint_await`).
    DS_ERR_TIMEOUT = 6,
    /// The connection to the daemon closed.
    DS_ERR_CLOSED = 7,
    /// The library panicked; the call did nothing further.
    DS_ERR_PANIC = 8,
    /// Anything else (an unexpected reply, a thread that could not start).
    DS_ERR_INTERNAL = 9,
}

/// A connection to the daemon. Create with `ds_client_connect`, free with `ds_client_free`.
pub struct ds_client {
    runtime: tokio::runtime::Runtime,
    client: Client,
    subscriptions: Mutex<HashMap<u64, Feed>>,
    next_subscription: AtomicU64,
}

/// Receives one event of a subscription, as JSON (`len` bytes, NUL-terminated), on the
/// subscription's delivery thread. The JSON is valid only during the call.
pub type ds_event_cb =
    Option<unsafe extern "C" fn(user_data: *mut c_void, event_json: *const c_char, len: usize)>;

/// A subscription's delivery thread and how to stop it.
struct Feed {
    stop: Arc<Notify>,
    stopped: Arc<AtomicBool>,
    thread: JoinHandle<()>,
    thread_id: ThreadId,
}

type Failure = (ds_result, String);

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

fn remember(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = Some(text));
}

/// Runs an export's body: a failure or a panic becomes its code, with the message kept.
fn boundary(body: impl FnOnce() -> Result<(), Failure>) -> ds_result {
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err((ds_result::DS_ERR_PANIC, format!("dstream panicked: {what}")))
    });
    match outcome {
        Ok(()) => {
            LAST_ERROR.with(|e| *e.borrow_mut() = None);
            ds_result::DS_OK
        }
        Err((code, message)) => {
            remember(&message);
            code
        }
    }
}

fn sdk_failure(e: Error) -> Failure {
    let code = match &e {
        Error::NotRunning { .. } | Error::PermissionDenied { .. } | Error::NotStarted { .. } => {
            ds_result::DS_ERR_CONNECT
        }
        Error::Rpc(_) => ds_result::DS_ERR_RPC,
        Error::Io(_) | Error::Closed | Error::SubscriptionFailed(_) => ds_result::DS_ERR_CLOSED,
        Error::Protocol(_) => ds_result::DS_ERR_INTERNAL,
    };
    let message = match &e {
        Error::Rpc(r) => format!("the daemon refused it (code {}): {}", r.code, r.message),
        other => other.to_string(),
    };
    (code, message)
}

/// A borrowed C string argument as `&str`.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err((ds_result::DS_ERR_NULL, format!("{what} is NULL")));
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|e| {
        (
            ds_result::DS_ERR_UTF8,
            format!("{what} is not valid UTF-8: {e}"),
        )
    })
}

fn json_arg(s: &str, what: &str) -> Result<Value, Failure> {
    serde_json::from_str(s).map_err(|e| {
        (
            ds_result::DS_ERR_JSON,
            format!("{what} is not valid JSON: {e}"),
        )
    })
}

fn client<'a>(c: *const ds_client) -> Result<&'a ds_client, Failure> {
    // SAFETY: a non-NULL `c` is a live client from ds_client_connect (the API's contract).
    unsafe { c.as_ref() }.ok_or((ds_result::DS_ERR_NULL, "client is NULL".into()))
}

/// Hands `value` out as a string the caller frees with `ds_string_free`.
fn give(out: *mut *mut c_char, value: &Value) -> Result<(), Failure> {
    if out.is_null() {
        return Err((ds_result::DS_ERR_NULL, "the output pointer is NULL".into()));
    }
    let s =
        CString::new(value.to_string()).map_err(|e| (ds_result::DS_ERR_INTERNAL, e.to_string()))?;
    // SAFETY: `out` is a non-NULL writable pointer (the API's contract).
    unsafe { *out = s.into_raw() };
    Ok(())
}

impl ds_client {
    fn call(&self, method: &str, params: Value) -> Result<Value, Failure> {
        self.runtime
            .block_on(self.client.call_raw(method, params))
            .map_err(sdk_failure)
    }
}

/// The library's version, a static string (never freed).
#[unsafe(no_mangle)]
pub extern "C" fn ds_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Copies the calling thread's last error message into `buf` (at most `cap` bytes, NUL
/// included) and returns the size the whole message needs, NUL included; 0 when the last
/// call on this thread succeeded. Call with `buf = NULL, cap = 0` to learn the size.
///
/// # Safety
/// `buf` is NULL or points to `cap` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_last_error(buf: *mut c_char, cap: usize) -> usize {
    LAST_ERROR.with(|e| {
        let e = e.borrow();
        let Some(msg) = e.as_ref() else { return 0 };
        let bytes = msg.as_bytes_with_nul();
        if !buf.is_null() && cap > 0 {
            let n = (bytes.len() - 1).min(cap - 1);
            // SAFETY: `buf` has `cap` writable bytes; we write `n + 1 <= cap` of them.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, n);
                *buf.add(n) = 0;
            }
        }
        bytes.len()
    })
}

/// Connects to the daemon at `socket_path` (NULL: `$DSTREAM_SOCKET`, else the default path).
///
/// # Safety
/// `socket_path` is NULL or a NUL-terminated string; `out` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_client_connect(
    socket_path: *const c_char,
    out: *mut *mut ds_client,
) -> ds_result {
    // SAFETY: the caller's contract, passed on.
    boundary(|| unsafe { connect_with(socket_path, None, out) })
}

/// Like `ds_client_connect`, but when no daemon answers it starts one first with
/// `dstream start --auto` (unless autostart is off), run from `dstream_program` (NULL:
/// `$DSTREAM_BIN`, else `dstream` on `PATH`). Blocks for a few seconds at most.
///
/// # Safety
/// `socket_path` and `dstream_program` are NULL or NUL-terminated strings; `out` points to a
/// writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_client_connect_or_start(
    socket_path: *const c_char,
    dstream_program: *const c_char,
    out: *mut *mut ds_client,
) -> ds_result {
    boundary(|| {
        let program = if dstream_program.is_null() {
            None
        } else {
            // SAFETY: the caller's contract.
            Some(std::path::PathBuf::from(unsafe {
                text(dstream_program, "dstream_program")
            }?))
        };
        // SAFETY: the caller's contract, passed on.
        unsafe { connect_with(socket_path, Some(program), out) }
    })
}

/// Connects, starting a daemon first (with the program given, or the default one) when
/// `start` is set.
///
/// # Safety
/// As `ds_client_connect`.
unsafe fn connect_with(
    socket_path: *const c_char,
    start: Option<Option<std::path::PathBuf>>,
    out: *mut *mut ds_client,
) -> Result<(), Failure> {
    {
        if out.is_null() {
            return Err((ds_result::DS_ERR_NULL, "out is NULL".into()));
        }
        let path = if socket_path.is_null() {
            std::env::var_os("DSTREAM_SOCKET")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(dstream_sdk::socket::default_socket_path)
        } else {
            // SAFETY: the caller's contract.
            std::path::PathBuf::from(unsafe { text(socket_path, "socket_path") }?)
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("dstream-ffi")
            .enable_all()
            .build()
            .map_err(|e| {
                (
                    ds_result::DS_ERR_INTERNAL,
                    format!("cannot start the client's runtime: {e}"),
                )
            })?;
        let client = match &start {
            None => runtime.block_on(Client::connect(&path)),
            Some(program) => runtime.block_on(Client::connect_or_start(&path, program.as_deref())),
        }
        .map_err(sdk_failure)?;
        let c = Box::new(ds_client {
            runtime,
            client,
            subscriptions: Mutex::new(HashMap::new()),
            next_subscription: AtomicU64::new(1),
        });
        // SAFETY: checked non-NULL above.
        unsafe { *out = Box::into_raw(c) };
        Ok(())
    }
}

/// Any method: `params_json` (NULL for none) in, the result as JSON out.
///
/// # Safety
/// `c` is a live client; the strings are NUL-terminated; `out_result_json` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_client_call(
    c: *mut ds_client,
    method: *const c_char,
    params_json: *const c_char,
    out_result_json: *mut *mut c_char,
) -> ds_result {
    boundary(|| {
        let c = client(c)?;
        // SAFETY: the caller's contract.
        let method = unsafe { text(method, "method") }?;
        let params = if params_json.is_null() {
            json!({})
        } else {
            // SAFETY: the caller's contract.
            json_arg(unsafe { text(params_json, "params_json") }?, "params_json")?
        };
        let result = c.call(method, params)?;
        give(out_result_json, &result)
    })
}

/// Appends one event (`{"type", "payload"?, …}`) to a session; its LSN once durable.
///
/// # Safety
/// `c` is a live client; the strings are NUL-terminated; `out_lsn` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_append(
    c: *mut ds_client,
    session_id: *const c_char,
    event_json: *const c_char,
    out_lsn: *mut u64,
) -> ds_result {
    boundary(|| {
        let c = client(c)?;
        // SAFETY: the caller's contract.
        let session = unsafe { text(session_id, "session_id") }?;
        // SAFETY: the caller's contract.
        let event = unsafe { text(event_json, "event_json") }?;
        let event: NewEvent = serde_json::from_str(event).map_err(|e| {
            (
                ds_result::DS_ERR_JSON,
                format!("event_json is not an event: {e}"),
            )
        })?;
        let acked = c
            .runtime
            .block_on(c.client.append(session, event))
            .map_err(sdk_failure)?;
        if !out_lsn.is_null() {
            // SAFETY: non-NULL and writable (the API's contract).
            unsafe { *out_lsn = acked.lsn };
        }
        Ok(())
    })
}

/// Hands a raw agent event to the daemon's pipeline (`ingest`): the stored events and any
/// decision, as JSON.
///
/// # Safety
/// `c` is a live client; the strings are NUL-terminated; `out_result_json` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_ingest(
    c: *mut ds_client,
    source: *const c_char,
    raw_json: *const c_char,
    out_result_json: *mut *mut c_char,
) -> ds_result {
    boundary(|| {
        let c = client(c)?;
        // SAFETY: the caller's contract.
        let source = unsafe { text(source, "source") }?;
        // SAFETY: the caller's contract.
        let raw = json_arg(unsafe { text(raw_json, "raw_json") }?, "raw_json")?;
        let result = c.call(methods::INGEST, json!({"source": source, "event": raw}))?;
        give(out_result_json, &result)
    })
}

struct UserData(*mut c_void);
// SAFETY: the caller hands `user_data` to the delivery thread and promises it may be used
// there (the API's contract for callbacks).
unsafe impl Send for UserData {}

/// Follows a session from `from_lsn`: `cb(user_data, event_json, len)` for each event, each
/// exactly once and in LSN order, on one delivery thread of this subscription. The id for
/// `ds_unsubscribe` goes to `out_subscription`.
///
/// # Safety
/// `c` is a live client; `session_id` is NUL-terminated; `cb` is a valid function that may
/// be called from another thread with `user_data`; `out_subscription` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_subscribe(
    c: *mut ds_client,
    session_id: *const c_char,
    from_lsn: u64,
    cb: ds_event_cb,
    user_data: *mut c_void,
    out_subscription: *mut u64,
) -> ds_result {
    boundary(|| {
        let c = client(c)?;
        // SAFETY: the caller's contract.
        let session = unsafe { text(session_id, "session_id") }?;
        let cb = cb.ok_or((ds_result::DS_ERR_NULL, "cb is NULL".into()))?;
        let mut sub = c
            .runtime
            .block_on(c.client.subscribe(session, from_lsn.max(1)))
            .map_err(sdk_failure)?;
        let (stop, stopped) = (Arc::new(Notify::new()), Arc::new(AtomicBool::new(false)));
        let handle = c.runtime.handle().clone();
        let user = UserData(user_data);
        let (thread_stop, thread_stopped) = (stop.clone(), stopped.clone());
        let thread = std::thread::Builder::new()
            .name("dstream-ffi-feed".into())
            .spawn(move || {
                let user = user;
                loop {
                    let next = handle.block_on(async {
                        tokio::select! {
                            item = sub.next() => Some(item),
                            _ = thread_stop.notified() => None,
                        }
                    });
                    let event = match next {
                        None | Some(None) | Some(Some(Err(_))) => break,
                        Some(Some(Ok(SubscriptionItem::Event(e)))) => e,
                        Some(Some(Ok(_))) => continue,
                    };
                    if thread_stopped.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(text) = serde_json::to_string(&event) else {
                        continue;
                    };
                    let Ok(text) = CString::new(text) else {
                        continue;
                    };
                    let len = text.as_bytes().len();
                    // A panic cannot cross back through C; a callback cannot panic (it is C),
                    // but guard anyway so this thread ends cleanly.
                    let _ = catch_unwind(AssertUnwindSafe(|| {
                        // SAFETY: the caller's contract for `cb` and `user_data`.
                        unsafe { cb(user.0, text.as_ptr(), len) }
                    }));
                    if thread_stopped.load(Ordering::Acquire) {
                        break;
                    }
                }
                let _ = handle.block_on(sub.unsubscribe());
            })
            .map_err(|e| {
                (
                    ds_result::DS_ERR_INTERNAL,
                    format!("cannot start the delivery thread: {e}"),
                )
            })?;
        let id = c.next_subscription.fetch_add(1, Ordering::Relaxed);
        let thread_id = thread.thread().id();
        c.subscriptions.lock().unwrap().insert(
            id,
            Feed {
                stop,
                stopped,
                thread,
                thread_id,
            },
        );
        if !out_subscription.is_null() {
            // SAFETY: non-NULL and writable (the API's contract).
            unsafe { *out_subscription = id };
        }
        Ok(())
    })
}

fn end_feed(feed: Feed) {
    feed.stopped.store(true, Ordering::Release);
    feed.stop.notify_one();
    // From inside its own callback the thread cannot be joined: it ends after the callback
    // returns, and no callback follows.
    if std::thread::current().id() != feed.thread_id {
        let _ = feed.thread.join();
    }
}

/// Ends a subscription. Returns only after any callback in flight has finished (when called
/// from that subscription's own callback, it returns at once and no further callback runs).
///
/// # Safety
/// `c` is a live client.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_unsubscribe(c: *mut ds_client, subscription: u64) -> ds_result {
    boundary(|| {
        let c = client(c)?;
        let feed = c
            .subscriptions
            .lock()
            .unwrap()
            .remove(&subscription)
            .ok_or((
                ds_result::DS_ERR_RPC,
                format!("no subscription {subscription} on this client"),
            ))?;
        end_feed(feed);
        Ok(())
    })
}

/// Opens a checkpoint (`checkpoint.request` params as JSON); the checkpoint as JSON once it
/// is durable. The same key gives the same checkpoint.
///
/// # Safety
/// `c` is a live client; `params_json` is NUL-terminated; `out_checkpoint_json` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_checkpoint_request(
    c: *mut ds_client,
    params_json: *const c_char,
    out_checkpoint_json: *mut *mut c_char,
) -> ds_result {
    boundary(|| {
        let c = client(c)?;
        // SAFETY: the caller's contract.
        let params = json_arg(unsafe { text(params_json, "params_json") }?, "params_json")?;
        let cp = c.call(methods::CHECKPOINT_REQUEST, params)?;
        give(out_checkpoint_json, &cp)
    })
}

/// Waits until the checkpoint `id` is decided (or expired), at most `timeout_ms` (0: no
/// limit). When the time runs out first it returns `DS_ERR_TIMEOUT` and still hands out the
/// checkpoint as it stands (pending).
///
/// # Safety
/// `c` is a live client; `id` is NUL-terminated; `out_checkpoint_json` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_checkpoint_await(
    c: *mut ds_client,
    id: *const c_char,
    timeout_ms: u64,
    out_checkpoint_json: *mut *mut c_char,
) -> ds_result {
    boundary(|| {
        let c = client(c)?;
        // SAFETY: the caller's contract.
        let id = unsafe { text(id, "id") }?;
        let mut params = json!({ "id": id });
        if timeout_ms > 0 {
            params["timeout_ms"] = json!(timeout_ms);
        }
        let cp = c.call(methods::CHECKPOINT_AWAIT, params)?;
        give(out_checkpoint_json, &cp)?;
        if cp.get("decision").is_none_or(Value::is_null) {
            return Err((
                ds_result::DS_ERR_TIMEOUT,
                format!("checkpoint {id} was not decided within {timeout_ms} ms"),
            ));
        }
        Ok(())
    })
}

/// Decides a checkpoint: `decision` is "approve", "reject" or one of its options; `note` may be
/// NULL. The first decision wins: a later one gets `DS_ERR_RPC` naming the first.
///
/// # Safety
/// `c` is a live client; the strings are NUL-terminated (`note` may be NULL);
/// `out_checkpoint_json` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_checkpoint_resolve(
    c: *mut ds_client,
    id: *const c_char,
    decision: *const c_char,
    note: *const c_char,
    out_checkpoint_json: *mut *mut c_char,
) -> ds_result {
    boundary(|| {
        let c = client(c)?;
        // SAFETY: the caller's contract.
        let id = unsafe { text(id, "id") }?;
        // SAFETY: the caller's contract.
        let decision = unsafe { text(decision, "decision") }?;
        let mut params = json!({"id": id, "decision": decision});
        if !note.is_null() {
            // SAFETY: the caller's contract.
            params["note"] = json!(unsafe { text(note, "note") }?);
        }
        let cp = c.call(methods::CHECKPOINT_RESOLVE, params)?;
        if out_checkpoint_json.is_null() {
            return Ok(());
        }
        give(out_checkpoint_json, &cp)
    })
}

/// Frees a string this library returned. NULL is ignored.
///
/// # Safety
/// `s` is NULL or a string from this library, freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_string_free(s: *mut c_char) {
    if !s.is_null() {
        let _ = catch_unwind(|| {
            // SAFETY: made by CString::into_raw in `give`, freed once (the caller's contract).
            drop(unsafe { CString::from_raw(s) });
        });
    }
}

/// Closes the connection, ending its subscriptions first. NULL is ignored.
///
/// # Safety
/// `c` is NULL or a live client, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_client_free(c: *mut ds_client) {
    if c.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: made by Box::into_raw in ds_client_connect, freed once.
        let c = unsafe { Box::from_raw(c) };
        let feeds: Vec<Feed> = c
            .subscriptions
            .lock()
            .unwrap()
            .drain()
            .map(|(_, f)| f)
            .collect();
        for f in feeds {
            end_feed(f);
        }
        let ds_client {
            runtime, client, ..
        } = *c;
        drop(client);
        runtime.shutdown_timeout(Duration::from_secs(1));
    }));
}
