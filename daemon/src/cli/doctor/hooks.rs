//! Checks 4 and 5: the agents' side. Claude Code's hooks, read from the settings files
//! `dstream install claude-code` writes (by the same code), each pointing at a dstream (or the
//! lean `dstream-hook`, with its dstream beside it) that exists and is this version; settings
//! that turn hooks off; OpenCode's plugin file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::report::{Check, Context, VERSION, sh};
use crate::cli::install::claude_code::{read_settings, settings_file};
use crate::cli::install::claude_events::CLAUDE_CORE_EVENTS;
use crate::cli::install::claude_hooks::installed;
use crate::cli::install::json::Json;
use crate::cli::install::opencode;
use crate::cli::install::shell::is_lean;
use dstream_daemon::hook::LEAN_BIN;

/// How long `<hook binary> --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(3);

/// One Claude Code settings file dstream may install into, and the install command for it.
struct Scope {
    path: PathBuf,
    install: String,
}

fn claude_scopes() -> Vec<Scope> {
    let mut out = vec![Scope {
        path: settings_file(None, false),
        install: "dstream install claude-code".into(),
    }];
    // The project is the folder Claude Code is started in: here.
    if let Ok(cwd) = std::env::current_dir() {
        for local in [false, true] {
            out.push(Scope {
                path: settings_file(Some(&cwd), local),
                install: format!(
                    "dstream install claude-code --project {}{}",
                    sh(&cwd),
                    if local { " --local" } else { "" }
                ),
            });
        }
    }
    out
}

/// Where Claude Code's managed (administrator's) settings are.
fn managed_settings() -> PathBuf {
    if cfg!(target_os = "macos") {
        PathBuf::from("/Library/Application Support/ClaudeCode/managed-settings.json")
    } else {
        PathBuf::from("/etc/claude-code/managed-settings.json")
    }
}

pub fn check(cx: &Context) -> Vec<Check> {
    let scopes = claude_scopes();
    let mut out = Vec::new();
    let mut docs = Vec::new();
    for s in &scopes {
        match read_settings(&s.path) {
            Ok(Some(doc)) => docs.push((s, doc)),
            Ok(None) => {}
            // Claude Code ignores a settings file it cannot parse, hooks and all.
            Err(e) => out.push(Check::fail(
                "claude_code.settings",
                format!("{e:#}"),
                format!("fix the JSON in {}", sh(&s.path)),
            )),
        }
    }
    out.extend(claude_hooks(&docs, &cx.config));
    out.extend(hooks_disabled(&docs));
    out.push(opencode_plugin());
    out
}

/// Check 4 for Claude Code: where dstream's hooks are, and whether they can run.
fn claude_hooks(docs: &[(&Scope, Json)], config: &dstream_daemon::Config) -> Vec<Check> {
    const NAME: &str = "claude_code.hooks";
    let mut out = Vec::new();
    let mut versions = BTreeMap::new();
    for (scope, doc) in docs {
        let hooks = installed(doc);
        if hooks.is_empty() {
            continue;
        }
        let shown = scope.path.display();
        let mut bad = Vec::new();
        let mut exes: Vec<&str> = hooks.iter().map(|(_, exe)| exe.as_str()).collect();
        exes.sort();
        exes.dedup();
        for exe in exes {
            // An `http` hook: it must post where the daemon listens.
            if exe.starts_with("http://") {
                if let Some(why) = http_hook_problem(exe, config) {
                    bad.push(Check::fail(
                        NAME,
                        format!("{shown}: the http hooks post to {exe}, but {why}"),
                        format!("{} --http", scope.install),
                    ));
                }
                continue;
            }
            let verdict = versions
                .entry(exe.to_string())
                .or_insert_with(|| hook_binary(exe));
            if let Err(e) = verdict {
                bad.push(Check::fail(
                    NAME,
                    format!("{shown}: the hooks run {exe}, which {e}"),
                    &scope.install,
                ));
            }
        }
        if !bad.is_empty() {
            out.extend(bad);
            continue;
        }
        let missing: Vec<&str> = CLAUDE_CORE_EVENTS
            .iter()
            .copied()
            .filter(|e| !hooks.iter().any(|(h, _)| h == e))
            .collect();
        let events = {
            let mut e: Vec<&str> = hooks.iter().map(|(e, _)| e.as_str()).collect();
            e.sort();
            e.dedup();
            e.len()
        };
        if missing.is_empty() {
            out.push(Check::ok(
                NAME,
                format!("{shown}: {events} events hooked, running dstream {VERSION}"),
            ));
        } else {
            out.push(Check::warn(
                NAME,
                format!(
                    "{shown}: no dstream hook for {} (dstream does not see those events)",
                    missing.join(", ")
                ),
                format!("{} --events core", scope.install),
            ));
        }
    }
    if docs.iter().all(|(_, doc)| installed(doc).is_empty()) {
        out.push(Check::warn(
            NAME,
            "dstream's hooks are not installed for Claude Code (fine if you do not use it)",
            "dstream install claude-code",
        ));
    }
    out
}

