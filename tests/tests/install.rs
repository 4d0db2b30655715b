//! `dstream install` / `dstream uninstall` for Claude Code and OpenCode, on temporary projects
//! and a temporary home.
#![cfg(unix)]

use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use dstream_tests::serde_json::{self, Value, json};
use dstream_tests::{daemon_bin, mode_of, wait_child};

/// Every event `dstream install claude-code` hooks by default: all that Claude Code 2.1.330
/// accepts but WorktreeCreate (which would replace Claude Code's own worktree creation).
fn events() -> Vec<&'static str> {
    dstream_tests::agents::CLAUDE_HOOK_EVENTS
        .iter()
        .copied()
        .filter(|e| *e != "WorktreeCreate")
        .collect()
}

/// A settings file someone already uses: other settings, and hooks of their own.
const EXISTING: &str = r#"{
  "model": "opus",
  "permissions": {
    "allow": ["Bash(npm test)"],
    "deny": []
  },
  "hooks": {
    "PostToolUse": [
      {
        "matcher": "Edit|Write",
        "hooks": [{ "type": "command", "command": "prettier --write \"$CLAUDE_FILE\"" }]
      }
    ],
    "Stop": [
      { "hooks": [{ "type": "command", "command": "notify-send done", "timeout": 5 }] }
    ]
  },
  "env": { "FOO": "1" },
  "statusLine": { "type": "command", "command": "echo hi" }
}
"#;

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dstream-install-")
        .tempdir()
        .unwrap()
}

