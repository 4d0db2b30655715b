//! Check 9: the user service that starts the daemon at login and keeps it running. Only
//! whether its file is there; `dstream service install` writes it (when that command knows
//! more, this asks it instead).

use std::path::PathBuf;

use super::{Check, sh};

/// Where the service's file is: the systemd user unit, or the launchd agent on macOS.
pub fn unit_path() -> PathBuf {
    let home = dstream_sdk::socket::home_dir();
    if cfg!(target_os = "macos") {
        return home.join("Library/LaunchAgents/dev.dstream.daemon.plist");
    }
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(".config"))
        .join("systemd/user/dstream.service")
}

/// The service's file, when it is installed.
pub fn installed() -> Option<PathBuf> {
    Some(unit_path()).filter(|p| p.is_file())
}

/// Starts the installed service.
pub fn start_command() -> &'static str {
    if cfg!(target_os = "macos") {
        "launchctl kickstart gui/$(id -u)/dev.dstream.daemon"
    } else {
        "systemctl --user start dstream"
    }
}

/// Restarts the installed service (a new binary, a new version).
pub fn restart_command() -> &'static str {
    if cfg!(target_os = "macos") {
        "launchctl kickstart -k gui/$(id -u)/dev.dstream.daemon"
    } else {
        "systemctl --user restart dstream"
    }
}

pub fn check() -> Check {
    const NAME: &str = "service";
    match installed() {
        Some(p) => Check::ok(NAME, format!("installed: {}", p.display())),
        None => Check::warn(
            NAME,
            format!(
                "not installed ({} does not exist): the daemon runs only while started by hand",
                sh(&unit_path())
            ),
            "dstream service install",
        ),
    }
}
