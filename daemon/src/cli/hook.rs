//! `dstream hook <agent>`: the hook agents run per event. It is `dstream_daemon::hook` (which
//! the lean `dstream-hook` binary runs too); here are only its clap definitions, for `dstream
//! --help` and for the forms the hand parser leaves to clap (help, errors).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use dstream_daemon::hook::{self, Agent, Options, Program, args::Parsed};

/// Agents whose hooks `dstream hook` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HookAgent {
    /// Claude Code (settings.json `hooks`; install with `dstream install claude-code`).
    ClaudeCode,
}

#[derive(Args)]
#[command(after_long_help = hook::args::HELP)]
pub struct HookArgs {
    /// The agent running this hook.
    #[arg(value_enum)]
    agent: HookAgent,
    /// Deny tool calls (PreToolUse, PermissionRequest) when the daemon cannot be reached or
    /// fails, instead of letting them through [env: DSTREAM_HOOK_FAIL_CLOSED=1]
    #[arg(long)]
    fail_closed: bool,
    /// Socket of the daemon [default: $DSTREAM_SOCKET, else $XDG_RUNTIME_DIR/dstream/dstream.sock, else ~/.dstream/dstream.sock]
    #[arg(long)]
    socket: Option<PathBuf>,
}

/// The options of `dstream <args>` when it is a hook run clap need not see: `hook` and what
/// the hand parser takes (building the whole CLI's parser is a measurable part of a hook's
/// run). Help and errors go through clap as usual.
pub fn plain(args: &[OsString]) -> Option<Options> {
    let (first, rest) = args.split_first()?;
    if first != "hook" {
        return None;
    }
    match hook::args::parse(rest, Program::Dstream) {
        Ok(Parsed::Run(options)) => Some(options),
        _ => None,
    }
}

pub fn run(args: HookArgs) -> ExitCode {
    let agent = match args.agent {
        HookAgent::ClaudeCode => Agent::ClaudeCode,
    };
    hook::run(Options {
        agent,
        fail_closed: args.fail_closed,
        socket: args.socket,
        program: Program::Dstream,
    })
}
