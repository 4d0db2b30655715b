//! Where the daemon's local socket lives.

use std::path::PathBuf;

/// File name of the socket inside its directory.
pub const SOCKET_FILE: &str = "dstream.sock";

/// The default socket path: `$DSTREAM_SOCKET` if set, else
/// `$XDG_RUNTIME_DIR/dstream/dstream.sock`, else `~/.dstream/dstream.sock`.
/// On Windows: the named pipe `\\.\pipe\dstream-<user>`.
pub fn default_socket_path() -> PathBuf {
    if let Some(p) = std::env::var_os("DSTREAM_SOCKET").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    platform_default()
}

#[cfg(unix)]
fn platform_default() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("dstream").join(SOCKET_FILE);
    }
    home_dir().join(".dstream").join(SOCKET_FILE)
}

#[cfg(windows)]
fn platform_default() -> PathBuf {
    let user = std::env::var("USERNAME").unwrap_or_else(|_| "user".into());
    PathBuf::from(format!(r"\\.\pipe\dstream-{user}"))
}

/// The user's home directory (`$HOME`, or `%USERPROFILE%` on Windows).
pub fn home_dir() -> PathBuf {
    let var = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    std::env::var_os(var)
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| ".".into())
}
