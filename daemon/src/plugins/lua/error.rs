//! Errors from Lua as the user sees them: one readable line, used by loading and calling
//! alike.

/// An mlua error as one readable line: the script's message and position, without the
/// Rust-side wrapping and the traceback.
pub fn clean_error(e: &mlua::Error) -> String {
    let text = match e {
        mlua::Error::CallbackError { cause, .. } => return clean_error(cause),
        mlua::Error::MemoryError(m) => format!("out of memory: {m}"),
        other => other.to_string(),
    };
    let first = text.lines().next().unwrap_or("").trim();
    let first = first.strip_prefix("runtime error: ").unwrap_or(first);
    first.chars().take(500).collect()
}
