//! Native plugins: shared libraries with the C ABI of `plugins/include/dstream_plugin.h`.
//!
//! The table the library's `dstream_plugin_entry` returns is mirrored here in `#[repr(C)]`
//! Rust; only the `struct_size` bytes the plugin declares are read (later fields count as
//! NULL), and a table of another `abi_version` is refused with a clear error.
//!
//! Each plugin runs on a thread of its own that answers the pipeline's [`Call`]s exactly as a
//! Lua plugin's thread does, so the deadline, the error policy and the counters are shared.
//!
//! **Never unloaded.** Code of a library may still run on a thread that hung in it, and
//! `dlclose` under it would crash the daemon. So a library is loaded from a private copy of
//! its file with a unique name (the dynamic loader would otherwise hand back the handle it
//! has for that path, i.e. the old code), the copy is unlinked at once, and a reload loads a
//! fresh copy: the old plugin gets `shutdown` when its thread ends, and its mapping is leaked
//! on purpose. A daemon that reloads a plugin a thousand times holds a thousand small
//! mappings; that is the price of never crashing on a reload.

use std::ffi::{CStr, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, SyncSender};

use serde_json::{Value as Json, json};

use super::contract::{CALL_QUEUE, Call, Hooks, Input, Limits, PluginError, PluginMeta, Shared};

/// The ABI version this daemon speaks.
pub const ABI_VERSION: u32 = 1;
/// The symbol a plugin exports.
const ENTRY: &[u8] = b"dstream_plugin_entry\0";

/// File names the plugin folder loads as native plugins.
pub fn is_native_file(name: &str) -> bool {
    [".so", ".dylib", ".dll"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

/// The file name without its library extension (the key of `[plugins.native.<stem>]`).
pub fn stem(file: &str) -> &str {
    [".so", ".dylib", ".dll"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))
        .unwrap_or(file)
}

#[repr(C)]
struct HostApi {
    abi_version: u32,
    struct_size: u32,
    log: extern "C" fn(i32, *const c_char, usize),
    now_ms: extern "C" fn() -> u64,
}

type InitFn = unsafe extern "C" fn(*const HostApi, *const c_char, usize, *mut *mut c_void) -> i32;
type MapFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    usize,
    *const c_char,
    usize,
    *mut *mut c_char,
    *mut usize,
) -> i32;
type EventFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, usize, *mut *mut c_char, *mut usize) -> i32;
type OnEventFn = unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> i32;
type FreeFn = unsafe extern "C" fn(*mut c_void, *mut c_char, usize);
type LastErrorFn = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type ShutdownFn = unsafe extern "C" fn(*mut c_void);

/// `ds_plugin_vtable`, field for field. Function pointers are `Option`s: NULL is `None`.
#[repr(C)]
#[derive(Clone, Copy)]
struct VTable {
    abi_version: u32,
    struct_size: u32,
    name: *const c_char,
    version: *const c_char,
    flags: u32,
    priority: i32,
    sources: *const c_char,
    init: Option<InitFn>,
    map: Option<MapFn>,
    process: Option<EventFn>,
    decide: Option<EventFn>,
    on_event: Option<OnEventFn>,
    free_buf: Option<FreeFn>,
    last_error: Option<LastErrorFn>,
    shutdown: Option<ShutdownFn>,
    /// Appended to version 1: a plugin whose `struct_size` ends before it has none.
    relay: Option<EventFn>,
}

extern "C" fn host_log(level: i32, msg: *const c_char, len: usize) {
    if msg.is_null() {
        return;
    }
    // SAFETY: the plugin passes `len` readable bytes at `msg` (the header's contract).
    let bytes = unsafe { std::slice::from_raw_parts(msg.cast::<u8>(), len) };
    // One throttle per plugin thread (each native plugin runs on its own).
    thread_local! {
        static THROTTLE: super::log_line::Throttle = super::log_line::Throttle::default();
    }
    let name = PLUGIN_NAME.with(|n| n.borrow().clone());
    match THROTTLE.with(|t| t.check()) {
        super::log_line::Verdict::Drop => return,
        super::log_line::Verdict::Log { dropped_before } if dropped_before > 0 => {
            tracing::warn!(plugin = %name, dropped = dropped_before, "plugin log lines dropped (more than 20 a second)");
        }
        super::log_line::Verdict::Log { .. } => {}
    }
    let lossy = String::from_utf8_lossy(bytes);
    let text = super::log_line::clean(&lossy);
    match level {
        1 => tracing::error!(plugin = %name, "{text}"),
        2 => tracing::warn!(plugin = %name, "{text}"),
        3 => tracing::info!(plugin = %name, "{text}"),
        _ => tracing::debug!(plugin = %name, "{text}"),
    }
}

