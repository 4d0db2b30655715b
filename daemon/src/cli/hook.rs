//! `dstream hook <agent>`: the command an agent's hook runs on every event.
//!
//! It reads one hook event (JSON) from stdin, hands it to the daemon with `ingest`, and prints
//! the daemon's verdict in the agent's own reply format. It runs on every tool call, so it is a
//! plain blocking client: no async runtime, one connection, one request. It never holds the
//! agent up for long and never blocks it by accident:
//!
//! - The work (stdin, connect, request, reply) runs on a worker thread while the main thread
//!   keeps the deadlines: [`CONNECT_TIMEOUT`] to connect, `DSTREAM_HOOK_TIMEOUT_MS` for the
//!   whole exchange. When one passes, the hook answers without the daemon and exits; the
//!   worker is simply dropped with the process.
//! - Without the daemon (no socket, refused, an error reply, a deadline) it fails open: it
//!   prints nothing and exits 0, so the agent carries on as if dstream were not installed.
//!   With `--fail-closed` it denies tool calls instead.
//! - It always exits 0. Claude Code treats exit code 2 as "block", which must only ever be a
//!   decision, never an accident.

use dstream_daemon::util::backoff::Backoff;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use dstream_sdk::protocol::{
    Action, CheckpointAwaitParams, CheckpointInfo, CheckpointState, DEFAULT_MAX_FRAME_BYTES,
    Decision, HelloResult, IngestParams, IngestResult, OnTimeout, RpcError, codes, methods,
};
use serde::Serialize;
use serde_json::{Value, json};

/// How long connecting to the daemon's socket may take. A local socket connects at once or
/// fails at once; this only bounds a daemon so swamped that its accept queue is full.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The most `DSTREAM_HOOK_TIMEOUT_MS` may ask for.
const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Default for `DSTREAM_HOOK_TIMEOUT_MS`: how long the whole exchange may take.
const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// How long past a checkpoint's deadline the hook waits for the daemon's verdict before it
/// applies the checkpoint's default itself (the daemon may be restarting).
const CHECKPOINT_GRACE: Duration = Duration::from_secs(5);
/// Pauses between attempts to reach a daemon that went away while a checkpoint was pending.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(1);
/// The most of stdin the hook reads. Anything longer is not parsed (see [`read_input`]).
const MAX_INPUT_BYTES: usize = 64 << 20;
/// The longest reply line the hook accepts from the daemon.
const MAX_REPLY_BYTES: u64 = 64 << 20;
/// Room in a frame for the JSON-RPC envelope around the event.
const ENVELOPE_ROOM: usize = 4096;
/// Events may nest this deep and still be sent as JSON: the daemon takes
/// [`dstream_sdk::event::MAX_NESTING_DEPTH`] levels in an event, and the mapping may place
/// the source event a few levels down.
const MAX_EVENT_DEPTH: usize = dstream_sdk::event::MAX_NESTING_DEPTH - 8;

/// Agents whose hooks `dstream hook` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HookAgent {
    /// Claude Code (settings.json `hooks`; install with `dstream install claude-code`).
    ClaudeCode,
}

impl HookAgent {
    /// The `source` name the daemon's mapping plugins know this agent by.
    fn source(self) -> &'static str {
        match self {
            HookAgent::ClaudeCode => "claude-code",
        }
    }
}

#[derive(Args)]
#[command(after_long_help = HOOK_HELP)]
pub struct HookArgs {
    /// The agent running this hook.
    #[arg(value_enum)]
    agent: HookAgent,
    /// Deny tool calls (PreToolUse, PermissionRequest) when the daemon cannot be reached or
    /// fails, instead of letting them through [env: DSTREAM_HOOK_FAIL_CLOSED=1]
    #[arg(long)]
    fail_closed: bool,
    /// Socket of the daemon [default: $DSTREAM_SOCKET, else $XDG_RUNTIME_DIR/dstream/dstream.sock, else ~/.dstream/dstream.sock]
    #[arg(long)]
    socket: Option<PathBuf>,
}

impl HookArgs {
    /// The plain forms agents run (`hook claude-code [--fail-closed] [--socket PATH]`), read
    /// without clap: building the whole CLI's parser is a measurable part of a hook's
    /// ~2 ms. Anything else (help, typos) returns `None` and goes through clap as usual.
    pub fn from_plain_args(args: &[std::ffi::OsString]) -> Option<HookArgs> {
        let mut it = args.iter();
        if it.next()? != "hook" || it.next()? != "claude-code" {
            return None;
        }
        let mut parsed = HookArgs {
            agent: HookAgent::ClaudeCode,
            fail_closed: false,
            socket: None,
        };
        while let Some(a) = it.next() {
            match a.to_str()? {
                "--fail-closed" if !parsed.fail_closed => parsed.fail_closed = true,
                "--socket" if parsed.socket.is_none() => parsed.socket = Some(it.next()?.into()),
                _ => return None,
            }
        }
        Some(parsed)
    }
}

