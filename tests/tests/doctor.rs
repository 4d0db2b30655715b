//! `dstream doctor`: the real binary, with HOME and the XDG folders in a temporary directory,
//! against a real daemon (or none). Each broken state makes it exit 1 and name the failing
//! check with a fix; a healthy install exits 0.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dstream_tests::serde_json::{self, Value};
use dstream_tests::{Daemon, daemon_bin, hook_bin, output_within};

const TIMEOUT: Duration = Duration::from_secs(30);

/// A user's machine in a temporary directory: HOME, the config folder (the daemon's plugin
/// folder is in it), the working directory, and a daemon on `<dir>/run/dstream.sock`.
struct Machine {
    daemon: Daemon,
}

impl Machine {
    fn new() -> Machine {
        let mut daemon = Daemon::new(None);
        let home = daemon.dir().join("home");
        std::fs::create_dir_all(&home).unwrap();
        daemon.set_env("HOME", home.to_str().unwrap());
        Machine { daemon }
    }

    fn home(&self) -> PathBuf {
        self.daemon.dir().join("home")
    }

    fn settings(&self) -> PathBuf {
        self.home().join(".claude/settings.json")
    }

    /// `dstream <args>` as this user would run it here.
    fn dstream(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(daemon_bin());
        cmd.args(args)
            .current_dir(self.daemon.dir())
            .env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.daemon.dir().join("config"))
            .env("XDG_DATA_HOME", self.daemon.dir().join("xdg-data"))
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("DSTREAM_SOCKET")
            .env_remove("DSTREAM_DATA_DIR")
            .env_remove("DSTREAM_CONFIG");
        cmd
    }

    fn install_claude_code(&self) {
        let out = output_within(&mut self.dstream(&["install", "claude-code"]), TIMEOUT);
        assert!(out.status.success(), "{out:?}");
    }

    /// `dstream doctor --json`: its exit code and report.
    fn doctor(&self) -> (i32, Value) {
        let socket = self.daemon.socket();
        let data = self.daemon.data_dir();
        let out = output_within(
            &mut self.dstream(&[
                "doctor",
                "--json",
                "--socket",
                socket.to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
            ]),
            TIMEOUT,
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "doctor --json printed no JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let code = out.status.code().expect("exited");
        assert_eq!(report["ok"], code == 0, "exit code and ok agree: {report}");
        (code, report)
    }
}

fn checks<'a>(report: &'a Value, name: &str) -> Vec<&'a Value> {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["name"] == name)
        .collect()
}

/// The one failing check of that name: its detail and fix.
fn failed<'a>(report: &'a Value, name: &str) -> &'a Value {
    checks(report, name)
        .into_iter()
        .find(|c| c["status"] == "fail")
        .unwrap_or_else(|| panic!("no failing {name} check in {report:#}"))
}

fn fix(check: &Value) -> &str {
    check["fix"].as_str().expect("a failing check has a fix")
}

fn detail(check: &Value) -> &str {
    check["detail"].as_str().unwrap()
}

fn failing_names(report: &Value) -> Vec<&str> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

#[test]
fn a_healthy_install_passes_with_warnings_at_most() {
    let mut m = Machine::new();
    m.daemon.restart();
    m.install_claude_code();
    let (code, report) = m.doctor();
    assert_eq!(
        code,
        0,
        "failing: {:?} in {report:#}",
        failing_names(&report)
    );
    let hooks = checks(&report, "claude_code.hooks");
    assert_eq!(hooks.len(), 1, "{report:#}");
    assert_eq!(hooks[0]["status"], "ok", "{report:#}");
    assert!(detail(hooks[0]).contains(m.settings().to_str().unwrap()));
    assert_eq!(checks(&report, "daemon")[0]["status"], "ok");
    assert_eq!(checks(&report, "daemon.version")[0]["status"], "ok");
    for name in ["socket_dir", "data_dir", "plugins", "spool.backlog"] {
        assert_eq!(
            checks(&report, name)[0]["status"],
            "ok",
            "{name}: {report:#}"
        );
    }
    // What is not set up is a warning with its fix, not a failure.
    let service = checks(&report, "service")[0];
    assert_eq!(service["status"], "warn");
    assert_eq!(fix(service), "dstream service install");
    // The text report says the same to a person, and exits the same way.
    let socket = m.daemon.socket();
    let data = m.daemon.data_dir();
    let out = output_within(
        &mut m.dstream(&[
            "doctor",
            "--socket",
            socket.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ]),
        TIMEOUT,
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("fix: dstream service install") && text.contains("0 failed"),
        "{text}"
    );
}

