//! The deadlines, kept on the one thread that does the work: every blocking step (reading
//! stdin, connecting, each write and read of a request, waiting for a decision) is given what
//! its phase has left, and a step that runs out ends the hook with the phase named. Only the
//! spool write, which cannot be cut short from outside, runs on a thread of its own.
//!
//! One thread because the hook is a process per tool call: a second thread (its stack, its
//! malloc arena, the hand-offs) cost about a tenth of the hook's wall time.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::util::time::now_ms;

use crate::autostart;

use crate::hook::args::Program;
use crate::hook::exchange::exchange;
use crate::hook::fallback::Fallback;
use crate::hook::input::{Input, read_input};
use crate::hook::outcome::{Failure, Outcome};
use crate::hook::stdin::TimedStdin;

/// How long connecting to the daemon's socket may take. A local socket connects at once or
/// fails at once; this only bounds a daemon so swamped that its accept queue is full.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long writing an event to the spool may take.
const SPOOL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long past a checkpoint's deadline the hook waits for the daemon's verdict before it
/// applies the checkpoint's default itself (the daemon may be restarting).
const CHECKPOINT_GRACE: Duration = Duration::from_secs(5);

/// The phase the hook is in and until when it may last.
pub(crate) struct Clock {
    /// The whole exchange's deadline.
    overall: Instant,
    phase: &'static str,
    until: Instant,
}

impl Clock {
    fn new(timeout: Duration) -> Clock {
        let overall = Instant::now() + timeout;
        Clock {
            overall,
            phase: "reading the event from stdin",
            until: overall,
        }
    }

    fn enter(&mut self, phase: &'static str, until: Instant) {
        self.phase = phase;
        self.until = until;
    }

    pub(crate) fn connecting(&mut self) {
        let until = self.overall.min(Instant::now() + CONNECT_TIMEOUT);
        self.enter("connecting to the daemon", until);
    }

    pub(crate) fn connected(&mut self) {
        let until = self.overall;
        self.enter("waiting for the daemon's reply", until);
    }

    /// The call waits for a person: from now on the deadline is the checkpoint's, plus grace.
    pub(crate) fn waiting(&mut self, deadline_ms: u64) {
        let left = Duration::from_millis(deadline_ms.saturating_sub(now_ms()));
        self.enter(
            "waiting for a decision",
            Instant::now() + left + CHECKPOINT_GRACE,
        );
    }

    fn starting(&mut self) {
        let until = self
            .overall
            .min(Instant::now() + autostart::wait_bound() + CONNECT_TIMEOUT);
        self.enter("starting the daemon", until);
    }

    /// When the current phase ends.
    pub(crate) fn until(&self) -> Instant {
        self.until
    }

    /// What the phase has left; zero once it is over.
    pub(crate) fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }

    /// The failure of running out of time in the current phase.
    pub(crate) fn expired(&self) -> Failure {
        Failure::Timeout(self.phase)
    }
}

/// Reads the event and asks the daemon, within `timeout` for the whole exchange (or a pending
/// checkpoint's deadline): the event's kind, once read, and the outcome.
pub(crate) fn ingest_within(
    source: &'static str,
    socket: PathBuf,
    timeout: Duration,
    fail_closed: bool,
    program: Program,
) -> (Option<String>, Outcome) {
    let mut clock = Clock::new(timeout);
    let reply_by_ms = now_ms().saturating_add(timeout.as_millis() as u64);
    let mut stdin = TimedStdin::new(clock.until());
    let mut input = read_input(&mut stdin);
    if stdin.timed_out() {
        return (None, Err(clock.expired()));
    }
    let kind = input.kind.clone();
    let result = exchange(source, &socket, &mut input, reply_by_ms, &mut clock);
    let Err(Failure::NotRunning(e)) = &result else {
        return (kind, result);
    };
    // No daemon: start one, or spool the event.
    let fallback = Fallback::resolve(&socket, program);
    if let Some(note) = &fallback.note {
        eprintln!("dstream hook: {note}");
    }
    let why = if fallback.autostart() {
        clock.starting();
        match fallback.start(clock.left()) {
            Ok(_) => {
                let result = exchange(source, &socket, &mut input, reply_by_ms, &mut clock);
                return (kind, result);
            }
            Err(e) => format!("no daemon, and starting one failed: {e}"),
        }
    } else {
        format!("the daemon is not running ({e}) and autostart is off")
    };
    // A call the hook refuses itself did not run: the spool says so.
    let refused =
        fail_closed && matches!(kind.as_deref(), Some("PreToolUse" | "PermissionRequest"));
    (
        kind,
        Err(spool_within(source, fallback, input, refused, why)),
    )
}

/// Writes the event to the spool on a thread of its own, waiting [`SPOOL_TIMEOUT`] for it:
/// writing a few KiB and two syncs. The agent's deadline may be spent, but a spooled event is
/// the one thing the hook must not cut short.
fn spool_within(
    source: &'static str,
    fallback: Fallback,
    mut input: Input,
    refused: bool,
    why: String,
) -> Failure {
    let (tx, rx) = mpsc::channel();
    let mut write = move || fallback.spool(source, &mut input, refused.then_some("deny"));
    let spawned = std::thread::Builder::new()
        .name("dstream-hook-spool".into())
        .spawn(move || {
            let _ = tx.send(write());
        });
    if let Err(e) = spawned {
        return Failure::Lost {
            why,
            spool: format!("no thread could be started to write it: {e}"),
        };
    }
    match rx.recv_timeout(SPOOL_TIMEOUT) {
        Ok(Ok(file)) => Failure::Spooled { why, file },
        Ok(Err(e)) => Failure::Lost {
            why,
            spool: e.to_string(),
        },
        Err(_) => Failure::Timeout("spooling the event"),
    }
}
