//! `dstream service status`: whether the service is installed, enabled and running. The
//! report is a value of its own so that other commands (`dstream doctor`) can use it.

use std::path::PathBuf;

use serde::Serialize;

use super::{Kind, file, launchd, systemd};

/// How the service stands. Serialized as `dstream service status --json` prints it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ServiceStatus {
    /// `systemd` or `launchd`.
    pub kind: &'static str,
    /// Where the unit or plist is (or would be).
    pub path: PathBuf,
    /// A file of ours is at `path`.
    pub installed: bool,
    /// The service manager starts it at login; `None` when that cannot be known.
    pub enabled: Option<bool>,
    /// The service manager runs it (when it can be asked), else a daemon answers on the
    /// default socket.
    pub running: bool,
    /// Why `installed` is false although something is at `path` (not ours, not readable).
    #[serde(skip)]
    pub problem: Option<String>,
}

/// Looks at this OS's service: the file, the service manager (with a deadline), the socket.
pub(crate) fn status_report() -> ServiceStatus {
    let kind = Kind::native();
    let path = kind.path();
    let (installed, problem) = match file::probe(&path) {
        Ok(None) => (false, None),
        Ok(Some(true)) => (true, None),
        Ok(Some(false)) => (
            false,
            Some("a file is there that `dstream service install` did not write".to_owned()),
        ),
        Err(e) => (false, Some(format!("{e:#}"))),
    };
    let (enabled, managed_running) = match kind {
        Kind::Systemd => (systemd::enabled(), systemd::active()),
        Kind::Launchd => match launchd::loaded_and_running() {
            Some((loaded, running)) => (Some(loaded), Some(running)),
            None => (None, None),
        },
    };
    ServiceStatus {
        kind: kind.name(),
        path,
        installed,
        enabled,
        running: managed_running.unwrap_or_else(daemon_answers),
        problem,
    }
}

/// Whether a daemon accepts connections on the default socket (`DSTREAM_SOCKET`, else the
/// platform's default).
fn daemon_answers() -> bool {
    let socket = dstream_sdk::socket::default_socket_path();
    #[cfg(unix)]
    {
        std::os::unix::net::UnixStream::connect(socket).is_ok()
    }
    #[cfg(not(unix))]
    {
        let _ = socket;
        false
    }
}

pub(crate) fn print(status: &ServiceStatus, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string(status).expect("a status serializes")
        );
        return;
    }
    let what = match status.kind {
        "launchd" => "launchd agent",
        _ => "systemd user unit",
    };
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    println!("{what}: {}", status.path.display());
    match &status.problem {
        Some(problem) => println!("installed: no ({problem})"),
        None => println!("installed: {}", yes_no(status.installed)),
    }
    match status.enabled {
        Some(b) => println!("enabled:   {}", yes_no(b)),
        None => println!("enabled:   unknown ({} cannot be asked here)", status.kind),
    }
    println!("running:   {}", yes_no(status.running));
}