#[test]
fn a_daemon_that_is_down_fails_with_the_command_that_starts_it() {
    let m = Machine::new();
    m.install_claude_code();
    let (code, report) = m.doctor();
    assert_eq!(code, 1);
    let daemon = failed(&report, "daemon");
    assert!(
        detail(daemon).contains(m.daemon.socket().to_str().unwrap()),
        "{daemon}"
    );
    assert_eq!(fix(daemon), "dstream daemon");
    assert_eq!(failing_names(&report), ["daemon"], "{report:#}");
}

#[test]
fn a_hook_pointing_at_a_missing_binary_fails_and_install_fixes_it() {
    let mut m = Machine::new();
    m.daemon.restart();
    m.install_claude_code();
    let text = std::fs::read_to_string(m.settings()).unwrap();
    // Install points the hooks at the lean binary beside dstream.
    let exe = hook_bin().display().to_string();
    assert!(text.contains(&format!("{exe} claude-code")), "{text}");
    std::fs::write(m.settings(), text.replace(&exe, "/opt/gone/dstream-hook")).unwrap();
    let (code, report) = m.doctor();
    assert_eq!(code, 1);
    let hooks = failed(&report, "claude_code.hooks");
    assert!(
        detail(hooks).contains("/opt/gone/dstream-hook") && detail(hooks).contains("not found"),
        "{hooks}"
    );
    assert_eq!(fix(hooks), "dstream install claude-code");
    // The fix it names fixes it.
    m.install_claude_code();
    let (code, report) = m.doctor();
    assert_eq!(code, 0, "{report:#}");
}