/// Runs dstream with `HOME` (and no XDG_CONFIG_HOME unless given in `env`).
fn dstream_in(bin: &Path, home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        // The telemetry settings make the daemon's token: in this HOME, never the real one.
        .env_remove("XDG_DATA_HOME")
        .env_remove("DSTREAM_DATA_DIR")
        .env_remove("DSTREAM_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    // A command that never exits is killed, so that it does not outlive the test.
    let Some(status) = wait_child(&mut child, std::time::Duration::from_secs(20)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("dstream {args:?} hung");
    };
    let mut out = child.wait_with_output().unwrap();
    out.status = status;
    out
}

fn dstream(home: &Path, args: &[&str]) -> Output {
    dstream_in(&daemon_bin(), home, args, &[])
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn failed(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected a failure: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

/// `path` as one POSIX shell word, as install writes it.
fn shell_word(path: &Path) -> String {
    let real = path.to_str().unwrap();
    let plain = real
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
    if plain {
        real.to_string()
    } else {
        format!("'{}'", real.replace('\'', r"'\''"))
    }
}

/// The hook command install writes for `bin`: the lean `dstream-hook` beside it when there is
/// one (`<its real path> claude-code`), else `<its real path> hook claude-code`.
fn expected_command(bin: &Path) -> String {
    let real = fs::canonicalize(bin).unwrap();
    let lean = real.with_file_name("dstream-hook");
    if lean.is_file() {
        format!("{} claude-code", shell_word(&lean))
    } else {
        format!("{} hook claude-code", shell_word(&real))
    }
}

/// The commands of all hook handlers of `event`.
fn commands(settings: &Value, event: &str) -> Vec<String> {
    settings["hooks"][event]
        .as_array()
        .map(|groups| {
            groups
                .iter()
                .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
                .map(|h| h["command"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Positions of `keys` (as `"key":`) in `text`, to check that their order is kept.
fn key_order(text: &str, keys: &[&str]) -> Vec<usize> {
    keys.iter()
        .map(|k| {
            text.find(&format!("\"{k}\""))
                .unwrap_or_else(|| panic!("no {k} in {text}"))
        })
        .collect()
}

#[test]
fn claude_code_project_install_is_idempotent_and_uninstall_restores_the_file() {
    let home = temp_dir();
    let project = temp_dir();
    let settings = project.path().join(".claude").join("settings.json");
    fs::create_dir_all(settings.parent().unwrap()).unwrap();
    fs::write(&settings, EXISTING).unwrap();
    let original = read_json(&settings);
    let dir = project.path().to_str().unwrap();

    let said = ok(&dstream(
        home.path(),
        &["install", "claude-code", "--project", dir],
    ));
    assert!(
        said.contains(&format!("added for {} events", events().len())),
        "{said}"
    );
    let installed = read_json(&settings);
    let command = expected_command(&daemon_bin());
    for event in events() {
        let cmds = commands(&installed, event);
        assert_eq!(
            cmds.iter().filter(|c| **c == command).count(),
            1,
            "{event}: {cmds:?}"
        );
        let ours = installed["hooks"][event]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["hooks"].as_array().unwrap())
            .find(|h| h["command"] == command.as_str())
            .unwrap();
        assert_eq!(ours["type"], "command");
        assert_eq!(ours["timeout"], 600);
    }
    assert!(installed["hooks"].get("WorktreeCreate").is_none());
    // The user's hooks run first, as before; everything else is as it was, in its order.
    assert_eq!(
        commands(&installed, "PostToolUse")[0],
        "prettier --write \"$CLAUDE_FILE\""
    );
    assert_eq!(commands(&installed, "Stop")[0], "notify-send done");
    for key in ["model", "permissions", "env", "statusLine"] {
        assert_eq!(installed[key], original[key], "{key}");
    }
    let text = fs::read_to_string(&settings).unwrap();
    let order = key_order(
        &text,
        &["model", "permissions", "hooks", "env", "statusLine"],
    );
    assert!(order.is_sorted(), "key order changed: {text}");
    assert!(text.ends_with("}\n"));

    // Again: nothing to do, and the file is not rewritten.
    let bytes = fs::read(&settings).unwrap();
    let said = ok(&dstream(
        home.path(),
        &["install", "claude-code", "--project", dir],
    ));
    assert!(said.contains("nothing changed"), "{said}");
    assert_eq!(fs::read(&settings).unwrap(), bytes);

    // Uninstall: the same JSON value as before install, keys in their order.
    let said = ok(&dstream(
        home.path(),
        &["uninstall", "claude-code", "--project", dir],
    ));
    assert!(
        said.contains(&format!("from {} events", events().len())),
        "{said}"
    );
    assert_eq!(read_json(&settings), original);
    let text = fs::read_to_string(&settings).unwrap();
    assert!(
        key_order(
            &text,
            &["model", "permissions", "hooks", "env", "statusLine"]
        )
        .is_sorted()
    );
    let said = ok(&dstream(
        home.path(),
        &["uninstall", "claude-code", "--project", dir],
    ));
    assert!(said.contains("nothing changed"), "{said}");
    assert_eq!(read_json(&settings), original);
}

#[test]
fn claude_code_user_install_is_the_default_and_uninstall_deletes_what_it_created() {
    let home = temp_dir();
    let settings = home.path().join(".claude").join("settings.json");
    let said = ok(&dstream(home.path(), &["install", "claude-code"]));
    assert!(said.contains("created"), "{said}");
    let installed = read_json(&settings);
    assert_eq!(
        installed["hooks"].as_object().unwrap().len(),
        events().len(),
        "{installed}"
    );
    // And Claude Code's telemetry, pointed at the daemon's listener with its token.
    let env = &installed["env"];
    assert_eq!(
        env["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"], "http://127.0.0.1:4438/v1/logs",
        "{installed}"
    );
    let token = std::fs::read_to_string(home.path().join(".dstream/data/http.token")).unwrap();
    assert_eq!(
        env["OTEL_EXPORTER_OTLP_LOGS_HEADERS"],
        format!("Authorization=Bearer {}", token.trim())
    );
    let said = ok(&dstream(home.path(), &["install", "claude-code", "--user"]));
    assert!(said.contains("nothing changed"), "{said}");
    let said = ok(&dstream(
        home.path(),
        &["uninstall", "claude-code", "--user"],
    ));
    assert!(said.contains("deleted"), "{said}");
    assert!(!settings.exists());
    let said = ok(&dstream(home.path(), &["uninstall", "claude-code"]));
    assert!(said.contains("nothing to remove"), "{said}");
}

/// A user with an OTLP exporter of their own keeps it, and is told how to put dstream in front
/// of their collector (`[otlp] forward_to`) rather than being promised it.
#[test]
fn a_users_own_exporter_is_left_alone_with_the_way_to_forward() {
    let home = temp_dir();
    let settings = home.path().join(".claude").join("settings.json");
    let out = dstream_in(
        &daemon_bin(),
        home.path(),
        &["install", "claude-code", "--user"],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")],
    );
    let said = ok(&out);
    assert!(
        said.contains("OTEL_EXPORTER_OTLP_ENDPOINT names your own exporter"),
        "{said}"
    );
    assert!(
        said.contains("`forward_to = \"http://collector:4318\"` under [otlp]")
            && !said.contains("planned"),
        "{said}"
    );
    let installed = read_json(&settings);
    assert!(installed.get("env").is_none(), "{installed}");
}

#[test]
fn claude_code_local_and_core_events() {
    let home = temp_dir();
    let project = temp_dir();
    let dir = project.path().to_str().unwrap();
    ok(&dstream(
        home.path(),
        &[
            "install",
            "claude-code",
            "--project",
            dir,
            "--local",
            "--events",
            "core",
        ],
    ));
    let local = project.path().join(".claude").join("settings.local.json");
    assert!(!project.path().join(".claude/settings.json").exists());
    let installed = read_json(&local);
    let mut names: Vec<_> = installed["hooks"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "Notification",
            "PostToolUse",
            "PreCompact",
            "PreToolUse",
            "SessionEnd",
            "SessionStart",
            "Stop",
            "SubagentStop",
            "UserPromptSubmit"
        ]
    );
    // Widening to all events adds the rest, and keeps the ones already there.
    let said = ok(&dstream(
        home.path(),
        &["install", "claude-code", "--project", dir, "--local"],
    ));
    assert!(
        said.contains(&format!("added for {} events", events().len() - 9)),
        "{said}"
    );
    // Mistakes are refused before anything is written.
    let err = failed(&dstream(
        home.path(),
        &[
            "install",
            "claude-code",
            "--project",
            dir,
            "--events",
            "PreToolCall",
        ],
    ));
    assert!(err.contains("PreToolCall"), "{err}");
    let err = failed(&dstream(
        home.path(),
        &["install", "claude-code", "--events", "WorktreeCreate"],
    ));
    assert!(err.contains("worktree"), "{err}");
    let err = failed(&dstream(
        home.path(),
        &["install", "claude-code", "--local"],
    ));
    assert!(err.contains("--project"), "{err}");
    assert!(!home.path().join(".claude").exists());
}

#[test]
fn malformed_settings_are_refused_and_left_untouched() {
    let home = temp_dir();
    let project = temp_dir();
    let settings = project.path().join(".claude").join("settings.json");
    fs::create_dir_all(settings.parent().unwrap()).unwrap();
    let dir = project.path().to_str().unwrap();
    for bad in [
        "{ \"model\": \"opus\", ",
        "[]",
        "{\"hooks\": []}",
        "{\"hooks\": {\"PreToolUse\": {\"matcher\": \"*\"}}}",
        "\u{feff}{}",
    ] {
        fs::write(&settings, bad).unwrap();
        for verb in ["install", "uninstall"] {
            let err = failed(&dstream(
                home.path(),
                &[verb, "claude-code", "--project", dir],
            ));
            assert!(err.contains("settings"), "{verb} {bad:?}: {err}");
            assert_eq!(
                fs::read_to_string(&settings).unwrap(),
                bad,
                "{verb} touched it"
            );
        }
    }
    let leftovers: Vec<_> = fs::read_dir(settings.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["settings.json"], "temporary files left behind");
}

#[test]
fn a_moved_binary_is_repointed_and_the_installed_command_runs_under_sh() {
    let home = temp_dir();
    let project = temp_dir();
    let dir = project.path().to_str().unwrap();
    // A copy of dstream in a folder whose name needs quoting.
    let odd = temp_dir();
    let bin_dir = odd.path().join("my tools 'v2'");
    fs::create_dir_all(&bin_dir).unwrap();
    let copy = bin_dir.join("dstream");
    dstream_tests::copy_executable(&daemon_bin(), &copy);

    let settings = project.path().join(".claude").join("settings.json");
    fs::create_dir_all(settings.parent().unwrap()).unwrap();
    fs::write(
        &settings,
        r#"{"hooks": {"PreToolUse": [{"hooks": [{"type": "command",
            "command": "DSTREAM_HOOK_DEBUG=0 /old/place/dstream hook claude-code --fail-closed",
            "timeout": 30}]}]}}"#,
    )
    .unwrap();
    let said = ok(&dstream_in(
        &copy,
        home.path(),
        &[
            "install",
            "claude-code",
            "--project",
            dir,
            "--events",
            "PreToolUse",
        ],
        &[],
    ));
    assert!(
        said.contains("pointed at this dstream for 1 event"),
        "{said}"
    );
    let installed = read_json(&settings);
    let cmds = commands(&installed, "PreToolUse");
    let quoted = expected_command(&copy);
    let quoted_exe = quoted.strip_suffix(" hook claude-code").unwrap();
    assert_eq!(
        cmds,
        [format!(
            "DSTREAM_HOOK_DEBUG=0 {quoted_exe} hook claude-code --fail-closed"
        )]
    );
    assert_eq!(
        installed["hooks"]["PreToolUse"][0]["hooks"][0]["timeout"],
        30
    );

    // The command, run the way Claude Code runs it (through a shell), reaches the copy: with
    // no daemon and --fail-closed kept, it denies.
    let answer = dstream_tests::run_installed_pre_tool_use(&cmds[0], &odd.path().join("none.sock"));
    assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny");

    // Uninstall recognises the entry whichever dstream wrote it.
    ok(&dstream(
        home.path(),
        &["uninstall", "claude-code", "--project", dir],
    ));
    assert!(
        !settings.exists(),
        "nothing but dstream's hooks was in the file"
    );
}

