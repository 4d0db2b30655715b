//! `dstream start`: make sure a daemon is running, starting one in the background if none
//! answers. What the OpenCode plugin and the SDKs run (with `--auto`) when they find no daemon;
//! `--json` also tells them where to spool events if none can be started.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use dstream_daemon::autostart::{self, Launch, Started};
use dstream_daemon::config::{Config, DaemonFlags};
use serde_json::json;

/// Exit code of `--auto` when autostart is off.
const AUTOSTART_OFF: u8 = 3;

#[derive(Args)]
pub struct StartArgs {
    /// Configuration file [env: DSTREAM_CONFIG; default: ~/.config/dstream/config.toml if it exists].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Socket path [env: DSTREAM_SOCKET; overrides the config file].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Data directory [env: DSTREAM_DATA_DIR; overrides the config file].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// How long to wait for the daemon to answer [default: $DSTREAM_AUTOSTART_WAIT_MS, else 2000].
    #[arg(long)]
    wait_ms: Option<u64>,
    /// Start only if autostart is on (`daemon.autostart`, DSTREAM_AUTOSTART); exit 3 if off.
    #[arg(long)]
    auto: bool,
    /// Print one JSON object: the socket, the data and spool folders, what happened.
    #[arg(long)]
    json: bool,
}

pub fn run(args: StartArgs) -> anyhow::Result<ExitCode> {
    let config = Config::resolve(&DaemonFlags {
        config: args.config,
        socket: args.socket,
        data_dir: args.data_dir,
        ..DaemonFlags::default()
    })?;
    let launch = Launch {
        exe: std::env::current_exe()?,
        config: config.file.clone(),
        socket: config.socket_path(),
        data_dir: config.data_dir(),
    };
    let wait = args
        .wait_ms
        .map(Duration::from_millis)
        .unwrap_or_else(autostart::wait_bound);
    let off = args.auto && (!config.daemon.autostart || autostart::disabled_by_env());
    let result = if off {
        None
    } else {
        Some(autostart::ensure_running(&launch, wait))
    };
    let (started, pid, error) = match &result {
        None => ("off", None, None),
        Some(Ok(Started::AlreadyRunning)) => ("already", None, None),
        Some(Ok(Started::ByUs(pid))) => ("now", Some(*pid), None),
        Some(Ok(Started::ByOther)) => ("other", None, None),
        Some(Err(e)) => ("failed", None, Some(e.to_string())),
    };
    if args.json {
        println!(
            "{}",
            json!({
                "socket": launch.socket,
                "data_dir": launch.data_dir,
                "spool_dir": dstream_daemon::spool::spool_dir(&launch.data_dir),
                "spool_max_bytes": config.daemon.spool_max_bytes,
                "started": started,
                "pid": pid,
                "error": error,
            })
        );
    } else {
        match (started, &error) {
            ("off", _) => println!("autostart is off (daemon.autostart, DSTREAM_AUTOSTART)"),
            (_, Some(e)) => eprintln!("dstream: {e}"),
            ("now", _) => println!(
                "started the daemon (pid {}) on {}; its log: {}",
                pid.unwrap_or_default(),
                launch.socket.display(),
                autostart::log_path(&launch.data_dir).display()
            ),
            _ => println!("the daemon is running on {}", launch.socket.display()),
        }
    }
    Ok(match (started, error) {
        ("off", _) => ExitCode::from(AUTOSTART_OFF),
        (_, Some(_)) => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    })
}
