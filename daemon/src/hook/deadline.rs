//! The deadlines: the worker thread reads stdin and asks the daemon, while the main thread
//! waits for each of its steps within that step's deadline, and answers without the daemon
//! when one passes.

use std::io;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::util::time::now_ms;

use crate::autostart;

use crate::hook::args::Program;
use crate::hook::exchange::exchange;
use crate::hook::fallback::Fallback;
use crate::hook::input::read_input;
use crate::hook::outcome::{Failure, Outcome, Step};

/// How long connecting to the daemon's socket may take. A local socket connects at once or
/// fails at once; this only bounds a daemon so swamped that its accept queue is full.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long writing an event to the spool may take.
const SPOOL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long past a checkpoint's deadline the hook waits for the daemon's verdict before it
/// applies the checkpoint's default itself (the daemon may be restarting).
const CHECKPOINT_GRACE: Duration = Duration::from_secs(5);

/// Reads the event and asks the daemon on a worker thread, within `timeout` for the whole
/// exchange (or a pending checkpoint's deadline): the event's kind, once read, and the outcome.
pub(crate) fn ingest_within(
    source: &'static str,
    socket: PathBuf,
    timeout: Duration,
    fail_closed: bool,
    program: Program,
) -> (Option<String>, Outcome) {
    let (tx, rx) = mpsc::channel();
    let reply_by_ms = now_ms().saturating_add(timeout.as_millis() as u64);
    let spawned = std::thread::Builder::new()
        .name("dstream-hook".into())
        .spawn(move || work(source, socket, reply_by_ms, fail_closed, program, tx));
    match spawned {
        Ok(_) => watch(&rx, timeout),
        Err(e) => (None, Err(Failure::Io(e))),
    }
}

/// The main thread's side: waits for the worker's steps, each within its deadline.
fn watch(rx: &mpsc::Receiver<Step>, timeout: Duration) -> (Option<String>, Outcome) {
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
                let left = Duration::from_millis(checkpoint.deadline_ms.saturating_sub(now_ms()));
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
            Ok(Step::Starting) => {
                phase = "starting the daemon";
                phase_deadline =
                    deadline.min(Instant::now() + autostart::wait_bound() + CONNECT_TIMEOUT);
            }
            // Writing a few KiB and two syncs: the agent's deadline may be spent, but a
            // spooled event is the one thing the hook must not cut short.
            Ok(Step::Spooling) => {
                phase = "spooling the event";
                phase_deadline = Instant::now() + SPOOL_TIMEOUT;
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

/// The worker: reads stdin, then asks the daemon; without one, starts one or spools.
fn work(
    source: &'static str,
    socket: PathBuf,
    reply_by_ms: u64,
    fail_closed: bool,
    program: Program,
    tx: mpsc::Sender<Step>,
) {
    let mut input = read_input(&mut io::stdin().lock());
    let _ = tx.send(Step::Input(input.kind.clone()));
    let mut result = exchange(source, &socket, &mut input, reply_by_ms, &tx);
    if let Err(Failure::NotRunning(e)) = &result {
        let fallback = Fallback::resolve(&socket, program);
        if let Some(note) = &fallback.note {
            eprintln!("dstream hook: {note}");
        }
        let why = if fallback.autostart() {
            let _ = tx.send(Step::Starting);
            match fallback.start() {
                Ok(_) => {
                    result = exchange(source, &socket, &mut input, reply_by_ms, &tx);
                    None
                }
                Err(e) => Some(format!("no daemon, and starting one failed: {e}")),
            }
        } else {
            Some(format!(
                "the daemon is not running ({e}) and autostart is off"
            ))
        };
        if let Some(why) = why {
            let _ = tx.send(Step::Spooling);
            // A call the hook refuses itself did not run: the spool says so.
            let refused = fail_closed
                && matches!(
                    input.kind.as_deref(),
                    Some("PreToolUse" | "PermissionRequest")
                );
            result = Err(
                match fallback.spool(source, &mut input, refused.then_some("deny")) {
                    Ok(file) => Failure::Spooled { why, file },
                    Err(e) => Failure::Lost {
                        why,
                        spool: e.to_string(),
                    },
                },
            );
        }
    }
    let _ = tx.send(Step::Reply(result));
}