#[test]
fn a_symlinked_settings_file_stays_a_link() {
    let home = temp_dir();
    let dotfiles = home.path().join("dotfiles");
    fs::create_dir_all(&dotfiles).unwrap();
    fs::create_dir_all(home.path().join(".claude")).unwrap();
    let real = dotfiles.join("claude-settings.json");
    fs::write(&real, "{\"model\": \"opus\"}\n").unwrap();
    let link = home.path().join(".claude").join("settings.json");
    symlink(&real, &link).unwrap();
    ok(&dstream(home.path(), &["install", "claude-code"]));
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(commands(&read_json(&real), "Stop").len(), 1);
    ok(&dstream(home.path(), &["uninstall", "claude-code"]));
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(read_json(&real), json!({"model": "opus"}));
}

/// A project whose `.claude/` exists; returns it, its path as a string, and the settings path.
fn project() -> (tempfile::TempDir, String, PathBuf) {
    let project = temp_dir();
    let settings = project.path().join(".claude").join("settings.json");
    fs::create_dir_all(settings.parent().unwrap()).unwrap();
    let dir = project.path().to_str().unwrap().to_string();
    (project, dir, settings)
}

/// The names in a folder, sorted (to see that no temporary file was left behind).
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_link_emptied_by_uninstall_stays_a_link() {
    let home = temp_dir();
    let (_project, dir, settings) = project();
    let real = home.path().join("dotfiles-settings.json");
    fs::write(&real, "{}\n").unwrap();
    symlink(&real, &settings).unwrap();
    ok(&dstream(
        home.path(),
        &["install", "claude-code", "--project", &dir],
    ));
    assert_eq!(commands(&read_json(&real), "Stop").len(), 1);
    // Deleting the link would leave dstream's hooks in the file it leads to.
    ok(&dstream(
        home.path(),
        &["uninstall", "claude-code", "--project", &dir],
    ));
    assert!(
        fs::symlink_metadata(&settings)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read_to_string(&real).unwrap(), "{}\n");
}

