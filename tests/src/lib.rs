//! Harness for the end-to-end tests: runs the real `dstream` binary on a temporary socket and
//! data directory and talks to it over the real socket with a small blocking JSON-line client.
//!
//! Everything here waits with a deadline, so a broken daemon makes a test fail, never hang.
#![cfg(unix)]

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

pub use serde_json;

pub mod agents;
pub mod browser;
pub mod hostile_server;
pub mod mock_model;
pub mod npm_cache;
pub mod relay;
pub mod tmux;

/// How long a daemon gets to become ready (socket accepts and `hello` answers).
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a daemon gets to exit after a signal, or to refuse to start.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default deadline for one request/response round trip.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// The JSON-RPC error codes of the contract.
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INVALID_SESSION_ID: i64 = -32001;
    pub const SESSION_NOT_FOUND: i64 = -32002;
    pub const FRAME_TOO_LARGE: i64 = -32003;
    pub const SESSION_QUARANTINED: i64 = -32005;
    pub const SESSION_EXISTS: i64 = -32016;
    pub const SESSION_GONE: i64 = -32017;
}

/// Path of the `dstream` binary: `$DSTREAM_BIN`, else `<target>/<profile>/dstream` next to the
/// directory holding the running test executable (`<target>/<profile>/deps/`).
pub fn daemon_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("DSTREAM_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "DSTREAM_BIN={} is not a file", p.display());
        return p;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe
        .parent()
        .expect("test executable has a parent dir")
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let bin = dir.join(format!("dstream{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "the dstream binary was not found at {}; run `cargo build -p dstream-daemon` first \
         (or set DSTREAM_BIN to its path)",
        bin.display()
    );
    static FRESH: std::sync::Once = std::sync::Once::new();
    FRESH.call_once(|| assert_not_stale(&bin));
    bin
}

/// Path of the lean hook binary, `dstream-hook` (what `dstream install claude-code` points hooks
/// at when it sits next to `dstream`): `$DSTREAM_HOOK_BIN`, else the one beside
/// [`daemon_bin`].
pub fn hook_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("DSTREAM_HOOK_BIN") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "DSTREAM_HOOK_BIN={} is not a file",
            p.display()
        );
        return p;
    }
    let daemon = daemon_bin();
    let bin = daemon.with_file_name(format!("dstream-hook{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "the dstream-hook binary was not found at {}; run `cargo build -p dstream-daemon` first \
         (or set DSTREAM_HOOK_BIN to its path)",
        bin.display()
    );
    static FRESH: std::sync::Once = std::sync::Once::new();
    FRESH.call_once(|| assert_not_stale(&bin));
    bin
}

/// The two ways a hook runs: `dstream hook claude-code`, and the lean binary
/// `dstream-hook claude-code` that `install` prefers. Both must behave the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookForm {
    /// `dstream hook claude-code`
    Cli,
    /// `dstream-hook claude-code`
    Lean,
}

impl HookForm {
    pub const BOTH: [HookForm; 2] = [HookForm::Cli, HookForm::Lean];

    /// The form the tests run hooks in unless they ask for one: `DSTREAM_TEST_HOOK=lean` (or
    /// `cli`, the default) runs the whole suite's hooks through that binary.
    pub fn chosen() -> HookForm {
        match std::env::var("DSTREAM_TEST_HOOK").as_deref() {
            Ok("lean") => HookForm::Lean,
            Ok("cli") | Ok("") | Err(_) => HookForm::Cli,
            Ok(other) => panic!("DSTREAM_TEST_HOOK={other:?}: expected `lean` or `cli`"),
        }
    }

    /// A command running the hook for Claude Code in this form, before any further arguments.
    pub fn command(self) -> Command {
        match self {
            HookForm::Cli => {
                let mut cmd = Command::new(daemon_bin());
                cmd.args(["hook", "claude-code"]);
                cmd
            }
            HookForm::Lean => {
                let mut cmd = Command::new(hook_bin());
                cmd.arg("claude-code");
                cmd
            }
        }
    }
}

/// `<hook> claude-code` in the form the suite runs hooks in ([`HookForm::chosen`]).
pub fn hook_command() -> Command {
    HookForm::chosen().command()
}

/// `cargo test -p dstream-tests` does not rebuild the `dstream` binary (only `cargo test
/// --workspace` does): a binary older than the daemon's sources would test old code and pass
/// or fail for the wrong reason. Say so instead.
fn assert_not_stale(bin: &Path) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let built = fs::metadata(bin).and_then(|m| m.modified()).ok();
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    // What the binary is built from: the two crates' sources and the files it embeds.
    let mut stack: Vec<PathBuf> = [
        "daemon/src",
        "sdk/src",
        "config.toml",
        "scripts/opencode/dstream.js",
    ]
    .iter()
    .map(|p| repo.join(p))
    .collect();
    stack.extend(
        fs::read_dir(repo.join("plugins"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "lua")),
    );
    while let Some(p) = stack.pop() {
        let Ok(meta) = fs::metadata(&p) else { continue };
        if meta.is_dir() {
            stack.extend(
                fs::read_dir(&p)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
        } else if let Ok(t) = meta.modified()
            && newest.as_ref().is_none_or(|(n, _)| t > *n)
        {
            newest = Some((t, p));
        }
    }
    if let (Some(built), Some((changed, file))) = (built, newest) {
        assert!(
            changed <= built,
            "{} is older than {}: run `cargo build -p dstream-daemon` (or `cargo test \
             --workspace`, which builds it) so the tests run the code you changed",
            bin.display(),
            file.display()
        );
    }
}

