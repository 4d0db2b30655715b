//! The checkpoint policy of `[checkpoints]` in config.toml: which tool calls run, which are
//! refused, and which wait for a person. Rules are matched on the tool name, the tool's main
//! input and the source; deny wins over ask over allow.

use serde_json::Value as Json;

use crate::config::{CheckpointsConfig, OnTimeout, PermissionRequests, RuleAction};

/// What the policy says about one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleVerdict {
    pub action: RuleAction,
    /// `rules[i]`, naming the rule that matched.
    pub rule: String,
    /// The rule as written, for people.
    pub description: String,
    /// The rule's input glob: an "always allow" granted on this checkpoint covers the calls
    /// this glob matches.
    pub input_glob: Option<String>,
    pub timeout_ms: u64,
    pub on_timeout: OnTimeout,
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
        let main = call.input.and_then(main_input);
        let mut best: Option<(usize, &crate::config::RuleConfig)> = None;
        for (i, rule) in self.config.rules.iter().enumerate() {
            if !glob_match(&rule.tool, call.tool, true) {
                continue;
            }
            if let Some(source) = &rule.source
                && !glob_match(source, call.source, true)
            {
                continue;
            }
            if let Some(pattern) = &rule.input {
                match &main {
                    Some(text) if glob_match(pattern, text, false) => {}
                    _ => continue,
                }
            }
            if best.is_none_or(|(_, b)| rank(rule.action) > rank(b.action)) {
                best = Some((i, rule));
            }
        }
        best.map(|(i, rule)| RuleVerdict {
            action: rule.action,
            rule: format!("rules[{i}]"),
            description: describe(rule),
            input_glob: rule.input.clone(),
            timeout_ms: rule.timeout_ms.unwrap_or(self.config.default_timeout_ms),
            on_timeout: rule.on_timeout.unwrap_or(self.config.default_on_timeout),
        })
    }
}

fn rank(a: RuleAction) -> u8 {
    match a {
        RuleAction::Deny => 3,
        RuleAction::Ask => 2,
        RuleAction::Allow => 1,
    }
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

/// Shell-style glob: `*` any run of characters, `?` any one character, everything else
/// literal. Iterative with one backtrack point, so no pattern can make it slow.
pub fn glob_match(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let fold = |s: &str| -> Vec<char> {
        if ignore_case {
            s.chars().flat_map(char::to_lowercase).collect()
        } else {
            s.chars().collect()
        }
    };
    let (p, t) = (fold(pattern), fold(text));
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
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
    fn globs() {
        assert!(glob_match("rm -rf *", "rm -rf /", false));
        assert!(glob_match("*", "", false));
        assert!(glob_match("a*b*c", "aXXbYYc", false));
        assert!(!glob_match("a*b*c", "aXXbYY", false));
        assert!(glob_match("B?sh", "bash", true));
        assert!(!glob_match("Bash", "bash", false));
        assert!(glob_match("*.env", "/x/.env", false));
        // Pathological patterns finish quickly.
        let long = "a".repeat(10_000);
        assert!(!glob_match("*a*a*a*a*a*a*b", &long, false));
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
        assert_eq!((v.action, v.rule.as_str()), (RuleAction::Ask, "rules[1]"));
        assert_eq!(v.timeout_ms, 1000);
        assert_eq!(call("Bash", "rm -rf /").unwrap().action, RuleAction::Deny);
        assert_eq!(call("Read", "x").unwrap().action, RuleAction::Allow);
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

    #[test]
    fn summaries_are_one_short_line() {
        let s = summary(Some("Bash"), Some(&json!({"command": "echo a\n  echo b"})));
        assert_eq!(s, "Bash: echo a echo b");
        let long = summary(Some("Bash"), Some(&json!({"command": "x".repeat(500)})));
        assert_eq!(long.chars().count(), 160);
    }
}
