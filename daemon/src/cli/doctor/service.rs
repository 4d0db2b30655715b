//! Check 9: the user service that starts the daemon at login and keeps it running, as
//! `dstream service status` sees it.

use std::path::PathBuf;

use super::report::{Check, sh};

/// The service's file, when it is installed (ours, at its place).
pub fn installed() -> Option<PathBuf> {
    let status = crate::cli::service::status_report();
    status.installed.then_some(status.path)
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
    let status = crate::cli::service::status_report();
    if let Some(problem) = &status.problem {
        return Check::warn(
            NAME,
            format!("{}: {problem}", sh(&status.path)),
            "move the file away, then `dstream service install`",
        );
    }
    if !status.installed {
        return Check::warn(
            NAME,
            format!(
                "not installed ({} does not exist): the daemon runs only while started by hand \
                 or by a hook",
                sh(&status.path)
            ),
            "dstream service install",
        );
    }
    match (status.enabled, status.running) {
        (Some(false), _) => Check::warn(
            NAME,
            format!("installed ({}) but not enabled at login", sh(&status.path)),
            "dstream service install",
        ),
        (_, false) => Check::warn(
            NAME,
            format!("installed ({}) but not running", sh(&status.path)),
            start_command(),
        ),
        _ => Check::ok(NAME, format!("installed and running: {}", sh(&status.path))),
    }
}
