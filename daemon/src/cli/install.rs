//! `dstream install <agent>` and `dstream uninstall <agent>`: register dstream with an agent,
//! and take exactly that back out.
//!
//! - Claude Code: a hook entry per recorded event in a `settings.json`, running
//!   `<absolute path of this dstream> hook claude-code`. The rest of the file (other settings,
//!   other hooks, the order of keys) is kept as it is.
//! - OpenCode: the plugin `scripts/opencode/dstream.js` (built into this binary) copied into
//!   OpenCode's plugin folder.
//!
//! Both write atomically (a temporary file renamed over the old one), change nothing when
//! there is nothing to change, and say what they did. They edit only a regular file, or one
//! that a symbolic link leads to (the link stays); a FIFO, a device, a dangling link, a file
//! over 16 MiB or a read-only file is refused, untouched (see `files`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, anyhow, bail};
use clap::{Args, ValueEnum};

use files::Found;
use json::{Json, Str};

mod files;
mod json;

/// The OpenCode plugin, as `dstream install opencode` writes it.
const OPENCODE_PLUGIN: &str = include_str!("../../../scripts/opencode/dstream.js");
/// A line in the plugin that marks a file as dstream's to replace or remove.
const OPENCODE_MARKER: &str = "@dstream-opencode-plugin";
/// File name of the plugin in OpenCode's plugin folder.
const OPENCODE_FILE: &str = "dstream.js";

/// Seconds Claude Code waits for the hook before it gives up on it. Long, because a tool call
/// that policy holds for a person's approval waits in the hook; the hook's own deadline
/// (`DSTREAM_HOOK_TIMEOUT_MS`) ends it much sooner when nobody is waiting, and the daemon's
/// approval timeouts stay below this one so that a decision is never cut off.
const CLAUDE_HOOK_TIMEOUT_SECS: u64 = 600;

/// The Claude Code hook events dstream records: every event Claude Code 2.1.330 validates its
/// settings against (the release tests/fixtures were captured from), in its order, except
/// `WorktreeCreate`, whose hook replaces Claude Code's own `git worktree add` and must print
/// the new worktree's path.
const CLAUDE_EVENTS: &[&str] = &[
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "Notification",
    "UserPromptSubmit",
    "UserPromptExpansion",
    "SessionStart",
    "SessionEnd",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "PreModelSwitch",
    "PostModelSwitch",
    "PermissionRequest",
    "PermissionDenied",
    "Setup",
    "TeammateIdle",
    "TaskCreated",
    "TaskCompleted",
    "Elicitation",
    "ElicitationResult",
    "ConfigChange",
    "WorktreeRemove",
    "InstructionsLoaded",
    "CwdChanged",
    "FileChanged",
    "DirectoryAdded",
    "MessageDisplay",
];

/// The events every Claude Code release with hooks knows (`--events core`). Some releases
/// refuse a whole settings file that names an event they do not know.
const CLAUDE_CORE_EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Notification",
    "SubagentStop",
    "Stop",
    "PreCompact",
    "SessionEnd",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Agent {
    /// Claude Code: hooks in a settings.json.
    ClaudeCode,
    /// OpenCode: a plugin file in its plugin folder.
    Opencode,
}

/// Where to install: one project, or the user's own configuration (the default).
#[derive(Args)]
pub struct Target {
    /// Install for this project only: DIR/.claude/settings.json (Claude Code) or
    /// DIR/.opencode/plugins/ (OpenCode).
    #[arg(long, value_name = "DIR", conflicts_with = "user")]
    project: Option<PathBuf>,
    /// Install for the current user, in every project [the default]: ~/.claude/settings.json
    /// (Claude Code) or $XDG_CONFIG_HOME/opencode/plugins/ (OpenCode, else ~/.config/…).
    #[arg(long)]
    user: bool,
    /// With --project, for Claude Code: use DIR/.claude/settings.local.json, Claude Code's
    /// per-person project file, instead of the shared (usually committed) settings.json. The
    /// hook command holds this machine's path to dstream.
    #[arg(long, requires = "project")]
    local: bool,
}

