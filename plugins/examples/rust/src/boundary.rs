//! The panic boundary around each export: a panic must never unwind into the daemon (that is
//! undefined behaviour across `extern "C"`), so every export runs its body through [`guard`],
//! which turns a panic into an error code and a message `last_error` hands out.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The ABI's success code; anything else is a failure.
pub const OK: i32 = 0;
pub const FAILED: i32 = 1;

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Runs `body`, catching a panic; `Err(message)` and panics become [`FAILED`] with the message
/// kept for `last_error`.
pub fn guard(body: impl FnOnce() -> Result<(), String>) -> i32 {
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(format!("panicked: {what}"))
    });
    match outcome {
        Ok(()) => OK,
        Err(message) => {
            let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
            LAST_ERROR.with(|e| *e.borrow_mut() = Some(text));
            FAILED
        }
    }
}

/// The last failure's text on this thread, valid until the next failure.
pub fn last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ref().map_or(std::ptr::null(), |s| s.as_ptr()))
}

/// Hands `text` to the host as an output buffer it gives back through `free_buf`.
pub fn output(text: String, out: *mut *mut c_char, out_len: *mut usize) {
    let boxed: Box<[u8]> = text.into_bytes().into_boxed_slice();
    let len = boxed.len();
    // SAFETY: the host passes writable out-parameters (the ABI's contract).
    unsafe {
        *out_len = len;
        *out = Box::into_raw(boxed).cast::<c_char>();
    }
}

/// Frees a buffer made by [`output`].
///
/// # Safety
/// `buf` and `len` must come from one [`output`] call, and be freed once.
pub unsafe fn free(buf: *mut c_char, len: usize) {
    if !buf.is_null() {
        // SAFETY: rebuilds the boxed slice `output` leaked, with its length.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(buf.cast::<u8>(), len)) });
    }
}
