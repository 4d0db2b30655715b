//! The lean hook binary, `dstream-hook`: `dstream install claude-code` points hooks at it when
//! it sits beside `dstream` (and back at `dstream hook` when it does not), uninstall takes
//! either form out, it stays position-independent (ASLR), and without a daemon it starts the
//! `dstream` beside it or spools. (Its answers are the hook suite's: `tests/hook.rs` runs its
//! main cases in both forms, and `DSTREAM_TEST_HOOK=lean` runs every test's hooks through it.)
#![cfg(unix)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use dstream_tests::serde_json::{self, Value, json};
use dstream_tests::{copy_executable, daemon_bin, hook_bin, wait_child};

const TIMEOUT: Duration = Duration::from_secs(30);

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dstream-lean-")
        .tempdir()
        .unwrap()
}

/// `cmd` run to its end.
fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    let Some(status) = wait_child(&mut child, TIMEOUT) else {
        let _ = child.kill();
        panic!("{cmd:?} hung");
    };
    let mut out = child.wait_with_output().unwrap();
    out.status = status;
    out
}

/// `<bin> <args>` with a temporary HOME and no dstream settings from the environment.
fn dstream(bin: &Path, home: &Path, args: &[&str]) -> String {
    let out = run(Command::new(bin)
        .args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("DSTREAM_DATA_DIR")
        .env_remove("DSTREAM_CONFIG"));
    assert!(
        out.status.success(),
        "{bin:?} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The commands of dstream's and everyone's hook handlers for `event`.
fn commands(settings: &Path, event: &str) -> Vec<String> {
    let doc: Value = serde_json::from_slice(&fs::read(settings).unwrap()).unwrap();
    doc["hooks"][event]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
        .map(|h| h["command"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `path` as one single-quoted POSIX shell word (the test's folder name needs quoting).
fn quoted(path: &Path) -> String {
    format!("'{}'", path.to_str().unwrap().replace('\'', r"'\''"))
}

#[test]
fn install_points_hooks_at_the_lean_binary_beside_dstream_and_uninstall_removes_them() {
    let home = temp_dir();
    let project = temp_dir();
    let dir = project.path().to_str().unwrap();
    // dstream and dstream-hook side by side, in a folder whose name needs quoting.
    let tools = temp_dir();
    let bin_dir = fs::canonicalize(tools.path())
        .unwrap()
        .join("my tools 'v2'");
    fs::create_dir_all(&bin_dir).unwrap();
    let (full, lean) = (bin_dir.join("dstream"), bin_dir.join("dstream-hook"));
    copy_executable(&daemon_bin(), &full);
    copy_executable(&hook_bin(), &lean);

    let settings = project.path().join(".claude").join("settings.json");
    fs::create_dir_all(settings.parent().unwrap()).unwrap();
    fs::write(
        &settings,
        r#"{"hooks": {"PreToolUse": [{"hooks": [{"type": "command",
            "command": "DSTREAM_HOOK_DEBUG=0 /old/place/dstream hook claude-code --fail-closed",
            "timeout": 30}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}}"#,
    )
    .unwrap();
    let install = ["install", "claude-code", "--project", dir];
    let events = ["--events", "PreToolUse,Stop"];
    let install: Vec<&str> = install.iter().chain(&events).copied().collect();

    // Installed: the old entry repointed at the lean binary (the user's words around it kept),
    // the new one written in the lean form.
    let said = dstream(&full, home.path(), &install);
    assert!(said.contains(&quoted(&lean)), "{said}");
    let pre = format!(
        "DSTREAM_HOOK_DEBUG=0 {} claude-code --fail-closed",
        quoted(&lean)
    );
    assert_eq!(
        commands(&settings, "PreToolUse"),
        std::slice::from_ref(&pre)
    );
    assert_eq!(
        commands(&settings, "Stop"),
        [
            "notify-send done".to_string(),
            format!("{} claude-code", quoted(&lean))
        ]
    );
    // Again: nothing to do.
    assert!(dstream(&full, home.path(), &install).contains("nothing changed"));

    // The installed command, run the way Claude Code runs it (through a shell), is the lean
    // hook: with no daemon and --fail-closed kept, it denies.
    let answer = dstream_tests::run_installed_pre_tool_use(&pre, &tools.path().join("none.sock"));
    assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny");

    // Without the lean binary beside it, install points the hooks back at `dstream hook`; with
    // it back, at the lean binary again.
    fs::remove_file(&lean).unwrap();
    dstream(&full, home.path(), &install);
    assert_eq!(
        commands(&settings, "PreToolUse"),
        [format!(
            "DSTREAM_HOOK_DEBUG=0 {} hook claude-code --fail-closed",
            quoted(&full)
        )]
    );
    copy_executable(&hook_bin(), &lean);
    dstream(&full, home.path(), &install);
    assert_eq!(commands(&settings, "PreToolUse"), [pre]);

    // Uninstall, by another dstream, recognises the lean form: only the user's hook is left.
    let said = dstream(
        &daemon_bin(),
        home.path(),
        &["uninstall", "claude-code", "--project", dir],
    );
    assert!(said.contains("from 2 events"), "{said}");
    assert_eq!(commands(&settings, "Stop"), ["notify-send done"]);
    assert!(commands(&settings, "PreToolUse").is_empty());
    assert!(!fs::read_to_string(&settings).unwrap().contains("dstream"));
}

/// The ELF type of the file at `path` (`e_type`: 2 for a fixed-address executable, 3 for a
/// position-independent one or a shared library).
#[cfg(target_os = "linux")]
fn elf_type(path: &Path) -> u16 {
    let bytes = fs::read(path).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF", "{} is not ELF", path.display());
    let field = [bytes[16], bytes[17]];
    match bytes[5] {
        1 => u16::from_le_bytes(field),
        2 => u16::from_be_bytes(field),
        other => panic!("EI_DATA {other} in {}", path.display()),
    }
}

/// Both binaries parse what agents, plugins and the network send: they keep ASLR, linked as
/// position-independent executables (the default), never at a fixed address.
#[cfg(target_os = "linux")]
#[test]
fn both_binaries_are_position_independent_executables() {
    const ET_DYN: u16 = 3;
    for bin in [daemon_bin(), hook_bin()] {
        assert_eq!(
            elf_type(&bin),
            ET_DYN,
            "{} is not position-independent (ELF type is not ET_DYN)",
            bin.display()
        );
    }
}

/// A UserPromptSubmit event of `session`, as Claude Code sends it.
fn prompt(session: &str) -> Value {
    json!({"session_id": session, "hook_event_name": "UserPromptSubmit",
        "prompt": "hello", "cwd": "/tmp"})
}

/// Runs `bin claude-code` with `event` on stdin, autostart on, the socket and data directory
/// given, and no config from the environment.
fn lean_hook(bin: &Path, socket: &Path, data: &Path, event: &Value) -> Output {
    let mut cmd = Command::new(bin);
    cmd.arg("claude-code")
        .env("DSTREAM_SOCKET", socket)
        .env("DSTREAM_DATA_DIR", data)
        .env_remove("DSTREAM_AUTOSTART")
        .env_remove("DSTREAM_CONFIG")
        .env_remove("DSTREAM_HOOK_FAIL_CLOSED")
        .env("XDG_CONFIG_HOME", data.parent().unwrap().join("config"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(event.to_string().as_bytes())
        .unwrap();
    wait_child(&mut child, TIMEOUT).expect("the hook exits");
    child.wait_with_output().unwrap()
}

/// Kills the daemon a test's hook started, by the pid in its lock file.
struct Autostarted(PathBuf);

impl Drop for Autostarted {
    fn drop(&mut self) {
        if let Some(pid) = fs::read_to_string(self.0.join("LOCK"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            // SAFETY: a plain signal to the daemon this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[test]
fn the_lean_hook_starts_the_dstream_beside_it() {
    let dir = temp_dir();
    let (socket, data) = (dir.path().join("run/dstream.sock"), dir.path().join("data"));
    let _guard = Autostarted(data.clone());
    let out = lean_hook(&hook_bin(), &socket, &data, &prompt("s-lean-auto"));
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let pid = fs::read_to_string(data.join("LOCK")).expect("a daemon holds the data directory");
    let exe = fs::read_link(format!("/proc/{}/exe", pid.trim())).unwrap();
    assert_eq!(exe, fs::canonicalize(daemon_bin()).unwrap());
    let mut client = dstream_tests::Client::connect(&socket);
    let events = client.read_all("s-lean-auto");
    assert!(
        events.iter().any(|e| e["type"] == "user.input"),
        "{events:?}"
    );
    assert!(
        fs::read_dir(data.join("spool"))
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "nothing spooled"
    );
}

#[test]
fn a_lean_hook_with_no_dstream_beside_it_spools() {
    let dir = temp_dir();
    let alone = dir.path().join("bin/dstream-hook");
    fs::create_dir_all(alone.parent().unwrap()).unwrap();
    copy_executable(&hook_bin(), &alone);
    let (socket, data) = (dir.path().join("run/dstream.sock"), dir.path().join("data"));
    let _guard = Autostarted(data.clone());
    let event = prompt("s-lean-alone");
    let out = lean_hook(&alone, &socket, &data, &event);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("starting one failed") && said.contains("spooled in"),
        "{said}"
    );
    let spooled: Vec<PathBuf> = fs::read_dir(data.join("spool"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(spooled.len(), 1, "{spooled:?}");
    let record: Value =
        serde_json::from_str(fs::read_to_string(&spooled[0]).unwrap().trim()).unwrap();
    assert_eq!(record["source"], "claude-code");
    assert_eq!(record["session_id"], "s-lean-alone");
    assert_eq!(record["event"], event);
    // No daemon appeared.
    assert!(!socket.exists());
}