const HOOK_HELP: &str = "\
Agents run this command, not people: `dstream install claude-code` registers it for every
Claude Code hook event. It reads the event from stdin, stores it through the daemon (`ingest`),
and answers on stdout in Claude Code's format:

  PreToolUse         allow/deny  -> hookSpecificOutput.permissionDecision (+ reason, updatedInput)
  PermissionRequest  allow/deny  -> hookSpecificOutput.decision.behavior (+ updatedInput/message)
  `ask`              the call is held by a dstream checkpoint: the hook waits for the decision
                     (dstream approve|reject|inbox), across daemon restarts, then answers as above
  no decision, any other event -> nothing: Claude Code goes on as it normally would
  remote stop        deny, with `continue: false` (Claude Code ends its turn)

It always exits 0. If the daemon is not running, answers with an error, or takes longer than
the deadline, the hook prints nothing (fails open) unless --fail-closed is given, in which case
it denies tool calls and says why.

Input that is not JSON is sent as a JSON string holding the text (stored, never mapped); an
event too big for one frame has its longest strings cut (marked `[dstream: N bytes cut]`), and
then any `updatedInput` in the reply is ignored, since it was computed from the cut input.

Environment:
  DSTREAM_SOCKET              the daemon's socket (--socket wins)
  DSTREAM_HOOK_TIMEOUT_MS     deadline for the whole exchange, in ms [default: 30000, at most 3600000]
  DSTREAM_HOOK_FAIL_CLOSED=1  same as --fail-closed
  DSTREAM_HOOK_DEBUG=1        one line on stderr about every run (Claude Code shows hook
                              stderr only in its verbose mode)";

/// True when an environment flag is set to something other than empty, `0` or `false`.
fn env_flag(name: &str) -> bool {
    std::env::var(name)
        .map(|v| !matches!(v.trim(), "" | "0" | "false" | "no"))
        .unwrap_or(false)
}

struct Settings {
    source: &'static str,
    socket: PathBuf,
    timeout: Duration,
    fail_closed: bool,
    debug: bool,
}

impl Settings {
    fn new(args: HookArgs) -> (Settings, Option<String>) {
        let mut note = None;
        let timeout_ms = match std::env::var("DSTREAM_HOOK_TIMEOUT_MS") {
            Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
                // A hook that waits forever holds the agent forever: an hour at most.
                Ok(ms) if ms > MAX_TIMEOUT_MS => {
                    note = Some(format!(
                        "DSTREAM_HOOK_TIMEOUT_MS={ms} is more than an hour; using {MAX_TIMEOUT_MS}"
                    ));
                    MAX_TIMEOUT_MS
                }
                Ok(ms) => ms,
                Err(_) => {
                    note = Some(format!(
                        "DSTREAM_HOOK_TIMEOUT_MS={v:?} is not a number of milliseconds; using {DEFAULT_TIMEOUT_MS}"
                    ));
                    DEFAULT_TIMEOUT_MS
                }
            },
            _ => DEFAULT_TIMEOUT_MS,
        };
        let settings = Settings {
            source: args.agent.source(),
            socket: args
                .socket
                .unwrap_or_else(dstream_sdk::socket::default_socket_path),
            timeout: Duration::from_millis(timeout_ms),
            fail_closed: args.fail_closed || env_flag("DSTREAM_HOOK_FAIL_CLOSED"),
            debug: env_flag("DSTREAM_HOOK_DEBUG"),
        };
        (settings, note)
    }
}

/// The hook event as it will be sent, and what the reply needs to know about it.
struct Input {
    event: Value,
    /// `hook_event_name`, which picks the reply format.
    kind: Option<String>,
    /// The agent's session, passed as the `session_id` hint when it is a valid session id.
    session_id: Option<String>,
    /// Set when the event was changed to fit: not JSON, too big, or too deep.
    altered: Option<String>,
}

/// What the worker reports to the main thread, in this order.
enum Step {
    /// stdin was read: the event's kind, for answering without the daemon.
    Input(Option<String>),
    Connected,
    /// The call waits for a person: the deadlines are the checkpoint's from now on.
    Waiting(CheckpointInfo),
    Reply(Result<(IngestResult, bool), Failure>),
}

enum Failure {
    /// No daemon: the socket is missing or nobody listens on it.
    NotRunning(io::Error),
    Io(io::Error),
    Rpc(RpcError),
    BadReply(String),
    Timeout(&'static str),
    /// No verdict on a pending checkpoint reached the hook by its deadline (the daemon was
    /// gone): its default applies.
    Undecided(Box<CheckpointInfo>),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NotRunning(e) => write!(f, "the daemon is not running: {e}"),
            Failure::Io(e) => write!(f, "talking to the daemon failed: {e}"),
            Failure::Rpc(e) => write!(f, "the daemon refused the event: {e}"),
            Failure::BadReply(m) => write!(f, "the daemon's reply was not understood: {m}"),
            Failure::Timeout(what) => write!(f, "timed out {what}"),
            Failure::Undecided(c) => write!(
                f,
                "no decision on checkpoint {} reached the hook by its deadline",
                c.id
            ),
        }
    }
}