#[derive(Args)]
#[command(after_long_help = INSTALL_HELP)]
pub struct InstallArgs {
    #[arg(value_enum)]
    agent: Agent,
    #[command(flatten)]
    target: Target,
    /// Claude Code events to hook: `all` [default], `core` (the events every Claude Code
    /// with hooks knows), or a comma-separated list of event names.
    #[arg(long, value_delimiter = ',', value_name = "EVENTS")]
    events: Vec<String>,
}

const INSTALL_HELP: &str = "\
Claude Code: adds to the settings file, for every hook event dstream records, a hook that runs
`<this dstream's absolute path> hook claude-code` with a 600 s timeout (long enough for a person
to approve a held tool call). Other settings and other hooks are left as they are. Running it
again changes nothing; after moving the dstream binary, running it again points the hooks at
the new path. Installing adds events and never removes any. If Claude Code reports `Invalid key
in record` for a hook event after installing, it is older than that event (and ignores the whole
file): run `dstream uninstall claude-code`, then install again with `--events core`.

OpenCode: writes the dstream plugin to .opencode/plugins/dstream.js (project) or
$XDG_CONFIG_HOME/opencode/plugins/dstream.js (user). An older dstream plugin there is replaced;
a file of that name that is not dstream's is left alone (and the command fails).

Without --project or --user, installs for the user.";

#[derive(Args)]
pub struct UninstallArgs {
    #[arg(value_enum)]
    agent: Agent,
    #[command(flatten)]
    target: Target,
}

/// The settings file to edit for Claude Code.
fn claude_settings(target: &Target) -> PathBuf {
    match &target.project {
        Some(dir) => dir.join(".claude").join(if target.local {
            "settings.local.json"
        } else {
            "settings.json"
        }),
        None => dstream_sdk::socket::home_dir()
            .join(".claude")
            .join("settings.json"),
    }
}

/// OpenCode's plugin folder for the target.
fn opencode_plugins(target: &Target) -> anyhow::Result<PathBuf> {
    if target.local {
        bail!("--local is for Claude Code only; OpenCode has one plugin folder per project");
    }
    Ok(match &target.project {
        Some(dir) => dir.join(".opencode").join("plugins"),
        None => {
            // XDG: a relative XDG_CONFIG_HOME is to be ignored.
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .unwrap_or_else(|| dstream_sdk::socket::home_dir().join(".config"));
            config.join("opencode").join("plugins")
        }
    })
}

pub fn install(args: InstallArgs) -> anyhow::Result<ExitCode> {
    match args.agent {
        Agent::ClaudeCode => {
            let events = chosen_events(&args.events)?;
            install_claude(&claude_settings(&args.target), &events)
        }
        Agent::Opencode => {
            if !args.events.is_empty() {
                bail!("--events is for Claude Code only");
            }
            install_opencode(&opencode_plugins(&args.target)?)
        }
    }?;
    Ok(ExitCode::SUCCESS)
}

pub fn uninstall(args: UninstallArgs) -> anyhow::Result<ExitCode> {
    match args.agent {
        Agent::ClaudeCode => uninstall_claude(&claude_settings(&args.target)),
        Agent::Opencode => uninstall_opencode(&opencode_plugins(&args.target)?),
    }?;
    Ok(ExitCode::SUCCESS)
}

