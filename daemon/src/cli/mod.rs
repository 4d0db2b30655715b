//! Command-line interface: argument definitions and dispatch.

mod checkpoint_cmds;
mod client;
mod client_cmds;
mod daemon_cmd;
mod doctor;
mod hook;
mod import;
mod inbox;
mod install;
mod lifecycle_cmds;
mod open_cmd;
mod output;
mod plugins_cmd;
mod relay_cmd;
mod replay;
mod search_cmd;
mod service;
mod start;
mod tail_view;
mod usage_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "dstream",
    version,
    about = "Durable event logs and a human brake for coding agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon in the foreground (stops cleanly on SIGINT/SIGTERM).
    Daemon(daemon_cmd::DaemonArgs),
    /// Make sure a daemon is running: start one in the background if none answers.
    Start(start::StartArgs),
    /// Append events read as JSON lines from stdin.
    Append(client_cmds::AppendArgs),
    /// Print a session's events, optionally following new ones.
    Tail(client_cmds::TailArgs),
    /// List sessions, most recently active first.
    Sessions(client_cmds::SessionsArgs),
    /// Find events across sessions by session, lineage, type, actor and time.
    Query(client_cmds::QueryArgs),
    /// Show the daemon's counters.
    Stats(client_cmds::StatsArgs),
    /// What the model calls cost: tokens and dollars by day, week, month, session, model,
    /// project or agent.
    Usage(usage_cmd::UsageArgs),
    /// Find events across sessions by their text (prompts, replies, commands, paths, output).
    Search(search_cmd::SearchArgs),
    /// Drop the search index and build it again from the logs.
    Reindex(search_cmd::ReindexArgs),
    /// Open the web view in the browser, logged in (a one-time link; `--print` prints it).
    Open(open_cmd::OpenArgs),
    /// Move a quarantined session's damage aside and take appends again.
    Repair(client_cmds::RepairArgs),
    /// Compress a session's log now (zstd; every read stays the same).
    Compress(client_cmds::CompressArgs),
    /// Start a new session from another's events up to an LSN.
    Fork(lifecycle_cmds::ForkArgs),
    /// Delete the sessions past `retention.delete_after` now (`--dry-run`: list them).
    Gc(lifecycle_cmds::GcArgs),
    /// List the checkpoints waiting for a decision.
    Pending(checkpoint_cmds::PendingArgs),
    /// Let a held tool call run (optionally with an edited input).
    Approve(checkpoint_cmds::ApproveArgs),
    /// Refuse a held tool call.
    Reject(checkpoint_cmds::RejectArgs),
    /// Decide pending checkpoints interactively, as they arrive.
    Inbox(inbox::InboxArgs),
    /// Step through a session event by event, with the files touched, cost and checkpoints
    /// at each point (`--print`: the state at an LSN as text).
    Replay(replay::ReplayArgs),
    /// Run one native plugin for the daemon, answering over stdin/stdout (`isolation =
    /// "process"`; the daemon starts this, not people).
    #[command(hide = true)]
    PluginHost(PluginHostArgs),
    /// List, check or reload the plugins.
    Plugins(plugins_cmd::PluginsArgs),
    /// Report one agent hook event to the daemon and answer in the agent's format (agents run this).
    Hook(hook::HookArgs),
    /// Show how the relay to the remote Durable Streams server stands.
    Relay(relay_cmd::RelayArgs),
    /// Register dstream with an agent: Claude Code hooks, or the OpenCode plugin.
    Install(install::InstallArgs),
    /// Remove what `dstream install` added, and nothing else.
    Uninstall(install::UninstallArgs),
    /// Run the daemon at login: a systemd user unit or a launchd agent.
    Service(service::ServiceArgs),
    /// Check that dstream is set up and running, and say how to fix what is not.
    Doctor(doctor::DoctorArgs),
    /// Import what agents already wrote: Claude Code transcripts, OpenCode sessions.
    Import(import::ImportArgs),
}

#[derive(Args)]
struct PluginHostArgs {
    /// The plugin library.
    library: PathBuf,
    /// Where to copy it for loading.
    cache: PathBuf,
    /// Its `[plugins.native.<name>]` table as JSON.
    config: String,
}

pub fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(options) = hook::plain(&args) {
        return dstream_daemon::hook::run(options);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // Each command builds its own async runtime, if it needs one; parsing builds none. The
    // hook runs on every tool call of an agent, so it is answered here, without any runtime.
    // It keeps SIGPIPE ignored: a daemon that goes away mid-request is an error to handle
    // (fail open), not a signal that kills the hook.
    let cli = match cli.command {
        Command::Hook(args) => return hook::run(args),
        command => Cli { command },
    };
    if !matches!(cli.command, Command::Daemon(_)) {
        // Client output piped into `head` should end quietly, as other Unix tools do.
        #[cfg(unix)]
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let result = match cli.command {
        Command::Daemon(args) => daemon_cmd::run(args),
        Command::Start(args) => start::run(args),
        Command::Append(args) => client_cmds::append(args),
        Command::Tail(args) => client_cmds::tail(args),
        Command::Sessions(args) => client_cmds::sessions(args),
        Command::Query(args) => client_cmds::query(args),
        Command::Stats(args) => client_cmds::stats(args),
        Command::Usage(args) => usage_cmd::run(args),
        Command::Search(args) => search_cmd::search(args),
        Command::Reindex(args) => search_cmd::reindex(args),
        Command::Open(args) => open_cmd::run(args),
        Command::Repair(args) => client_cmds::repair(args),
        Command::Compress(args) => client_cmds::compress(args),
        Command::Fork(args) => lifecycle_cmds::fork(args),
        Command::Gc(args) => lifecycle_cmds::gc(args),
        Command::Plugins(args) => plugins_cmd::run(args),
        Command::Pending(args) => checkpoint_cmds::pending(args),
        Command::Approve(args) => checkpoint_cmds::approve(args),
        Command::Reject(args) => checkpoint_cmds::reject(args),
        Command::Inbox(args) => inbox::run(args),
        Command::Replay(args) => replay::run(args),
        Command::PluginHost(a) => Ok(dstream_daemon::plugin_host_main(
            &a.library, &a.cache, &a.config,
        )),
        Command::Hook(args) => Ok(hook::run(args)),
        Command::Relay(args) => relay_cmd::run(args),
        Command::Install(args) => install::install(args),
        Command::Uninstall(args) => install::uninstall(args),
        Command::Service(args) => service::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Import(args) => import::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("dstream: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Reports a command-line error. Usage errors exit with 2, as usual, except for `dstream hook`:
/// Claude Code reads exit code 2 from a hook as "block this tool call", so a mistyped hook
/// command (or one written by a newer `dstream install`) must not block the agent's every move.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let is_hook = std::env::args_os().nth(1).is_some_and(|a| a == "hook");
    if is_hook && !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::FAILURE;
    }
    e.exit()
}