/// A Claude Code `PreToolUse` hook event for a Bash `command`, as the agent sends it.
pub fn claude_pre_tool_use(session: &str, call: &str, command: &str) -> Value {
    json!({
        "session_id": session,
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/tmp/project",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "test"},
        "tool_use_id": call,
    })
}

/// Runs an installed hook command the way Claude Code runs it (through `sh -c`), as a client
/// of the daemon at `socket`, with a Bash PreToolUse on stdin; what it printed, parsed (it must
/// exit 0).
pub fn run_installed_pre_tool_use(command: &str, socket: &Path) -> Value {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .envs(client_env(socket))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"hook_event_name":"PreToolUse","session_id":"s","tool_name":"Bash","tool_input":{}}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `program args` as a person in another terminal would: not as a descendant of this
/// test process, which the daemon may know as an agent (it ran hooks) and whose children's
/// checkpoint decisions it refuses. The program is started by a shell that exits at once, so
/// it belongs to init; its output is collected through files.
pub fn run_detached(program: &Path, args: &[&std::ffi::OsStr]) -> std::process::Output {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err, rc) = (
        dir.path().join("out"),
        dir.path().join("err"),
        dir.path().join("rc"),
    );
    let script = r#"( "$0" "$@" >"$DS_OUT" 2>"$DS_ERR" </dev/null; echo $? >"$DS_RC.tmp"; mv "$DS_RC.tmp" "$DS_RC" ) &"#;
    let status = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(program)
        .args(args)
        .env("DS_OUT", &out)
        .env("DS_ERR", &err)
        .env("DS_RC", &rc)
        .status()
        .expect("run sh");
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Ok(text) = fs::read_to_string(&rc) {
            break text.trim().parse::<i32>().expect("exit code");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} did not finish",
            program.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    std::process::Output {
        status: std::process::ExitStatus::from_raw(code << 8),
        stdout: fs::read(&out).unwrap_or_default(),
        stderr: fs::read(&err).unwrap_or_default(),
    }
}

/// The data directory that goes with `socket` in these tests: a [`Daemon`]'s
/// (`<dir>/run/dstream.sock` → `<dir>/data`), else a folder `data` beside the socket.
pub fn data_dir_for(socket: &Path) -> PathBuf {
    let parent = socket.parent().expect("a socket path has a folder");
    match parent.file_name() {
        Some(name) if name == "run" => parent.parent().unwrap_or(parent).join("data"),
        _ => parent.join("data"),
    }
}

/// The environment of a hook, or of an agent whose hooks run dstream, talking to `socket` in
/// a test: the socket, autostart off (a test's hook never starts a daemon it did not ask for;
/// the tests of autostart turn it on), and the spool in the test's own data directory.
pub fn client_env(socket: impl AsRef<Path>) -> [(&'static str, std::ffi::OsString); 3] {
    let socket = socket.as_ref();
    [
        ("DSTREAM_SOCKET", socket.as_os_str().to_owned()),
        ("DSTREAM_AUTOSTART", "0".into()),
        ("DSTREAM_DATA_DIR", data_dir_for(socket).into_os_string()),
    ]
}

/// `dstream hook claude-code` against the daemon at `socket`, with `event` on stdin, left
/// running (it may wait for a checkpoint).
pub fn spawn_hook(socket: &Path, event: &Value) -> Child {
    spawn_hook_raw(socket, event.to_string().as_bytes(), &[])
}

/// [`spawn_hook`] with `stdin` as raw bytes (what JSON values cannot hold) and extra
/// environment variables.
pub fn spawn_hook_raw(socket: &Path, stdin: &[u8], env: &[(&str, &str)]) -> Child {
    let mut child = hook_command()
        .envs(client_env(socket))
        .env_remove("DSTREAM_HOOK_FAIL_CLOSED")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dstream hook");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).unwrap();
    drop(input);
    child
}

/// Builds a C plugin (`src`, relative to the repository) into the shared library `out` with
/// the system compiler against `plugins/include`, with extra `cc` arguments; moved into place
/// in one step, as an install would, so a daemon never loads half a file.
pub fn build_c_plugin(src: &str, out: &Path, extra: &[&str]) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let tmp = out.with_extension("building");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-I"])
        .arg(repo.join("plugins/include"))
        .args(extra)
        .arg("-o")
        .arg(&tmp)
        .arg(repo.join(src))
        .status()
        .expect("a C compiler (cc) builds the example plugins");
    assert!(status.success(), "cc {src} failed");
    fs::rename(&tmp, out).unwrap();
}

/// The directory holding `libdstream_ffi.so`, for the C and Node tests.
///
/// `cargo test` builds dstream-ffi only as an rlib (what Rust dependents link), so on a fresh
/// checkout the C library is not there yet: it is then built once, with `cargo build -p
/// dstream-ffi --lib`, into a target directory of its own (the running `cargo test` holds the
/// lock on the main one). `$DSTREAM_FFI_LIB_DIR` points at a prebuilt one instead.
pub fn ffi_lib_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("DSTREAM_FFI_LIB_DIR") {
            return PathBuf::from(dir);
        }
        let profile_dir = daemon_bin().parent().expect("profile dir").to_path_buf();
        if profile_dir.join("libdstream_ffi.so").is_file() {
            return profile_dir;
        }
        let target = profile_dir.parent().expect("target dir").join("ffi-lib");
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("repo")
            .join("Cargo.toml");
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "build",
                "--quiet",
                "-p",
                "dstream-ffi",
                "--lib",
                "--manifest-path",
            ])
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", &target)
            .status()
            .expect("run cargo build -p dstream-ffi");
        assert!(status.success(), "cargo build -p dstream-ffi failed");
        let dir = target.join("debug");
        assert!(
            dir.join("libdstream_ffi.so").is_file(),
            "libdstream_ffi.so not found in {} after building it",
            dir.display()
        );
        dir
    })
    .clone()
}