pub fn run(args: HookArgs) -> ExitCode {
    let started = Instant::now();
    let (settings, note) = Settings::new(args);
    if let (Some(note), true) = (&note, settings.debug) {
        eprintln!("dstream hook: {note}");
    }
    let (tx, rx) = mpsc::channel();
    let socket = settings.socket.clone();
    let source = settings.source;
    let reply_by_ms =
        dstream_daemon::util::time::now_ms().saturating_add(settings.timeout.as_millis() as u64);
    let spawned = std::thread::Builder::new()
        .name("dstream-hook".into())
        .spawn(move || work(source, socket, reply_by_ms, tx));
    let (kind, outcome) = match spawned {
        Ok(_) => watch(&rx, settings.timeout),
        Err(e) => (None, Err(Failure::Io(e))),
    };
    let (answer, verdict) = answer(kind.as_deref(), &outcome, settings.fail_closed);
    if let Some(answer) = &answer {
        let mut out = io::stdout().lock();
        // Nothing useful is left to do if the agent stopped reading.
        let _ = serde_json::to_writer(&mut out, answer);
        let _ = writeln!(out);
        let _ = out.flush();
    }
    let quiet_failure = matches!(outcome, Err(Failure::NotRunning(_)));
    if settings.debug || (outcome.is_err() && !quiet_failure) {
        let event = kind.as_deref().unwrap_or("unknown event");
        let what = match &outcome {
            Ok(_) => "stored".to_string(),
            Err(e) => e.to_string(),
        };
        eprintln!(
            "dstream hook: {event}: {what}; {verdict} ({} ms)",
            started.elapsed().as_millis()
        );
    }
    ExitCode::SUCCESS
}

/// The main thread's side: waits for the worker's steps, each within its deadline.
fn watch(
    rx: &mpsc::Receiver<Step>,
    timeout: Duration,
) -> (Option<String>, Result<(IngestResult, bool), Failure>) {
    let deadline = Instant::now() + timeout;
    let mut kind = None;
    let mut phase = "reading the event from stdin";
    let mut phase_deadline = deadline;
    let mut waiting = None;
    loop {
        let wait = phase_deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Step::Waiting(checkpoint)) => {
                phase = "waiting for a decision";
                let left =
                    Duration::from_millis(checkpoint.deadline_ms.saturating_sub(crate_now_ms()));
                phase_deadline = Instant::now() + left + CHECKPOINT_GRACE;
                waiting = Some(checkpoint);
            }
            Err(RecvTimeoutError::Timeout) if waiting.is_some() => {
                return (
                    kind,
                    Err(Failure::Undecided(Box::new(waiting.take().expect("set")))),
                );
            }
            Ok(Step::Input(k)) => {
                kind = k;
                phase = "connecting to the daemon";
                phase_deadline = deadline.min(Instant::now() + CONNECT_TIMEOUT);
            }
            Ok(Step::Connected) => {
                phase = "waiting for the daemon's reply";
                phase_deadline = deadline;
            }
            Ok(Step::Reply(r)) => return (kind, r),
            Err(RecvTimeoutError::Timeout) => return (kind, Err(Failure::Timeout(phase))),
            Err(RecvTimeoutError::Disconnected) => {
                return (
                    kind,
                    Err(Failure::BadReply("the hook's worker stopped".into())),
                );
            }
        }
    }
}

/// The worker: reads stdin, then asks the daemon.
fn work(source: &'static str, socket: PathBuf, reply_by_ms: u64, tx: mpsc::Sender<Step>) {
    let input = read_input(&mut io::stdin().lock());
    let _ = tx.send(Step::Input(input.kind.clone()));
    let result = exchange(source, &socket, input, reply_by_ms, &tx);
    let _ = tx.send(Step::Reply(result));
}

// ---- reading the event ----

