//! `dstream service install|uninstall|status`: run the daemon at login, restarted when it
//! fails, as a systemd user unit (Linux) or a launchd agent (macOS).
//!
//! The parts: [`systemd`] and [`launchd`] (each: the file it writes, where, and the service
//! manager's commands), [`file`] (writing and removing only a file that carries our marker),
//! [`manager`] (running the service manager's command line with a deadline) and [`status`]
//! (what `status` and, later, `dstream doctor` report). Both file generators are plain
//! functions compiled on every OS, so `dstream service print` shows either anywhere.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueEnum};

mod file;
mod launchd;
mod manager;
mod status;
mod systemd;

pub(crate) use status::status_report;

#[derive(Args)]
pub struct ServiceArgs {
    #[command(subcommand)]
    command: ServiceCommand,
}

#[derive(Subcommand)]
enum ServiceCommand {
    /// Write the unit (or agent) and start it: the daemon then runs at every login, and is
    /// restarted when it fails. Running it again rewrites it.
    #[command(after_long_help = INSTALL_HELP)]
    Install(DaemonFlags),
    /// Stop the daemon started by `install` and remove the file it wrote, and nothing else.
    Uninstall,
    /// Say whether the service is installed, enabled and running (exits 0 either way).
    Status(StatusArgs),
    /// Print the file `install` would write, writing nothing (for your own unit management).
    #[command(hide = true)]
    Print(PrintArgs),
}

const INSTALL_HELP: &str = "\
Linux: writes ${XDG_CONFIG_HOME:-~/.config}/systemd/user/dstream.service, then runs `systemctl
--user daemon-reload` and `systemctl --user enable --now dstream.service` when a user session
bus is there (else it says which commands to run later). macOS: writes
~/Library/LaunchAgents/dev.dstream.daemon.plist and loads it with `launchctl bootstrap`.

The service runs `<this dstream's absolute path> daemon`, with --config, --socket and
--data-dir only when given here, and PATH=/usr/local/bin:/usr/bin:/bin as its only
environment setting: nothing of this shell's environment (API keys included) is copied into it.
A file at that path that `dstream service install` did not write is left alone (and the
command fails).";

/// The daemon's own flags, passed through to `dstream daemon` only when given.
#[derive(Args, Clone, Default)]
struct DaemonFlags {
    /// Configuration file for the daemon [default: the daemon's own default].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Socket path for the daemon.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Data directory for the daemon.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[derive(Args)]
struct StatusArgs {
    /// Print one JSON object: kind, path, installed, enabled (null when unknown), running.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct PrintArgs {
    /// Which file [default: this OS's: launchd on macOS, systemd elsewhere].
    #[arg(long, value_enum)]
    kind: Option<Kind>,
    #[command(flatten)]
    flags: DaemonFlags,
}

/// The service manager a file is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Kind {
    Systemd,
    Launchd,
}

impl Kind {
    /// This OS's service manager: launchd on macOS, systemd elsewhere.
    pub(crate) fn native() -> Kind {
        if cfg!(target_os = "macos") {
            Kind::Launchd
        } else {
            Kind::Systemd
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Systemd => "systemd",
            Kind::Launchd => "launchd",
        }
    }

    /// Where `install` writes the file for this kind.
    pub(crate) fn path(self) -> PathBuf {
        match self {
            Kind::Systemd => systemd::unit_path(),
            Kind::Launchd => launchd::plist_path(),
        }
    }
}

/// What the service runs, resolved at install time: the daemon's arguments (program first)
/// and where launchd sends its output.
struct Launch {
    argv: Vec<String>,
    log: PathBuf,
}

