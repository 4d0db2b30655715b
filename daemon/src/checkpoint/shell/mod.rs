//! What a shell command line runs, for the checkpoint policy: every simple command in it.
//!
//! The line is parsed (brush-parser) and walked through pipelines, lists (`&&`, `||`, `;`),
//! subshells, groups and compound commands, command and process substitutions, here-documents
//! that expand, `sh -c` / `bash -c` / `eval` strings and `find -exec`, each nested string parsed
//! in turn. A simple command is also seen through its wrappers (`sudo`, `env`, `xargs`,
//! `timeout N`, …, options included), so `sudo env A=1 /bin/rm -rf x` is also `rm -rf x`.
//! Words lose their quoting and escapes, and the program its directory: `"\rm"` reads `rm`. A
//! word the shell computes when it runs (`$X`, `$(…)`) keeps its text: it cannot be known here.
//!
//! One job a file, so each can be read (and reviewed) alone:
//! - `outcome`: what the analysis answers, [`Invocation`] or [`ShellError`];
//! - `bounds`: the limits, and the nesting count that refuses a line before it is parsed;
//! - `parser`: the one door to brush-parser, which must not take the daemon down;
//! - `walk`: the walk of the syntax tree down to each simple command;
//! - `words`: a word as the program sees it (quoting removed, substitutions walked);
//! - `wrappers`: programs that run other programs (`sudo`, `env`, `xargs`, shells' `-c`).
//!
//! This file only declares them and re-exports what `policy` uses.

mod bounds;
mod outcome;
mod parser;
mod walk;
mod words;
mod wrappers;

/// For `policy`'s tests of an overlong line.
#[cfg(test)]
pub use bounds::MAX_LEN;
pub use outcome::{Invocation, ShellError};
pub use walk::invocations;

#[cfg(test)]
mod tests;