/// Reads the hook event from `reader`: at most [`MAX_INPUT_BYTES`].
///
/// - A JSON value is sent as it is (cut to fit a frame later, see [`fit`]).
/// - Anything else (not JSON, not UTF-8, nested deeper than an event may be, or longer than
///   the limit) is sent as a JSON string holding the text, so the daemon still stores what
///   the agent sent, as an unmapped event, rather than nothing.
fn read_input(reader: &mut impl Read) -> Input {
    let mut bytes = Vec::new();
    let read = reader
        .take(MAX_INPUT_BYTES as u64 + 1)
        .read_to_end(&mut bytes);
    let mut altered = match read {
        Err(e) => Some(format!("stdin could not be read whole: {e}")),
        Ok(_) if bytes.len() > MAX_INPUT_BYTES => {
            bytes.truncate(MAX_INPUT_BYTES);
            Some(format!(
                "stdin is longer than {MAX_INPUT_BYTES} bytes; the rest was not read"
            ))
        }
        Ok(_) => None,
    };
    // What JSON cannot represent (a lone surrogate, 1e999) is repaired and what nests too deep
    // is kept as text, rather than the whole event becoming one string: the daemon must still
    // read the tool call to decide it.
    let parsed = match altered {
        None => match std::str::from_utf8(&bytes)
            .ok()
            .and_then(dstream_daemon::lossy_json::parse)
        {
            Some((mut v, repaired)) => {
                if repaired {
                    altered = Some(
                        "values JSON cannot represent (a lone surrogate, a number beyond \
                         f64) were replaced"
                            .into(),
                    );
                }
                if depth(&v) > MAX_EVENT_DEPTH {
                    cut_deep(&mut v, MAX_EVENT_DEPTH);
                    altered = Some(format!(
                        "parts nested deeper than {MAX_EVENT_DEPTH} levels are kept as text"
                    ));
                }
                Some(v)
            }
            None => {
                let why = match serde_json::from_slice::<Value>(&bytes) {
                    Err(e) => e.to_string(),
                    Ok(_) => "not UTF-8".into(),
                };
                altered = Some(format!("stdin is not JSON: {why}"));
                None
            }
        },
        Some(_) => None,
    };
    match parsed {
        Some(event) => {
            let field = |name: &str| event.get(name).and_then(Value::as_str).map(str::to_owned);
            Input {
                kind: field("hook_event_name"),
                session_id: field("session_id"),
                event,
                altered,
            }
        }
        None => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            Input {
                kind: sniff(&text, "hook_event_name"),
                session_id: sniff(&text, "session_id"),
                event: Value::String(text),
                altered,
            }
        }
    }
}

/// How deeply arrays and objects nest in `v` (0 for a scalar). serde_json's parser stops at
/// 128 levels, so the recursion is bounded.
/// Replaces every array or object found `levels` deep with its JSON text.
fn cut_deep(v: &mut Value, levels: usize) {
    let children: Vec<&mut Value> = match v {
        Value::Array(a) => a.iter_mut().collect(),
        Value::Object(m) => m.values_mut().collect(),
        _ => return,
    };
    if levels <= 1 {
        for c in children {
            if matches!(c, Value::Array(_) | Value::Object(_)) {
                *c = Value::String(c.to_string());
            }
        }
        return;
    }
    for c in children {
        cut_deep(c, levels - 1);
    }
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The string value of `"key": "…"` in text that is not valid JSON as a whole (say, cut
/// short), when it is plain (no escapes) and short. Good enough to answer in the right format
/// and to file the text under the right session.
fn sniff(text: &str, key: &str) -> Option<String> {
    let needle = format!("\"{key}\"");
    let mut rest = &text[text.find(&needle)? + needle.len()..];
    rest = rest.trim_start().strip_prefix(':')?.trim_start();
    rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    let value = &rest[..end];
    (end <= 256 && !value.contains('\\')).then(|| value.to_string())
}

// ---- fitting an event into one frame ----

/// Bytes of `s` once written as a JSON string, quotes included (serde_json's escaping).
fn escaped_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// Cuts the longest strings of `event` until it serializes to at most `budget` bytes; each cut
/// string ends with a note of how much was cut. An event that still does not fit (say, a
/// million small strings) is replaced by a summary that keeps its identifying fields. Returns
/// whether anything changed.
fn fit(event: &mut Value, budget: usize) -> bool {
    let Ok(mut size) = serde_json::to_vec(event).map(|v| v.len()) else {
        return false;
    };
    if size <= budget {
        return false;
    }
    let original = size;
    {
        let mut strings = Vec::new();
        let mut stack = vec![&mut *event];
        while let Some(v) = stack.pop() {
            match v {
                Value::String(s) if s.len() >= 1024 => strings.push(s),
                Value::Array(a) => stack.extend(a.iter_mut()),
                Value::Object(m) => stack.extend(m.values_mut()),
                _ => {}
            }
        }
        strings.sort_by_key(|s| std::cmp::Reverse(s.len()));
        for s in strings {
            if size <= budget {
                break;
            }
            let before = escaped_len(s);
            let excess = size - budget;
            // The note added below takes under 64 bytes.
            let mut keep = s.len().saturating_sub(excess + 64);
            while !s.is_char_boundary(keep) {
                keep -= 1;
            }
            let cut = s.len() - keep;
            s.truncate(keep);
            s.push_str(&format!("…[dstream: {cut} bytes cut]"));
            size = size + escaped_len(s) - before;
        }
    }
    if size > budget {
        let mut summary = serde_json::Map::new();
        if let Value::Object(m) = &*event {
            for key in [
                "hook_event_name",
                "session_id",
                "transcript_path",
                "cwd",
                "tool_name",
                "tool_use_id",
            ] {
                if let Some(v @ Value::String(s)) = m.get(key)
                    && s.len() <= 4096
                {
                    summary.insert(key.to_string(), v.clone());
                }
            }
        }
        summary.insert(
            "dstream_truncated".into(),
            json!({"reason": "the event did not fit in one frame", "bytes": original}),
        );
        *event = Value::Object(summary);
    }
    true
}

// ---- talking to the daemon ----

#[cfg(unix)]
type Stream = std::os::unix::net::UnixStream;

/// Connects, and makes sure the daemon at `path` runs as this user: a socket another user
/// planted on a shared path could otherwise answer `allow` (and an edited input) for any call.
#[cfg(unix)]
fn connect(path: &std::path::Path) -> io::Result<Stream> {
    let stream = Stream::connect(path)?;
    let theirs = peer_uid(&stream)?;
    // SAFETY: geteuid has no preconditions.
    let mine = unsafe { libc::geteuid() };
    if theirs != mine {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the socket {} is served by uid {theirs}, not by this user (uid {mine}); \
                 not talking to it",
                path.display()
            ),
        ));
    }
    Ok(stream)
}