extern "C" fn host_now_ms() -> u64 {
    crate::util::time::now_ms()
}

static HOST: HostApi = HostApi {
    abi_version: ABI_VERSION,
    struct_size: std::mem::size_of::<HostApi>() as u32,
    log: host_log,
    now_ms: host_now_ms,
};

thread_local! {
    /// The plugin this thread serves, for its log lines.
    static PLUGIN_NAME: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// A loaded plugin: its table and its state. Used only on its own thread (or, in a
/// `dstream plugin-host` child, on the child's main thread).
pub struct Local {
    vt: VTable,
    state: *mut c_void,
    meta: PluginMeta,
}

impl Local {
    /// Loads the library at `path` (from a private copy in `cache`) and runs its `init`.
    pub fn load(path: &Path, cache: &Path, config: &Json) -> Result<Local, PluginError> {
        load(path, cache, config)
    }

    pub fn meta(&self) -> &PluginMeta {
        &self.meta
    }

    /// One call, on the calling thread.
    pub fn call(&self, hook: Hooks, input: Input) -> Result<Vec<Json>, PluginError> {
        PLUGIN_NAME.with(|n| *n.borrow_mut() = self.meta.name.clone());
        run(self, hook, input)
    }

    pub fn shutdown(&self) {
        shutdown(self)
    }
}

// SAFETY: a `Local` is created on, and only ever used from, the plugin's own thread; it is
// moved there once before any call.
unsafe impl Send for Local {}

/// Copies `path` to a unique name in `cache` (so the loader maps it anew), loads it, checks its
/// table, and runs `init` with `config`; the library is leaked on purpose (see the module docs).
fn load(path: &Path, cache: &Path, config: &Json) -> Result<Local, PluginError> {
    let load_err = |m: String| PluginError::Load(m);
    crate::vfs::Vfs::create_dir_all(&crate::vfs::OsVfs, cache)
        .map_err(|e| load_err(format!("cannot create {}: {e}", cache.display())))?;
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let copy: PathBuf = cache.join(format!(
        "{}-{}-{file}",
        std::process::id(),
        ulid::Ulid::new()
    ));
    std::fs::copy(path, &copy).map_err(|e| load_err(format!("cannot copy it for loading: {e}")))?;
    // SAFETY: loading a library runs its initializers; the plugin folder is the user's own
    // (owner-only, like the rest of dstream's configuration), which is the trust boundary.
    let lib = unsafe { libloading::Library::new(&copy) };
    let _ = std::fs::remove_file(&copy);
    let lib = lib.map_err(|e| load_err(format!("cannot load the library: {e}")))?;
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    // SAFETY: the symbol's type is the one the header declares.
    let entry: libloading::Symbol<unsafe extern "C" fn(u32) -> *const VTable> = unsafe {
        lib.get(ENTRY)
    }
    .map_err(|_| load_err("no `dstream_plugin_entry` symbol: not a dstream plugin".to_string()))?;
    // SAFETY: calling the plugin's entry point, as the ABI says.
    let table = unsafe { entry(ABI_VERSION) };
    if table.is_null() {
        return Err(load_err(format!(
            "dstream_plugin_entry({ABI_VERSION}) returned NULL: the plugin does not speak this ABI version"
        )));
    }
    // Read the two leading fields first, then only the prefix the plugin declares.
    // SAFETY: every table starts with two u32s; `table` points to a static table.
    let (abi, size) = unsafe { ((*table).abi_version, (*table).struct_size) };
    if abi != ABI_VERSION {
        return Err(load_err(format!(
            "ABI version {abi}, but this dstream speaks version {ABI_VERSION}; rebuild the plugin against plugins/include/dstream_plugin.h"
        )));
    }
    let known = std::mem::size_of::<VTable>();
    let take = (size as usize).min(known);
    if take < std::mem::offset_of!(VTable, init) {
        return Err(load_err(format!(
            "its table is {size} bytes, too small for the fields every plugin declares"
        )));
    }
    let mut vt = std::mem::MaybeUninit::<VTable>::zeroed();
    // SAFETY: copies `take` bytes (at most our struct's size) from the plugin's table into a
    // zeroed one; zero is NULL / None for every pointer field.
    let vt = unsafe {
        std::ptr::copy_nonoverlapping(table.cast::<u8>(), vt.as_mut_ptr().cast::<u8>(), take);
        vt.assume_init()
    };
    let text = |p: *const c_char| -> Option<String> {
        // SAFETY: the header requires NUL-terminated static strings (or NULL).
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let name = text(vt.name)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| load_err("its table has no name".to_string()))?;
    let sources: Vec<String> = text(vt.sources)
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut hooks = Hooks::empty();
    for (present, hook) in [
        (vt.map.is_some() && !sources.is_empty(), Hooks::MAP),
        (vt.process.is_some(), Hooks::PROCESS),
        (vt.decide.is_some(), Hooks::DECIDE),
        (vt.on_event.is_some(), Hooks::ON_EVENT),
        (vt.relay.is_some(), Hooks::RELAY),
    ] {
        if present {
            hooks |= hook;
        }
    }
    let mut state: *mut c_void = std::ptr::null_mut();
    if let Some(init) = vt.init {
        let config = config.to_string();
        PLUGIN_NAME.with(|n| *n.borrow_mut() = name.clone());
        // SAFETY: the host table is static; `config` outlives the call; `state` is writable.
        let rc = unsafe { init(&HOST, config.as_ptr().cast(), config.len(), &mut state) };
        if rc != 0 {
            let why = last_error(&vt, state).unwrap_or_else(|| format!("code {rc}"));
            return Err(load_err(format!("init failed: {why}")));
        }
    }
    Ok(Local {
        meta: PluginMeta {
            name,
            sources,
            priority: i64::from(vt.priority),
            hooks,
            process_if_contains: None,
        },
        vt,
        state,
    })
}

fn last_error(vt: &VTable, state: *mut c_void) -> Option<String> {
    let f = vt.last_error?;
    // SAFETY: the plugin's own function on its own state.
    let p = unsafe { f(state) };
    // SAFETY: a NUL-terminated string owned by the plugin, or NULL.
    (!p.is_null()).then(|| {
        unsafe { CStr::from_ptr(p) }
            .to_string_lossy()
            .chars()
            .take(500)
            .collect()
    })
}

/// Loads the plugin on a thread of its own and returns what it declares and its call queue.
pub fn spawn(
    path: &Path,
    cache: &Path,
    config: Json,
    limits: Limits,
    shared: Arc<Shared>,
) -> Result<(PluginMeta, SyncSender<Call>), PluginError> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (tx, rx) = mpsc::sync_channel::<Call>(CALL_QUEUE);
    let (path, cache) = (path.to_path_buf(), cache.to_path_buf());
    let thread_name = format!(
        "dstream-native-{}",
        stem(&path.file_name().unwrap_or_default().to_string_lossy())
    );
    let load_timeout = limits.call_timeout * 4;
    std::thread::Builder::new()
        .name(thread_name)
        .spawn(move || {
            let loaded = match load(&path, &cache, &config) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            if ready_tx.send(Ok(loaded.meta.clone())).is_err() {
                shutdown(&loaded);
                return;
            }
            serve(&loaded, &rx, &shared);
            shutdown(&loaded);
        })
        .map_err(|e| PluginError::Load(format!("cannot start its thread: {e}")))?;
    match ready_rx.recv_timeout(load_timeout) {
        Ok(Ok(meta)) => Ok((meta, tx)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(PluginError::Load(format!(
            "loading did not finish within {} ms",
            load_timeout.as_millis()
        ))),
    }
}

fn shutdown(loaded: &Local) {
    if let Some(f) = loaded.vt.shutdown {
        // SAFETY: the plugin's own function, called once, on its thread, after the last call.
        unsafe { f(loaded.state) };
    }
}

fn serve(loaded: &Local, rx: &Receiver<Call>, shared: &Shared) {
    PLUGIN_NAME.with(|n| *n.borrow_mut() = loaded.meta.name.clone());
    super::contract::serve_calls(rx, shared, &loaded.meta.name, |hook, input| {
        run(loaded, hook, input)
    });
}

/// One call into the plugin; its output parsed into the shapes the pipeline expects.
fn run(l: &Local, hook: Hooks, input: Input) -> Result<Vec<Json>, PluginError> {
    let vt = &l.vt;
    let missing = || PluginError::Call(format!("plugin has no `{}` function", hook.name()));
    let mut out: *mut c_char = std::ptr::null_mut();
    let mut out_len = 0usize;
    let (rc, kept) = match (hook, input) {
        (
            Hooks::MAP,
            Input::Map {
                raw,
                source,
                session_id,
            },
        ) => {
            let f = vt.map.ok_or_else(missing)?;
            let raw = raw.to_string();
            let ctx = json!({"source": source, "session_id": session_id}).to_string();
            // SAFETY: buffers valid for the call, out-params writable (the header's contract).
            let rc = unsafe {
                f(
                    l.state,
                    raw.as_ptr().cast(),
                    raw.len(),
                    ctx.as_ptr().cast(),
                    ctx.len(),
                    &mut out,
                    &mut out_len,
                )
            };
            (rc, None)
        }
        // A filter, a decision and a relay filter take the same arguments; the event is kept
        // to pass on unchanged when a filter returns nothing.
        (Hooks::PROCESS | Hooks::DECIDE | Hooks::RELAY, Input::Event(event)) => {
            let f = match hook {
                Hooks::PROCESS => vt.process,
                Hooks::DECIDE => vt.decide,
                _ => vt.relay,
            };
            let f = f.ok_or_else(missing)?;
            let text = event.to_string();
            // SAFETY: as above.
            let rc = unsafe {
                f(
                    l.state,
                    text.as_ptr().cast(),
                    text.len(),
                    &mut out,
                    &mut out_len,
                )
            };
            (rc, (hook != Hooks::DECIDE).then_some(event))
        }
        (Hooks::ON_EVENT, Input::Event(event)) => {
            let f = vt.on_event.ok_or_else(missing)?;
            let text = event.to_string();
            // SAFETY: as above.
            let rc = unsafe { f(l.state, text.as_ptr().cast(), text.len()) };
            (rc, None)
        }
        _ => return Err(PluginError::Call("a call the plugin cannot take".into())),
    };
    let output = take_output(l, out, out_len);
    if rc != 0 {
        let why = last_error(vt, l.state).unwrap_or_else(|| format!("returned {rc}"));
        return Err(PluginError::Call(why));
    }
    let parsed: Option<Json> = match output {
        None => None,
        Some(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| {
            PluginError::Call(format!("{} returned invalid JSON: {e}", hook.name()))
        })?),
    };
    match hook {
        Hooks::DECIDE => Ok(vec![parsed.unwrap_or(Json::Null)]),
        Hooks::ON_EVENT => Ok(Vec::new()),
        // The event to send, null to keep it local, nothing to send it unchanged.
        Hooks::RELAY => match parsed {
            None => Ok(kept.map(|e| vec![(*e).clone()]).unwrap_or_default()),
            Some(Json::Null) => Ok(Vec::new()),
            Some(e @ Json::Object(_)) => Ok(vec![e]),
            Some(_) => Err(PluginError::Call(
                "relay must return an event object or null".into(),
            )),
        },
        _ => match parsed {
            // No output: map emits nothing, process keeps the event as it came.
            None => Ok(kept.map(|e| vec![(*e).clone()]).unwrap_or_default()),
            Some(Json::Array(events)) => Ok(events),
            Some(_) => Err(PluginError::Call(format!(
                "{} must return a JSON array of events",
                hook.name()
            ))),
        },
    }
}

/// Copies the plugin's output buffer and hands it back to its `free_buf`.
fn take_output(l: &Local, out: *mut c_char, len: usize) -> Option<Vec<u8>> {
    if out.is_null() {
        return None;
    }
    // SAFETY: the plugin returned `len` readable bytes at `out`.
    let bytes = unsafe { std::slice::from_raw_parts(out.cast::<u8>(), len) }.to_vec();
    if let Some(free) = l.vt.free_buf {
        // SAFETY: handing the plugin's own buffer back to it, once.
        unsafe { free(l.state, out, len) };
    }
    Some(bytes)
}
