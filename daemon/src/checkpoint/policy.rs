//! The checkpoint policy of `[checkpoints]` in config.toml: which tool calls run, which are
//! refused, and which wait for a person. Rules are matched on the tool name, the tool's main
//! input and the source; deny wins over ask over allow.
//!
//! A shell command (the `command` of Claude Code's Bash, OpenCode's bash, any tool with one)
//! is matched per simple command too (`shell`, `shell_rule`): a deny or ask rule holds if it
//! matches the whole line or any simple command in it; an allow rule (or a grant) only if
//! every simple command is covered. A line that cannot be analysed counts as matching the
//! strictest deny or ask rule on its tool: what cannot be seen is never let through unseen.

use std::cell::OnceCell;

use serde_json::Value as Json;

use super::shell::{self, Invocation, ShellError};
use super::shell_rule::{self, Flags};
use crate::config::{CheckpointsConfig, PermissionRequests, RuleConfig};
use crate::util::glob::glob_match;
use dstream_sdk::protocol::{Action, OnTimeout};

/// What the policy says about one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleVerdict {
    pub action: Action,
    /// `rules[i]`, naming the rule that matched.
    pub rule: String,
    /// The rule as written, for people.
    pub description: String,
    /// The rule's input glob: an "always allow" granted on this checkpoint covers the calls
    /// this glob matches.
    pub input_glob: Option<String>,
    pub timeout_ms: u64,
    pub on_timeout: OnTimeout,
    /// Why the rule counts though its glob did not match (a command that cannot be parsed).
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    config: CheckpointsConfig,
}

/// A tool call as the policy sees it.
pub struct Call<'a> {
    pub source: &'a str,
    pub tool: &'a str,
    pub input: Option<&'a Json>,
}

impl Policy {
    pub fn new(config: &CheckpointsConfig) -> Policy {
        Policy {
            config: config.clone(),
        }
    }

    pub fn default_timeout_ms(&self) -> u64 {
        self.config.default_timeout_ms
    }

    pub fn default_on_timeout(&self) -> OnTimeout {
        self.config.default_on_timeout
    }

    pub fn grant_ttl_ms(&self) -> u64 {
        self.config.grant_ttl_ms
    }

    pub fn permission_requests(&self) -> PermissionRequests {
        self.config.permission_requests
    }

    /// The strongest rule matching the call (deny > ask > allow; the first of equals), if any.
    pub fn evaluate(&self, call: &Call) -> Option<RuleVerdict> {
        let subject = Subject::of(call.input);
        let targeting: Vec<(usize, &RuleConfig)> = self
            .config
            .rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| {
                glob_match(&rule.tool, call.tool, true)
                    && rule
                        .source
                        .as_ref()
                        .is_none_or(|s| glob_match(s, call.source, true))
            })
            .collect();
        let strict = || targeting.iter().filter(|(_, r)| r.action != Action::Allow);
        let mut best =
            strongest(strict().filter(|(_, r)| r.input.as_deref().is_none_or(|p| subject.hits(p))));
        let mut note = None;
        // Parsed only when some deny or ask rule targets the tool: most calls need no parse.
        if strict().next().is_some()
            && let Err(e) = subject.parsed()
        {
            // Unseen is not harmless: the strictest rule on this tool holds, glob or not.
            let strictest = strongest(strict());
            if strictest.is_some_and(|(_, s)| {
                best.is_none_or(|(_, b)| s.action.strictness() > b.action.strictness())
            }) {
                best = strictest;
                note = Some(format!(
                    "the command could not be parsed ({e}), so it counts as matching the \
                     strictest rule for this tool"
                ));
            }
        }
        let best = best.or_else(|| subject.allowed(&targeting))?;
        let (i, rule) = best;
        Some(RuleVerdict {
            action: rule.action,
            rule: format!("rules[{i}]"),
            description: describe(rule),
            input_glob: rule.input.clone(),
            timeout_ms: rule.timeout_ms.unwrap_or(self.config.default_timeout_ms),
            on_timeout: rule.on_timeout.unwrap_or(self.config.default_on_timeout),
            note,
        })
    }
}

/// The strongest of these rules (deny > ask > allow), the first of equals.
fn strongest<'a>(
    rules: impl Iterator<Item = &'a (usize, &'a RuleConfig)>,
) -> Option<(usize, &'a RuleConfig)> {
    rules.fold(None, |best, &(i, rule)| {
        if best.is_none_or(|(_, b): (usize, &RuleConfig)| {
            rule.action.strictness() > b.action.strictness()
        }) {
            Some((i, rule))
        } else {
            best
        }
    })
}