#[cfg(target_os = "linux")]
fn peer_uid(stream: &Stream) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the buffer and its length describe `cred`, which outlives the call.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

#[cfg(all(unix, not(target_os = "linux")))]
fn peer_uid(stream: &Stream) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    let (mut uid, mut gid) = (0, 0);
    // SAFETY: both out-pointers are valid for the call.
    if unsafe { libc::getpeereid(stream.as_raw_fd(), &mut uid, &mut gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(uid)
}

#[cfg(not(unix))]
type Stream = std::net::TcpStream;

#[cfg(not(unix))]
fn connect(_path: &std::path::Path) -> io::Result<Stream> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "`dstream hook` talks to the daemon over a Unix socket, which this platform lacks",
    ))
}

/// Sends the event with `ingest` and returns the result, and whether the event had to be
/// altered (then an `updated_input` in the reply must not be applied).
fn exchange(
    source: &str,
    socket: &std::path::Path,
    mut input: Input,
    reply_by_ms: u64,
    tx: &mpsc::Sender<Step>,
) -> Result<(IngestResult, bool), Failure> {
    let mut conn = Conn::open(socket)?;
    let _ = tx.send(Step::Connected);
    let session_id = input
        .session_id
        .take()
        .filter(|s| dstream_sdk::validate_session_id(s).is_ok());
    let mut altered = input.altered.is_some();
    let mut budget = DEFAULT_MAX_FRAME_BYTES - ENVELOPE_ROOM;
    let mut asked_limit = false;
    loop {
        altered |= fit(&mut input.event, budget);
        let params = IngestParams {
            source: source.to_string(),
            event: &input.event,
            session_id: session_id.clone(),
            reply_by_ms: Some(reply_by_ms),
        };
        match conn.call(methods::INGEST, &params)? {
            Ok(result) => {
                let mut result: IngestResult =
                    serde_json::from_value(result).map_err(|e| Failure::BadReply(e.to_string()))?;
                if let Some(d) = &mut result.decision
                    && d.action == Action::Ask
                    && let Some(checkpoint) = d.checkpoint.clone()
                    && checkpoint.decision.is_none()
                {
                    let _ = tx.send(Step::Waiting(checkpoint.clone()));
                    let decided = await_decision(conn, socket, checkpoint)?;
                    *d = decision_of(decided);
                }
                return Ok((result, altered));
            }
            // The daemon runs with a smaller frame limit than the default: learn it, cut the
            // event to fit and send it once more.
            Err(e) if e.code == codes::FRAME_TOO_LARGE && !asked_limit => {
                asked_limit = true;
                let hello: HelloResult = match conn.call(methods::HELLO, &json!({}))? {
                    Ok(v) => serde_json::from_value(v).map_err(|_| Failure::Rpc(e.clone()))?,
                    Err(_) => return Err(Failure::Rpc(e)),
                };
                budget = hello
                    .max_frame_bytes
                    .saturating_sub(ENVELOPE_ROOM)
                    .max(1024);
            }
            Err(e) => return Err(Failure::Rpc(e)),
        }
    }
}

/// Waits for a person's decision on `checkpoint`, across daemon restarts: a lost connection
/// is made again (the checkpoint is rebuilt from the log on the daemon's side) and the await
/// sent again, until the main thread's deadline ends the hook.
fn await_decision(
    conn: Conn,
    socket: &std::path::Path,
    checkpoint: CheckpointInfo,
) -> Result<CheckpointInfo, Failure> {
    let params = CheckpointAwaitParams {
        id: checkpoint.id.clone(),
        session_id: Some(checkpoint.session_id.clone()),
        timeout_ms: None,
    };
    let mut conn = Some(conn);
    let mut backoff = Backoff::new(RECONNECT_MIN, RECONNECT_MAX);
    loop {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match Conn::open(socket) {
                Ok(c) => {
                    backoff.reset();
                    conn.insert(c)
                }
                Err(_) => {
                    std::thread::sleep(backoff.next_delay(None));
                    continue;
                }
            },
        };
        match c.call(methods::CHECKPOINT_AWAIT, &params) {
            Ok(Ok(v)) => {
                let info: CheckpointInfo =
                    serde_json::from_value(v).map_err(|e| Failure::BadReply(e.to_string()))?;
                if info.decision.is_some() {
                    return Ok(info);
                }
            }
            // A daemon on its way down: wait for the next one.
            Ok(Err(e)) if e.code == codes::SHUTTING_DOWN => conn = None,
            Ok(Err(e)) => return Err(Failure::Rpc(e)),
            Err(_) => conn = None,
        }
    }
}