/// Milliseconds since the Unix epoch, by the test's clock.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A JSON-RPC error as received.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error {}: {}", self.code, self.message)?;
        if let Some(d) = &self.data {
            write!(f, " (data: {d})")?;
        }
        Ok(())
    }
}

impl RpcError {
    fn from_value(v: &Value) -> RpcError {
        RpcError {
            code: v["code"]
                .as_i64()
                .unwrap_or_else(|| panic!("error object without integer code: {v}")),
            message: v["message"].as_str().unwrap_or_default().to_string(),
            data: v.get("data").cloned(),
        }
    }
}

/// A running (or stopped) daemon with its own temporary directory:
/// `<tmp>/run/dstream.sock`, `<tmp>/data`, `<tmp>/config.toml`, `<tmp>/daemon.stderr`.
pub struct Daemon {
    tmp: tempfile::TempDir,
    child: Option<Child>,
    config: Option<PathBuf>,
    starts: u32,
    /// Open-file limit (soft and hard) the daemon runs under, when set.
    nofile: Option<u64>,
    /// Extra environment variables of the daemon (from its next start on).
    envs: Vec<(String, String)>,
}

impl Daemon {
    /// A daemon with the default configuration (no `--config`).
    pub fn start() -> Daemon {
        Daemon::start_with_config(None)
    }

    /// A daemon with this TOML written to `<tmp>/config.toml` and passed as `--config`.
    pub fn start_with(config_toml: &str) -> Daemon {
        Daemon::start_with_config(Some(config_toml))
    }

    fn start_with_config(config_toml: Option<&str>) -> Daemon {
        let mut d = Daemon::new(config_toml);
        d.restart();
        d
    }

