//! `dstream daemon`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use dstream_daemon::Config;
use dstream_daemon::config::DaemonFlags;

#[derive(Args)]
pub struct DaemonArgs {
    /// Configuration file; keys it leaves out keep their defaults (see config.toml)
    /// [env: DSTREAM_CONFIG; default: ~/.config/dstream/config.toml if it exists].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Socket path [env: DSTREAM_SOCKET; overrides the config file].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Data directory [env: DSTREAM_DATA_DIR; overrides the config file].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Plugin folder [default: plugins.dir, else $XDG_CONFIG_HOME/dstream/plugins, else ~/.config/dstream/plugins].
    #[arg(long)]
    plugin_dir: Option<PathBuf>,
    /// Where the HTTP listener listens: a loopback address and port, 0 (a free port, which
    /// `dstream stats` names) or off [env: DSTREAM_HTTP_LISTEN; default: [http] listen].
    #[arg(long)]
    http_listen: Option<String>,
}

pub fn run(args: DaemonArgs) -> anyhow::Result<ExitCode> {
    return_big_buffers_to_the_os();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let mut config = Config::resolve(&DaemonFlags {
        config: args.config,
        socket: args.socket,
        data_dir: args.data_dir,
        http_listen: args.http_listen,
    })?;
    config.plugin_dir_override = args.plugin_dir;
    raise_open_file_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(dstream_daemon::server::run_until_signal(config))?;
    Ok(ExitCode::SUCCESS)
}

/// Each active session holds its log open; lift the soft limit on open files to the hard one.
fn raise_open_file_limit() {
    #[cfg(unix)]
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Buffers of 4 MiB and more (big frames, big read pages) are mapped on their own and
/// unmapped when freed. glibc otherwise raises its mmap threshold after the first such free
/// and keeps later ones in per-thread arenas, so a daemon that once handled a few 16 MiB
/// frames would stay that big however idle it is. Not lower: recovery reads every log through
/// a 1 MiB buffer, and mapping that afresh per session made a 10,000-session restart 4x slower.
/// Pinning the threshold also pins the trim threshold at its 128 KiB default, and trimming
/// the heap that eagerly cost the same restart another ~45%; 8 MiB is where glibc would have
/// put it.
fn return_big_buffers_to_the_os() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes the allocator; called before any thread is started.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 8 << 20);
    }
}
