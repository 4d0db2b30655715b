//! Starting a daemon when none answers, for callers that ask for it
//! ([`crate::Client::connect_or_start`], the C library's `ds_client_connect_or_start`, the
//! Node package's `connect(path, {autostart: true})`).
//!
//! It runs `dstream start --auto --socket <path>`, which starts the daemon detached, in a
//! fixed minimal environment (not the caller's), unless autostart is turned off
//! (`[daemon] autostart = false` or `DSTREAM_AUTOSTART=0`), and returns once it answers or
//! its wait (2 s by default) is over.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Exit code of `dstream start --auto` when autostart is off.
const AUTOSTART_OFF: i32 = 3;

/// Why no daemon could be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("autostart is off (daemon.autostart = false or DSTREAM_AUTOSTART=0)")]
    Off,
    #[error("cannot run {}: {cause}", program.display())]
    Spawn { program: PathBuf, cause: io::Error },
    #[error("`dstream start` failed: {0}")]
    Failed(String),
}

/// The `dstream` program to run: `program` if given, else `$DSTREAM_BIN`, else `dstream`
/// on `PATH`.
pub fn program(program: Option<&Path>) -> PathBuf {
    program
        .map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os("DSTREAM_BIN")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("dstream"))
}

/// Starts a daemon for `socket` unless one answers already (blocking, a few seconds at most).
pub fn start_daemon(dstream: Option<&Path>, socket: &Path) -> Result<(), StartError> {
    let program = program(dstream);
    let out = Command::new(&program)
        .args([OsString::from("start"), "--auto".into(), "--socket".into()])
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|cause| StartError::Spawn {
            program: program.clone(),
            cause,
        })?;
    match out.status.code() {
        Some(0) => Ok(()),
        Some(AUTOSTART_OFF) => Err(StartError::Off),
        _ => Err(StartError::Failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )),
    }
}
