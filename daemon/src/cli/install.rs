//! `dstream install <agent>` and `dstream uninstall <agent>`: register dstream with an agent,
//! and take exactly that back out.
//!
//! - Claude Code: a hook entry per recorded event in a `settings.json`, running
//!   `<absolute path of the dstream-hook beside this dstream> claude-code` (the lean hook
//!   binary), or without one there `<absolute path of this dstream> hook claude-code`. The rest
//!   of the file (other settings, other hooks, the order of keys) is kept as it is.
//! - OpenCode: the plugin `scripts/opencode/dstream.js` (built into this binary) copied into
//!   OpenCode's plugin folder.
//!
//! Both write atomically (a temporary file renamed over the old one), change nothing when
//! there is nothing to change, and say what they did. They edit only a regular file, or one
//! that a symbolic link leads to (the link stays); a FIFO, a device, a dangling link, a file
//! over 16 MiB or a read-only file is refused, untouched (see [`files`]).
//!
//! The parts: [`claude_code`] (the settings file), [`claude_hooks`] (dstream's entries in
//! it), [`claude_events`] (which events), [`opencode`] (the plugin file), and what they share:
//! [`files`] (reading and writing what is at a path), [`json`] (a document edited as written)
//! and [`shell`] (the hook's command line).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::{Args, ValueEnum};

// `dstream doctor` reads back what these wrote, through the same code.
pub(super) mod claude_code;
pub(super) mod claude_events;
pub(super) mod claude_hooks;
pub(super) mod claude_telemetry;
pub(super) mod files;
pub(super) mod json;
pub(super) mod opencode;
pub(super) mod shell;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Agent {
    /// Claude Code: hooks in a settings.json.
    ClaudeCode,
    /// OpenCode: a plugin file in its plugin folder.
    Opencode,
}

/// Where to install: one project, or the user's own configuration (the default).
#[derive(Args)]
pub struct Target {
    /// Install for this project only: DIR/.claude/settings.json (Claude Code) or
    /// DIR/.opencode/plugins/ (OpenCode).
    #[arg(long, value_name = "DIR", conflicts_with = "user")]
    project: Option<PathBuf>,
    /// Install for the current user, in every project [the default]: ~/.claude/settings.json
    /// (Claude Code) or $XDG_CONFIG_HOME/opencode/plugins/ (OpenCode, else ~/.config/…).
    #[arg(long)]
    user: bool,
    /// With --project, for Claude Code: use DIR/.claude/settings.local.json, Claude Code's
    /// per-person project file, instead of the shared (usually committed) settings.json. The
    /// hook command holds this machine's path to dstream.
    #[arg(long, requires = "project")]
    local: bool,
}

#[derive(Args)]
#[command(after_long_help = INSTALL_HELP)]
pub struct InstallArgs {
    #[arg(value_enum)]
    agent: Agent,
    #[command(flatten)]
    target: Target,
    /// Claude Code events to hook: `all` [default], `core` (the events every Claude Code
    /// with hooks knows), or a comma-separated list of event names.
    #[arg(long, value_delimiter = ',', value_name = "EVENTS")]
    events: Vec<String>,
    /// Claude Code: leave its telemetry settings alone (by default they point its OTLP log
    /// exporter at dstream, for usage and cost).
    #[arg(long)]
    no_telemetry: bool,
    /// Claude Code, for the user: `http` hooks that POST to the daemon's listener (no process
    /// per event) instead of running `dstream hook`. They fail open while the daemon is down
    /// and cannot start it, so the command hook stays the default.
    #[arg(long)]
    http: bool,
}

const INSTALL_HELP: &str = "\
Claude Code: adds to the settings file, for every hook event dstream records, a hook that runs
`<absolute path of dstream-hook> claude-code` with a 600 s timeout (long enough for a person to
approve a held tool call). dstream-hook is the lean hook binary installed beside dstream (it
starts faster on every event); without one beside this dstream, the hook runs `<this dstream's
absolute path> hook claude-code`, which does the same. Other settings and other hooks are left
as they are. Running it again changes nothing; after moving the dstream binaries, running it
again points the hooks at the new path. Installing adds events and never removes any. If Claude Code reports `Invalid key
in record` for a hook event after installing, it is older than that event (and ignores the whole
file): run `dstream uninstall claude-code`, then install again with `--events core`.