#[test]
fn numbers_repeated_keys_and_escapes_are_kept_as_written() {
    let home = temp_dir();
    let (_project, dir, settings) = project();
    // Laid out as install writes, so that uninstall gives back the very same bytes.
    let original = r#"{
  "big": 12345678901234567890123,
  "hundred": 1e2,
  "price": 1.50,
  "tiny": -0.0,
  "huge": 1e400,
  "theme": "dark",
  "theme": "light",
  "note": "caf\u00e9 \/ \ud83d\ude00",
  "hooks": {
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "notify-send done",
            "timeout": 5.0
          }
        ]
      }
    ]
  },
  "theme": "solarized"
}
"#;
    fs::write(&settings, original).unwrap();
    ok(&dstream(
        home.path(),
        &["install", "claude-code", "--project", &dir],
    ));
    let installed = fs::read_to_string(&settings).unwrap();
    for line in original
        .lines()
        .filter(|l| !l.contains('{') && !l.contains('}'))
    {
        if !line.contains('[') && !line.contains(']') {
            assert!(installed.contains(line), "{line:?} lost: {installed}");
        }
    }
    assert_eq!(installed.matches("\"theme\"").count(), 3, "{installed}");
    assert!(
        installed.ends_with("  \"theme\": \"solarized\"\n}\n"),
        "{installed}"
    );
    ok(&dstream(
        home.path(),
        &["uninstall", "claude-code", "--project", &dir],
    ));
    assert_eq!(fs::read_to_string(&settings).unwrap(), original);
}

