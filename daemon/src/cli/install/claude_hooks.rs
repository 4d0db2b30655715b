//! dstream's hook entries in a Claude Code settings document: adding one per event (or
//! pointing an existing one at this binary), and taking every one of them back out, keeping
//! the rest of the document as written.

use anyhow::{anyhow, bail};

use super::json::{Json, Str};
use super::shell;

/// Seconds Claude Code waits for the hook before it gives up on it. Long, because a tool call
/// that policy holds for a person's approval waits in the hook; the hook's own deadline
/// (`DSTREAM_HOOK_TIMEOUT_MS`) ends it much sooner when nobody is waiting, and the daemon's
/// approval timeouts stay below this one so that a decision is never cut off.
pub const CLAUDE_HOOK_TIMEOUT_SECS: u64 = 600;

/// The command a hook entry runs: `exe hook claude-code`, or `exe claude-code` when `exe` is
/// the lean `dstream-hook`.
pub fn hook_command(exe: &str) -> String {
    shell::hook_words(exe, "claude-code")
}

/// The environment variable an `http` hook's header takes the daemon's token from (Claude Code
/// fills it in only for hooks that list it in `allowedEnvVars`).
pub const TOKEN_VAR: &str = "DSTREAM_HTTP_TOKEN";
/// The path the daemon takes Claude Code's `http` hooks at.
const HOOK_PATH: &str = "/hooks/claude-code";

/// How dstream's hooks reach it.
#[derive(Clone, Copy)]
pub enum HookKind<'a> {
    /// `type: "command"`: run `exe`'s hook (`dstream hook claude-code`, or the lean
    /// `dstream-hook claude-code`).
    Command { exe: &'a str },
    /// `type: "http"`: POST to the daemon's listener at `base` (`http://127.0.0.1:4438`).
    /// SessionStart keeps the command (Claude Code runs no `http` hook for it, and the command
    /// starts a daemon that is down).
    Http { exe: &'a str, base: &'a str },
}

impl HookKind<'_> {
    /// The handler for `event`.
    fn handler(&self, event: &str) -> Json {
        match *self {
            HookKind::Http { base, .. } if event != "SessionStart" => object(vec![
                ("type", Json::string("http")),
                ("url", Json::string(&format!("{base}{HOOK_PATH}"))),
                (
                    "headers",
                    object(vec![(
                        "Authorization",
                        Json::string(&format!("Bearer ${TOKEN_VAR}")),
                    )]),
                ),
                ("allowedEnvVars", Json::Array(vec![Json::string(TOKEN_VAR)])),
                ("timeout", Json::from(CLAUDE_HOOK_TIMEOUT_SECS)),
            ]),
            HookKind::Command { exe } | HookKind::Http { exe, .. } => object(vec![
                ("type", Json::string("command")),
                ("command", Json::string(&hook_command(exe))),
                ("timeout", Json::from(CLAUDE_HOOK_TIMEOUT_SECS)),
            ]),
        }
    }

    /// Whether `found` is already the handler this kind wants for `event`.
    fn wants(&self, event: &str, found: &Ours) -> bool {
        match (*self, found) {
            (HookKind::Http { base, .. }, Ours::Http(url)) if event != "SessionStart" => {
                *url == format!("{base}{HOOK_PATH}")
            }
            (HookKind::Http { .. }, _) if event != "SessionStart" => false,
            (HookKind::Command { exe } | HookKind::Http { exe, .. }, Ours::Command(c)) => {
                c.exe == exe
            }
            _ => false,
        }
    }
}

/// One of dstream's handlers as found in a settings file.
enum Ours {
    Command(shell::HookCommand),
    /// An `http` hook posting to a dstream listener: its URL.
    Http(String),
}

impl Ours {
    /// What it reaches: the dstream binary (as written) or the URL.
    fn target(&self) -> String {
        match self {
            Ours::Command(c) => c.exe.clone(),
            Ours::Http(url) => url.clone(),
        }
    }
}

