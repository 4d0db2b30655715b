//! `dstream tail` for people: one line per event in words (`12:01:30  Bash  echo hi > x.txt
//! → ok 19 ms`), coloured on a terminal, cut to its width. `--json` does not come here.
//!
//! `words` and its helpers `tools` and `usage` turn an event into a [`paint::Line`];
//! `joins` remembers calls so a result can name what it answers; `paint` lays the line out.

mod fields;
mod joins;
mod paint;
mod tools;
mod usage;
mod words;

#[cfg(test)]
mod tests;

use std::io::IsTerminal;

use dstream_sdk::Event;

use crate::cli::tail_view::joins::Joins;
use crate::cli::tail_view::paint::Style;
pub use crate::cli::tail_view::paint::{Line, Tone};
pub use crate::cli::tail_view::usage::dollars;

/// Width when the terminal's cannot be read, or output is not a terminal.
const DEFAULT_WIDTH: usize = 120;

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set.
    Auto,
    Always,
    Never,
}

/// Renders one session's events in order, remembering what later lines need.
pub struct TailView {
    joins: Joins,
    style: Style,
}

impl TailView {
    /// For standard output: colours per `color`, the terminal's width.
    pub fn for_stdout(color: ColorChoice) -> Self {
        let terminal = std::io::stdout().is_terminal();
        let color = match color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            }
        };
        let columns = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.trim().parse().ok());
        let width = match (terminal, columns) {
            (true, _) => crossterm::terminal::size()
                .ok()
                .map(|(w, _)| usize::from(w))
                .filter(|w| *w > 0)
                .or(columns),
            (false, c) => c,
        };
        TailView::new(Style {
            color,
            width: width.unwrap_or(DEFAULT_WIDTH),
            local_time: true,
        })
    }

    /// Plain text at any width, in local time: for views that lay lines out themselves
    /// (`dstream replay`) or print them to a file.
    pub fn plain() -> Self {
        TailView::new(Style {
            color: false,
            width: 0,
            local_time: true,
        })
    }

    fn new(style: Style) -> Self {
        TailView {
            joins: Joins::default(),
            style,
        }
    }

    /// The event in words, not yet laid out: for a view that colours and cuts it itself.
    pub fn words(&mut self, e: &Event) -> Line {
        words::describe(e, &mut self.joins)
    }

    /// `HH:MM:SS` of `ms`, as this view's lines show times.
    pub fn clock(&self, ms: u64) -> String {
        paint::clock(ms, self.style.local_time)
    }

    /// The event as one line (no newline).
    pub fn line(&mut self, e: &Event) -> String {
        let words = words::describe(e, &mut self.joins);
        paint::paint(&words, e.lsn, e.timestamp, &self.style)
    }
}
