//! `dstream service install|uninstall|status|print`, run as the real binary with HOME,
//! XDG_CONFIG_HOME and XDG_RUNTIME_DIR in a temporary folder and no session bus address, so
//! `systemctl --user` finds no user manager and no real init system is touched.
#![cfg(unix)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use dstream_tests::serde_json::{self, Value, json};
use dstream_tests::{Daemon, daemon_bin, mode_of, output_within, skip};

const MARKER_LINE: &str =
    "# Written by `dstream service install`; `dstream service uninstall` removes it.";
/// An API key in the installer's environment, which must not reach the service's file.
const SECRET: &str = "sk-ant-api03-service-test-must-not-leak";
const TIMEOUT: Duration = Duration::from_secs(30);

/// A temporary home, and a `dstream` reached through a path with a space in it.
struct Home {
    tmp: tempfile::TempDir,
    bin: PathBuf,
}

impl Home {
    fn new() -> Home {
        let real = daemon_bin();
        // Next to the binary, so a hard link works (same file system) and stays cheap.
        let tmp = tempfile::Builder::new()
            .prefix("service-")
            .tempdir_in(real.parent().unwrap())
            .expect("tempdir");
        let bin_dir = tmp.path().join("my bin");
        fs::create_dir_all(&bin_dir).unwrap();
        let bin = bin_dir.join("dstream");
        if fs::hard_link(&real, &bin).is_err() {
            dstream_tests::copy_executable(&real, &bin);
        }
        for dir in ["home", "config", "run", "data"] {
            fs::create_dir_all(tmp.path().join(dir)).unwrap();
        }
        Home { tmp, bin }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn unit_path(&self) -> PathBuf {
        self.path("config/systemd/user/dstream.service")
    }

    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(self.tmp.path())
            .env("HOME", self.path("home"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("XDG_RUNTIME_DIR", self.path("run"))
            .env("XDG_DATA_HOME", self.path("data"))
            .env("ANTHROPIC_API_KEY", SECRET)
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env_remove("DSTREAM_SOCKET")
            .env_remove("DSTREAM_CONFIG")
            .env_remove("DSTREAM_DATA_DIR");
        cmd
    }

    fn dstream(&self, args: &[&str]) -> Output {
        output_within(self.command(&self.bin).args(args), TIMEOUT)
    }

    fn status(&self) -> Value {
        let out = self.dstream(&["service", "status", "--json"]);
        assert!(out.status.success(), "status failed: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "expected success: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A path as systemd must read it inside double quotes (the test paths hold no `"`, `\`, `$`).
fn quoted(path: &Path) -> String {
    format!("\"{}\"", path.to_str().unwrap().replace('%', "%%"))
}

#[cfg(target_os = "linux")]
#[test]
fn install_writes_a_unit_that_systemd_accepts() {
    let home = Home::new();
    let config = home.path("my conf/dstream 100%.toml");
    fs::create_dir_all(config.parent().unwrap()).unwrap();
    fs::write(&config, "# only defaults\n").unwrap();
    let out = home.dstream(&[
        "service",
        "install",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        "data dir", // relative: made absolute against the installer's folder
    ]);
    let stdout = ok(&out);
    let unit = home.unit_path();
    assert!(stdout.contains(unit.to_str().unwrap()), "{stdout}");
    // No user manager here: it says so, and what to run later.
    assert!(
        stdout.contains("systemctl --user enable --now dstream.service"),
        "{stdout}"
    );

    let content = fs::read_to_string(&unit).expect("the unit was written");
    assert_eq!(mode_of(&unit), 0o644);
    assert_eq!(content.lines().next(), Some(MARKER_LINE));
    let exe = home.bin.canonicalize().unwrap();
    let exec = format!(
        "ExecStart={} daemon --config {} --data-dir {}",
        quoted(&exe),
        quoted(&config),
        quoted(&home.path("data dir")),
    );
    let lines: Vec<&str> = content.lines().collect();
    for line in [
        exec.as_str(),
        "Type=simple",
        "Environment=PATH=/usr/local/bin:/usr/bin:/bin",
        "Restart=on-failure",
        "RestartSec=2",
        "TimeoutStopSec=30",
        "WantedBy=default.target",
    ] {
        assert!(lines.contains(&line), "no line {line:?} in\n{content}");
    }
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("Environment"))
            .count(),
        1,
        "{content}"
    );
    assert!(!content.contains(SECRET), "{content}");
    assert!(
        !content.contains("--socket"),
        "no --socket was given: {content}"
    );

    // systemd's own parser: the unit must load without a complaint, and the ExecStart binary
    // (behind a path with a space) must be found.
    let Some(verified) = verify(&home, &unit) else {
        return;
    };
    assert!(verified.status.success(), "{}", text(&verified.stderr));
    let complaints: Vec<String> = text(&verified.stderr)
        .lines()
        .filter(|l| l.contains("dstream.service"))
        .map(str::to_owned)
        .collect();
    assert!(complaints.is_empty(), "systemd-analyze: {complaints:?}");
    // The same check fails a unit whose program path is not quoted: it can fail.
    let broken_dir = home.path("broken");
    fs::create_dir_all(&broken_dir).unwrap();
    let broken = broken_dir.join("dstream.service");
    fs::write(
        &broken,
        content.replace(&quoted(&exe), exe.to_str().unwrap()),
    )
    .unwrap();
    let refused = verify(&home, &broken).unwrap();
    assert!(
        !refused.status.success(),
        "systemd-analyze accepted an unquoted path with a space: {}",
        text(&refused.stderr)
    );
}

/// `systemd-analyze verify` of `unit` as a user unit; `None` (a recorded skip) without it.
#[cfg(target_os = "linux")]
fn verify(home: &Home, unit: &Path) -> Option<Output> {
    let found = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        skip(
            "install_writes_a_unit_that_systemd_accepts",
            "systemd-analyze is not installed (Debian package systemd); the unit was not \
             checked by systemd's parser",
        );
        return None;
    }
    // --user: checked as the user manager would load it; --man=no: Documentation= links are
    // not looked up in man pages that may not be installed.
    Some(output_within(
        home.command(Path::new("systemd-analyze"))
            .args(["verify", "--user", "--man=no"])
            .arg(unit),
        TIMEOUT,
    ))
}

#[test]
fn the_launchd_plist_parses_with_the_expected_keys() {
    let home = Home::new();
    let data = home.path("d&<x> 'y'");
    let out = home.dstream(&[
        "service",
        "print",
        "--kind",
        "launchd",
        "--socket",
        "/tmp/s \"q\".sock",
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    assert!(!stdout.contains(SECRET));
    let value = plist::Value::from_reader_xml(stdout.as_bytes())
        .unwrap_or_else(|e| panic!("not a plist ({e}):\n{stdout}"));
    let dict = value.as_dictionary().expect("a dictionary");
    let mut keys: Vec<&str> = dict.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "EnvironmentVariables",
            "KeepAlive",
            "Label",
            "ProcessType",
            "ProgramArguments",
            "RunAtLoad",
            "StandardErrorPath",
            "StandardOutPath",
        ]
    );
    let string = |key: &str| dict[key].as_string().unwrap().to_owned();
    assert_eq!(string("Label"), "dev.dstream.daemon");
    assert_eq!(string("ProcessType"), "Background");
    let log = data.join("daemon.log");
    assert_eq!(string("StandardOutPath"), log.to_str().unwrap());
    assert_eq!(string("StandardErrorPath"), log.to_str().unwrap());
    assert_eq!(dict["RunAtLoad"].as_boolean(), Some(true));
    let keep_alive = dict["KeepAlive"].as_dictionary().unwrap();
    assert_eq!(keep_alive.len(), 1);
    assert_eq!(keep_alive["SuccessfulExit"].as_boolean(), Some(false));
    let env = dict["EnvironmentVariables"].as_dictionary().unwrap();
    assert_eq!(env.len(), 1, "PATH only");
    assert_eq!(
        env["PATH"].as_string(),
        Some("/usr/local/bin:/usr/bin:/bin")
    );
    let args: Vec<&str> = dict["ProgramArguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_string().unwrap())
        .collect();
    let exe = home.bin.canonicalize().unwrap();
    assert_eq!(
        args,
        [
            exe.to_str().unwrap(),
            "daemon",
            "--socket",
            "/tmp/s \"q\".sock",
            "--data-dir",
            data.to_str().unwrap(),
        ]
    );
    // Printing writes nothing.
    assert!(!home.path("home/Library").exists());
    let out = home.dstream(&["service", "print", "--kind", "systemd"]);
    assert!(ok(&out).starts_with(MARKER_LINE));
    assert!(!home.path("config/systemd").exists());
}

#[cfg(target_os = "linux")]
#[test]
fn install_twice_changes_nothing_and_new_flags_rewrite_it() {
    let home = Home::new();
    ok(&home.dstream(&["service", "install"]));
    let unit = home.unit_path();
    let first = fs::read(&unit).unwrap();
    let again = ok(&home.dstream(&["service", "install"]));
    assert!(again.contains("already"), "{again}");
    assert_eq!(fs::read(&unit).unwrap(), first);
    let entries = fs::read_dir(unit.parent().unwrap()).unwrap().count();
    assert_eq!(entries, 1, "no temporary file left behind");

    let socket = home.path("run/other.sock");
    ok(&home.dstream(&["service", "install", "--socket", socket.to_str().unwrap()]));
    let rewritten = fs::read_to_string(&unit).unwrap();
    assert!(
        rewritten.contains(&format!("daemon --socket {}\n", socket.display())),
        "{rewritten}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_unit_that_is_not_ours_is_never_overwritten_or_removed() {
    let home = Home::new();
    let unit = home.unit_path();
    fs::create_dir_all(unit.parent().unwrap()).unwrap();
    let mine = "[Unit]\nDescription=my own dstream\n\n[Service]\nExecStart=/opt/dstream daemon\n";
    fs::write(&unit, mine).unwrap();

    let out = home.dstream(&["service", "install"]);
    assert!(!out.status.success(), "install overwrote a foreign unit");
    assert!(
        text(&out.stderr).contains(unit.to_str().unwrap()),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(fs::read_to_string(&unit).unwrap(), mine);

    let status = home.status();
    assert_eq!(status["installed"], json!(false));
    assert_eq!(status["path"], json!(unit));

    let out = home.dstream(&["service", "uninstall"]);
    assert!(!out.status.success(), "uninstall accepted a foreign unit");
    assert!(
        text(&out.stderr).contains(unit.to_str().unwrap()),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(fs::read_to_string(&unit).unwrap(), mine);
}

#[cfg(target_os = "linux")]
#[test]
fn uninstall_removes_exactly_what_install_wrote() {
    let home = Home::new();
    let unit = home.unit_path();
    let dir = unit.parent().unwrap().to_path_buf();
    fs::create_dir_all(&dir).unwrap();
    let other = dir.join("other.service");
    fs::write(&other, "[Service]\nExecStart=/bin/true\n").unwrap();
    ok(&home.dstream(&["service", "install"]));
    // As `systemctl --user enable` would have linked it.
    let wants = dir.join("default.target.wants");
    fs::create_dir_all(&wants).unwrap();
    symlink(&unit, wants.join("dstream.service")).unwrap();
    symlink(&other, wants.join("other.service")).unwrap();
    let status = home.status();
    assert_eq!(status["installed"], json!(true));
    assert_eq!(status["enabled"], json!(true));

    let out = ok(&home.dstream(&["service", "uninstall"]));
    assert!(
        out.contains(&format!("removed {}", unit.display())),
        "{out}"
    );
    assert!(!unit.exists());
    assert!(fs::symlink_metadata(wants.join("dstream.service")).is_err());
    assert!(other.exists());
    assert!(fs::symlink_metadata(wants.join("other.service")).is_ok());

    let out = ok(&home.dstream(&["service", "uninstall"]));
    assert!(out.contains("nothing installed"), "{out}");
    let status = home.status();
    assert_eq!(status["installed"], json!(false));
    assert_eq!(status["enabled"], json!(false));
}

#[cfg(target_os = "linux")]
#[test]
fn status_reports_installed_and_a_running_daemon() {
    let home = Home::new();
    let unit = home.unit_path();
    assert_eq!(
        home.status(),
        json!({"kind": "systemd", "path": unit, "installed": false, "enabled": false,
               "running": false})
    );
    ok(&home.dstream(&["service", "install"]));
    assert_eq!(
        home.status(),
        json!({"kind": "systemd", "path": unit, "installed": true, "enabled": false,
               "running": false})
    );
    // Without a user manager, "running" is whether a daemon answers on the socket.
    let daemon = Daemon::start();
    let out = output_within(
        home.command(&home.bin)
            .args(["service", "status", "--json"])
            .env("DSTREAM_SOCKET", daemon.socket()),
        TIMEOUT,
    );
    let status: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(status["running"], json!(true));
    // The plain report says the same, and exits 0 whatever it finds.
    let out = ok(&home.dstream(&["service", "status"]));
    assert!(out.contains("installed: yes"), "{out}");
    assert!(out.contains("running:   no"), "{out}");
}

/// A `systemctl` first on PATH that logs its arguments and answers as a user manager would;
/// `FAKE_SYSTEMCTL_FAIL=<verb>` makes that verb fail.
#[cfg(target_os = "linux")]
fn fake_systemctl(home: &Home) -> (String, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = home.path("fake bin");
    fs::create_dir_all(&dir).unwrap();
    let log = home.path("systemctl.log");
    let script = dir.join("systemctl");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             echo \"$*\" >> '{}'\n\
             if [ \"$2\" = \"$FAKE_SYSTEMCTL_FAIL\" ]; then echo \"Failed to $2 unit: boom\" >&2; exit 1; fi\n\
             case \"$2\" in is-enabled) echo enabled ;; is-active) echo active ;; esac\n",
            log.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (path, log)
}

/// The calls the fake `systemctl` logged since the last look, and forgets them.
#[cfg(target_os = "linux")]
fn calls(log: &Path) -> Vec<String> {
    let text = fs::read_to_string(log).unwrap_or_default();
    let _ = fs::remove_file(log);
    text.lines().map(str::to_owned).collect()
}

#[cfg(target_os = "linux")]
#[test]
fn with_a_user_manager_install_enables_and_uninstall_disables() {
    let home = Home::new();
    let (path, log) = fake_systemctl(&home);
    let run = |args: &[&str], fail: &str| {
        output_within(
            home.command(&home.bin)
                .args(args)
                .env("PATH", &path)
                .env("FAKE_SYSTEMCTL_FAIL", fail),
            TIMEOUT,
        )
    };
    let out = ok(&run(&["service", "install"], ""));
    assert!(out.contains("enabled and started dstream.service"), "{out}");
    assert_eq!(
        calls(&log),
        [
            "--user show-environment",
            "--user daemon-reload",
            "--user enable --now dstream.service"
        ]
    );
    // Rewritten with another command line: restarted, so the new one is in force.
    ok(&run(&["service", "install", "--socket", "/tmp/x.sock"], ""));
    assert_eq!(
        calls(&log)[1..],
        [
            "--user daemon-reload",
            "--user enable dstream.service",
            "--user restart dstream.service"
        ]
    );
    // The manager's answers win over the socket (no daemon listens on it here).
    let out = ok(&run(&["service", "status", "--json"], ""));
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["enabled"], json!(true));
    assert_eq!(status["running"], json!(true));
    calls(&log);

    let out = ok(&run(&["service", "uninstall"], ""));
    assert!(
        out.contains("stopped and disabled dstream.service"),
        "{out}"
    );
    assert!(!home.unit_path().exists());
    let seen = calls(&log);
    assert!(
        seen.contains(&"--user disable --now dstream.service".to_owned()),
        "{seen:?}"
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("--user daemon-reload")
    );

    // A failing step fails the command, names the step, and leaves the unit written.
    let out = run(&["service", "install"], "enable");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("systemctl --user enable --now dstream.service") && err.contains("boom"),
        "{err}"
    );
    assert!(home.unit_path().exists());
}
