//! `dstream doctor [--json]`: checks that dstream is set up and running, and for each problem
//! says the command that fixes it. Exits 1 when a check fails (warnings do not fail).
//!
//! The checks, one file per area: [`daemon`] (reachable, its version, its plugins, the relay),
//! [`files`] (the socket's folder, the data dir, free space), [`hooks`] (Claude Code and
//! OpenCode installs, settings that turn hooks off), [`spool`] (events waiting on disk for the
//! daemon, lost ones), [`service`] (the user service that keeps the daemon running).

mod daemon;
mod files;
mod hooks;
mod http;
mod report;
mod service;
mod spool;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use dstream_daemon::Config;
use dstream_daemon::config::DaemonFlags;

use super::client::print_json;
use report::{Check, Context, Status};

#[derive(Args)]
pub struct DoctorArgs {
    /// Socket of the daemon [default: $DSTREAM_SOCKET, else the config's, else
    /// $XDG_RUNTIME_DIR/dstream/dstream.sock, else ~/.dstream/dstream.sock]
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Data directory [default: $DSTREAM_DATA_DIR, else the config's]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Configuration file [default: $DSTREAM_CONFIG, else
    /// $XDG_CONFIG_HOME/dstream/config.toml (~/.config/…) if it exists]
    #[arg(long, env = "DSTREAM_CONFIG")]
    config: Option<PathBuf>,
    /// Print one JSON object: {"ok": bool, "checks": [{name, status, detail, fix}]}.
    #[arg(long)]
    json: bool,
}

/// The configuration the daemon would run with (`Config::resolve`, as `dstream daemon`
/// decides); a file that cannot be used is a failure, and the defaults stand in for it.
fn load_config(args: &DoctorArgs) -> (Config, Check) {
    let flags = DaemonFlags {
        config: args.config.clone(),
        socket: args.socket.clone(),
        data_dir: args.data_dir.clone(),
        ..DaemonFlags::default()
    };
    match Config::resolve(&flags) {
        Ok(c) => {
            let from = match &c.file {
                Some(p) => p.display().to_string(),
                None => "built-in defaults".to_string(),
            };
            (c, Check::ok("config", from))
        }
        Err(e) => {
            let mut c = Config::default();
            c.apply_overrides(&flags);
            let fix = "edit the config file (the message names the key)".to_string();
            (c, Check::fail("config", e.to_string(), fix))
        }
    }
}

pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let (config, config_check) = load_config(&args);
    let socket = config.socket_path();
    let data_dir = config.data_dir();
    let mut cx = Context {
        config,
        socket,
        data_dir,
        daemon: None,
    };
    let mut checks = vec![config_check];
    let (answers, daemon_checks) = daemon::ask(&cx);
    cx.daemon = answers;
    checks.extend(daemon_checks);
    checks.extend(files::check(&cx));
    checks.extend(hooks::check(&cx));
    checks.extend(daemon::plugins(&cx));
    checks.extend(daemon::relay(&cx));
    checks.extend(spool::check(&cx));
    checks.push(http::listener(&cx));
    checks.push(http::budgets(&cx));
    checks.push(service::check());

    let ok = checks.iter().all(|c| c.status != Status::Fail);
    if args.json {
        print_json(&serde_json::json!({"ok": ok, "checks": checks}))?;
    } else {
        print_text(&checks);
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_text(checks: &[Check]) {
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in checks {
        let status = match c.status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        println!("{status:<4}  {:<width$}  {}", c.name, c.detail);
        if let Some(fix) = &c.fix {
            println!("      {:<width$}  fix: {fix}", "");
        }
    }
    let count = |s| checks.iter().filter(|c| c.status == s).count();
    let (warn, fail) = (count(Status::Warn), count(Status::Fail));
    println!(
        "{} checks: {} ok, {warn} warning{}, {fail} failed",
        checks.len(),
        count(Status::Ok),
        if warn == 1 { "" } else { "s" },
    );
}