/// A decided checkpoint as the verdict the agent gets.
fn decision_of(checkpoint: CheckpointInfo) -> Decision {
    let d = checkpoint.decision.clone().expect("decided");
    let mut reason = match checkpoint.state {
        CheckpointState::Expired => format!(
            "nobody decided before the deadline; dstream applied the default ({})",
            d.action
        ),
        state => format!(
            "{state} by {} (dstream checkpoint {})",
            d.decided_by, checkpoint.id
        ),
    };
    if let Some(note) = &d.note {
        reason.push_str(": ");
        reason.push_str(note);
    }
    Decision {
        action: d.action,
        reason: Some(reason),
        decided_by: Some(d.decided_by.clone()),
        updated_input: d.input.clone(),
        checkpoint: Some(checkpoint),
        stop: false,
    }
}

fn crate_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One connection to the daemon, used for one request at a time.
struct Conn {
    reader: BufReader<Stream>,
    writer: Stream,
    next_id: u64,
}

impl Conn {
    fn open(socket: &std::path::Path) -> Result<Conn, Failure> {
        let stream = connect(socket).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => Failure::NotRunning(e),
            _ => Failure::Io(e),
        })?;
        Ok(Conn {
            reader: BufReader::new(stream.try_clone().map_err(Failure::Io)?),
            writer: stream,
            next_id: 1,
        })
    }

    /// Sends a request and waits for its response. The deadline is the main thread's.
    fn call(
        &mut self,
        method: &str,
        params: &impl Serialize,
    ) -> Result<Result<Value, RpcError>, Failure> {
        let id = self.next_id;
        self.next_id += 1;
        let mut frame = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .map_err(|e| Failure::BadReply(e.to_string()))?;
        frame.push(b'\n');
        self.writer.write_all(&frame).map_err(Failure::Io)?;
        loop {
            let mut line = Vec::new();
            let n = (&mut self.reader)
                .take(MAX_REPLY_BYTES)
                .read_until(b'\n', &mut line)
                .map_err(Failure::Io)?;
            if n == 0 {
                return Err(Failure::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the daemon closed the connection",
                )));
            }
            if line.last() != Some(&b'\n') {
                return Err(Failure::BadReply(format!(
                    "a reply longer than {MAX_REPLY_BYTES} bytes, or cut short"
                )));
            }
            let frame: Value =
                serde_json::from_slice(&line).map_err(|e| Failure::BadReply(e.to_string()))?;
            // Anything else on the line (there should be nothing) is not ours.
            if frame.get("id") != Some(&json!(id)) {
                continue;
            }
            if let Some(err) = frame.get("error") {
                let err: RpcError = serde_json::from_value(err.clone())
                    .map_err(|e| Failure::BadReply(e.to_string()))?;
                return Ok(Err(err));
            }
            return Ok(Ok(frame.get("result").cloned().unwrap_or(Value::Null)));
        }
    }
}

