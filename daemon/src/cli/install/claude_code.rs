//! Installing into Claude Code's settings file: which file, reading it as a JSON object,
//! writing it back atomically (or deleting it when dstream's hooks were all it held), and
//! saying what changed.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};

use super::claude_hooks::{
    CLAUDE_HOOK_TIMEOUT_SECS, HookKind, TOKEN_VAR, add_hooks, hook_command, remove_hooks,
};
use super::claude_telemetry::{self, Added, Telemetry};
use super::files::{self, Found};
use super::json::{self, Json};

/// The settings file: `DIR/.claude/settings.json` for a project (`settings.local.json` with
/// `local`), else the user's `~/.claude/settings.json`.
pub fn settings_file(project: Option<&Path>, local: bool) -> PathBuf {
    match project {
        Some(dir) => dir.join(".claude").join(if local {
            "settings.local.json"
        } else {
            "settings.json"
        }),
        None => dstream_sdk::socket::home_dir()
            .join(".claude")
            .join("settings.json"),
    }
}

/// The program hooks run: the lean `dstream-hook` beside the running binary when it is there
/// (a smaller image that starts faster on every event), else the running binary itself (as
/// `dstream hook`).
fn hook_exe() -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("finding the path of this dstream binary")?;
    let lean = exe.with_file_name(format!(
        "{}{}",
        dstream_daemon::hook::LEAN_BIN,
        std::env::consts::EXE_SUFFIX
    ));
    let exe = if lean.is_file() { lean } else { exe };
    let exe = exe.to_str().ok_or_else(|| {
        anyhow!(
            "the path of this dstream binary ({}) is not UTF-8",
            exe.display()
        )
    })?;
    Ok(exe.to_string())
}

/// The document in a settings file. A file that is not a JSON object is an error (and is left
/// untouched).
fn parse_settings(file: &files::File) -> anyhow::Result<Json> {
    let shown = file.shown();
    let text = std::str::from_utf8(&file.content).map_err(|e| {
        anyhow!("{shown} is not UTF-8 text ({e}); fix it first, it was left untouched")
    })?;
    let doc = json::parse(text).map_err(|e| {
        anyhow!("{shown} is not valid JSON ({e}); fix it first, it was left untouched")
    })?;
    if !matches!(doc, Json::Object(_)) {
        bail!("{shown} does not hold a JSON object; it was left untouched");
    }
    Ok(doc)
}

/// The settings document at `path`, read as `install` reads it: `None` when there is no file
/// (or a link to nothing), an error when it cannot be read or is not a JSON object.
pub fn read_settings(path: &Path) -> anyhow::Result<Option<Json>> {
    match files::read(path, files::MAX_BYTES)? {
        Found::Missing | Found::DanglingLink(_) => Ok(None),
        Found::File(file) => parse_settings(&file).map(Some),
    }
}

/// Writes `doc` over `file`, or to a new file at `path` when there was none.
fn write_settings(path: &Path, file: Option<&files::File>, doc: &Json) -> anyhow::Result<()> {
    let mut text = json::to_pretty(doc);
    text.push('\n');
    match file {
        Some(file) => file.replace(text.as_bytes()),
        None => {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            }
            files::create(path, text.as_bytes())
        }
    }
}

/// `--http`: where the daemon's listener takes hooks, and its token.
pub struct HttpHooks {
    /// `http://127.0.0.1:4438`
    pub base: String,
    pub token: String,
}

/// The token in the `env` block (the user's own settings only): the hooks' header names the
/// variable, never the secret. Whether it changed.
fn set_token(doc: &mut Json, token: &str) -> bool {
    let Some(env) = doc.entry("env", || Json::Object(Vec::new())) else {
        return false;
    };
    if env.get(TOKEN_VAR).and_then(|v| v.as_str()).as_deref() == Some(token) {
        return false;
    }
    env.set(TOKEN_VAR, Json::string(token));
    true
}

/// Takes the token back out of `env` (and `env` when nothing else is in it).
fn remove_token(doc: &mut Json) -> bool {
    let Some(env) = doc.get_mut("env") else {
        return false;
    };
    if env.get(TOKEN_VAR).is_none() {
        return false;
    }
    env.remove(TOKEN_VAR);
    if matches!(env, Json::Object(entries) if entries.is_empty()) {
        doc.remove("env");
    }
    true
}

