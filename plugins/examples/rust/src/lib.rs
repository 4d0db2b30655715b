//! An example dstream native plugin in Rust, without dependencies: it maps events of the
//! source `rust-example` (any JSON) to one `example.received` event whose payload says how many
//! bytes arrived, and it panics, on purpose, on a raw event containing "panic!": the panic
//! boundary in [`boundary`] turns that into an ordinary plugin error, so the daemon stores the
//! event as `unmapped` and carries on.
//!
//! Build: `cargo build --release --manifest-path plugins/examples/rust/Cargo.toml`, then copy
//! `target/release/libdstream_example_plugin.so` into dstream's plugin folder.

mod boundary;

use std::ffi::{c_char, c_void};

/// `ds_plugin_vtable` of plugins/include/dstream_plugin.h, ABI version 1.
#[repr(C)]
pub struct VTable {
    abi_version: u32,
    struct_size: u32,
    name: *const c_char,
    version: *const c_char,
    flags: u32,
    priority: i32,
    sources: *const c_char,
    init:
        Option<unsafe extern "C" fn(*const c_void, *const c_char, usize, *mut *mut c_void) -> i32>,
    map: Option<MapFn>,
    process: Option<EventFn>,
    decide: Option<EventFn>,
    on_event: Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> i32>,
    free_buf: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, usize)>,
    last_error: Option<unsafe extern "C" fn(*mut c_void) -> *const c_char>,
    shutdown: Option<unsafe extern "C" fn(*mut c_void)>,
}

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

// SAFETY: the table is immutable and its pointers point to static data and functions.
unsafe impl Sync for VTable {}

static VTABLE: VTable = VTable {
    abi_version: 1,
    struct_size: std::mem::size_of::<VTable>() as u32,
    name: c"rust_example".as_ptr(),
    version: c"0.1.0".as_ptr(),
    flags: 1, // thread-safe: no state at all
    priority: 0,
    sources: c"rust-example".as_ptr(),
    init: None,
    map: Some(map),
    process: None,
    decide: None,
    on_event: None,
    free_buf: Some(free_buf),
    last_error: Some(last_error),
    shutdown: None,
};

/// The entry point dstream looks up.
#[unsafe(no_mangle)]
pub extern "C" fn dstream_plugin_entry(host_abi_version: u32) -> *const VTable {
    if host_abi_version == 1 {
        &VTABLE
    } else {
        std::ptr::null()
    }
}

unsafe extern "C" fn map(
    _state: *mut c_void,
    raw: *const c_char,
    raw_len: usize,
    _ctx: *const c_char,
    _ctx_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
) -> i32 {
    boundary::guard(|| {
        // SAFETY: the host passes `raw_len` readable bytes (the ABI's contract).
        let raw = unsafe { std::slice::from_raw_parts(raw.cast::<u8>(), raw_len) };
        let text = std::str::from_utf8(raw).map_err(|e| format!("raw is not UTF-8: {e}"))?;
        if text.contains("panic!") {
            panic!("asked to panic by the event");
        }
        let events = format!(
            "[{{\"type\":\"example.received\",\"payload\":{{\"bytes\":{raw_len},\"by\":\"rust\"}}}}]"
        );
        boundary::output(events, out, out_len);
        Ok(())
    })
}

unsafe extern "C" fn free_buf(_state: *mut c_void, buf: *mut c_char, len: usize) {
    // SAFETY: the host hands back, once, a buffer `map` made with `boundary::output`.
    unsafe { boundary::free(buf, len) }
}

unsafe extern "C" fn last_error(_state: *mut c_void) -> *const c_char {
    boundary::last_error()
}