    /// Prepare the directories without starting anything.
    pub fn new(config_toml: Option<&str>) -> Daemon {
        let tmp = tempfile::Builder::new()
            .prefix("dstream-e2e-")
            .tempdir()
            .expect("tempdir");
        let config = config_toml.map(|c| {
            let p = tmp.path().join("config.toml");
            fs::write(&p, c).expect("write config");
            p
        });
        Daemon {
            tmp,
            child: None,
            config,
            starts: 0,
            nofile: None,
            envs: Vec::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }
    pub fn socket(&self) -> PathBuf {
        self.tmp.path().join("run").join("dstream.sock")
    }
    pub fn data_dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }
    pub fn sessions_dir(&self) -> PathBuf {
        self.data_dir().join("sessions")
    }
    pub fn quarantine_dir(&self) -> PathBuf {
        self.data_dir().join("quarantine")
    }
    pub fn log_path(&self, session: &str) -> PathBuf {
        self.sessions_dir().join(format!("{session}.jsonl"))
    }
    /// The daemon's plugin folder (its default: `$XDG_CONFIG_HOME/dstream/plugins`).
    pub fn plugin_dir(&self) -> PathBuf {
        self.tmp.path().join("config/dstream/plugins")
    }
    pub fn config_path(&self) -> Option<&Path> {
        self.config.as_deref()
    }
    pub fn stderr_path(&self) -> PathBuf {
        self.tmp.path().join("daemon.stderr")
    }
    /// Everything the daemon(s) of this directory wrote to stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(self.stderr_path()).unwrap_or_default()
    }
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon is not running").id()
    }
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Runs the daemon (from its next start on) with at most `n` open files: soft and hard
    /// limit, so that it cannot raise its own.
    pub fn limit_open_files(&mut self, n: u64) {
        self.nofile = Some(n);
    }

    /// Sets an environment variable of the daemon, from its next start on.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.envs.push((key.to_string(), value.to_string()));
    }

    /// The command line that starts a daemon on this directory's socket and data dir.
    pub fn command(&self) -> Command {
        let mut cmd = self.command_for(&self.socket(), &self.data_dir(), self.config.as_deref());
        cmd.envs(self.envs.iter().map(|(k, v)| (k, v)));
        if let Some(n) = self.nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe and touches only the child.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: n as libc::rlim_t,
                        rlim_max: n as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd
    }

    /// A field of the daemon's `/proc/<pid>/status` (e.g. `Threads`), as a number.
    pub fn proc_status(&self, field: &str) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc status"))
    }

    /// The names of the daemon's threads now (`/proc/<pid>/task/*/comm`, at most 15 bytes).
    pub fn thread_names(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(format!("/proc/{}/task", self.pid()))
            .unwrap()
            .flatten()
            // A thread may end between the listing and the read.
            .filter_map(|t| fs::read_to_string(t.path().join("comm")).ok())
            .map(|n| n.trim_end().to_string())
            .collect();
        names.sort();
        names
    }

    /// How many descriptors the daemon has open now.
    pub fn open_fds(&self) -> usize {
        fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .unwrap()
            .count()
    }

    /// A daemon command with explicit paths (for the "second daemon" tests); stderr appended
    /// to `<tmp>/daemon.stderr` like the main one.
    pub fn command_for(&self, socket: &Path, data_dir: &Path, config: Option<&Path>) -> Command {
        let mut cmd = Command::new(daemon_bin());
        cmd.arg("daemon")
            .arg("--socket")
            .arg(socket)
            .arg("--data-dir")
            .arg(data_dir);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        // No HTTP listener unless the test's configuration asks for one: many test daemons
        // run at once, and the default port is the user's.
        let wants_http = config
            .and_then(|c| fs::read_to_string(c).ok())
            .is_some_and(|text| text.contains("[http]"));
        if !wants_http {
            cmd.args(["--http-listen", "off"]);
        }
        let log = |name: &str| {
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.tmp.path().join(name))
                .expect("open daemon log file")
        };
        // The default plugin folder, inside the test's directory.
        cmd.env("RUST_LOG", "warn")
            .env("XDG_CONFIG_HOME", self.tmp.path().join("config"))
            .env_remove("DSTREAM_SOCKET")
            .env_remove("DSTREAM_DATA_DIR")
            .env_remove("DSTREAM_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log("daemon.stdout")))
            .stderr(Stdio::from(log("daemon.stderr")));
        cmd
    }

    /// `dstream ARGS --socket <this daemon's socket>`, with no stdin and no autostart, run to
    /// its end.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(daemon_bin())
            .args(args)
            .arg("--socket")
            .arg(self.socket())
            .env("DSTREAM_AUTOSTART", "0")
            .stdin(Stdio::null())
            .output()
            .expect("run dstream")
    }

    /// `dstream ARGS --socket <this daemon's socket>` as a person runs it from another
    /// terminal ([`run_detached`]): a test that ran hooks is an agent to the daemon, which
    /// refuses its children's decisions.
    pub fn cli_as_person(&self, args: &[&str]) -> std::process::Output {
        let socket = self.socket();
        let mut all: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        all.push("--socket".as_ref());
        all.push(socket.as_os_str());
        run_detached(&daemon_bin(), &all)
    }

    /// Appends `lines` (one JSON event per line) to `session` through `dstream append`: one
    /// streaming client, pipelined, so many events go in fast.
    pub fn append_lines(&self, session: &str, lines: &str) {
        let mut child = Command::new(daemon_bin())
            .args(["append", "--session", session, "--socket"])
            .arg(self.socket())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dstream append");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(lines.as_bytes()).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "dstream append failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Start (again) on the same directories and wait until it is ready.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "daemon already running");
        self.starts += 1;
        {
            let mut f = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.stderr_path())
                .unwrap();
            let _ = writeln!(f, "---- test harness: start #{} ----", self.starts);
        }
        let child = self.command().spawn().expect("spawn dstream daemon");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        let socket = self.socket();
        let mut last_err;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().expect("try_wait") {
                self.child = None;
                panic!(
                    "dstream daemon exited before becoming ready ({status}); stderr:\n{}",
                    self.stderr()
                );
            }
            match Client::connect_timeout(&socket, Duration::from_secs(2)) {
                Ok(mut c) => match c.try_call("hello", json!({})) {
                    Ok(Ok(_)) => {
                        // Closed and gone before returning, so that `stats.connections` counts
                        // only the test's own clients from here on.
                        c.close_and_wait(Instant::now() + CALL_TIMEOUT);
                        return;
                    }
                    Ok(Err(e)) => last_err = format!("hello failed: {e}"),
                    Err(e) => last_err = format!("hello: {e}"),
                },
                Err(e) => last_err = format!("connect: {e}"),
            }
            if Instant::now() >= deadline {
                panic!(
                    "dstream daemon not ready after {:?} (last: {last_err}); stderr:\n{}",
                    READY_TIMEOUT,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// A new client connection.
    pub fn client(&self) -> Client {
        Client::connect(&self.socket())
    }

    /// Send a signal to the running daemon.
    pub fn signal(&self, sig: libc::c_int) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: plain kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(
            rc,
            0,
            "kill({pid}, {sig}) failed: {}",
            io::Error::last_os_error()
        );
    }

    /// Wait for the daemon to exit (bounded); panics if it does not.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("daemon is not running");
        match wait_child(&mut child, timeout) {
            Some(status) => status,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "dstream daemon did not exit within {timeout:?}; stderr:\n{}",
                    self.stderr()
                )
            }
        }
    }

    /// SIGTERM and wait for the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit(EXIT_TIMEOUT)
    }

    /// SIGKILL (no chance to clean up) and reap.
    pub fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        self.wait_exit(EXIT_TIMEOUT);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::env::var_os("DSTREAM_KEEP_TMP").is_some() {
            let kept = std::mem::replace(&mut self.tmp, tempfile::TempDir::new().unwrap()).keep();
            eprintln!("DSTREAM_KEEP_TMP: kept {}", kept.display());
        }
        if std::thread::panicking() {
            eprintln!(
                "---- dstream stderr ({}) ----\n{}",
                self.stderr_path().display(),
                tail(&self.stderr(), 8000)
            );
        }
    }
}

fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Wait (polling) for a child to exit; `None` on timeout.
pub fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return Some(s);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Run a command that is expected to exit by itself (e.g. a refused start); kills it and panics
/// if it is still running after `timeout`.
pub fn run_expect_exit(mut cmd: Command, timeout: Duration) -> ExitStatus {
    let mut child = cmd.spawn().expect("spawn");
    match wait_child(&mut child, timeout) {
        Some(s) => s,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process {cmd:?} was still running after {timeout:?}; expected it to exit");
        }
    }
}

