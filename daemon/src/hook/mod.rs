//! The hook: the command an agent's hook runs on every event, as `dstream hook <agent>` or as
//! the lean binary `dstream-hook <agent>` (the same code; [`lean`] is its `main`).
//!
//! It reads one hook event (JSON) from stdin, hands it to the daemon with `ingest`, and prints
//! the daemon's verdict in the agent's own reply format. It runs on every tool call, so it is a
//! plain blocking client: no async runtime, one connection, one request. It never holds the
//! agent up for long and never blocks it by accident:
//!
//! - Every blocking step (stdin, connect, each read and write of the request) waits at most
//!   what its phase has left (see [`deadline`]): one second to connect,
//!   `DSTREAM_HOOK_TIMEOUT_MS` for the whole exchange. When one passes, the hook answers
//!   without the daemon and exits. All on one thread: a process per event cannot afford a
//!   second.
//! - Without a daemon (no socket, or nobody listening) it starts one (see
//!   [`crate::autostart`], at most `DSTREAM_AUTOSTART_WAIT_MS`, 2 s by default) and
//!   sends the event to it; if autostart is off or the start fails, it writes the event to the
//!   spool in the data directory, durably, for the daemon to take in when it runs ([`fallback`]).
//!   Either way the session stays complete in dstream. The agent's call is then let through
//!   (fail open), or with `--fail-closed` denied (and the spooled event says so).
//! - Other failures (an error reply, a deadline) fail open, or closed with `--fail-closed`.
//! - It always exits 0. Claude Code treats exit code 2 as "block", which must only ever be a
//!   decision, never an accident.
//!
//! The parts, in the order a run uses them: [`args`] (what the hook is told), [`input`] (the
//! event from stdin, read by [`stdin`] within the deadline), [`deadline`] (the exchange
//! within its deadlines, kept by [`clock`]), [`exchange`] (the requests, over [`conn`], with the event cut by
//! [`fit`]), [`fallback`] (no daemon: start one or spool), [`outcome`] (how asking the daemon
//! ended), [`verdict`] (what the outcome means for the call) and [`claude_code`] (the reply
//! printed for Claude Code).
//!
//! Only what these use is linked into `dstream-hook`: no clap, no async runtime, no tracing,
//! none of the daemon. That is the point of the lean binary: a hook is a process per event,
//! and a smaller image starts faster (fewer pages to map, fewer relocations to apply).

pub mod args;
mod claude_code;
mod clock;
mod conn;
mod deadline;
mod exchange;
mod fallback;
mod fit;
mod input;
pub mod lean;
mod outcome;
mod readable;
mod stdin;
mod verdict;

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Instant;

use crate::hook::outcome::Failure;

pub use args::{Agent, Options, Program};

/// The lean hook binary's name (beside `dstream`, `install` points hooks at it).
pub const LEAN_BIN: &str = "dstream-hook";

/// Runs the hook: reads the event, asks the daemon (or starts one, or spools), prints the
/// answer. Always exits 0.
pub fn run(options: Options) -> ExitCode {
    let started = Instant::now();
    let (settings, note) = args::Settings::new(options);
    if let (Some(note), true) = (&note, settings.debug) {
        eprintln!("dstream hook: {note}");
    }
    let (kind, outcome) = deadline::ingest_within(
        settings.source,
        settings.socket.clone(),
        settings.timeout,
        settings.fail_closed,
        settings.program,
    );
    let (answer, verdict) = claude_code::answer(kind.as_deref(), &outcome, settings.fail_closed);
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
