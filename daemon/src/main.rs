//! `dstream`: the daemon and its command-line clients.

mod cli;
mod pow;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