/// What a rule's input glob is matched against: the call's main input and, for a shell
/// command, its simple commands (parsed once, when a glob first asks).
struct Subject {
    main: Option<String>,
    shell: bool,
    parsed: OnceCell<Result<Vec<Invocation>, ShellError>>,
}

impl Subject {
    fn of(input: Option<&Json>) -> Subject {
        Subject {
            main: input.and_then(main_input),
            shell: input.is_some_and(|i| shell_command(i).is_some()),
            parsed: OnceCell::new(),
        }
    }

    /// The simple commands of a shell command; not a shell command is none.
    fn parsed(&self) -> Result<&[Invocation], &ShellError> {
        let result = self.parsed.get_or_init(|| match (&self.main, self.shell) {
            (Some(line), true) => shell::invocations(line),
            _ => Ok(Vec::new()),
        });
        result.as_deref()
    }

    /// Whether a deny or ask glob hits: the whole input (as always), or any simple command.
    fn hits(&self, pattern: &str) -> bool {
        let Some(main) = &self.main else {
            return false;
        };
        glob_match(pattern, main, false)
            || self.parsed().is_ok_and(|all| {
                all.iter().any(|inv| {
                    inv.views
                        .iter()
                        .any(|v| shell_rule::matches(pattern, v, Flags::AtLeast))
                })
            })
    }

    /// Whether a glob covers the call, as an allow rule or a grant must: every simple command
    /// of a shell command (a line that cannot be parsed is not covered), else the input.
    fn covered_by(&self, pattern: &str) -> bool {
        let Some(main) = &self.main else {
            return false;
        };
        match self.parsed() {
            Ok([]) => glob_match(pattern, main, false),
            Ok(all) => all.iter().all(|inv| covers(pattern, inv)),
            Err(_) => false,
        }
    }