/// Whether the hook's binary runs and is this version (`dstream`, or the lean `dstream-hook`
/// with the `dstream` beside it that starts a daemon when none runs): `Err` says what is wrong.
fn hook_binary(exe: &str) -> Result<(), String> {
    let path = resolve(exe).ok_or_else(|| "is not found (not a file, nor on PATH)".to_string())?;
    let meta = std::fs::metadata(&path).map_err(|e| format!("cannot be examined ({e})"))?;
    if !meta.is_file() {
        return Err("is not a file".into());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o111 == 0 {
            return Err("is not executable".into());
        }
    }
    let lean = is_lean(exe);
    let said = run_version(&path)?;
    let name = if lean { LEAN_BIN } else { "dstream" };
    let expected = format!("{name} {VERSION}");
    if said != expected {
        return Err(format!(
            "says {said:?} to --version, not {expected:?} (another dstream)"
        ));
    }
    if lean {
        // Without a daemon, the lean hook starts the `dstream` beside it; with none there, it
        // can only spool.
        let beside = path.with_file_name(format!("dstream{}", std::env::consts::EXE_SUFFIX));
        if !beside.is_file() {
            return Err(format!(
                "has no dstream beside it ({} is missing), so it cannot start a daemon when \
                 none runs (it spools the events instead)",
                beside.display()
            ));
        }
        let said = run_version(&beside)?;
        if said != format!("dstream {VERSION}") {
            return Err(format!(
                "starts the dstream beside it, which says {said:?} to --version, not \
                 \"dstream {VERSION}\" (another dstream)"
            ));
        }
    }
    Ok(())
}

/// `exe` as the shell that runs the hook finds it: a path, or a name on PATH.
fn resolve(exe: &str) -> Option<PathBuf> {
    let p = Path::new(exe);
    if exe.contains('/') {
        return p.exists().then(|| p.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(exe))
        .find(|c| c.is_file())
}

/// The first line `<exe> --version` prints, within [`VERSION_TIMEOUT`].
fn run_version(exe: &Path) -> Result<String, String> {
    let mut child = Command::new(exe)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot be run ({e})"))?;
    let deadline = Instant::now() + VERSION_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "did not answer --version within {} s",
                    VERSION_TIMEOUT.as_secs()
                ));
            }
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("cannot be run ({e})"))?;
    if !out.status.success() {
        return Err(format!("fails to run --version ({})", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string())
}

/// Check 5: a setting that keeps Claude Code from running dstream's hooks.
fn hooks_disabled(docs: &[(&Scope, Json)]) -> Vec<Check> {
    const NAME: &str = "claude_code.hooks_enabled";
    let is_true = |doc: &Json, key: &str| matches!(doc.get(key), Some(Json::Bool(true)));
    let mut out = Vec::new();
    for (scope, doc) in docs {
        if is_true(doc, "disableAllHooks") {
            out.push(Check::fail(
                NAME,
                format!(
                    "{} sets \"disableAllHooks\": true: Claude Code runs no hooks, dstream's \
                     neither",
                    scope.path.display()
                ),
                format!("remove \"disableAllHooks\" from {}", sh(&scope.path)),
            ));
        }
    }
    let managed = managed_settings();
    match read_settings(&managed) {
        Ok(Some(doc)) => {
            for (key, what) in [
                ("disableAllHooks", "Claude Code runs no hooks"),
                (
                    "allowManagedHooksOnly",
                    "Claude Code runs only the administrator's hooks, not dstream's",
                ),
            ] {
                if is_true(&doc, key) {
                    out.push(Check::fail(
                        NAME,
                        format!(
                            "{} (managed settings) sets \"{key}\": true: {what}",
                            managed.display()
                        ),
                        format!(
                            "remove \"{key}\" from {} (as root; ask whoever manages this \
                             machine)",
                            sh(&managed)
                        ),
                    ));
                }
            }
        }
        Ok(None) => {}
        Err(e) => out.push(Check::warn(
            NAME,
            format!("cannot read the managed settings: {e:#}"),
            format!("ls -l {}", sh(&managed)),
        )),
    }
    if out.is_empty() {
        out.push(Check::ok(NAME, "no setting turns Claude Code's hooks off"));
    }
    out
}

/// Check 4 for OpenCode: the plugin file, and whether it is this dstream's.
fn opencode_plugin() -> Check {
    const NAME: &str = "opencode.plugin";
    let mut scopes = vec![(
        opencode::plugin_dir(None),
        "dstream install opencode".to_string(),
    )];
    if let Ok(cwd) = std::env::current_dir() {
        scopes.push((
            opencode::plugin_dir(Some(&cwd)),
            format!("dstream install opencode --project {}", sh(&cwd)),
        ));
    }
    let mut found = None;
    for (dir, install) in &scopes {
        match opencode::installed(dir) {
            opencode::Installed::Missing => {}
            opencode::Installed::Current(p) => {
                found.get_or_insert(Check::ok(
                    NAME,
                    format!("{} is this dstream's plugin", p.display()),
                ));
            }
            opencode::Installed::Other(p) => {
                return Check::warn(
                    NAME,
                    format!(
                        "{} is another dstream version's plugin, not {VERSION}'s",
                        p.display()
                    ),
                    install,
                );
            }
            opencode::Installed::Foreign(p, why) => {
                return Check::warn(
                    NAME,
                    format!(
                        "{}: {why}; OpenCode does not run dstream's plugin",
                        p.display()
                    ),
                    format!("move {} away, then: {install}", sh(&p)),
                );
            }
        }
    }
    found.unwrap_or_else(|| {
        Check::warn(
            NAME,
            "dstream's plugin is not installed for OpenCode (fine if you do not use it)",
            "dstream install opencode",
        )
    })
}

/// Why an `http` hook posting to `url` cannot reach the daemon `config` describes, if it
/// cannot.
fn http_hook_problem(url: &str, config: &dstream_daemon::Config) -> Option<String> {
    use dstream_daemon::http::settings::Listen;
    match config.http.listen() {
        Ok(Listen::At(addr)) if addr.port() != 0 => {
            let base = format!("http://{addr}/");
            (!url.starts_with(&base))
                .then(|| format!("the daemon listens at {addr} ([http] listen)"))
        }
        Ok(Listen::At(_)) => Some("[http] listen picks a free port at every start (\"0\")".into()),
        Ok(Listen::Off) => Some("the daemon's HTTP listener is off ([http] listen)".into()),
        Err(e) => Some(e),
    }
}