impl Launch {
    /// `<this dstream, canonical> daemon [--config P] [--socket P] [--data-dir P]`, every
    /// path absolute (the service manager starts it in another directory).
    fn resolve(flags: &DaemonFlags) -> anyhow::Result<Launch> {
        let exe = std::env::current_exe()
            .and_then(|p| p.canonicalize())
            .context("finding the path of this dstream executable")?;
        let mut argv = vec![utf8(&exe)?, "daemon".to_owned()];
        let config = match &flags.config {
            Some(path) => {
                let path = absolute(path)?;
                // Refuse now what the daemon would refuse at every login.
                let config = dstream_daemon::Config::load(&path)?;
                argv.extend(["--config".to_owned(), utf8(&path)?]);
                config
            }
            None => dstream_daemon::Config::default(),
        };
        if let Some(socket) = &flags.socket {
            argv.extend(["--socket".to_owned(), utf8(&absolute(socket)?)?]);
        }
        let data_dir = match &flags.data_dir {
            Some(dir) => {
                let dir = absolute(dir)?;
                argv.extend(["--data-dir".to_owned(), utf8(&dir)?]);
                dir
            }
            None => absolute(&config.data_dir())?,
        };
        Ok(Launch {
            argv,
            log: data_dir.join("daemon.log"),
        })
    }

    /// The file for `kind`, as `install` writes it.
    fn render(&self, kind: Kind) -> anyhow::Result<String> {
        match kind {
            Kind::Systemd => systemd::unit(&self.argv),
            Kind::Launchd => launchd::plist(&self.argv, &self.log),
        }
    }
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("making {} absolute", path.display()))
}

/// Unit files and plists are text: a path that is not UTF-8 cannot be written into one.
fn utf8(path: &Path) -> anyhow::Result<String> {
    match path.to_str() {
        Some(s) => Ok(s.to_owned()),
        None => bail!(
            "{} is not valid UTF-8, which a service file cannot hold",
            path.display()
        ),
    }
}

pub fn run(args: ServiceArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ServiceCommand::Install(flags) => install(&flags)?,
        ServiceCommand::Uninstall => uninstall()?,
        ServiceCommand::Status(a) => status::print(&status_report(), a.json),
        ServiceCommand::Print(a) => {
            let kind = a.kind.unwrap_or_else(Kind::native);
            print!("{}", Launch::resolve(&a.flags)?.render(kind)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The kind `install` and `uninstall` manage here: none on an OS with neither manager.
fn managed_kind() -> anyhow::Result<Kind> {
    if cfg!(any(target_os = "linux", target_os = "macos")) {
        Ok(Kind::native())
    } else {
        bail!(
            "dstream service supports systemd (Linux) and launchd (macOS); `dstream service \
             print --kind systemd|launchd` shows the file to adapt for this system"
        )
    }
}

fn install(flags: &DaemonFlags) -> anyhow::Result<()> {
    let kind = managed_kind()?;
    let launch = Launch::resolve(flags)?;
    let content = launch.render(kind)?;
    let path = kind.path();
    let changed = file::write_ours(&path, &content)?;
    match &changed {
        file::Written::Created => println!("wrote {}", path.display()),
        file::Written::Replaced => println!("rewrote {}", path.display()),
        file::Written::Unchanged => println!("{} is already as it should be", path.display()),
    }
    match kind {
        Kind::Systemd => systemd::start(&path, &changed),
        Kind::Launchd => {
            // launchd does not create the folders of StandardOutPath.
            if let Some(dir) = launch.log.parent() {
                dstream_daemon::autostart::make_private_dir(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            launchd::start(&path, &changed)
        }
    }
}

fn uninstall() -> anyhow::Result<()> {
    let kind = managed_kind()?;
    let path = kind.path();
    match file::check_ours(&path)? {
        file::Found::Missing => {
            println!(
                "nothing installed: {} does not exist; nothing changed",
                path.display()
            );
            return Ok(());
        }
        file::Found::Ours => {}
    }
    match kind {
        Kind::Systemd => systemd::stop(&path)?,
        Kind::Launchd => launchd::stop(),
    }
    file::remove_ours(&path)?;
    println!("removed {}", path.display());
    if kind == Kind::Systemd {
        systemd::reload_after_removal();
    }
    Ok(())
}