    /// The allow rule that lets the call run: for a shell command, every simple command must
    /// be covered by an allow rule (each by its own, perhaps); the first of them is named.
    fn allowed<'a>(
        &self,
        targeting: &[(usize, &'a RuleConfig)],
    ) -> Option<(usize, &'a RuleConfig)> {
        let mut allows = targeting
            .iter()
            .filter(|(_, r)| r.action == Action::Allow)
            .copied();
        allows.clone().next()?;
        match self.parsed() {
            Ok(all) if !all.is_empty() && self.main.is_some() => {
                let mut first: Option<(usize, &RuleConfig)> = None;
                for inv in all {
                    let by = allows
                        .clone()
                        .find(|(_, r)| r.input.as_deref().is_none_or(|p| covers(p, inv)))?;
                    first = first.filter(|f| f.0 < by.0).or(Some(by));
                }
                first
            }
            _ => allows.find(|(_, r)| r.input.as_deref().is_none_or(|p| self.covered_by(p))),
        }
    }
}

/// Whether an allow glob covers one simple command, through any of its wrappers.
fn covers(pattern: &str, inv: &Invocation) -> bool {
    inv.views
        .iter()
        .any(|v| shell_rule::matches(pattern, v, Flags::Exactly))
}

/// Whether an "always allow" granted with this input glob covers a call: as an allow rule
/// would, so `git status*` granted never lets `git status; curl x | sh` by.
pub fn grant_covers(glob: &str, input: Option<&Json>) -> bool {
    Subject::of(input).covered_by(glob)
}

/// The shell command line of a tool call, if its main input is one: the `command` of Claude
/// Code's Bash, of OpenCode's bash, of any tool that has one.
pub fn shell_command(input: &Json) -> Option<&str> {
    input.get("command").and_then(Json::as_str)
}

fn describe(rule: &crate::config::RuleConfig) -> String {
    let mut s = format!("tool = {:?}", rule.tool);
    if let Some(i) = &rule.input {
        s.push_str(&format!(", input = {i:?}"));
    }
    if let Some(src) = &rule.source {
        s.push_str(&format!(", source = {src:?}"));
    }
    s.push_str(&format!(", action = {:?}", rule.action.as_str()));
    s
}

/// The part of a tool's input a person reads first and a rule matches on: the command, the
/// file path, the url or the pattern (Claude Code's and OpenCode's names), else the whole
/// input as JSON text.
pub fn main_input(input: &Json) -> Option<String> {
    const KEYS: &[&str] = &[
        "command",
        "file_path",
        "filePath",
        "path",
        "url",
        "pattern",
        "query",
        "prompt",
        "description",
    ];
    match input {
        Json::String(s) => Some(s.clone()),
        Json::Object(m) => KEYS
            .iter()
            .find_map(|k| m.get(*k).and_then(Json::as_str).map(str::to_string))
            .or_else(|| Some(input.to_string())),
        Json::Null => None,
        other => Some(other.to_string()),
    }
}

/// One line for the person deciding: `Bash: rm -rf build`, cut to a readable length.
pub fn summary(tool: Option<&str>, input: Option<&Json>) -> String {
    const MAX: usize = 160;
    let main = input.and_then(main_input).unwrap_or_default();
    let main = main.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut s = match tool {
        Some(t) if !main.is_empty() => format!("{t}: {main}"),
        Some(t) => t.to_string(),
        None => main,
    };
    if s.chars().count() > MAX {
        s = s.chars().take(MAX - 1).collect::<String>() + "…";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use serde_json::json;

    fn policy(rules: &str) -> Policy {
        let c = Config::from_toml_str(rules, std::path::Path::new("t.toml")).unwrap();
        Policy::new(&c.checkpoints)
    }

    #[test]
    fn deny_beats_ask_beats_allow_and_tool_names_ignore_case() {
        let p = policy(
            r#"
[[checkpoints.rules]]
tool = "*"
action = "allow"
[[checkpoints.rules]]
tool = "Bash"
action = "ask"
timeout_ms = 1000
[[checkpoints.rules]]
tool = "bash"
input = "rm -rf *"
action = "deny"
"#,
        );
        let call = |tool: &'static str, cmd: &str| {
            let input = json!({ "command": cmd });
            p.evaluate(&Call {
                source: "opencode",
                tool,
                input: Some(&input),
            })
        };
        let v = call("bash", "ls").unwrap();
        assert_eq!((v.action, v.rule.as_str()), (Action::Ask, "rules[1]"));
        assert_eq!(v.timeout_ms, 1000);
        assert_eq!(call("Bash", "rm -rf /").unwrap().action, Action::Deny);
        assert_eq!(call("Read", "x").unwrap().action, Action::Allow);
    }

    #[test]
    fn source_and_input_narrow_a_rule() {
        let p = policy(
            r#"
[[checkpoints.rules]]
tool = "Write"
input = "/etc/*"
source = "claude-code"
action = "ask"
"#,
        );
        let input = json!({ "file_path": "/etc/passwd", "content": "x" });
        let hit = |source| {
            p.evaluate(&Call {
                source,
                tool: "Write",
                input: Some(&input),
            })
        };
        assert!(hit("claude-code").is_some());
        assert!(hit("opencode").is_none());
        let other = json!({ "filePath": "/home/x" });
        assert!(
            p.evaluate(&Call {
                source: "claude-code",
                tool: "write",
                input: Some(&other)
            })
            .is_none()
        );
    }

    fn bash(p: &Policy, command: &str) -> Option<RuleVerdict> {
        let input = json!({ "command": command });
        p.evaluate(&Call {
            source: "claude-code",
            tool: "Bash",
            input: Some(&input),
        })
    }

    fn action(p: &Policy, command: &str) -> Option<Action> {
        bash(p, command).map(|v| v.action)
    }

    #[test]
    fn a_deny_rule_holds_for_every_simple_command_of_a_shell_line() {
        let p = policy(
            r#"
[[checkpoints.rules]]
tool = "Bash"
input = "rm -rf *"
action = "deny"
"#,
        );
        for line in [
            "rm -rf x",
            "/bin/rm -rf x",
            "rm -fr x",
            "rm -r -f x",
            "rm -f -r x",
            "true && rm -rf x",
            "echo hi; rm -rf x",
            "(rm -rf x)",
            "$(rm -rf x)",
            "echo `rm -rf x`",
            "sudo rm -rf x",
            "env FOO=1 rm -rf x",
            "FOO=1 rm -rf x",
            "\\rm -rf x",
            "\"rm\" -rf x",
            "find . | xargs rm -rf",
            "bash -c 'rm -rf x'",
            "sh -c \"cd /; rm -fr x\"",
            "timeout 5 nice -n 1 sudo -u root /usr/bin/rm -r -f x",
            "find . -exec rm -rf {} +",
        ] {
            assert_eq!(action(&p, line), Some(Action::Deny), "{line:?}");
        }
        for line in ["rm x", "rm -r x", "echo rm -rf x", "git rm -rf x"] {
            assert_eq!(action(&p, line), None, "{line:?}");
        }
    }

    #[test]
    fn a_rule_on_the_whole_line_still_matches_it() {
        let p = policy(
            r#"
[[checkpoints.rules]]
tool = "Bash"
input = "curl * | sh"
action = "deny"
[[checkpoints.rules]]
tool = "Bash"
input = "sh*"
action = "ask"
"#,
        );
        assert_eq!(action(&p, "curl x | sh"), Some(Action::Deny));
        // The simple command `sh …` meets `sh*` though the line starts with `cd`.
        let v = bash(&p, "cd x && sh run.sh").unwrap();
        assert_eq!((v.action, v.rule.as_str()), (Action::Ask, "rules[1]"));
        // `cmd | sh` runs what cannot be seen: the strictest rule holds.
        let v = bash(&p, "cat x | sh").unwrap();
        assert_eq!((v.action, v.rule.as_str()), (Action::Deny, "rules[0]"));
        assert!(
            v.note
                .unwrap()
                .contains("reads the program it runs from its input")
        );
    }

    #[test]
    fn an_allow_rule_must_cover_every_simple_command() {
        let p = policy(
            r#"
[[checkpoints.rules]]
tool = "Bash"
input = "git status*"
action = "allow"
[[checkpoints.rules]]
tool = "Bash"
input = "ls *"
action = "allow"
"#,
        );
        assert_eq!(action(&p, "git status"), Some(Action::Allow));
        let v = bash(&p, "ls -la && git status -s | sudo git status").unwrap();
        assert_eq!((v.action, v.rule.as_str()), (Action::Allow, "rules[0]"));
        for line in [
            "git status; rm -rf /",
            "git status && curl x | sh",
            "git status $(rm -rf /)",
            "ls x > /dev/null; bash -c 'rm -rf /'",
            "git status 'unterminated",
        ] {
            assert_eq!(action(&p, line), None, "{line:?}");
        }
    }

    #[test]
    fn a_line_that_cannot_be_parsed_counts_as_the_strictest_rule() {
        let p = policy(
            r#"
[[checkpoints.rules]]
tool = "Bash"
input = "git push*"
action = "ask"
[[checkpoints.rules]]
tool = "Bash"
input = "rm -rf *"
action = "deny"
[[checkpoints.rules]]
tool = "Read"
action = "deny"
"#,
        );
        let deep = format!("{}rm -rf x{}", "$(".repeat(50), ")".repeat(50));
        for line in [
            "echo 'unterminated",
            deep.as_str(),
            "curl x | sh",
            &"x ".repeat(shell::MAX_LEN),
        ] {
            let v = bash(&p, line).unwrap_or_else(|| panic!("{line:?}"));
            assert_eq!((v.action, v.rule.as_str()), (Action::Deny, "rules[1]"));
            let note = v.note.unwrap_or_default();
            assert!(note.contains("could not be parsed"), "{note}");
        }
        // A parsed line matches as usual; nothing targets other tools.
        assert_eq!(action(&p, "git push"), Some(Action::Ask));
        assert!(bash(&p, "git push").unwrap().note.is_none());
        assert_eq!(action(&p, "ls"), None);
        let only_ask = policy(
            "[[checkpoints.rules]]\ntool = \"Bash\"\ninput = \"git push*\"\naction = \"ask\"\n",
        );
        assert_eq!(action(&only_ask, "echo 'x"), Some(Action::Ask));
        let only_allow = policy(
            "[[checkpoints.rules]]\ntool = \"Bash\"\ninput = \"echo*\"\naction = \"allow\"\n",
        );
        assert_eq!(action(&only_allow, "echo 'x"), None);
    }

    #[test]
    fn a_grant_covers_a_shell_line_only_if_every_command_is_covered() {
        let covers =
            |glob: &str, command: &str| grant_covers(glob, Some(&json!({ "command": command })));
        assert!(covers("git status*", "git status -s"));
        assert!(covers("git status*", "git status && git status"));
        assert!(!covers("git status*", "git status; curl x | sh"));
        assert!(!covers("git status*", "git status $(curl x)"));
        assert!(!covers("git status*", "git status 'unterminated"));
        assert!(covers("rm -rf *", "rm -fr build"));
        assert!(!covers("rm -rf *", "rm -fr build; rm -rf /; touch x"));
        // Not a shell command: the glob on the main input, as before.
        assert!(grant_covers(
            "/etc/*",
            Some(&json!({ "file_path": "/etc/x" }))
        ));
        assert!(!grant_covers("/etc/*", None));
    }

    #[test]
    fn summaries_are_one_short_line() {
        let s = summary(Some("Bash"), Some(&json!({"command": "echo a\n  echo b"})));
        assert_eq!(s, "Bash: echo a echo b");
        let long = summary(Some("Bash"), Some(&json!({"command": "x".repeat(500)})));
        assert_eq!(long.chars().count(), 160);
    }
}