fn chosen_events(list: &[String]) -> anyhow::Result<Vec<&'static str>> {
    let mut out: Vec<&'static str> = Vec::new();
    for name in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let add: &[&'static str] = match name {
            "all" => CLAUDE_EVENTS,
            "core" => CLAUDE_CORE_EVENTS,
            "WorktreeCreate" => bail!(
                "WorktreeCreate is not hooked: its hook replaces Claude Code's own worktree \
                 creation and must print the new worktree's path"
            ),
            _ => match CLAUDE_EVENTS.iter().find(|e| **e == name) {
                Some(e) => std::slice::from_ref(e),
                None => bail!(
                    "{name:?} is not a Claude Code hook event dstream knows; known: {}",
                    CLAUDE_EVENTS.join(", ")
                ),
            },
        };
        for e in add {
            if !out.contains(e) {
                out.push(e);
            }
        }
    }
    Ok(if out.is_empty() {
        CLAUDE_EVENTS.to_vec()
    } else {
        out
    })
}

// ---- Claude Code ----

/// The path of the running binary, as a shell word for the hook command.
fn dstream_exe() -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("finding the path of this dstream binary")?;
    let exe = exe.to_str().ok_or_else(|| {
        anyhow!(
            "the path of this dstream binary ({}) is not UTF-8",
            exe.display()
        )
    })?;
    Ok(exe.to_string())
}