/// Runs `cmd` to its end with its output collected on threads (so a full pipe never blocks
/// it), killing it and failing the test if it has not exited within `timeout`. Stdin is null
/// unless `cmd` set it.
pub fn output_within(cmd: &mut Command, timeout: Duration) -> std::process::Output {
    let mut child = Watched::spawn(cmd);
    let status = child.wait(timeout);
    let (stdout, stderr) = child.finish();
    std::process::Output {
        status,
        stdout,
        stderr,
    }
}

/// A child whose stdout arrives line by line on a channel and whose stderr is collected on a
/// thread, so every wait on it has a deadline. Killed (and reaped) when dropped, so a failing
/// test leaves no process behind.
pub struct Watched {
    child: Child,
    what: String,
    lines: std::sync::mpsc::Receiver<Vec<u8>>,
    /// Every stdout line received so far (each with its `\n`, if it had one).
    stdout: Vec<u8>,
    /// All of stderr, sent once it ends.
    stderr: std::sync::mpsc::Receiver<Vec<u8>>,
}

impl Watched {
    /// Spawns `cmd` with stdout and stderr piped (stdin null unless `cmd` set it).
    pub fn spawn(cmd: &mut Command) -> Watched {
        let what = format!("{cmd:?}");
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            loop {
                let mut line = Vec::new();
                match out.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) if tx.send(line).is_err() => return,
                    Ok(_) => {}
                }
            }
        });
        let mut err = child.stderr.take().unwrap();
        let (tx, stderr) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = io::Read::read_to_end(&mut err, &mut b);
            let _ = tx.send(b);
        });
        Watched {
            child,
            what,
            lines,
            stdout: Vec::new(),
            stderr,
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The next line of stdout (without its `\n`); kills the child and fails the test if none
    /// comes within `timeout` or stdout ends first.
    pub fn next_line(&mut self, timeout: Duration) -> String {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                self.stdout.extend_from_slice(&line);
                String::from_utf8_lossy(&line)
                    .trim_end_matches('\n')
                    .to_string()
            }
            Err(e) => {
                let why = match e {
                    std::sync::mpsc::RecvTimeoutError::Timeout => {
                        format!("printed no line within {timeout:?}")
                    }
                    std::sync::mpsc::RecvTimeoutError::Disconnected => {
                        "closed its stdout before the line".to_string()
                    }
                };
                self.fail(&why)
            }
        }
    }

    /// Waits for the child to exit; kills it and fails the test if it has not within `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        match wait_child(&mut self.child, timeout) {
            Some(status) => status,
            None => self.fail(&format!("was still running after {timeout:?}")),
        }
    }

    /// Whether the child has exited (without waiting).
    pub fn has_exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// Stdout and stderr in full, once the child has exited (see [`Watched::wait`]). Fails
    /// the test if its pipes stay open much longer (a process it left behind holds them).
    pub fn finish(mut self) -> (Vec<u8>, Vec<u8>) {
        let (stdout, stderr, ended) = self.drain(Instant::now() + EXIT_TIMEOUT);
        if !ended {
            panic!(
                "the output of {} did not end after it exited; stdout:\n{}\nstderr:\n{}",
                self.what,
                String::from_utf8_lossy(&stdout),
                String::from_utf8_lossy(&stderr)
            );
        }
        (stdout, stderr)
    }

    /// What is left of stdout and stderr, read until both end or `deadline`; whether both
    /// ended.
    fn drain(&mut self, deadline: Instant) -> (Vec<u8>, Vec<u8>, bool) {
        use std::sync::mpsc::RecvTimeoutError::Timeout;
        let mut stdout = std::mem::take(&mut self.stdout);
        let mut ended = true;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => stdout.extend(line),
                Err(e) => {
                    ended &= e != Timeout;
                    break;
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let stderr = self.stderr.recv_timeout(left).unwrap_or_else(|e| {
            ended &= e != Timeout;
            Vec::new()
        });
        (stdout, stderr, ended)
    }

    fn fail(&mut self, why: &str) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (stdout, stderr, _) = self.drain(Instant::now() + Duration::from_secs(2));
        panic!(
            "{} {why}; stdout:\n{}\nstderr:\n{}",
            self.what,
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        )
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Copies the executable `from` to `to` (mode 0755) with `cp`, in a child process. A copy
/// written by this process cannot be run until every child that another test thread forked
/// meanwhile has exec'd: such a child holds the copy's write descriptor, and running the copy
/// then fails with "Text file busy" (ETXTBSY). Once `cp` has exited, no process holds one.
pub fn copy_executable(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .status()
        .expect("run cp");
    assert!(status.success(), "cp {} {}", from.display(), to.display());
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(to, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Where skipped tests are recorded: `<target>/dstream-tests-skipped.txt`, next to the
/// profile directories (`<target>/<profile>/deps/<test binary>` is the running test).
pub fn skip_log() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let target = exe
        .ancestors()
        .find(|d| d.file_name().is_some_and(|n| n == "deps"))
        .and_then(|deps| deps.parent()?.parent())
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    target.join("dstream-tests-skipped.txt")
}

/// Says that `test` did not run because of `why`, where it cannot be missed: a `SKIP:` line on
/// stderr and a line appended to [`skip_log`], so a skip is never a silent pass. The caller
/// returns right after. Conditions known before the run use `#[ignore = "…"]` instead.
pub fn skip(test: &str, why: &str) {
    let line = format!("SKIP: {test}: {why}");
    // Straight to the stderr descriptor: the test harness captures `eprintln!` of a test that
    // passes, and a skip passes.
    let _ = writeln!(io::stderr(), "{line}");
    let binary = std::env::current_exe()
        .ok()
        .and_then(|e| e.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let log = skip_log();
    let written = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| writeln!(f, "{} {binary} {line}", now_ms()));
    if let Err(e) = written {
        eprintln!("(could not record the skip in {}: {e})", log.display());
    }
}

/// A blocking JSON-line client over a Unix socket with deadlines on every read.
pub struct Client {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    /// Bytes of a frame not yet terminated by `\n` (kept across read timeouts).
    partial: Vec<u8>,
    next_id: u64,
    notifications: VecDeque<Value>,
    responses: HashMap<String, Value>,
    /// Responses to requests whose id was unreadable (id null), in arrival order.
    null_id_responses: VecDeque<Value>,
    pub timeout: Duration,
}

/// Why reading a frame failed.
#[derive(Debug)]
pub enum ReadError {
    Timeout,
    Closed,
    Io(io::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Timeout => write!(f, "timed out waiting for a frame"),
            ReadError::Closed => write!(f, "connection closed by the daemon"),
            ReadError::Io(e) => write!(f, "i/o error: {e}"),
        }
    }
}

impl Client {
    /// The first pending checkpoint of `session`, once it shows (its hook is on its way).
    pub fn pending_in(&mut self, session: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let list = self.ok(
                "checkpoint.list",
                json!({"state": "pending", "session_id": session}),
            );
            if let Some(first) = list["checkpoints"].as_array().and_then(|a| a.first()) {
                return first.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no pending checkpoint in {session}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn connect(socket: &Path) -> Client {
        Client::connect_timeout(socket, CALL_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect to {}: {e}", socket.display()))
    }

    pub fn connect_timeout(socket: &Path, timeout: Duration) -> io::Result<Client> {
        let stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(Duration::from_millis(100)))?;
        stream.set_write_timeout(Some(Duration::from_secs(30)))?;
        let reader = BufReader::with_capacity(256 * 1024, stream.try_clone()?);
        Ok(Client {
            writer: stream,
            reader,
            partial: Vec::new(),
            next_id: 1,
            notifications: VecDeque::new(),
            responses: HashMap::new(),
            null_id_responses: VecDeque::new(),
            timeout,
        })
    }

    /// Ends this connection and waits until the daemon has closed its side: the daemon closes
    /// it once it has dropped the connection (and its count in `stats.connections`). Panics if
    /// that does not happen by `deadline`.
    pub fn close_and_wait(mut self, deadline: Instant) {
        let _ = self.writer.shutdown(std::net::Shutdown::Write);
        loop {
            match self.read_frame_until(deadline) {
                Ok(_) => {}
                Err(ReadError::Closed) => return,
                Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => return,
                Err(e) => panic!("waiting for the daemon to close a connection: {e}"),
            }
        }
    }

    /// Write raw bytes (nothing added).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.try_send_raw(bytes)
            .unwrap_or_else(|e| panic!("write to daemon: {e}"));
    }

    pub fn try_send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes)?;
        self.writer.flush()
    }

    /// Send a request without waiting; returns its id (for pipelining).
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        self.try_send(method, params)
            .unwrap_or_else(|e| panic!("write to daemon: {e}"))
    }

    pub fn try_send(&mut self, method: &str, params: Value) -> io::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .unwrap();
        line.push(b'\n');
        self.try_send_raw(&line)?;
        Ok(id)
    }

    /// Read the next frame from the socket (whatever it is), waiting at most until `deadline`.
    /// Panics if the daemon sends something that is not a JSON object line.
    pub fn read_frame_until(&mut self, deadline: Instant) -> Result<Value, ReadError> {
        loop {
            match self.reader.read_until(b'\n', &mut self.partial) {
                Ok(0) => return Err(ReadError::Closed),
                Ok(_) => {
                    if self.partial.last() != Some(&b'\n') {
                        // EOF in the middle of a frame.
                        return Err(ReadError::Closed);
                    }
                    let line = std::mem::take(&mut self.partial);
                    let v: Value = serde_json::from_slice(&line).unwrap_or_else(|e| {
                        panic!(
                            "daemon sent a frame that is not JSON ({e}): {:?}",
                            String::from_utf8_lossy(&line)
                        )
                    });
                    assert!(v.is_object(), "daemon sent a non-object frame: {v}");
                    assert_eq!(v["jsonrpc"], "2.0", "frame without jsonrpc 2.0: {v}");
                    return Ok(v);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    if Instant::now() >= deadline {
                        return Err(ReadError::Timeout);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(ReadError::Closed);
                }
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }

    /// Read one frame and file it: notifications and responses go to their queues.
    fn pump(&mut self, deadline: Instant) -> Result<(), ReadError> {
        let v = self.read_frame_until(deadline)?;
        if v.get("method").is_some() && v.get("id").is_none() {
            self.notifications.push_back(v);
        } else {
            let id = v.get("id").cloned().unwrap_or(Value::Null);
            assert!(
                v.get("result").is_some() != v.get("error").is_some(),
                "response must have exactly one of result/error: {v}"
            );
            if id.is_null() {
                self.null_id_responses.push_back(v);
            } else {
                let key = id.to_string();
                assert!(
                    !self.responses.contains_key(&key),
                    "two responses with id {key}"
                );
                self.responses.insert(key, v);
            }
        }
        Ok(())
    }

    /// Wait for the full response frame with this id.
    pub fn try_response_frame(&mut self, id: &Value) -> Result<Value, ReadError> {
        let deadline = Instant::now() + self.timeout;
        let key = id.to_string();
        loop {
            if let Some(v) = self.responses.remove(&key) {
                return Ok(v);
            }
            self.pump(deadline)?;
        }
    }

    /// Wait for the response to request `id`: its result or its error.
    pub fn try_wait_response(&mut self, id: u64) -> Result<Result<Value, RpcError>, ReadError> {
        let frame = self.try_response_frame(&json!(id))?;
        Ok(split_response(&frame))
    }

    pub fn wait_response(&mut self, id: u64) -> Result<Value, RpcError> {
        self.try_wait_response(id)
            .unwrap_or_else(|e| panic!("waiting for the response to request {id}: {e}"))
    }

    /// Wait for the next response with `id: null` (answer to a frame whose id was unreadable).
    pub fn null_id_response(&mut self) -> Value {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(v) = self.null_id_responses.pop_front() {
                return v;
            }
            if let Err(e) = self.pump(deadline) {
                panic!(
                    "waiting for a response with id null: {e} (responses with ids received: {:?})",
                    self.responses.values().collect::<Vec<_>>()
                );
            }
        }
    }

    /// Wait for the next response of any id (null or not). Useful after raw frames.
    pub fn any_response(&mut self) -> Value {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(v) = self.null_id_responses.pop_front() {
                return v;
            }
            if let Some(k) = self.responses.keys().next().cloned() {
                return self.responses.remove(&k).unwrap();
            }
            if let Err(e) = self.pump(deadline) {
                panic!("waiting for any response: {e}");
            }
        }
    }

    /// Call and wait; outer error = transport problem, inner = JSON-RPC error.
    pub fn try_call(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<Result<Value, RpcError>, ReadError> {
        let id = self.try_send(method, params).map_err(ReadError::Io)?;
        self.try_wait_response(id)
    }

    /// Call and wait; panics on transport problems; returns the JSON-RPC result or error.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.send(method, params.clone());
        self.try_wait_response(id)
            .unwrap_or_else(|e| panic!("{method} {params}: {e}"))
    }

    /// Call and expect success.
    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        match self.call(method, params.clone()) {
            Ok(v) => v,
            Err(e) => panic!("{method} {params} failed: {e}"),
        }
    }

    /// Call and expect a JSON-RPC error.
    pub fn err(&mut self, method: &str, params: Value) -> RpcError {
        match self.call(method, params.clone()) {
            Ok(v) => panic!("{method} {params} succeeded with {v}; expected an error"),
            Err(e) => e,
        }
    }

    /// Next notification (any subscription), waiting at most `timeout`.
    pub fn next_notification(&mut self, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.notifications.pop_front() {
                return Some(v);
            }
            match self.pump(deadline) {
                Ok(()) => {}
                Err(ReadError::Timeout) => return None,
                Err(e) => panic!("waiting for a notification: {e}"),
            }
        }
    }

    /// Notifications already received (without reading the socket).
    pub fn drain_buffered_notifications(&mut self) -> Vec<Value> {
        self.notifications.drain(..).collect()
    }

    /// `append` with a type and payload; returns (lsn, id).
    pub fn append(&mut self, session: &str, ty: &str, payload: Value) -> (u64, String) {
        let r = self.ok(
            "append",
            json!({"session_id": session, "event": {"type": ty, "payload": payload}}),
        );
        lsn_id(&r)
    }

    /// `append` with a full event object.
    pub fn append_event(&mut self, session: &str, event: Value) -> (u64, String) {
        let r = self.ok("append", json!({"session_id": session, "event": event}));
        lsn_id(&r)
    }

    /// All events of a session via repeated `read` (following `next_lsn`).
    pub fn read_all(&mut self, session: &str) -> Vec<Value> {
        self.read_from(session, 1)
    }

    pub fn read_from(&mut self, session: &str, from: u64) -> Vec<Value> {
        let mut out = Vec::new();
        let mut from = from;
        for _ in 0..100_000 {
            let r = self.ok("read", json!({"session_id": session, "from_lsn": from}));
            let events = r["events"]
                .as_array()
                .unwrap_or_else(|| panic!("read without events: {r}"));
            out.extend(events.iter().cloned());
            let next = r["next_lsn"]
                .as_u64()
                .unwrap_or_else(|| panic!("read without next_lsn: {r}"));
            if r["up_to_date"] == json!(true) {
                return out;
            }
            assert!(
                next > from,
                "read made no progress: from_lsn {from} -> next_lsn {next}"
            );
            from = next;
        }
        panic!("read_all did not finish");
    }
}

