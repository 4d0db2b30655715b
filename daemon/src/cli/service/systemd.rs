//! The systemd user unit: its text, where it goes, and `systemctl --user` to start, stop and
//! ask about it. Without a user session bus (containers, CI, a login without a user
//! manager) `systemctl --user` fails; then the unit is written all the same and the
//! commands to run later are named.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::bail;

use super::file::{MARKER, Written};
use super::manager::{self, CHANGE, QUERY};

/// The unit's name.
pub const UNIT: &str = "dstream.service";

/// The only environment setting the daemon gets from the unit; HOME, USER and
/// XDG_RUNTIME_DIR come from the user manager.
pub const PATH_ENV: &str = "PATH=/usr/local/bin:/usr/bin:/bin";

/// `${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user`, where the user manager looks for the
/// user's own units (a relative XDG_CONFIG_HOME is ignored, as XDG says).
pub fn unit_dir() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| dstream_sdk::socket::home_dir().join(".config"))
        .join("systemd")
        .join("user")
}

pub fn unit_path() -> PathBuf {
    unit_dir().join(UNIT)
}

/// The link `systemctl --user enable` makes: its presence is what "enabled" means.
pub fn wants_link() -> PathBuf {
    unit_dir().join("default.target.wants").join(UNIT)
}

/// The unit that runs `argv` (program first).
pub fn unit(argv: &[String]) -> anyhow::Result<String> {
    let mut exec = String::new();
    for (i, arg) in argv.iter().enumerate() {
        if i > 0 {
            exec.push(' ');
        }
        exec.push_str(&quote(arg)?);
    }
    Ok(format!(
        "# {MARKER}
# Runs the dstream daemon at login and restarts it when it fails; see `dstream service --help`.
[Unit]
Description=dstream daemon: durable event logs and a human brake for coding agents

[Service]
Type=simple
ExecStart={exec}
Environment={PATH_ENV}
Restart=on-failure
RestartSec=2
# The daemon stops cleanly on SIGTERM; give it time to finish what it is writing.
TimeoutStopSec=30

[Install]
WantedBy=default.target
"
    ))
}

/// One word of a command line as systemd reads it: as is when it holds only characters
/// systemd gives no meaning to, else in double quotes with `\` and `"` escaped, `%`
/// (specifiers) doubled, `$` (variables) doubled and control characters as C escapes.
fn quote(arg: &str) -> anyhow::Result<String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/_.,:+=@-".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        return Ok(arg.to_owned());
    }
    let mut out = String::from("\"");
    for c in arg.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => bail!("{arg:?} holds a NUL character, which a service file cannot carry"),
            c if c.is_ascii_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    Ok(out)
}

fn systemctl(args: &[&str], timeout: std::time::Duration) -> Option<manager::Ran> {
    let mut all = vec!["--user"];
    all.extend_from_slice(args);
    manager::run("systemctl", &all, timeout)
}

/// Whether `systemctl --user` reaches a user manager; `Err` says why not.
fn user_manager() -> Result<(), String> {
    match systemctl(&["show-environment"], QUERY) {
        Some(r) if r.success => Ok(()),
        Some(r) => Err(r.said()),
        None => Err("systemctl could not be run, or did not answer within 5 s".to_owned()),
    }
}

/// After the unit at `path` was written: loads it and enables and starts it (restarts it
/// when it was rewritten, so the new command line is in force).
pub fn start(path: &Path, written: &Written) -> anyhow::Result<()> {
    if let Err(why) = user_manager() {
        println!(
            "systemctl --user is not available here ({why}), so the unit was written but not \
             started. Once you are logged in with a user session bus, run:\n  \
             systemctl --user daemon-reload\n  systemctl --user enable --now {UNIT}"
        );
        return Ok(());
    }
    let steps: &[&[&str]] = match written {
        Written::Replaced => &[&["daemon-reload"], &["enable", UNIT], &["restart", UNIT]],
        _ => &[&["daemon-reload"], &["enable", "--now", UNIT]],
    };
    for step in steps {
        let shown = format!("systemctl --user {}", step.join(" "));
        match systemctl(step, CHANGE) {
            Some(r) if r.success => {}
            Some(r) => bail!(
                "{} is written, but `{shown}` failed: {}",
                path.display(),
                r.said()
            ),
            None => bail!(
                "{} is written, but `{shown}` did not finish in time",
                path.display()
            ),
        }
    }
    println!(
        "enabled and started {UNIT}: the daemon runs now and at every login \
         (`systemctl --user status {UNIT}`, `journalctl --user -u {UNIT}`)"
    );
    Ok(())
}

/// Before the unit is removed: stops and disables it. Without a user manager, removes the
/// link that enabled it (when it leads to our unit), which `disable` would have removed.
pub fn stop(path: &Path) -> anyhow::Result<()> {
    if let Err(why) = user_manager() {
        let link = wants_link();
        if std::fs::read_link(&link).is_ok_and(|target| target == path) {
            std::fs::remove_file(&link)?;
            println!("removed the link {} that enabled it", link.display());
        }
        println!(
            "systemctl --user is not available here ({why}); a daemon it started earlier \
             may still be running"
        );
        return Ok(());
    }
    match systemctl(&["disable", "--now", UNIT], CHANGE) {
        Some(r) if r.success => println!("stopped and disabled {UNIT}"),
        Some(r) => println!(
            "`systemctl --user disable --now {UNIT}` failed ({}); removing the unit anyway",
            r.said()
        ),
        None => println!(
            "`systemctl --user disable --now {UNIT}` did not finish in time; removing the \
             unit anyway"
        ),
    }
    Ok(())
}

/// After the unit was removed: the user manager forgets it.
pub fn reload_after_removal() {
    if user_manager().is_ok() {
        let _ = systemctl(&["daemon-reload"], QUERY);
    }
}

/// Whether the unit is enabled: `systemctl --user is-enabled`, else whether the link that
/// enabling makes is there.
pub fn enabled() -> Option<bool> {
    if let Some(r) = systemctl(&["is-enabled", UNIT], QUERY) {
        // It prints the state on stdout (and exits non-zero for most); nothing without a bus.
        match r.stdout.trim() {
            "" => {}
            "enabled" | "enabled-runtime" => return Some(true),
            _ => return Some(false),
        }
    }
    Some(std::fs::symlink_metadata(wants_link()).is_ok())
}

/// Whether the user manager runs the unit; `None` without a user manager.
pub fn active() -> Option<bool> {
    let r = systemctl(&["is-active", UNIT], QUERY)?;
    match r.stdout.trim() {
        "" => None,
        state => Some(matches!(state, "active" | "reloading")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_systemd() {
        assert_eq!(quote("/usr/bin/dstream").unwrap(), "/usr/bin/dstream");
        assert_eq!(quote("/a b/c").unwrap(), "\"/a b/c\"");
        assert_eq!(
            quote("/x/100%$HOME\"\\").unwrap(),
            "\"/x/100%%$$HOME\\\"\\\\\""
        );
        assert_eq!(quote("a\nb\u{1}").unwrap(), "\"a\\nb\\x01\"");
        assert_eq!(quote("").unwrap(), "\"\"");
        assert!(quote("a\0b").is_err());
    }
}