OpenCode: writes the dstream plugin to .opencode/plugins/dstream.js (project) or
$XDG_CONFIG_HOME/opencode/plugins/dstream.js (user). An older dstream plugin there is replaced;
a file of that name that is not dstream's is left alone (and the command fails).

Without --project or --user, installs for the user.";

#[derive(Args)]
pub struct UninstallArgs {
    #[arg(value_enum)]
    agent: Agent,
    #[command(flatten)]
    target: Target,
}

/// The settings file to edit for Claude Code.
fn claude_settings(target: &Target) -> PathBuf {
    claude_code::settings_file(target.project.as_deref(), target.local)
}

/// What to do about Claude Code's telemetry settings: point them at dstream, or why not.
fn telemetry_for(args: &InstallArgs) -> Result<claude_telemetry::Telemetry, String> {
    if args.no_telemetry {
        return Err("--no-telemetry".into());
    }
    if args.target.project.is_some() {
        // Measured with Claude Code 2.1.330: a project's settings (shared or local) do not
        // reach its OpenTelemetry exporter, the user's do. (And a shared file must never hold
        // the token.)
        return Err(
            "Claude Code takes telemetry settings from the user's settings only: \
             `dstream install claude-code --user` adds them"
                .into(),
        );
    }
    let config = dstream_daemon::Config::resolve(&dstream_daemon::config::DaemonFlags::default())
        .map_err(|e| e.to_string())?;
    claude_telemetry::of(&config)
}

/// Where `--http` hooks post, and the token they send: the listener of the configuration a
/// daemon would run with, which must name a fixed loopback port.
fn http_hooks(target: &Target) -> anyhow::Result<claude_code::HttpHooks> {
    if target.project.is_some() {
        // The token goes in the `env` block next to the hooks, and a project's file is shared.
        bail!("--http installs for the user only (`~/.claude/settings.json` holds the token)");
    }
    let config = dstream_daemon::Config::resolve(&dstream_daemon::config::DaemonFlags::default())?;
    let addr = match config.http.listen() {
        Ok(dstream_daemon::http::settings::Listen::At(a)) if a.port() != 0 => a,
        _ => bail!(
            "--http needs the daemon's HTTP listener on a fixed port: [http] listen is {:?}",
            config.http.listen
        ),
    };
    let token = dstream_daemon::http::token::load_or_create(&config.data_dir())?;
    Ok(claude_code::HttpHooks {
        base: format!("http://{addr}"),
        token,
    })
}

/// OpenCode's plugin folder for the target.
fn opencode_plugins(target: &Target) -> anyhow::Result<PathBuf> {
    if target.local {
        bail!("--local is for Claude Code only; OpenCode has one plugin folder per project");
    }
    Ok(opencode::plugin_dir(target.project.as_deref()))
}

pub fn install(args: InstallArgs) -> anyhow::Result<ExitCode> {
    match args.agent {
        Agent::ClaudeCode => {
            let events = claude_events::chosen_events(&args.events)?;
            let telemetry = telemetry_for(&args);
            let http = if args.http {
                Some(http_hooks(&args.target)?)
            } else {
                None
            };
            claude_code::install(
                &claude_settings(&args.target),
                &events,
                telemetry,
                http.as_ref(),
            )
        }
        Agent::Opencode => {
            if !args.events.is_empty() {
                bail!("--events is for Claude Code only");
            }
            if args.http {
                bail!("--http is for Claude Code only");
            }
            opencode::install(&opencode_plugins(&args.target)?)
        }
    }?;
    Ok(ExitCode::SUCCESS)
}

pub fn uninstall(args: UninstallArgs) -> anyhow::Result<ExitCode> {
    match args.agent {
        Agent::ClaudeCode => claude_code::uninstall(&claude_settings(&args.target)),
        Agent::Opencode => opencode::uninstall(&opencode_plugins(&args.target)?),
    }?;
    Ok(ExitCode::SUCCESS)
}