#[test]
fn a_repeated_hooks_key_is_refused() {
    let home = temp_dir();
    let (_project, dir, settings) = project();
    let twice = r#"{"hooks": {"Stop": []}, "model": "opus", "hooks": {}}"#;
    fs::write(&settings, twice).unwrap();
    for verb in ["install", "uninstall"] {
        let err = failed(&dstream(
            home.path(),
            &[verb, "claude-code", "--project", &dir],
        ));
        assert!(err.contains("`hooks` is written 2 times"), "{verb}: {err}");
        assert!(err.contains(settings.to_str().unwrap()), "{verb}: {err}");
        assert_eq!(fs::read_to_string(&settings).unwrap(), twice);
    }
}

#[test]
fn a_read_only_settings_file_is_refused_and_left_untouched() {
    let home = temp_dir();
    let (_project, dir, settings) = project();
    fs::write(&settings, EXISTING).unwrap();
    fs::set_permissions(&settings, fs::Permissions::from_mode(0o444)).unwrap();
    let out = dstream(home.path(), &["install", "claude-code", "--project", &dir]);
    assert_eq!(out.status.code(), Some(1));
    let err = failed(&out);
    assert!(err.contains(settings.to_str().unwrap()), "{err}");
    assert!(err.contains("read-only (mode 0444)"), "{err}");
    assert!(err.contains("left untouched"), "{err}");
    assert_eq!(fs::read_to_string(&settings).unwrap(), EXISTING);
    assert_eq!(mode_of(&settings), 0o444);

    // Installed while writable, then made read-only: install has nothing to do, uninstall
    // is refused.
    fs::set_permissions(&settings, fs::Permissions::from_mode(0o644)).unwrap();
    ok(&dstream(
        home.path(),
        &["install", "claude-code", "--project", &dir],
    ));
    fs::set_permissions(&settings, fs::Permissions::from_mode(0o444)).unwrap();
    let installed = fs::read(&settings).unwrap();
    let said = ok(&dstream(
        home.path(),
        &["install", "claude-code", "--project", &dir],
    ));
    assert!(said.contains("nothing changed"), "{said}");
    let err = failed(&dstream(
        home.path(),
        &["uninstall", "claude-code", "--project", &dir],
    ));
    assert!(err.contains("read-only"), "{err}");
    assert_eq!(fs::read(&settings).unwrap(), installed);

    // A file holding nothing but dstream's hooks is not deleted either.
    fs::set_permissions(&settings, fs::Permissions::from_mode(0o644)).unwrap();
    fs::remove_file(&settings).unwrap();
    ok(&dstream(
        home.path(),
        &["install", "claude-code", "--project", &dir],
    ));
    fs::set_permissions(&settings, fs::Permissions::from_mode(0o400)).unwrap();
    let err = failed(&dstream(
        home.path(),
        &["uninstall", "claude-code", "--project", &dir],
    ));
    assert!(err.contains("read-only (mode 0400)"), "{err}");
    assert!(settings.exists());
    assert_eq!(names_in(settings.parent().unwrap()), ["settings.json"]);
}

