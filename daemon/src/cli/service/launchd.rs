//! The launchd agent: its property list, where it goes, and `launchctl` to load, unload and
//! ask about it.
//!
//! The XML is written here rather than with a plist library: it is one fixed dictionary of
//! strings and booleans, and escaping five characters is all a string needs, so a
//! dependency (and its XML writer) in the daemon would buy nothing. The tests parse it with
//! a real plist parser.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::file::{MARKER, Written};
use super::manager::{self, CHANGE, QUERY};

/// The agent's label, also the plist's file name.
pub const LABEL: &str = "dev.dstream.daemon";

/// The daemon's whole environment, as in the systemd unit.
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `~/Library/LaunchAgents/dev.dstream.daemon.plist`.
pub fn plist_path() -> PathBuf {
    dstream_sdk::socket::home_dir()
        .join("Library")
        .join("LaunchAgents")
        .join(format!("{LABEL}.plist"))
}

/// The agent that runs `argv` (program first), its output appended to `log`.
pub fn plist(argv: &[String], log: &Path) -> anyhow::Result<String> {
    let Some(log) = log.to_str() else {
        bail!(
            "{} is not valid UTF-8, which a plist cannot hold",
            log.display()
        );
    };
    let mut args = String::new();
    for arg in argv {
        args.push_str(&format!("\t\t<string>{}</string>\n", escape(arg)?));
    }
    let log = escape(log)?;
    Ok(format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- {MARKER} -->
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>{LABEL}</string>
	<key>ProgramArguments</key>
	<array>
{args}	</array>
	<key>EnvironmentVariables</key>
	<dict>
		<key>PATH</key>
		<string>{PATH}</string>
	</dict>
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<dict>
		<key>SuccessfulExit</key>
		<false/>
	</dict>
	<key>StandardOutPath</key>
	<string>{log}</string>
	<key>StandardErrorPath</key>
	<string>{log}</string>
	<key>ProcessType</key>
	<string>Background</string>
</dict>
</plist>
"#
    ))
}

/// `text` as XML character data. XML 1.0 cannot carry most control characters at all.
fn escape(text: &str) -> anyhow::Result<String> {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {
                bail!("{text:?} holds a control character, which a plist cannot carry")
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// `gui/<uid>`, the launchd domain of this user's login session.
fn domain() -> String {
    #[cfg(unix)]
    let uid = unsafe { libc::getuid() };
    #[cfg(not(unix))]
    let uid = 0;
    format!("gui/{uid}")
}

fn service() -> String {
    format!("{}/{LABEL}", domain())
}

fn launchctl(args: &[&str], timeout: std::time::Duration) -> Option<manager::Ran> {
    manager::run("launchctl", args, timeout)
}

/// Whether launchd has the agent loaded, and whether it runs; `None` when `launchctl` cannot
/// be asked.
pub fn loaded_and_running() -> Option<(bool, bool)> {
    let r = launchctl(&["print", &service()], QUERY)?;
    if !r.success {
        return Some((false, false));
    }
    let running = r.stdout.lines().any(|l| l.trim() == "state = running");
    Some((true, running))
}

/// After the plist at `path` was written: loads it (again, when it changed), which starts
/// the daemon.
pub fn start(path: &Path, written: &Written) -> anyhow::Result<()> {
    let shown = path.display();
    let bootstrap = format!("launchctl bootstrap {} {shown}", domain());
    match loaded_and_running() {
        None => {
            println!(
                "launchctl could not be run, so the agent was written but not loaded; in your \
                 login session, run:\n  {bootstrap}"
            );
            return Ok(());
        }
        Some((true, _)) if matches!(written, Written::Unchanged) => {
            println!("{LABEL} is already loaded; nothing else to do");
            return Ok(());
        }
        // Loaded with an older plist: unloaded (which stops the daemon) to load the new one.
        Some((true, _)) => {
            let _ = launchctl(&["bootout", &service()], CHANGE);
        }
        Some((false, _)) => {}
    }
    let Some(path) = path.to_str() else {
        bail!("{shown} is not valid UTF-8");
    };
    match launchctl(&["bootstrap", &domain(), path], CHANGE) {
        Some(r) if r.success => {
            println!("loaded {LABEL}: the daemon runs now and at every login");
            Ok(())
        }
        Some(r) => bail!("{shown} is written, but `{bootstrap}` failed: {}", r.said()),
        None => bail!("{shown} is written, but `{bootstrap}` did not finish in time"),
    }
}

/// Before the plist is removed: unloads the agent, which stops the daemon.
pub fn stop() {
    match loaded_and_running() {
        None => println!("launchctl could not be run; a daemon it started may still be running"),
        Some((false, _)) => {}
        Some((true, _)) => match launchctl(&["bootout", &service()], CHANGE) {
            Some(r) if r.success => println!("unloaded {LABEL} (the daemon was stopped)"),
            Some(r) => println!(
                "`launchctl bootout {}` failed ({}); removing the plist anyway",
                service(),
                r.said()
            ),
            None => println!(
                "`launchctl bootout {}` did not finish in time; removing the plist anyway",
                service()
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_for_xml() {
        assert_eq!(
            escape("a&b<c>\"d'").unwrap(),
            "a&amp;b&lt;c&gt;&quot;d&apos;"
        );
        assert!(escape("a\u{1}b").is_err());
    }
}