fn hook_command(exe: &str) -> String {
    format!("{} hook claude-code", shell::quote(exe))
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

fn dangling_link(path: &Path, target: &Path) -> anyhow::Error {
    anyhow!(
        "{} is a symbolic link to {}, which does not exist; dstream does not create files \
         through a dangling link, so it was left untouched. Create the file it points to (it \
         may be in a dotfiles folder or on a drive that is not there now), or remove the \
         link, then run this again",
        path.display(),
        target.display()
    )
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

/// What `install` did to one event's hooks.
#[derive(Default)]
struct Changes {
    added: Vec<&'static str>,
    updated: Vec<&'static str>,
}

/// Fails when `key` is written more than once in `object`: Claude Code reads only the last,
/// and an edit to either would not do what it says.
fn written_once(object: &Json, key: &str, shown: &str) -> anyhow::Result<()> {
    match object.count(key) {
        0 | 1 => Ok(()),
        n => bail!(
            "`{shown}` is written {n} times in the settings file, and Claude Code reads only \
             the last one; merge them into one, then run this again"
        ),
    }
}

fn object(entries: Vec<(&str, Json)>) -> Json {
    Json::Object(entries.into_iter().map(|(k, v)| (Str::new(k), v)).collect())
}

/// Adds the hook to `doc` for each event (or points an existing dstream hook at `exe`).
/// Fails, changing nothing on disk, when the file's `hooks` do not have the documented shape.
fn add_hooks(doc: &mut Json, events: &[&'static str], exe: &str) -> anyhow::Result<Changes> {
    written_once(doc, "hooks", "hooks")?;
    let hooks = doc
        .entry("hooks", || Json::Object(Vec::new()))
        .ok_or_else(|| anyhow!("the settings file is not a JSON object"))?;
    if !matches!(hooks, Json::Object(_)) {
        bail!("`hooks` in the settings file is not an object");
    }
    let mut changes = Changes::default();
    for event in events {
        written_once(hooks, event, &format!("hooks.{event}"))?;
        let list = hooks
            .entry(event, || Json::Array(Vec::new()))
            .expect("hooks is an object");
        let Json::Array(groups) = list else {
            bail!("`hooks.{event}` in the settings file is not a list");
        };
        let mut found = false;
        for handler in groups.iter_mut().flat_map(handlers_mut) {
            let Some(command) = ours(handler) else {
                continue;
            };
            found = true;
            if command.exe != exe {
                let rewritten = command.with_exe(exe);
                handler.set("command", Json::string(&rewritten));
                if handler.get("timeout").is_none() {
                    handler.set("timeout", Json::from(CLAUDE_HOOK_TIMEOUT_SECS));
                }
                changes.updated.push(event);
            }
        }
        if !found {
            groups.push(object(vec![(
                "hooks",
                Json::Array(vec![object(vec![
                    ("type", Json::string("command")),
                    ("command", Json::string(&hook_command(exe))),
                    ("timeout", Json::from(CLAUDE_HOOK_TIMEOUT_SECS)),
                ])]),
            )]));
            changes.added.push(event);
        }
    }
    Ok(changes)
}

/// The handlers (`{"type": "command", …}`) of one matcher group, if it has any.
fn handlers_mut(group: &mut Json) -> std::slice::IterMut<'_, Json> {
    match group.get_mut("hooks") {
        Some(Json::Array(handlers)) => handlers.iter_mut(),
        _ => Default::default(),
    }
}

/// A handler's command, when it runs `dstream hook claude-code`.
fn ours(handler: &Json) -> Option<shell::HookCommand> {
    if let Some(t) = handler.get("type")
        && t.as_str().is_none_or(|t| t != "command")
    {
        return None;
    }
    shell::HookCommand::parse(&handler.get("command")?.as_str()?, "claude-code")
}

/// Removes every dstream hook handler from `doc`, then the groups, event lists and `hooks`
/// object that this left empty. Returns the events it removed handlers from.
fn remove_hooks(doc: &mut Json) -> anyhow::Result<Vec<String>> {
    let mut touched = Vec::new();
    written_once(doc, "hooks", "hooks")?;
    let Some(hooks) = doc.get_mut("hooks") else {
        return Ok(touched);
    };
    let Json::Object(events) = hooks else {
        bail!("`hooks` in the settings file is not an object");
    };
    // Per entry (an event written twice is two entries): whether removing left it empty.
    let mut emptied = Vec::with_capacity(events.len());
    let mut seen = std::collections::HashSet::new();
    for (event, list) in events.iter_mut() {
        let Json::Array(groups) = list else {
            bail!(
                "`hooks.{}` in the settings file is not a list",
                event.value()
            );
        };
        let mut removed_here = false;
        groups.retain_mut(|group| {
            let Some(Json::Array(handlers)) = group.get_mut("hooks") else {
                return true;
            };
            let before = handlers.len();
            handlers.retain(|h| ours(h).is_none());
            if handlers.len() == before {
                return true;
            }
            removed_here = true;
            // Keep the group if it still has hooks, or anything else besides a matcher.
            !handlers.is_empty() || group.keys().any(|k| !matches!(&*k, "hooks" | "matcher"))
        });
        emptied.push(removed_here && groups.is_empty());
        if removed_here && seen.insert(event.value().into_owned()) {
            touched.push(event.value().into_owned());
        }
    }
    let mut emptied = emptied.into_iter();
    events.retain(|_| !emptied.next().unwrap_or(false));
    if !touched.is_empty() && events.is_empty() {
        doc.remove("hooks");
    }
    Ok(touched)
}

fn install_claude(path: &Path, events: &[&'static str]) -> anyhow::Result<()> {
    let exe = dstream_exe()?;
    let (file, mut doc) = match files::read(path, files::MAX_BYTES)? {
        Found::Missing => (None, Json::Object(Vec::new())),
        Found::DanglingLink(target) => return Err(dangling_link(path, &target)),
        Found::File(file) => {
            let doc = parse_settings(&file)?;
            (Some(file), doc)
        }
    };
    let is_new = file.is_none();
    let shown = file
        .as_ref()
        .map_or_else(|| path.display().to_string(), |f| f.shown());
    let changes =
        add_hooks(&mut doc, events, &exe).with_context(|| format!("{shown} was left untouched"))?;
    if changes.added.is_empty() && changes.updated.is_empty() {
        println!(
            "dstream's Claude Code hooks are already in {shown} ({} events); nothing changed",
            events.len()
        );
        return Ok(());
    }
    write_settings(path, file.as_ref(), &doc)?;
    println!(
        "{} {shown}: hooks run `{}` (timeout {CLAUDE_HOOK_TIMEOUT_SECS} s)",
        if is_new { "created" } else { "updated" },
        hook_command(&exe)
    );
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
    Ok(())
}

fn uninstall_claude(path: &Path) -> anyhow::Result<()> {
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
    if removed.is_empty() {
        println!("no dstream hooks in {shown}; nothing changed");
        return Ok(());
    }
    let summary = format!(
        "removed dstream's hook from {} event{}: {}",
        removed.len(),
        plural(removed.len()),
        removed.join(", ")
    );
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

// ---- OpenCode ----

fn is_our_plugin(content: &[u8]) -> bool {
    content == OPENCODE_PLUGIN.as_bytes()
        || String::from_utf8_lossy(&content[..content.len().min(4096)]).contains(OPENCODE_MARKER)
}

fn install_opencode(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(OPENCODE_FILE);
    match files::read(&path, files::MAX_BYTES)? {
        Found::Missing => {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            files::create(&path, OPENCODE_PLUGIN.as_bytes())?;
            println!(
                "installed {}; OpenCode loads it when it next starts",
                path.display()
            );
        }
        Found::DanglingLink(target) => return Err(dangling_link(&path, &target)),
        Found::File(file) if file.content == OPENCODE_PLUGIN.as_bytes() => {
            println!(
                "the dstream plugin is already in {}; nothing changed",
                file.shown()
            );
        }
        Found::File(file) if is_our_plugin(&file.content) => {
            file.replace(OPENCODE_PLUGIN.as_bytes())?;
            println!(
                "replaced an older dstream plugin at {}; OpenCode loads it when it next starts",
                file.shown()
            );
        }
        Found::File(file) => bail!(
            "{} exists and is not dstream's plugin; it was left untouched (move it away and \
             run this again)",
            file.shown()
        ),
    }
    Ok(())
}

fn uninstall_opencode(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(OPENCODE_FILE);
    let shown = path.display();
    match files::read(&path, files::MAX_BYTES)? {
        Found::Missing => println!("{shown} does not exist; nothing to remove"),
        Found::DanglingLink(target) => println!(
            "{shown} is a link to {}, which does not exist; nothing to remove (the link was \
             left as it is)",
            target.display()
        ),
        Found::File(file) if is_our_plugin(&file.content) => {
            file.remove()?;
            if file.is_link() {
                println!(
                    "removed the link {shown} (the file it led to, {}, was left in place)",
                    file.real.display()
                );
            } else {
                println!("removed {shown}");
            }
        }
        Found::File(file) => bail!(
            "{} is not dstream's plugin; it was left untouched",
            file.shown()
        ),
    }
    Ok(())
}

// ---- shell words ----

mod shell {
    /// `s` as one POSIX shell word: unchanged when it has no special characters, else in
    /// single quotes.
    pub fn quote(s: &str) -> String {
        let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
        if !s.is_empty() && s.chars().all(plain) {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', r"'\''"))
        }
    }

    /// Splits a command line into words as a POSIX shell would (quotes and backslashes; no
    /// expansions), with each word's byte span in the line. `None` for unbalanced quotes.
    pub fn split(line: &str) -> Option<Vec<(String, std::ops::Range<usize>)>> {
        let mut words = Vec::new();
        let mut chars = line.char_indices().peekable();
        loop {
            while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
            let Some(&(start, _)) = chars.peek() else {
                return Some(words);
            };
            let mut word = String::new();
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                match c {
                    '\'' => loop {
                        match chars.next()? {
                            (_, '\'') => break,
                            (_, c) => word.push(c),
                        }
                    },
                    '"' => loop {
                        match chars.next()? {
                            (_, '"') => break,
                            (_, '\\')
                                if chars
                                    .peek()
                                    .is_some_and(|(_, n)| matches!(n, '"' | '\\' | '$' | '`')) =>
                            {
                                word.push(chars.next()?.1);
                            }
                            (_, c) => word.push(c),
                        }
                    },
                    '\\' => word.push(chars.next()?.1),
                    c => word.push(c),
                }
            }
            // The word ends where the next blank starts, or with the line.
            let end = chars.peek().map_or(line.len(), |(i, _)| *i);
            words.push((word, start..end));
        }
    }

    /// A hook command that runs `dstream hook <agent>`, possibly after `NAME=value`
    /// assignments and with more arguments after it.
    pub struct HookCommand {
        line: String,
        /// The dstream binary as written (unquoted).
        pub exe: String,
        exe_span: std::ops::Range<usize>,
    }

    impl HookCommand {
        pub fn parse(line: &str, agent: &str) -> Option<HookCommand> {
            let words = split(line)?;
            let is_assignment = |w: &str| {
                w.split_once('=').is_some_and(|(name, _)| {
                    !name.is_empty()
                        && !name.starts_with(|c: char| c.is_ascii_digit())
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                })
            };
            let first = words.iter().position(|(w, _)| !is_assignment(w))?;
            let [(exe, span), (hook, _), (named, _), ..] = &words[first..] else {
                return None;
            };
            let stem = std::path::Path::new(exe).file_stem()?;
            (stem == "dstream" && hook == "hook" && named == agent).then(|| HookCommand {
                line: line.to_string(),
                exe: exe.clone(),
                exe_span: span.clone(),
            })
        }

        /// The same command line running `exe` instead; everything else kept verbatim.
        pub fn with_exe(&self, exe: &str) -> String {
            format!(
                "{}{}{}",
                &self.line[..self.exe_span.start],
                quote(exe),
                &self.line[self.exe_span.end..]
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = "/opt/my tools/dstream";

    fn doc(text: &str) -> Json {
        json::parse(text).unwrap()
    }

    fn text(doc: &Json) -> String {
        json::to_compact(doc)
    }

    #[test]
    fn quoting_and_splitting_round_trip() {
        for s in [
            "/usr/bin/dstream",
            "/opt/my tools/dstream",
            "it's",
            "",
            "a\"b$c\\d",
        ] {
            let words = shell::split(&shell::quote(s)).unwrap();
            assert_eq!(words.len(), 1, "{s:?}");
            assert_eq!(words[0].0, s);
        }
        assert_eq!(shell::quote("/usr/bin/dstream"), "/usr/bin/dstream");
        let words: Vec<String> = shell::split(r#"a "b c" d\ e 'f'"g""#)
            .unwrap()
            .into_iter()
            .map(|w| w.0)
            .collect();
        assert_eq!(words, ["a", "b c", "d e", "fg"]);
        assert!(shell::split("'open").is_none());
    }

    #[test]
    fn hook_commands_are_recognised_by_what_they_run() {
        let parse = |c: &str| shell::HookCommand::parse(c, "claude-code").map(|h| h.exe);
        assert_eq!(
            parse("dstream hook claude-code").as_deref(),
            Some("dstream")
        );
        assert_eq!(
            parse("'/opt/my tools/dstream' hook claude-code --fail-closed").as_deref(),
            Some("/opt/my tools/dstream")
        );
        assert_eq!(
            parse("DSTREAM_SOCKET=/tmp/s /usr/bin/dstream hook claude-code").as_deref(),
            Some("/usr/bin/dstream")
        );
        assert_eq!(parse("dstream hook opencode"), None);
        assert_eq!(parse("dstream-other hook claude-code"), None);
        assert_eq!(parse("echo dstream hook claude-code"), None);
        assert_eq!(parse("dstream tail x"), None);
        let h = shell::HookCommand::parse(
            "DSTREAM_HOOK_DEBUG=1 /old/dstream hook claude-code || true",
            "claude-code",
        )
        .unwrap();
        assert_eq!(
            h.with_exe(EXE),
            "DSTREAM_HOOK_DEBUG=1 '/opt/my tools/dstream' hook claude-code || true"
        );
    }

    #[test]
    fn install_then_uninstall_gives_back_the_same_document() {
        let original = r#"{"z": 1, "hooks": {"PreToolUse": [{"matcher": "Bash",
            "hooks": [{"type": "command", "command": "./check.sh"}]}], "Stop": []},
            "a": {"y": true, "b": null}, "permissions": {"allow": ["Bash(ls)"]}}"#;
        let mut d = doc(original);
        let events = chosen_events(&[]).unwrap();
        let changes = add_hooks(&mut d, &events, EXE).unwrap();
        assert_eq!(changes.added.len(), CLAUDE_EVENTS.len());
        // Keys keep their order; new events come after the existing ones.
        assert_eq!(
            d.keys().collect::<Vec<_>>(),
            ["z", "hooks", "a", "permissions"]
        );
        let hook_keys: Vec<_> = d.get("hooks").unwrap().keys().collect();
        assert_eq!(&hook_keys[..2], ["PreToolUse", "Stop"]);
        // The user's PreToolUse hook is still first.
        let pre = text(d.get("hooks").unwrap().get("PreToolUse").unwrap());
        assert!(pre.starts_with(r#"[{"matcher":"Bash","hooks":[{"type":"command","command":"./check.sh"}]},{"hooks":[{"type":"command","command":"'/opt/my tools/dstream' hook claude-code","timeout":600}]}"#), "{pre}");
        // Twice: no change.
        let once = d.clone();
        let again = add_hooks(&mut d, &events, EXE).unwrap();
        assert!(again.added.is_empty() && again.updated.is_empty());
        assert_eq!(d, once);
        // Removed: all of it, and the lists it alone filled.
        let removed = remove_hooks(&mut d).unwrap();
        assert_eq!(removed.len(), CLAUDE_EVENTS.len());
        // `Stop: []` was empty before install, and is emptied again by the removal.
        let mut expected = doc(original);
        let Some(Json::Object(hooks)) = expected.get_mut("hooks") else {
            panic!()
        };
        hooks.retain(|(k, _)| !k.is("Stop"));
        assert_eq!(text(&d), text(&expected));
    }

    #[test]
    fn a_moved_binary_is_repointed_and_user_flags_are_kept() {
        let mut d = doc(r#"{"hooks": {"PreToolUse": [{"hooks": [{"type": "command",
            "command": "/old/dstream hook claude-code --fail-closed", "timeout": 30}]}]}}"#);
        let changes = add_hooks(&mut d, &["PreToolUse"], EXE).unwrap();
        assert_eq!(changes.updated, ["PreToolUse"]);
        assert!(changes.added.is_empty());
        assert_eq!(
            text(&d),
            r#"{"hooks":{"PreToolUse":[{"hooks":[{"type":"command","command":"'/opt/my tools/dstream' hook claude-code --fail-closed","timeout":30}]}]}}"#
        );
    }

    #[test]
    fn uninstall_keeps_other_hooks_in_shared_groups() {
        let mut d = doc(r#"{"hooks": {"Stop": [{"matcher": "", "hooks": [
                {"type": "command", "command": "dstream hook claude-code"},
                {"type": "command", "command": "notify-send done"}]}]}}"#);
        assert_eq!(remove_hooks(&mut d).unwrap(), ["Stop"]);
        assert_eq!(
            text(&d),
            r#"{"hooks":{"Stop":[{"matcher":"","hooks":[{"type":"command","command":"notify-send done"}]}]}}"#
        );
        // Nothing of ours left: nothing removed.
        assert!(remove_hooks(&mut d).unwrap().is_empty());
    }

    #[test]
    fn badly_shaped_hooks_are_refused() {
        assert!(add_hooks(&mut doc(r#"{"hooks": []}"#), &["Stop"], EXE).is_err());
        assert!(add_hooks(&mut doc(r#"{"hooks": {"Stop": {}}}"#), &["Stop"], EXE).is_err());
        assert!(remove_hooks(&mut doc(r#"{"hooks": 3}"#)).is_err());
    }

    #[test]
    fn event_lists() {
        assert_eq!(chosen_events(&[]).unwrap().len(), CLAUDE_EVENTS.len());
        assert_eq!(chosen_events(&["core".into()]).unwrap(), CLAUDE_CORE_EVENTS);
        assert_eq!(
            chosen_events(&["Stop".into(), "PreToolUse".into(), "Stop".into()]).unwrap(),
            ["Stop", "PreToolUse"]
        );
        assert!(chosen_events(&["WorktreeCreate".into()]).is_err());
        assert!(chosen_events(&["PreToolCall".into()]).is_err());
        assert!(!CLAUDE_EVENTS.contains(&"WorktreeCreate"));
        for e in CLAUDE_CORE_EVENTS {
            assert!(CLAUDE_EVENTS.contains(e));
        }
    }

    #[test]
    fn edits_keep_numbers_and_repeated_keys_as_written() {
        let original = r#"{"big":12345678901234567890123,"e":1e2,"f":1.50,"k":1,"k":2,"hooks":{"Stop":[{"hooks":[{"type":"command","command":"x","timeout":5.0}]}]},"s":"\u00e9"}"#;
        let mut d = doc(original);
        add_hooks(&mut d, &["Stop", "PreToolUse"], EXE).unwrap();
        let installed = text(&d);
        assert!(
            installed.starts_with(r#"{"big":12345678901234567890123,"e":1e2,"f":1.50,"k":1,"k":2,"hooks":{"Stop":[{"hooks":[{"type":"command","command":"x","timeout":5.0}]},{"hooks""#),
            "{installed}"
        );
        assert!(installed.ends_with(r#""s":"\u00e9"}"#), "{installed}");
        remove_hooks(&mut d).unwrap();
        assert_eq!(text(&d), original);
    }

    #[test]
    fn repeated_hooks_or_events_are_refused() {
        let twice = r#"{"hooks": {}, "hooks": {"Stop": []}}"#;
        let err = add_hooks(&mut doc(twice), &["Stop"], EXE).err().unwrap();
        assert!(
            err.to_string().contains("`hooks` is written 2 times"),
            "{err}"
        );
        assert!(remove_hooks(&mut doc(twice)).is_err());
        let err = add_hooks(
            &mut doc(r#"{"hooks": {"Stop": [], "Stop": []}}"#),
            &["Stop"],
            EXE,
        )
        .err()
        .unwrap();
        assert!(
            err.to_string().contains("`hooks.Stop` is written 2 times"),
            "{err}"
        );
        // Uninstall takes dstream's handlers out of every copy of an event.
        let mut d = doc(
            r#"{"hooks": {"Stop": [{"hooks": [{"command": "dstream hook claude-code"}]}],
            "Stop": [{"hooks": [{"command": "dstream hook claude-code"}, {"command": "mine"}]}]}}"#,
        );
        assert_eq!(remove_hooks(&mut d).unwrap(), ["Stop"]);
        assert_eq!(
            text(&d),
            r#"{"hooks":{"Stop":[{"hooks":[{"command":"mine"}]}]}}"#
        );
    }

    #[test]
    fn a_settings_file_with_two_hundred_thousand_keys_is_edited() {
        // Reading it used to look each key up among all before it: 46 s in a release build.
        let mut original = String::from("{");
        for i in 0..200_000 {
            original.push_str(&format!("\"setting{i}\":{i},"));
        }
        original.push_str(r#""hooks":{}}"#);
        let mut d = doc(&original);
        let changes = add_hooks(&mut d, CLAUDE_EVENTS, EXE).unwrap();
        assert_eq!(changes.added.len(), CLAUDE_EVENTS.len());
        let installed = json::to_pretty(&d);
        let mut d = doc(&installed);
        assert_eq!(remove_hooks(&mut d).unwrap().len(), CLAUDE_EVENTS.len());
        assert_eq!(text(&d), original.replace(r#","hooks":{}"#, ""));
    }

    #[test]
    fn the_plugin_carries_its_marker() {
        assert!(is_our_plugin(OPENCODE_PLUGIN.as_bytes()));
        assert!(!is_our_plugin(b"export const Other = async () => ({})"));
    }
}
