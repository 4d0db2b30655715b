//! What an import shows: a bar of sessions and events on a terminal (plain lines otherwise),
//! each problem as it is found, and the summary at the end (text, or one JSON object).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::problem::Problem;

/// The totals of one import, as `--json` prints them.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    pub dry_run: bool,
    /// Sessions found (a session with its subagents is one).
    pub sessions_found: u64,
    /// Sessions that got new events.
    pub sessions_imported: u64,
    /// Sessions whose every line was imported before.
    pub sessions_already_imported: u64,
    /// Sessions dstream captured live: left as they are.
    pub sessions_captured_live: u64,
    /// Transcript lines sent (read, with `--dry-run`).
    pub lines: u64,
    /// Lines skipped because an earlier import stored them.
    pub lines_skipped: u64,
    /// Events stored.
    pub events: u64,
    /// Of those, `unmapped` (lines the mapping could not read: not JSON, unknown shapes).
    pub unmapped: u64,
    /// Problems that cost data: files that could not be read, lines cut short or refused.
    pub errors: u64,
    pub problems: Vec<Problem>,
    pub elapsed_ms: u64,
    /// Lines per second over the whole run (reading, sending, storing).
    pub lines_per_sec: f64,
}

/// The bar on a terminal, or plain lines on stderr.
pub struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    events: u64,
}

impl Progress {
    pub fn new(sessions: u64, quiet: bool) -> Progress {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new(sessions);
            let style = ProgressStyle::with_template(
                "{spinner} [{bar:30}] {pos}/{len} sessions, {msg} ({elapsed})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Progress {
            bar,
            started: Instant::now(),
            events: 0,
        }
    }

    /// Events stored so far grew by `n`.
    pub fn events(&mut self, n: u64) {
        self.events += n;
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{} events", self.events));
        }
    }

    /// One session is done: `what` says how it went.
    pub fn session(&self, id: &str, what: &str) {
        match &self.bar {
            Some(bar) => bar.inc(1),
            None => eprintln!("{id}: {what}"),
        }
    }

    /// A problem, shown as it is found.
    pub fn problem(&self, p: &Problem) {
        let text = format!("warning: {p}");
        match &self.bar {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }

    pub fn finish(self, summary: &mut Summary) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        let secs = self.started.elapsed().as_secs_f64();
        summary.elapsed_ms = (secs * 1000.0) as u64;
        let lines = summary.lines + summary.lines_skipped;
        summary.lines_per_sec = if secs > 0.0 {
            (lines as f64 / secs).round()
        } else {
            0.0
        };
    }
}

/// The summary for people.
pub fn print_text(s: &Summary) {
    let verb = if s.dry_run {
        "would import"
    } else {
        "imported"
    };
    println!(
        "{verb} {} of {} sessions ({} already imported, {} captured live, skipped): {} lines, {} events, {} unmapped, {} errors",
        s.sessions_imported,
        s.sessions_found,
        s.sessions_already_imported,
        s.sessions_captured_live,
        s.lines,
        s.events,
        s.unmapped,
        s.errors,
    );
    println!(
        "{} lines skipped (imported before); {:.1}s, {} lines/s",
        s.lines_skipped,
        s.elapsed_ms as f64 / 1000.0,
        s.lines_per_sec
    );
}
