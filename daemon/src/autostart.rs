//! Starting a daemon on demand: what `dstream hook` does when no daemon answers (and what
//! `dstream start` does for the OpenCode plugin and the SDKs).
//!
//! The started daemon is detached (its own session, stdio to `<data_dir>/daemon.log`, no
//! descriptor of the caller's kept open, so the agent waiting on the hook's output is not held
//! by it) and runs in a fixed minimal environment, never the agent's: the agent's API keys
//! and tokens must not leak into the daemon or its plugins. It gets the socket and data
//! directory the caller resolved, as flags, so both sides agree on them.
//!
//! Concurrent starts are safe: one caller at a time holds `<data_dir>/autostart.lock` and
//! spawns; the others wait for the socket to answer. Even without that lock only one daemon
//! could own the data directory (the store's own lock), the rest would exit at once.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a hook waits, by default, for a daemon it started to answer
/// (`DSTREAM_AUTOSTART_WAIT_MS` changes it). A fresh daemon answers in tens of milliseconds;
/// one recovering a large data directory after a crash may take longer, and then the event
/// is spooled rather than holding the agent up.
pub const DEFAULT_WAIT: Duration = Duration::from_millis(2_000);
/// The most `DSTREAM_AUTOSTART_WAIT_MS` may ask for.
const MAX_WAIT: Duration = Duration::from_secs(30);
/// The log of an autostarted daemon is started afresh (the old one kept as `.1`) past this.
const LOG_ROTATE_BYTES: u64 = 8 << 20;
/// The `PATH` a started daemon gets (plugins it runs find the system's tools, nothing else).
const FIXED_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The variables a started daemon keeps from its starter: where the user's files are, and
/// nothing that could carry a secret.
const KEPT_VARS: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "TZ",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
];

/// Which daemon to start, and how.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The `dstream` executable.
    pub exe: PathBuf,
    /// The config file to pass with `--config`, if the caller was told of one.
    pub config: Option<PathBuf>,
    pub socket: PathBuf,
    pub data_dir: PathBuf,
}

/// How a daemon came to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// One was already running.
    AlreadyRunning,
    /// This caller started it (its pid).
    ByUs(u32),
    /// Another caller started it at the same time.
    ByOther,
}

#[derive(Debug, thiserror::Error)]
pub enum AutostartError {
    #[error("no daemon answered on {} within {} ms of starting one", socket.display(), waited.as_millis())]
    Timeout { socket: PathBuf, waited: Duration },
    #[error("the daemon started for {} exited at once ({status}); {log_tail}", socket.display())]
    Exited {
        socket: PathBuf,
        status: String,
        log_tail: String,
    },
    #[error("cannot start a daemon: {what}: {source}")]
    Io {
        what: &'static str,
        source: io::Error,
    },
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> AutostartError {
    move |source| AutostartError::Io { what, source }
}

/// True when `DSTREAM_AUTOSTART` is set to `0`, `false`, `no` or `off`.
pub fn disabled_by_env() -> bool {
    std::env::var("DSTREAM_AUTOSTART")
        .map(|v| matches!(v.trim(), "0" | "false" | "no" | "off"))
        .unwrap_or(false)
}

/// How long to wait for a started daemon: `DSTREAM_AUTOSTART_WAIT_MS`, else [`DEFAULT_WAIT`];
/// at most 30 s.
pub fn wait_bound() -> Duration {
    std::env::var("DSTREAM_AUTOSTART_WAIT_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_WAIT)
        .min(MAX_WAIT)
}

/// The environment a started daemon gets: [`KEPT_VARS`] from this process and a fixed `PATH`.
pub fn minimal_env() -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = KEPT_VARS
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (OsString::from(k), v)))
        .collect();
    env.push(("PATH".into(), FIXED_PATH.into()));
    env
}

/// Whether a daemon answers on `socket` now.
pub fn answers(socket: &Path) -> bool {
    #[cfg(unix)]
    {
        std::os::unix::net::UnixStream::connect(socket).is_ok()
    }
    #[cfg(not(unix))]
    {
        let _ = socket;
        false
    }
}