#[test]
fn a_dangling_settings_link_is_refused() {
    let home = temp_dir();
    let (_project, dir, settings) = project();
    let target = home.path().join("dotfiles").join("claude.json");
    symlink(&target, &settings).unwrap();
    let err = failed(&dstream(
        home.path(),
        &["install", "claude-code", "--project", &dir],
    ));
    assert!(err.contains(settings.to_str().unwrap()), "{err}");
    assert!(
        err.contains(&format!("{}, which does not exist", target.display())),
        "{err}"
    );
    assert!(
        fs::symlink_metadata(&settings)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(!home.path().join("dotfiles").exists());
    // Nothing of dstream's can be there to remove.
    let said = ok(&dstream(
        home.path(),
        &["uninstall", "claude-code", "--project", &dir],
    ));
    assert!(said.contains("nothing to remove"), "{said}");
    assert!(
        fs::symlink_metadata(&settings)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(names_in(settings.parent().unwrap()), ["settings.json"]);
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

#[test]
fn fifos_devices_and_huge_files_are_refused_without_hanging() {
    let home = temp_dir();
    let (_project, dir, settings) = project();
    let refused = |why: &str| {
        for verb in ["install", "uninstall"] {
            // `dstream` kills it and fails the test if it does not exit.
            let err = failed(&dstream(
                home.path(),
                &[verb, "claude-code", "--project", &dir],
            ));
            assert!(err.contains(settings.to_str().unwrap()), "{verb}: {err}");
            assert!(err.contains(why), "{verb}: {err}");
        }
    };
    // Opening a FIFO to read waits for a writer.
    mkfifo(&settings);
    refused("is a named pipe (FIFO), not a regular file");
    assert!(
        fs::symlink_metadata(&settings)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    fs::remove_file(&settings).unwrap();

    // /dev/zero never ends.
    symlink("/dev/zero", &settings).unwrap();
    refused("a link to /dev/zero) is a character device, not a regular file");
    assert_eq!(fs::read_link(&settings).unwrap(), Path::new("/dev/zero"));
    fs::remove_file(&settings).unwrap();

    fs::create_dir(&settings).unwrap();
    refused("is a folder, not a regular file");
    fs::remove_dir(&settings).unwrap();

    // A (sparse) file far bigger than any settings file.
    let f = fs::File::create(&settings).unwrap();
    f.set_len(17 << 20).unwrap();
    refused("is larger than 16 MiB");
    assert_eq!(fs::metadata(&settings).unwrap().len(), 17 << 20);
    assert_eq!(names_in(settings.parent().unwrap()), ["settings.json"]);
}

fn plugin_source() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    fs::read_to_string(root.join("../scripts/opencode/dstream.js")).unwrap()
}

/// The plugin as the dstream at `bin` installs it: its own path (as the running program sees
/// it, links resolved) in the DSTREAM_BIN line, the rest as in the source.
fn installed_plugin_by(bin: &Path) -> Vec<u8> {
    let exe = fs::canonicalize(bin).unwrap();
    let quoted = serde_json::to_string(exe.to_str().unwrap()).unwrap();
    let source = plugin_source();
    let line = source
        .lines()
        .find(|l| l.contains("// @dstream-bin"))
        .expect("the plugin has a DSTREAM_BIN line");
    assert!(line.contains(r#"|| "dstream";"#), "{line}");
    let rendered = line.replace(r#"|| "dstream";"#, &format!("|| {quoted};"));
    let out = source.replacen(line, &rendered, 1);
    assert_ne!(out, source);
    out.into_bytes()
}

fn installed_plugin() -> Vec<u8> {
    installed_plugin_by(&daemon_bin())
}

#[test]
fn opencode_project_and_user_install() {
    let home = temp_dir();
    let project = temp_dir();
    let dir = project.path().to_str().unwrap();
    let file = project.path().join(".opencode/plugins/dstream.js");

    let said = ok(&dstream(
        home.path(),
        &["install", "opencode", "--project", dir],
    ));
    assert!(said.contains("installed"), "{said}");
    assert_eq!(fs::read(&file).unwrap(), installed_plugin());
    let said = ok(&dstream(
        home.path(),
        &["install", "opencode", "--project", dir],
    ));
    assert!(said.contains("nothing changed"), "{said}");
    // Another dstream (moved, or a second copy) writes its own path into the plugin, which
    // runs it to start a daemon; installing again from it changes nothing.
    let other = temp_dir();
    let copy = other.path().join("dstream");
    dstream_tests::copy_executable(&daemon_bin(), &copy);
    let said = ok(&dstream_in(
        &copy,
        home.path(),
        &["install", "opencode", "--project", dir],
        &[],
    ));
    assert!(said.contains("replaced"), "{said}");
    assert_eq!(fs::read(&file).unwrap(), installed_plugin_by(&copy));
    let said = ok(&dstream_in(
        &copy,
        home.path(),
        &["install", "opencode", "--project", dir],
        &[],
    ));
    assert!(said.contains("nothing changed"), "{said}");
    // The plain source (what an older dstream installed) is replaced too.
    fs::write(&file, plugin_source()).unwrap();
    let said = ok(&dstream(
        home.path(),
        &["install", "opencode", "--project", dir],
    ));
    assert!(said.contains("replaced"), "{said}");
    assert_eq!(fs::read(&file).unwrap(), installed_plugin());
    let said = ok(&dstream(
        home.path(),
        &["uninstall", "opencode", "--project", dir],
    ));
    assert!(said.contains("removed"), "{said}");
    assert!(!file.exists());
    let said = ok(&dstream(
        home.path(),
        &["uninstall", "opencode", "--project", dir],
    ));
    assert!(said.contains("nothing to remove"), "{said}");

    // User: $XDG_CONFIG_HOME/opencode/plugins, else ~/.config/opencode/plugins.
    let xdg = temp_dir();
    ok(&dstream_in(
        &daemon_bin(),
        home.path(),
        &["install", "opencode"],
        &[("XDG_CONFIG_HOME", xdg.path().to_str().unwrap())],
    ));
    assert_eq!(
        fs::read(xdg.path().join("opencode/plugins/dstream.js")).unwrap(),
        installed_plugin()
    );
    ok(&dstream(home.path(), &["install", "opencode", "--user"]));
    let in_home = home.path().join(".config/opencode/plugins/dstream.js");
    assert_eq!(fs::read(&in_home).unwrap(), installed_plugin());
    ok(&dstream(home.path(), &["uninstall", "opencode"]));
    assert!(!in_home.exists());
    assert!(xdg.path().join("opencode/plugins/dstream.js").exists());

    let err = failed(&dstream(
        home.path(),
        &["install", "opencode", "--project", dir, "--local"],
    ));
    assert!(err.contains("Claude Code only"), "{err}");
}

#[test]
fn opencode_files_that_are_not_ours_are_never_replaced_or_removed() {
    let home = temp_dir();
    let project = temp_dir();
    let dir = project.path().to_str().unwrap();
    let plugins = project.path().join(".opencode/plugins");
    fs::create_dir_all(&plugins).unwrap();
    let file = plugins.join("dstream.js");
    let foreign = "export const Mine = async () => ({})\n";
    fs::write(&file, foreign).unwrap();
    for verb in ["install", "uninstall"] {
        let err = failed(&dstream(home.path(), &[verb, "opencode", "--project", dir]));
        assert!(err.contains("not dstream's"), "{verb}: {err}");
        assert_eq!(fs::read_to_string(&file).unwrap(), foreign);
    }
    // An older (or edited) dstream plugin carries the marker: it is replaced, or removed.
    let older = "// dstream plugin (@dstream-opencode-plugin)\nexport const DstreamPlugin = async () => ({})\n";
    fs::write(&file, older).unwrap();
    let said = ok(&dstream(
        home.path(),
        &["install", "opencode", "--project", dir],
    ));
    assert!(said.contains("replaced"), "{said}");
    assert_eq!(fs::read(&file).unwrap(), installed_plugin());
    fs::write(&file, older).unwrap();
    ok(&dstream(
        home.path(),
        &["uninstall", "opencode", "--project", dir],
    ));
    assert!(!file.exists());
    // Other plugins in the folder are not touched.
    fs::write(plugins.join("other.js"), foreign).unwrap();
    ok(&dstream(
        home.path(),
        &["install", "opencode", "--project", dir],
    ));
    ok(&dstream(
        home.path(),
        &["uninstall", "opencode", "--project", dir],
    ));
    assert_eq!(
        fs::read_to_string(plugins.join("other.js")).unwrap(),
        foreign
    );
}

#[test]
fn opencode_refuses_fifos_dangling_links_and_read_only_files() {
    let home = temp_dir();
    let project = temp_dir();
    let dir = project.path().to_str().unwrap();
    let plugins = project.path().join(".opencode/plugins");
    fs::create_dir_all(&plugins).unwrap();
    let file = plugins.join("dstream.js");

    mkfifo(&file);
    for verb in ["install", "uninstall"] {
        let err = failed(&dstream(home.path(), &[verb, "opencode", "--project", dir]));
        assert!(
            err.contains("named pipe (FIFO), not a regular file"),
            "{verb}: {err}"
        );
    }
    assert!(fs::symlink_metadata(&file).unwrap().file_type().is_fifo());
    fs::remove_file(&file).unwrap();

    let missing = home.path().join("dotfiles/dstream.js");
    symlink(&missing, &file).unwrap();
    let err = failed(&dstream(
        home.path(),
        &["install", "opencode", "--project", dir],
    ));
    assert!(err.contains("which does not exist"), "{err}");
    assert!(!missing.exists());
    let said = ok(&dstream(
        home.path(),
        &["uninstall", "opencode", "--project", dir],
    ));
    assert!(said.contains("nothing to remove"), "{said}");
    assert!(
        fs::symlink_metadata(&file)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    fs::remove_file(&file).unwrap();

    // An older dstream plugin, made read-only: neither replaced nor removed.
    let older = "// dstream plugin (@dstream-opencode-plugin)\nexport const DstreamPlugin = async () => ({})\n";
    fs::write(&file, older).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o444)).unwrap();
    for verb in ["install", "uninstall"] {
        let err = failed(&dstream(home.path(), &[verb, "opencode", "--project", dir]));
        assert!(err.contains("read-only (mode 0444)"), "{verb}: {err}");
        assert_eq!(fs::read_to_string(&file).unwrap(), older);
    }
    fs::remove_file(&file).unwrap();

    // A link to an older plugin (in a dotfiles folder): the file it leads to is updated and
    // the link kept; uninstall removes the link, not the dotfiles' file.
    let dotfiles = home.path().join("dotfiles");
    fs::create_dir_all(&dotfiles).unwrap();
    let real = dotfiles.join("dstream.js");
    fs::write(&real, older).unwrap();
    symlink(&real, &file).unwrap();
    let said = ok(&dstream(
        home.path(),
        &["install", "opencode", "--project", dir],
    ));
    assert!(said.contains("replaced"), "{said}");
    assert!(
        fs::symlink_metadata(&file)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read(&real).unwrap(), installed_plugin());
    let said = ok(&dstream(
        home.path(),
        &["uninstall", "opencode", "--project", dir],
    ));
    assert!(said.contains("removed the link"), "{said}");
    assert!(fs::symlink_metadata(&file).is_err());
    assert_eq!(fs::read(&real).unwrap(), installed_plugin());
    assert!(names_in(&plugins).is_empty());
}