#[test]
fn a_hook_running_another_dstream_version_fails() {
    let mut m = Machine::new();
    m.daemon.restart();
    m.install_claude_code();
    // A "dstream-hook" that answers --version as an older release would.
    let old = m.daemon.dir().join("old/dstream-hook");
    std::fs::create_dir_all(old.parent().unwrap()).unwrap();
    std::fs::write(&old, "#!/bin/sh\necho 'dstream-hook 0.0.1'\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = std::fs::read_to_string(m.settings()).unwrap();
    let exe = hook_bin().display().to_string();
    std::fs::write(m.settings(), text.replace(&exe, old.to_str().unwrap())).unwrap();
    let (code, report) = m.doctor();
    assert_eq!(code, 1);
    let hooks = failed(&report, "claude_code.hooks");
    assert!(detail(hooks).contains("dstream-hook 0.0.1"), "{hooks}");

    // The same for `dstream hook` entries.
    let old = m.daemon.dir().join("old/dstream");
    std::fs::write(&old, "#!/bin/sh\necho 'dstream 0.0.1'\n").unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    let command = format!("{} hook claude-code", old.display());
    std::fs::write(
        m.settings(),
        text.replace(&format!("{exe} claude-code"), &command),
    )
    .unwrap();
    let (code, report) = m.doctor();
    assert_eq!(code, 1);
    let hooks = failed(&report, "claude_code.hooks");
    assert!(detail(hooks).contains("dstream 0.0.1"), "{hooks}");
}

#[test]
fn a_lean_hook_without_its_dstream_beside_it_fails() {
    let mut m = Machine::new();
    m.daemon.restart();
    m.install_claude_code();
    // dstream-hook alone: it answers, but could not start a daemon.
    let alone = m.daemon.dir().join("alone/dstream-hook");
    std::fs::create_dir_all(alone.parent().unwrap()).unwrap();
    dstream_tests::copy_executable(&hook_bin(), &alone);
    let text = std::fs::read_to_string(m.settings()).unwrap();
    let exe = hook_bin().display().to_string();
    std::fs::write(m.settings(), text.replace(&exe, alone.to_str().unwrap())).unwrap();
    let (code, report) = m.doctor();
    assert_eq!(code, 1);
    let hooks = failed(&report, "claude_code.hooks");
    assert!(detail(hooks).contains("no dstream beside it"), "{hooks}");
    assert_eq!(fix(hooks), "dstream install claude-code");
}

#[test]
fn disable_all_hooks_in_the_settings_fails_naming_the_file_and_key() {
    let mut m = Machine::new();
    m.daemon.restart();
    m.install_claude_code();
    let text = std::fs::read_to_string(m.settings()).unwrap();
    let text = text.replacen('{', "{\n  \"disableAllHooks\": true,", 1);
    std::fs::write(m.settings(), text).unwrap();
    let (code, report) = m.doctor();
    assert_eq!(code, 1);
    let c = failed(&report, "claude_code.hooks_enabled");
    assert!(
        detail(c).contains(m.settings().to_str().unwrap()) && detail(c).contains("disableAllHooks"),
        "{c}"
    );
    assert!(
        fix(c).contains("disableAllHooks") && fix(c).contains(m.settings().to_str().unwrap()),
        "{c}"
    );
    assert_eq!(
        failing_names(&report),
        ["claude_code.hooks_enabled"],
        "{report:#}"
    );
}

#[test]
fn a_lua_plugin_that_does_not_load_fails_naming_it() {
    let mut m = Machine::new();
    let dir = m.daemon.plugin_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("broken.lua");
    std::fs::write(
        &broken,
        "return { name = \"broken\", process = function(e) return e\n",
    )
    .unwrap();
    // Down: the folder is checked here.
    let (code, report) = m.doctor();
    assert_eq!(code, 1);
    let c = failed(&report, "plugins");
    assert!(detail(c).contains("broken.lua"), "{c}");
    // Up: the daemon's own list says so.
    m.daemon.restart();
    m.install_claude_code();
    let (code, report) = m.doctor();
    assert_eq!(code, 1);
    let c = failed(&report, "plugins");
    assert!(detail(c).contains("broken.lua"), "{c}");
    assert!(fix(c).starts_with("dstream plugins check "), "{c}");
    assert_eq!(failing_names(&report), ["plugins"], "{report:#}");
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_spool_backlog_with_the_daemon_down_and_lost_events_fail() {
    let m = Machine::new();
    m.install_claude_code();
    let spool = m.daemon.data_dir().join("spool");
    write(
        &spool.join("1700000000000-42.jsonl"),
        "{\"source\":\"claude-code\",\"event\":{}}\n",
    );
    let (code, report) = m.doctor();
    assert_eq!(code, 1);
    let c = failed(&report, "spool.backlog");
    assert!(
        detail(c).contains("1 file") && detail(c).contains(spool.to_str().unwrap()),
        "{c}"
    );
    assert_eq!(fix(c), "dstream daemon");
    assert!(
        checks(&report, "spool.overflow")
            .iter()
            .all(|c| c["status"] == "ok")
    );
    // Lost events: one line each.
    write(
        &spool.join("overflow.jsonl"),
        "{\"at_ms\":1700000000000,\"source\":\"claude-code\",\"session_id\":\"s\",\"bytes\":10}\n\
         {\"at_ms\":1700000001000,\"source\":\"claude-code\",\"session_id\":\"s\",\"bytes\":12}\n",
    );
    write(&spool.join("damaged/1700000000000-7.jsonl"), "\u{0}junk");
    let (code, report) = m.doctor();
    assert_eq!(code, 1);
    let c = failed(&report, "spool.overflow");
    assert!(detail(c).contains("2 events were lost"), "{c}");
    let damaged = checks(&report, "spool.damaged");
    assert_eq!(damaged[0]["status"], "warn");
    assert!(detail(damaged[0]).contains(spool.join("damaged").to_str().unwrap()));
}

#[test]
fn a_relay_that_cannot_run_fails_and_a_server_that_is_down_warns() {
    use std::os::unix::fs::PermissionsExt;
    // Nothing listens on port 9 (discard) here: the relay backs off.
    let config = |extra: &str| {
        format!(
            "[relay]\nurl = \"http://127.0.0.1:9/v1/stream\"\nprefix = \"p\"\nretry_min_ms = 60000\nretry_max_ms = 60000\n{extra}\n"
        )
    };
    let mut daemon = Daemon::new(Some(&config("")));
    let home = daemon.dir().join("home");
    std::fs::create_dir_all(&home).unwrap();
    daemon.set_env("HOME", home.to_str().unwrap());
    let token = daemon.dir().join("token");
    std::fs::write(&token, "t\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(
        daemon.config_path().unwrap(),
        config(&format!("token_file = \"{}\"", token.display())),
    )
    .unwrap();
    let mut m = Machine { daemon };
    m.daemon.restart();
    m.install_claude_code();
    let (code, report) = m.doctor();
    assert_eq!(code, 1);
    let c = failed(&report, "relay");
    assert!(
        detail(c).contains(token.to_str().unwrap()) && detail(c).contains("0644"),
        "{c}"
    );
    assert!(fix(c).contains("dstream relay retry"), "{c}");
    // Fixed: the relay runs, and a session it cannot deliver is a warning, not a failure.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = output_within(
        &mut m.dstream(&[
            "relay",
            "retry",
            "--socket",
            m.daemon.socket().to_str().unwrap(),
        ]),
        TIMEOUT,
    );
    assert!(out.status.success(), "{out:?}");
    m.daemon
        .client()
        .append("s1", "user.input", serde_json::json!({"text": "hi"}));
    let deadline = std::time::Instant::now() + TIMEOUT;
    let report = loop {
        let (code, report) = m.doctor();
        let relay = checks(&report, "relay");
        if relay.iter().any(|c| c["status"] == "warn") {
            assert_eq!(code, 0, "{report:#}");
            break report;
        }
        assert!(std::time::Instant::now() < deadline, "{report:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let c = checks(&report, "relay")
        .into_iter()
        .find(|c| c["status"] == "warn")
        .unwrap();
    assert!(
        detail(c).contains("s1") && detail(c).contains("backing_off"),
        "{c}"
    );
    assert_eq!(fix(c), "dstream relay retry");
}