/// Adds dstream's hooks for `events` to the settings file at `path` (as `http` hooks with
/// `http`), and its telemetry settings when `telemetry` says where (else why not).
pub fn install(
    path: &Path,
    events: &[&'static str],
    telemetry: Result<Telemetry, String>,
    http: Option<&HttpHooks>,
) -> anyhow::Result<()> {
    let exe = hook_exe()?;
    let (file, mut doc) = match files::read(path, files::MAX_BYTES)? {
        Found::Missing => (None, Json::Object(Vec::new())),
        Found::DanglingLink(target) => return Err(files::dangling_link(path, &target)),
        Found::File(file) => {
            let doc = parse_settings(&file)?;
            (Some(file), doc)
        }
    };
    let is_new = file.is_none();
    let shown = file
        .as_ref()
        .map_or_else(|| path.display().to_string(), |f| f.shown());
    let kind = match http {
        Some(h) => HookKind::Http {
            exe: &exe,
            base: &h.base,
        },
        None => HookKind::Command { exe: &exe },
    };
    let mut changes =
        add_hooks(&mut doc, events, kind).with_context(|| format!("{shown} was left untouched"))?;
    if let Some(h) = http
        && set_token(&mut doc, &h.token)
    {
        changes.updated.push("env");
    }
    let telemetry_note = match &telemetry {
        Ok(t) => match claude_telemetry::add(&mut doc, t, |k| std::env::var(k).ok()) {
            Added::Written => Some(format!(
                "  telemetry: Claude Code reports usage and cost to {} (env block; `--no-telemetry` leaves it out)",
                t.endpoint
            )),
            Added::AlreadyThere => None,
            Added::UsersOwn(key) => {
                // Their endpoint, when the key names one, to copy into forward_to.
                let theirs = doc
                    .get("env")
                    .and_then(|e| e.get(&key))
                    .and_then(|v| v.as_str().map(|s| s.into_owned()))
                    .or_else(|| std::env::var(&key).ok())
                    .filter(|v| v.starts_with("http://") || v.starts_with("https://"))
                    .unwrap_or_else(|| "<your collector's OTLP/HTTP base URL>".into());
                Some(format!(
                    "  telemetry: left alone, {key} names your own exporter. To have dstream \
                     record usage and cost too, and your collector still get everything: set \
                     `forward_to = \"{theirs}\"` under [otlp] in dstream's config.toml (and \
                     `forward_headers` if it wants a token); dstream then relays every request \
                     it receives there unchanged. Then take your OTEL_* exporter settings out \
                     of Claude Code's env (and the environment) and run this install again, \
                     which points Claude Code at dstream ({})",
                    t.endpoint
                ))
            }
        },
        Err(why) => Some(format!("  telemetry: not set ({why})")),
    };
    let telemetry_added = telemetry_note
        .as_deref()
        .is_some_and(|n| n.starts_with("  telemetry: Claude Code reports"));
    if changes.added.is_empty() && changes.updated.is_empty() && !telemetry_added {
        println!(
            "dstream's Claude Code hooks are already in {shown} ({} events); nothing changed",
            events.len()
        );
        if let Some(note) = telemetry_note {
            println!("{note}");
        }
        return Ok(());
    }
    write_settings(path, file.as_ref(), &doc)?;
    match http {
        None => println!(
            "{} {shown}: hooks run `{}` (timeout {CLAUDE_HOOK_TIMEOUT_SECS} s)",
            if is_new { "created" } else { "updated" },
            hook_command(&exe)
        ),
        Some(h) => println!(
            "{} {shown}: hooks POST to {}/hooks/claude-code with the token from ${TOKEN_VAR}              (set in `env` here); SessionStart runs `{}` (Claude Code runs no http hook there,              and it starts a daemon that is down). An http hook fails open while the daemon is              down: the calls in between run unchecked and unrecorded until it is back",
            if is_new { "created" } else { "updated" },
            h.base,
            hook_command(&exe)
        ),
    }
    if !changes.added.is_empty() {
        println!(
            "  added for {} event{}: {}",
            changes.added.len(),
            plural(changes.added.len()),
            changes.added.join(", ")
        );
    }
    if !changes.updated.is_empty() {
        println!(
            "  pointed at this dstream for {} event{}: {}",
            changes.updated.len(),
            plural(changes.updated.len()),
            changes.updated.join(", ")
        );
    }
    if let Some(note) = telemetry_note {
        println!("{note}");
    }
    Ok(())
}

/// Removes dstream's hooks from the settings file at `path`.
pub fn uninstall(path: &Path) -> anyhow::Result<()> {
    let file = match files::read(path, files::MAX_BYTES)? {
        Found::Missing => {
            println!("{} does not exist; nothing to remove", path.display());
            return Ok(());
        }
        // Nothing of dstream's can be behind a link to nothing.
        Found::DanglingLink(target) => {
            println!(
                "{} is a link to {}, which does not exist; nothing to remove",
                path.display(),
                target.display()
            );
            return Ok(());
        }
        Found::File(file) => file,
    };
    let mut doc = parse_settings(&file)?;
    let shown = file.shown();
    let removed = remove_hooks(&mut doc).with_context(|| format!("{shown} was left untouched"))?;
    let telemetry_removed = claude_telemetry::remove(&mut doc);
    let token_removed = remove_token(&mut doc);
    if removed.is_empty() && !telemetry_removed && !token_removed {
        println!("no dstream hooks in {shown}; nothing changed");
        return Ok(());
    }
    let mut summary = format!(
        "removed dstream's hook from {} event{}: {}",
        removed.len(),
        plural(removed.len()),
        removed.join(", ")
    );
    if telemetry_removed {
        summary.push_str("\nremoved dstream's telemetry settings from `env`");
    }
    if token_removed {
        summary.push_str(&format!("\nremoved {TOKEN_VAR} from `env`"));
    }
    if matches!(&doc, Json::Object(entries) if entries.is_empty()) && !file.is_link() {
        // Nothing but dstream's hooks was in it: the file goes, as install found it. (A link's
        // target is emptied instead: deleting the link would leave the hooks in the target.)
        file.remove()?;
        println!("{summary}\ndeleted {shown}: nothing else was in it");
    } else {
        write_settings(path, Some(&file), &doc)?;
        println!("{summary}\nupdated {shown}");
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