/// What `install` did to one event's hooks.
#[derive(Default)]
pub struct Changes {
    pub added: Vec<&'static str>,
    pub updated: Vec<&'static str>,
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
pub fn add_hooks(
    doc: &mut Json,
    events: &[&'static str],
    kind: HookKind,
) -> anyhow::Result<Changes> {
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
            let Some(current) = ours(handler) else {
                continue;
            };
            found = true;
            if kind.wants(event, &current) {
                continue;
            }
            match (&current, kind) {
                // The same kind, another binary: repointed, the user's flags and timeout kept.
                (Ours::Command(command), HookKind::Command { exe }) => {
                    handler.set(
                        "command",
                        Json::string(&command.with_exe(exe, "claude-code")),
                    );
                    if handler.get("timeout").is_none() {
                        handler.set("timeout", Json::from(CLAUDE_HOOK_TIMEOUT_SECS));
                    }
                }
                (Ours::Command(command), HookKind::Http { exe, .. })
                    if *event == "SessionStart" =>
                {
                    handler.set(
                        "command",
                        Json::string(&command.with_exe(exe, "claude-code")),
                    );
                }
                // From a command hook to an http one, or back, or another address.
                _ => *handler = kind.handler(event),
            }
            changes.updated.push(event);
        }
        if !found {
            groups.push(object(vec![(
                "hooks",
                Json::Array(vec![kind.handler(event)]),
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

/// A handler of dstream's: a command running `dstream hook claude-code`, or an `http` hook
/// posting to a dstream listener on this machine.
fn ours(handler: &Json) -> Option<Ours> {
    match handler.get("type").map(|t| t.as_str()) {
        None => {}
        Some(Some(t)) if t == "command" => {}
        Some(Some(t)) if t == "http" => {
            let url = handler.get("url")?.as_str()?.into_owned();
            return is_dstream_url(&url).then_some(Ours::Http(url));
        }
        _ => return None,
    }
    shell::HookCommand::parse(&handler.get("command")?.as_str()?, "claude-code").map(Ours::Command)
}

/// `http://<loopback>:<port>/hooks/claude-code`: where only a dstream daemon takes hooks.
fn is_dstream_url(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let Some(host) = rest.strip_suffix(HOOK_PATH) else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        Some((h, port)) if port.parse::<u16>().is_ok() => h,
        _ => return false,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// dstream's hook handlers in `doc`: each event with the dstream binary its command runs (as
/// written) or the URL its `http` hook posts to, in file order.
pub fn installed(doc: &Json) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Some(Json::Object(events)) = doc.get("hooks") else {
        return out;
    };
    for (event, list) in events {
        let Json::Array(groups) = list else { continue };
        for group in groups {
            let Some(Json::Array(handlers)) = group.get("hooks") else {
                continue;
            };
            for found in handlers.iter().filter_map(ours) {
                out.push((event.value().into_owned(), found.target()));
            }
        }
    }
    out
}

/// Removes every dstream hook handler from `doc`, then the groups, event lists and `hooks`
/// object that this left empty. Returns the events it removed handlers from.
pub fn remove_hooks(doc: &mut Json) -> anyhow::Result<Vec<String>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::install::claude_events::{CLAUDE_EVENTS, chosen_events};
    use crate::cli::install::json;

    const EXE: &str = "/opt/my tools/dstream";
    const CMD: HookKind = HookKind::Command { exe: EXE };

    fn doc(text: &str) -> Json {
        json::parse(text).unwrap()
    }

    fn text(doc: &Json) -> String {
        json::to_compact(doc)
    }

    #[test]
    fn install_then_uninstall_gives_back_the_same_document() {
        let original = r#"{"z": 1, "hooks": {"PreToolUse": [{"matcher": "Bash",
            "hooks": [{"type": "command", "command": "./check.sh"}]}], "Stop": []},
            "a": {"y": true, "b": null}, "permissions": {"allow": ["Bash(ls)"]}}"#;
        let mut d = doc(original);
        let events = chosen_events(&[]).unwrap();
        let changes = add_hooks(&mut d, &events, CMD).unwrap();
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
        let again = add_hooks(&mut d, &events, CMD).unwrap();
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
        let changes = add_hooks(&mut d, &["PreToolUse"], CMD).unwrap();
        assert_eq!(changes.updated, ["PreToolUse"]);
        assert!(changes.added.is_empty());
        assert_eq!(
            text(&d),
            r#"{"hooks":{"PreToolUse":[{"hooks":[{"type":"command","command":"'/opt/my tools/dstream' hook claude-code --fail-closed","timeout":30}]}]}}"#
        );
    }

    #[test]
    fn the_lean_binary_takes_over_dstream_hook_entries_and_gives_them_back() {
        let lean = HookKind::Command {
            exe: "/opt/bin/dstream-hook",
        };
        let mut d = doc(r#"{"hooks": {"Stop": [{"hooks": [{"type": "command",
            "command": "/opt/bin/dstream hook claude-code --fail-closed"}]}]}}"#);
        let changes = add_hooks(&mut d, &["Stop", "PreToolUse"], lean).unwrap();
        assert_eq!(
            (changes.updated, changes.added),
            (vec!["Stop"], vec!["PreToolUse"])
        );
        assert_eq!(
            text(&d),
            r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"/opt/bin/dstream-hook claude-code --fail-closed","timeout":600}]}],"PreToolUse":[{"hooks":[{"type":"command","command":"/opt/bin/dstream-hook claude-code","timeout":600}]}]}}"#
        );
        assert_eq!(
            installed(&d),
            [
                ("Stop".to_string(), "/opt/bin/dstream-hook".to_string()),
                (
                    "PreToolUse".to_string(),
                    "/opt/bin/dstream-hook".to_string()
                )
            ]
        );
        // Installed again by the lean binary: nothing to do. By a dstream alone: back.
        let again = add_hooks(&mut d, &["Stop", "PreToolUse"], lean).unwrap();
        assert!(again.added.is_empty() && again.updated.is_empty());
        add_hooks(&mut d, &["Stop", "PreToolUse"], CMD).unwrap();
        assert!(text(&d).contains(r#""'/opt/my tools/dstream' hook claude-code --fail-closed""#));
        assert_eq!(remove_hooks(&mut d).unwrap(), ["Stop", "PreToolUse"]);
        assert_eq!(text(&d), "{}");
    }

    #[test]
    fn http_hooks_replace_command_hooks_and_back_keeping_session_start_a_command() {
        let http = HookKind::Http {
            exe: EXE,
            base: "http://127.0.0.1:4438",
        };
        let mut d = doc("{}");
        add_hooks(&mut d, &["SessionStart", "PreToolUse"], CMD).unwrap();
        let changes = add_hooks(&mut d, &["SessionStart", "PreToolUse"], http).unwrap();
        assert_eq!(changes.updated, ["PreToolUse"]);
        let hooks = d.get("hooks").unwrap();
        let first = |e: &str| text(hooks.get(e).unwrap());
        assert!(first("SessionStart").contains(r#""type":"command""#));
        assert!(
            first("PreToolUse").contains(
                r#""type":"http","url":"http://127.0.0.1:4438/hooks/claude-code","headers":{"Authorization":"Bearer $DSTREAM_HTTP_TOKEN"},"allowedEnvVars":["DSTREAM_HTTP_TOKEN"]"#
            ),
            "{}",
            first("PreToolUse")
        );
        assert_eq!(installed(&d).len(), 2);
        // Again: nothing to do; back to commands: the http hook is replaced, not added to.
        let again = add_hooks(&mut d, &["SessionStart", "PreToolUse"], http).unwrap();
        assert!(again.added.is_empty() && again.updated.is_empty());
        let back = add_hooks(&mut d, &["SessionStart", "PreToolUse"], CMD).unwrap();
        assert_eq!(back.updated, ["PreToolUse"]);
        assert_eq!(installed(&d).iter().filter(|(_, t)| t == EXE).count(), 2);
        // Someone else's http hook is not ours.
        let mut theirs = doc(r#"{"hooks": {"Stop": [{"hooks": [{"type": "http",
            "url": "https://example.com/hooks/claude-code"}]}]}}"#);
        assert!(installed(&theirs).is_empty());
        assert!(remove_hooks(&mut theirs).unwrap().is_empty());
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
        assert!(add_hooks(&mut doc(r#"{"hooks": []}"#), &["Stop"], CMD).is_err());
        assert!(add_hooks(&mut doc(r#"{"hooks": {"Stop": {}}}"#), &["Stop"], CMD).is_err());
        assert!(remove_hooks(&mut doc(r#"{"hooks": 3}"#)).is_err());
    }

    #[test]
    fn edits_keep_numbers_and_repeated_keys_as_written() {
        let original = r#"{"big":12345678901234567890123,"e":1e2,"f":1.50,"k":1,"k":2,"hooks":{"Stop":[{"hooks":[{"type":"command","command":"x","timeout":5.0}]}]},"s":"\u00e9"}"#;
        let mut d = doc(original);
        add_hooks(&mut d, &["Stop", "PreToolUse"], CMD).unwrap();
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
        let err = add_hooks(&mut doc(twice), &["Stop"], CMD).err().unwrap();
        assert!(
            err.to_string().contains("`hooks` is written 2 times"),
            "{err}"
        );
        assert!(remove_hooks(&mut doc(twice)).is_err());
        let err = add_hooks(
            &mut doc(r#"{"hooks": {"Stop": [], "Stop": []}}"#),
            &["Stop"],
            CMD,
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
        let changes = add_hooks(&mut d, CLAUDE_EVENTS, CMD).unwrap();
        assert_eq!(changes.added.len(), CLAUDE_EVENTS.len());
        let installed = json::to_pretty(&d);
        let mut d = doc(&installed);
        assert_eq!(remove_hooks(&mut d).unwrap().len(), CLAUDE_EVENTS.len());
        assert_eq!(text(&d), original.replace(r#","hooks":{}"#, ""));
    }
}