/// Split a response frame into its result or error.
pub fn split_response(frame: &Value) -> Result<Value, RpcError> {
    if let Some(e) = frame.get("error") {
        Err(RpcError::from_value(e))
    } else {
        Ok(frame["result"].clone())
    }
}

/// (lsn, id) of an `append` result.
pub fn lsn_id(r: &Value) -> (u64, String) {
    let lsn = r["lsn"]
        .as_u64()
        .unwrap_or_else(|| panic!("append result without lsn: {r}"));
    let id = r["id"]
        .as_str()
        .unwrap_or_else(|| panic!("append result without id: {r}"))
        .to_string();
    (lsn, id)
}

/// The LSN of an event object.
pub fn lsn_of(ev: &Value) -> u64 {
    ev["lsn"]
        .as_u64()
        .unwrap_or_else(|| panic!("event without lsn: {ev}"))
}

/// True for a 26-character Crockford base32 ULID.
pub fn is_ulid(s: &str) -> bool {
    s.len() == 26
        && s.bytes()
            .all(|b| b"0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(&b.to_ascii_uppercase()))
        && s.as_bytes()[0] <= b'7'
}

/// Assert the LSNs of `events` are exactly `first, first+1, …`.
pub fn assert_contiguous(events: &[Value], first: u64, what: &str) {
    for (i, ev) in events.iter().enumerate() {
        let want = first + i as u64;
        let got = lsn_of(ev);
        assert_eq!(
            got, want,
            "{what}: event #{i} has lsn {got}, expected {want}"
        );
    }
}

const CRC_MARKER: &[u8] = b",\"crc\":\"";

/// The stored form of one record: `<body>,"crc":"<hex>"}\n` where `body` is a JSON object
/// without its closing brace.
pub fn seal_line(body: &[u8]) -> Vec<u8> {
    let mut line = body.to_vec();
    line.extend_from_slice(CRC_MARKER);
    line.extend_from_slice(format!("{:08x}", crc32c::crc32c(body)).as_bytes());
    line.extend_from_slice(b"\"}\n");
    line
}

/// Check one stored line (without its `\n`): ends with `,"crc":"xxxxxxxx"}`, the CRC32C of the
/// bytes before the marker matches, and the line is a JSON object. Returns the parsed object.
pub fn check_line(line: &[u8]) -> Result<Value, String> {
    let show = || String::from_utf8_lossy(line).into_owned();
    let pos = line
        .windows(CRC_MARKER.len())
        .rposition(|w| w == CRC_MARKER)
        .ok_or_else(|| format!("no crc field: {}", show()))?;
    let rest = &line[pos + CRC_MARKER.len()..];
    if rest.len() != 10 || &rest[8..] != b"\"}" {
        return Err(format!(
            "crc is not the last field as 8 hex digits: {}",
            show()
        ));
    }
    let hex = std::str::from_utf8(&rest[..8]).map_err(|_| format!("crc not ascii: {}", show()))?;
    if !hex
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(format!("crc is not 8 lowercase hex digits: {}", show()));
    }
    let stored = u32::from_str_radix(hex, 16).unwrap();
    let actual = crc32c::crc32c(&line[..pos]);
    if stored != actual {
        return Err(format!(
            "crc mismatch: stored {stored:08x}, computed {actual:08x}: {}",
            show()
        ));
    }
    let v: Value =
        serde_json::from_slice(line).map_err(|e| format!("line is not JSON ({e}): {}", show()))?;
    if !v.is_object() {
        return Err(format!("line is not an object: {}", show()));
    }
    Ok(v)
}

