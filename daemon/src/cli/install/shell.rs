//! Shell words for the hook's command line: quoting a path as one POSIX shell word, splitting
//! a command line back into words, and recognising a command that runs `dstream hook` or the
//! lean `dstream-hook`.

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

/// Whether `exe` is the lean hook binary, `dstream-hook` (by its name), which takes the agent
/// without `hook` before it.
pub fn is_lean(exe: &str) -> bool {
    std::path::Path::new(exe)
        .file_stem()
        .is_some_and(|s| s == dstream_daemon::hook::LEAN_BIN)
}

/// The words that run the hook for `agent` with `exe`, quoted: `exe hook agent`, or for the
/// lean binary `exe agent`.
pub fn hook_words(exe: &str, agent: &str) -> String {
    if is_lean(exe) {
        format!("{} {agent}", quote(exe))
    } else {
        format!("{} hook {agent}", quote(exe))
    }
}

/// A hook command that runs `dstream hook <agent>` or `dstream-hook <agent>`, possibly after
/// `NAME=value` assignments and with more arguments after it.
pub struct HookCommand {
    line: String,
    /// The program as written (unquoted): a `dstream`, or a `dstream-hook`.
    pub exe: String,
    /// From the program to the agent's name: what [`HookCommand::with_exe`] replaces.
    span: std::ops::Range<usize>,
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
        let [(exe, span), rest @ ..] = &words[first..] else {
            return None;
        };
        let stem = std::path::Path::new(exe).file_stem()?;
        let end = match rest {
            [(named, named_span), ..] if is_lean(exe) && named == agent => named_span.end,
            [(hook, _), (named, named_span), ..]
                if stem == "dstream" && hook == "hook" && named == agent =>
            {
                named_span.end
            }
            _ => return None,
        };
        Some(HookCommand {
            line: line.to_string(),
            exe: exe.clone(),
            span: span.start..end,
        })
    }

    /// The same command line running the hook with `exe` (`dstream` or `dstream-hook`, each in
    /// its own form) instead; everything before and after kept verbatim.
    pub fn with_exe(&self, exe: &str, agent: &str) -> String {
        format!(
            "{}{}{}",
            &self.line[..self.span.start],
            hook_words(exe, agent),
            &self.line[self.span.end..]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = "/opt/my tools/dstream";

    #[test]
    fn quoting_and_splitting_round_trip() {
        for s in [
            "/usr/bin/dstream",
            "/opt/my tools/dstream",
            "it's",
            "",
            "a\"b$c\\d",
        ] {
            let words = split(&quote(s)).unwrap();
            assert_eq!(words.len(), 1, "{s:?}");
            assert_eq!(words[0].0, s);
        }
        assert_eq!(quote("/usr/bin/dstream"), "/usr/bin/dstream");
        let words: Vec<String> = split(r#"a "b c" d\ e 'f'"g""#)
            .unwrap()
            .into_iter()
            .map(|w| w.0)
            .collect();
        assert_eq!(words, ["a", "b c", "d e", "fg"]);
        assert!(split("'open").is_none());
    }

    #[test]
    fn hook_commands_are_recognised_by_what_they_run() {
        let parse = |c: &str| HookCommand::parse(c, "claude-code").map(|h| h.exe);
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
        // The lean binary takes the agent without `hook`.
        assert_eq!(
            parse("'/opt/my tools/dstream-hook' claude-code --fail-closed").as_deref(),
            Some("/opt/my tools/dstream-hook")
        );
        assert_eq!(parse("dstream-hook hook claude-code"), None);
        assert_eq!(parse("dstream-hook opencode"), None);
        assert_eq!(parse("dstream claude-code"), None);
        assert_eq!(parse("echo dstream hook claude-code"), None);
        assert_eq!(parse("dstream tail x"), None);
        let h = HookCommand::parse(
            "DSTREAM_HOOK_DEBUG=1 /old/dstream hook claude-code || true",
            "claude-code",
        )
        .unwrap();
        assert_eq!(
            h.with_exe(EXE, "claude-code"),
            "DSTREAM_HOOK_DEBUG=1 '/opt/my tools/dstream' hook claude-code || true"
        );
        // Between the two forms, both ways, the words around kept.
        let lean = h.with_exe("/opt/bin/dstream-hook", "claude-code");
        assert_eq!(
            lean,
            "DSTREAM_HOOK_DEBUG=1 /opt/bin/dstream-hook claude-code || true"
        );
        let back = HookCommand::parse(&lean, "claude-code").unwrap();
        assert_eq!(back.exe, "/opt/bin/dstream-hook");
        assert_eq!(
            back.with_exe("/usr/bin/dstream", "claude-code"),
            "DSTREAM_HOOK_DEBUG=1 /usr/bin/dstream hook claude-code || true"
        );
    }
}