// ---- answering the agent ----

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClaudeOutput {
    /// `false` ends the agent's turn after this hook (a remote stop); absent otherwise.
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    continue_: Option<bool>,
    /// Shown to the person when `continue` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_reason: Option<String>,
    hook_specific_output: ClaudeSpecific,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClaudeSpecific {
    hook_event_name: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    permission_decision: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    permission_decision_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    updated_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<PermissionDecision>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PermissionDecision {
    behavior: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    updated_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// The verdict the hook acts on.
enum Verdict {
    Allow {
        reason: String,
        updated_input: Option<Value>,
    },
    Deny(String),
    /// Print nothing: the agent proceeds as it normally would.
    Pass,
}

/// What to print for the event `kind` given the outcome, and a few words for the debug line.
fn answer(
    kind: Option<&str>,
    outcome: &Result<(IngestResult, bool), Failure>,
    fail_closed: bool,
) -> (Option<ClaudeOutput>, &'static str) {
    let verdict = match outcome {
        Ok((result, altered)) => match &result.decision {
            None => Verdict::Pass,
            Some(d) => verdict_of(d, *altered),
        },
        // The daemon would have applied the checkpoint's default by now; so does the hook.
        Err(e @ Failure::Undecided(c)) => {
            let reason = format!("{e}; its default ({}) applies", c.on_timeout);
            if c.on_timeout == OnTimeout::Allow {
                Verdict::Allow {
                    reason,
                    updated_input: None,
                }
            } else {
                Verdict::Deny(reason)
            }
        }
        Err(e) if fail_closed => Verdict::Deny(format!(
            "dstream could not check this tool call: {e}. Denied because the dstream hook runs \
             fail-closed"
        )),
        Err(_) => Verdict::Pass,
    };
    let said = match verdict {
        Verdict::Allow { .. } => "allowed",
        Verdict::Deny(_) => "denied",
        Verdict::Pass => "no decision",
    };
    let output = match (kind, verdict) {
        (_, Verdict::Pass) | (None, _) => None,
        (
            Some("PreToolUse"),
            Verdict::Allow {
                reason,
                updated_input,
            },
        ) => Some(ClaudeSpecific {
            hook_event_name: "PreToolUse",
            permission_decision: Some("allow"),
            permission_decision_reason: Some(reason),
            updated_input,
            decision: None,
        }),
        (Some("PreToolUse"), Verdict::Deny(reason)) => Some(ClaudeSpecific {
            hook_event_name: "PreToolUse",
            permission_decision: Some("deny"),
            permission_decision_reason: Some(reason),
            updated_input: None,
            decision: None,
        }),
        (Some("PermissionRequest"), Verdict::Allow { updated_input, .. }) => Some(ClaudeSpecific {
            hook_event_name: "PermissionRequest",
            permission_decision: None,
            permission_decision_reason: None,
            updated_input: None,
            decision: Some(PermissionDecision {
                behavior: "allow",
                updated_input,
                message: None,
            }),
        }),
        (Some("PermissionRequest"), Verdict::Deny(message)) => Some(ClaudeSpecific {
            hook_event_name: "PermissionRequest",
            permission_decision: None,
            permission_decision_reason: None,
            updated_input: None,
            decision: Some(PermissionDecision {
                behavior: "deny",
                updated_input: None,
                message: Some(message),
            }),
        }),
        // Other events take no permission decision.
        _ => None,
    };
    let said = if output.is_some() {
        said
    } else {
        "printed nothing"
    };
    // A remote stop also ends the turn: Claude Code stops after this hook.
    let stop = match outcome {
        Ok((result, _)) => result.decision.as_ref().filter(|d| d.stop).map(|d| {
            d.reason
                .clone()
                .unwrap_or_else(|| "stopped remotely".into())
        }),
        Err(_) => None,
    };
    (
        output.map(|hook_specific_output| ClaudeOutput {
            continue_: stop.as_ref().map(|_| false),
            stop_reason: stop,
            hook_specific_output,
        }),
        said,
    )
}

fn verdict_of(d: &Decision, altered: bool) -> Verdict {
    let by = d.decided_by.as_deref().unwrap_or("dstream policy");
    match d.action {
        Action::Allow => Verdict::Allow {
            reason: d
                .reason
                .clone()
                .unwrap_or_else(|| format!("allowed by {by} (dstream)")),
            // Claude Code replaces the tool's input with an object; anything else is not an
            // input, and an edit of an event that was cut to fit would lose the cut part.
            updated_input: d
                .updated_input
                .clone()
                .filter(|v| v.is_object() && !altered),
        },
        Action::Deny => Verdict::Deny(
            d.reason
                .clone()
                .unwrap_or_else(|| format!("denied by {by} (dstream)")),
        ),
        Action::Ask => Verdict::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(action: &str) -> Decision {
        Decision {
            action: action.parse().unwrap(),
            reason: Some("because".into()),
            decided_by: Some("rule:test".into()),
            updated_input: Some(json!({"command": "ls -la"})),
            checkpoint: None,
            stop: false,
        }
    }

    fn render(kind: &str, outcome: Result<(IngestResult, bool), Failure>, closed: bool) -> Value {
        let (out, _) = answer(Some(kind), &outcome, closed);
        out.map(|o| serde_json::to_value(o).unwrap())
            .unwrap_or(Value::Null)
    }

    fn decided(action: &str, altered: bool) -> Result<(IngestResult, bool), Failure> {
        Ok((
            IngestResult {
                events: vec![],
                decision: Some(decision(action)),
            },
            altered,
        ))
    }

    #[test]
    fn pre_tool_use_decisions_use_permission_decision() {
        assert_eq!(
            render("PreToolUse", decided("allow", false), false),
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "allow", "permissionDecisionReason": "because",
                "updatedInput": {"command": "ls -la"}}})
        );
        assert_eq!(
            render("PreToolUse", decided("deny", false), false),
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "because"}})
        );
        assert_eq!(
            render("PreToolUse", decided("ask", false), false),
            Value::Null
        );
        // An edit of an input that was cut to fit is not applied.
        assert!(
            render("PreToolUse", decided("allow", true), false)["hookSpecificOutput"]
                .get("updatedInput")
                .is_none()
        );
    }

    #[test]
    fn permission_requests_use_decision_behavior() {
        assert_eq!(
            render("PermissionRequest", decided("allow", false), false),
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                "decision": {"behavior": "allow", "updatedInput": {"command": "ls -la"}}}})
        );
        assert_eq!(
            render("PermissionRequest", decided("deny", false), false),
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                "decision": {"behavior": "deny", "message": "because"}}})
        );
        assert_eq!(
            render("PermissionRequest", decided("ask", false), false),
            Value::Null
        );
    }

    #[test]
    fn other_events_and_failures_print_nothing_unless_fail_closed() {
        assert_eq!(
            render("PostToolUse", decided("deny", false), true),
            Value::Null
        );
        let down = || Err(Failure::Timeout("connecting to the daemon"));
        assert_eq!(render("PreToolUse", down(), false), Value::Null);
        let denied = render("PreToolUse", down(), true);
        assert_eq!(
            denied["hookSpecificOutput"]["permissionDecision"],
            json!("deny")
        );
        assert!(
            denied["hookSpecificOutput"]["permissionDecisionReason"]
                .as_str()
                .unwrap()
                .contains("fail-closed")
        );
        assert_eq!(
            render("PermissionRequest", down(), true)["hookSpecificOutput"]["decision"]["behavior"],
            json!("deny")
        );
        assert_eq!(render("Stop", down(), true), Value::Null);
        // A decision the hook does not know is a reply it does not understand: no decision,
        // or a denial when failing closed.
        let reply = json!({"events": [], "decision": {"action": "maybe"}});
        let e = serde_json::from_value::<IngestResult>(reply).unwrap_err();
        let unknown = || Err(Failure::BadReply(e.to_string()));
        assert_eq!(render("PreToolUse", unknown(), false), Value::Null);
        assert_eq!(
            render("PreToolUse", unknown(), true)["hookSpecificOutput"]["permissionDecision"],
            json!("deny")
        );
    }

    #[test]
    fn missing_reasons_name_the_decider() {
        let d = Decision::new(Action::Deny, "rule:no-rm");
        match verdict_of(&d, false) {
            Verdict::Deny(r) => assert_eq!(r, "denied by rule:no-rm (dstream)"),
            _ => panic!("expected a denial"),
        }
    }

    #[test]
    fn input_that_is_not_json_is_kept_as_text() {
        let text = br#"{"session_id":"abc-1","hook_event_name":"PreToolUse","tool_input":{"#;
        let input = read_input(&mut &text[..]);
        assert_eq!(
            input.event,
            Value::String(String::from_utf8_lossy(text).into())
        );
        assert_eq!(input.kind.as_deref(), Some("PreToolUse"));
        assert_eq!(input.session_id.as_deref(), Some("abc-1"));
        assert!(input.altered.unwrap().contains("not JSON"));

        let input = read_input(&mut &b"\xff\xfe garbage"[..]);
        assert!(input.event.is_string());
        assert_eq!(input.kind, None);

        let ok = read_input(&mut &br#"{"hook_event_name":"Stop","session_id":"s"}"#[..]);
        assert!(ok.altered.is_none());
        assert_eq!(ok.kind.as_deref(), Some("Stop"));
    }

    #[test]
    fn deeply_nested_parts_are_kept_as_text_and_the_rest_as_json() {
        let deep = format!(
            r#"{{"hook_event_name":"PreToolUse","tool_input":{{"x":{}1{}}}}}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        let input = read_input(&mut deep.as_bytes());
        // The call stays readable (tool, kind), only what nests too deep became a string.
        assert_eq!(input.kind.as_deref(), Some("PreToolUse"));
        assert!(input.event["tool_input"].is_object());
        assert!(depth(&input.event) <= MAX_EVENT_DEPTH);
        assert!(input.altered.unwrap().contains("deeper"));
    }

    #[test]
    fn sniff_reads_plain_string_fields_only() {
        assert_eq!(
            sniff(r#"{"a": "x", "k" : "v1"}"#, "k").as_deref(),
            Some("v1")
        );
        assert_eq!(sniff(r#"{"k": "v\"1"}"#, "k"), None);
        assert_eq!(sniff(r#"{"k": 5}"#, "k"), None);
        assert_eq!(sniff(r#"{"k": "unterminated"#, "k"), None);
        assert_eq!(sniff("", "k"), None);
    }

    #[test]
    fn big_events_are_cut_to_fit_and_keep_their_identity() {
        let mut event = json!({
            "hook_event_name": "PostToolUse",
            "session_id": "s1",
            "tool_response": {"stdout": "é".repeat(300_000), "stderr": "x\n".repeat(50_000)},
            "small": "keep me",
        });
        assert!(fit(&mut event, 100_000));
        let size = serde_json::to_vec(&event).unwrap().len();
        assert!(size <= 100_000, "{size}");
        assert_eq!(event["small"], "keep me");
        assert_eq!(event["session_id"], "s1");
        assert!(
            event["tool_response"]["stdout"]
                .as_str()
                .unwrap()
                .ends_with("bytes cut]")
        );
        // Already small enough: untouched.
        let before = event.clone();
        assert!(!fit(&mut event, 100_000));
        assert_eq!(event, before);
        // Many small strings cannot be cut: a summary replaces the event.
        let mut many = json!({"hook_event_name": "Stop", "session_id": "s2",
            "list": vec!["0123456789"; 20_000]});
        assert!(fit(&mut many, 10_000));
        assert_eq!(many["session_id"], "s2");
        assert!(many.get("list").is_none());
        assert!(many["dstream_truncated"]["bytes"].as_u64().unwrap() > 10_000);
    }

    #[test]
    fn escaped_len_matches_serde_json() {
        for s in [
            "",
            "plain",
            "quote\" and \\ back",
            "tab\t nl\n \u{1} \u{1f} é ✓ \u{7f}",
        ] {
            assert_eq!(
                escaped_len(s),
                serde_json::to_string(s).unwrap().len(),
                "{s:?}"
            );
        }
    }
}
