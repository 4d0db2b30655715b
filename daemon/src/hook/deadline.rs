//! The deadlines, kept on the one thread that does the work: every blocking step (reading
//! stdin, connecting, each write and read of a request, waiting for a decision) is given what
//! its phase has left, and a step that runs out ends the hook with the phase named. Only the
//! spool write, which cannot be cut short from outside, runs on a thread of its own.
//!
//! One thread because the hook is a process per tool call: a second thread (its stack, its
//! malloc arena, the hand-offs) cost about a tenth of the hook's wall time.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use crate::util::time::now_ms;

use crate::hook::args::Program;
use crate::hook::clock::Clock;
use crate::hook::exchange::exchange;
use crate::hook::fallback::Fallback;
use crate::hook::input::{Input, read_input};
use crate::hook::outcome::{Failure, Outcome};
use crate::hook::stdin::TimedStdin;

/// How long writing an event to the spool may take.
const SPOOL_TIMEOUT: Duration = Duration::from_secs(5);

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