/// Makes sure a daemon answers on `launch.socket`, starting one if none does, within `wait`.
pub fn ensure_running(launch: &Launch, wait: Duration) -> Result<Started, AutostartError> {
    if answers(&launch.socket) {
        return Ok(Started::AlreadyRunning);
    }
    let deadline = Instant::now() + wait;
    make_private_dir(&launch.data_dir).map_err(io_err("creating the data directory"))?;
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(launch.data_dir.join("autostart.lock"))
        .map_err(io_err("opening autostart.lock"))?;
    let mut pause = Duration::from_millis(1);
    loop {
        match lock.try_lock() {
            Ok(()) => {
                // Whoever held the lock before may have started it meanwhile.
                if answers(&launch.socket) {
                    return Ok(Started::ByOther);
                }
                let child = spawn(launch)?;
                return await_child(child, launch, deadline);
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                if answers(&launch.socket) {
                    return Ok(Started::ByOther);
                }
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err("locking")(e)),
        }
        if Instant::now() >= deadline {
            return Err(AutostartError::Timeout {
                socket: launch.socket.clone(),
                waited: wait,
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Waits (holding the start lock) for the daemon just spawned to answer.
fn await_child(
    mut child: Child,
    launch: &Launch,
    deadline: Instant,
) -> Result<Started, AutostartError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        if answers(&launch.socket) {
            return Ok(Started::ByUs(child.id()));
        }
        if let Ok(Some(status)) = child.try_wait() {
            // A daemon that lost a race for the data directory exits; another may answer.
            if answers(&launch.socket) {
                return Ok(Started::ByOther);
            }
            return Err(AutostartError::Exited {
                socket: launch.socket.clone(),
                status: status.to_string(),
                log_tail: log_tail(&launch.data_dir),
            });
        }
        if Instant::now() >= deadline {
            return Err(AutostartError::Timeout {
                socket: launch.socket.clone(),
                waited: started.elapsed(),
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

/// Where an autostarted daemon's output goes.
pub fn log_path(data_dir: &Path) -> PathBuf {
    data_dir.join("daemon.log")
}

/// The last line of the daemon's log, to say why it did not come up.
fn log_tail(data_dir: &Path) -> String {
    let text = std::fs::read(log_path(data_dir)).unwrap_or_default();
    let start = text.len().saturating_sub(2048);
    let text = String::from_utf8_lossy(&text[start..]);
    match text.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(line) => format!("its log says: {}", line.trim()),
        None => format!("see {}", log_path(data_dir).display()),
    }
}

fn open_log(data_dir: &Path) -> io::Result<File> {
    let path = log_path(data_dir);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES) {
        let _ = std::fs::rename(&path, data_dir.join("daemon.log.1"));
    }
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

fn spawn(launch: &Launch) -> Result<Child, AutostartError> {
    let log = open_log(&launch.data_dir).map_err(io_err("opening daemon.log"))?;
    let mut cmd = Command::new(&launch.exe);
    cmd.arg("daemon")
        .arg("--socket")
        .arg(&launch.socket)
        .arg("--data-dir")
        .arg(&launch.data_dir);
    if let Some(config) = &launch.config {
        cmd.arg("--config").arg(config);
    }
    cmd.env_clear()
        .envs(minimal_env())
        .current_dir(&launch.data_dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io_err("opening daemon.log"))?)
        .stderr(log);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe calls (setsid, close_range/fcntl) run in the child.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() == -1 {
                    return Err(io::Error::last_os_error());
                }
                cloexec_from_3();
                Ok(())
            });
        }
    }
    cmd.spawn().map_err(io_err("spawning `dstream daemon`"))
}

/// Marks every descriptor above stderr close-on-exec, so the daemon keeps none of its
/// starter's (an agent's pipe held open by the daemon would keep the agent waiting).
#[cfg(unix)]
fn cloexec_from_3() {
    #[cfg(target_os = "linux")]
    {
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        // SAFETY: a plain syscall on descriptor numbers.
        if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) } == 0
        {
            return;
        }
    }
    for fd in 3..1024 {
        // SAFETY: fcntl on a descriptor that may not exist only fails.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// Creates `dir` (and its parents) if missing, owner-only.
pub fn make_private_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}
