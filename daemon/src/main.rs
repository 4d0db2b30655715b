//! `dstream`: the daemon and its command-line clients.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
