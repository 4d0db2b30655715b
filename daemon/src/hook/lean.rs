//! `main` of the lean hook binary, `dstream-hook <agent> [--fail-closed] [--socket PATH]`:
//! `dstream hook` without the rest of `dstream`. Its arguments, outputs, exit codes, spool and
//! autostart are `dstream hook`'s; a usage error exits 1, never 2 (which Claude Code reads
//! as "block this tool call").

use std::io::Write;
use std::process::ExitCode;

use crate::hook::LEAN_BIN;
use crate::hook::args::{self, ARGS_HELP, HELP, Parsed, Program};

const ABOUT: &str =
    "Report one agent hook event to the daemon and answer in the agent's format (agents run this).";

/// The usage line.
fn usage() -> String {
    format!("Usage: {LEAN_BIN} [OPTIONS] <AGENT>")
}

/// Runs `dstream-hook` with this process's arguments.
pub fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match args::parse(&args, Program::Lean) {
        Ok(Parsed::Run(options)) => crate::hook::run(options),
        Ok(Parsed::Help) => {
            let text = format!("{ABOUT}\n\n{}\n\n{ARGS_HELP}\n\n{HELP}\n", usage());
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Ok(Parsed::Version) => {
            println!("{LEAN_BIN} {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "error: {e}\n\n{}\n\nFor more information, try '--help'.",
                usage()
            );
            ExitCode::FAILURE
        }
    }
}