/// Read a session log and check every line (newline-terminated, valid CRC, JSON object).
/// Returns the parsed records.
pub fn verify_log_file(path: &Path) -> Vec<Value> {
    let data = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    if data.is_empty() {
        return Vec::new();
    }
    assert_eq!(
        data.last(),
        Some(&b'\n'),
        "{} does not end with a newline",
        path.display()
    );
    data[..data.len() - 1]
        .split(|b| *b == b'\n')
        .enumerate()
        .map(|(i, line)| {
            check_line(line).unwrap_or_else(|e| panic!("{} line {}: {e}", path.display(), i + 1))
        })
        .collect()
}

/// Byte ranges `[start, end)` of each line (excluding the `\n`) of a file's content.
pub fn line_ranges(data: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in data.iter().enumerate() {
        if *b == b'\n' {
            out.push((start, i));
            start = i + 1;
        }
    }
    if start < data.len() {
        out.push((start, data.len()));
    }
    out
}

/// Every regular file under `dir` (recursively), sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Mode bits (permissions only) of a path.
pub fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Write a file in full (helper for corruption tests).
pub fn write_file(path: &Path, data: &[u8]) {
    let mut f = File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

/// Run `f` on a thread and wait at most `timeout` for it; panics (with the thread's panic
/// message if it panicked) when it does not finish in time.
pub fn with_timeout<T: Send + 'static>(
    what: &str,
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(timeout) {
        Ok(()) => h.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not finish within {timeout:?}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_is_castagnoli() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn sealed_lines_check_and_flipped_bytes_do_not() {
        let line = seal_line(br#"{"lsn":1,"id":"x","payload":{"a":"bcd"}"#);
        assert!(line.ends_with(b"\"}\n"));
        let body = &line[..line.len() - 1];
        assert_eq!(check_line(body).unwrap()["lsn"], 1);
        let mut bad = body.to_vec();
        let pos = bad.iter().position(|b| *b == b'c').unwrap();
        bad[pos] = b'C';
        assert!(check_line(&bad).unwrap_err().contains("crc mismatch"));
        let upper = String::from_utf8(body.to_vec()).unwrap().to_uppercase();
        assert!(check_line(upper.as_bytes()).is_err());
        assert!(check_line(br#"{"crc":"00000000","lsn":1}"#).is_err());
        assert_eq!(line_ranges(b"ab\ncd\nef"), vec![(0, 2), (3, 5), (6, 8)]);
    }

    #[test]
    fn ulid_shape() {
        assert!(is_ulid("01JDQ3V9S6X4M2B1K0ZP7T8W5R"));
        assert!(!is_ulid("01JDQ3V9S6X4M2B1K0ZP7T8W5"));
        assert!(!is_ulid("01JDQ3V9S6X4M2B1K0ZP7T8W5U"));
    }
}
