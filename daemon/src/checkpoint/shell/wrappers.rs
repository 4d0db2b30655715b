//! Programs that run other programs: a simple command seen through its wrappers (`sudo`, `env`,
//! `xargs`, `timeout N`, …, their options and operands skipped), the program's name without
//! its directory, and where a shell's code is (`-c CODE`, a script, or its input). Apart
//! because these are tables of outside programs' options, which grow on their own.

/// Programs that run the rest of their words as a command, with the options (short letters,
/// long names) that take a value and the operands before the command (`timeout 10 cmd`).
struct Wrapper {
    name: &'static str,
    short_values: &'static str,
    long_values: &'static [&'static str],
    operands: usize,
    /// `env A=1 cmd`.
    assignments: bool,
}

const fn wrapper(
    name: &'static str,
    short_values: &'static str,
    long_values: &'static [&'static str],
    operands: usize,
) -> Wrapper {
    Wrapper {
        name,
        short_values,
        long_values,
        operands,
        assignments: false,
    }
}

const WRAPPERS: &[Wrapper] = &[
    wrapper(
        "sudo",
        "CDghpRrTtUu",
        &[
            "--chdir",
            "--close-from",
            "--group",
            "--host",
            "--prompt",
            "--chroot",
            "--role",
            "--type",
            "--command-timeout",
            "--other-user",
            "--user",
        ],
        0,
    ),
    wrapper("doas", "Cu", &[], 0),
    Wrapper {
        assignments: true,
        ..wrapper("env", "CSu", &["--chdir", "--split-string", "--unset"], 0)
    },
    wrapper("nice", "n", &["--adjustment"], 0),
    wrapper("nohup", "", &[], 0),
    wrapper("time", "fo", &["--format", "--output"], 0),
    wrapper("command", "", &[], 0),
    wrapper("builtin", "", &[], 0),
    wrapper("exec", "a", &[], 0),
    wrapper(
        "xargs",
        "adEILnPs",
        &[
            "--arg-file",
            "--delimiter",
            "--eof",
            "--replace",
            "--max-lines",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--process-slot-var",
        ],
        0,
    ),
    wrapper("timeout", "ks", &["--kill-after", "--signal"], 1),
    wrapper("stdbuf", "eio", &["--error", "--input", "--output"], 0),
    wrapper("ionice", "cnp", &["--class", "--classdata", "--pid"], 0),
    wrapper("setsid", "", &[], 0),
    wrapper("taskset", "", &[], 1),
    wrapper("chrt", "", &[], 1),
    wrapper("watch", "n", &["--interval"], 0),
    wrapper("unbuffer", "", &[], 0),
    wrapper("busybox", "", &[], 0),
];

/// Shells whose `-c` string is parsed in turn.
pub(super) const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "fish",
];

/// `/usr/bin/rm` is `rm`.
pub(super) fn program_name(word: &str) -> String {
    match word.rsplit('/').next() {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => word.to_string(),
    }
}

/// The command as written, then the command each wrapper runs.
pub(super) fn unwrap(words: Vec<String>) -> Vec<Vec<String>> {
    let mut views = vec![words];
    while let Some(last) = views.last() {
        let Some(w) = WRAPPERS
            .iter()
            .find(|w| last.first().map(String::as_str) == Some(w.name))
        else {
            break;
        };
        let start = skip_options(last, w);
        let Some(rest) = last.get(start..).filter(|r| !r.is_empty()) else {
            break;
        };
        let mut inner = rest.to_vec();
        inner[0] = program_name(&inner[0]);
        views.push(inner);
    }
    views
}

/// Where the wrapped command starts: past the wrapper's options (and their values), its
/// assignments and operands.
fn skip_options(words: &[String], w: &Wrapper) -> usize {
    let mut i = 1;
    while let Some(word) = words.get(i) {
        i += 1;
        if word == "--" {
            break;
        }
        if word.starts_with("--") {
            if w.long_values.contains(&word.as_str()) {
                i += 1;
            }
        } else if let Some(short) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `-u root` or `-uroot`: a letter that takes a value ends the cluster.
            if let Some((k, c)) = short
                .char_indices()
                .find(|(_, c)| w.short_values.contains(*c))
                && k + c.len_utf8() == short.len()
            {
                i += 1;
            }
        } else if !(w.assignments && is_assignment(word)) {
            i -= 1;
            break;
        }
    }
    i + w.operands
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

pub(super) enum ShellCode<'a> {
    /// `-c CODE`.
    Code(&'a str),
    /// A script file: not read here.
    Script,
    /// The program comes from standard input.
    Stdin,
}

/// What a shell invocation runs: options first (`-o name` takes a value; a cluster with `c`
/// means the first operand is code), then the code or a script's name.
pub(super) fn shell_code(words: &[String]) -> ShellCode<'_> {
    let (mut code, mut stdin) = (false, false);
    let mut i = 1;
    while let Some(word) = words.get(i) {
        if word == "--" || word == "-" {
            i += 1;
            break;
        }
        if matches!(word.as_str(), "--rcfile" | "--init-file") {
            i += 2;
        } else if word.starts_with("--") {
            i += 1;
        } else if let Some(cluster) = word.strip_prefix(['-', '+']).filter(|s| !s.is_empty()) {
            code |= word.starts_with('-') && cluster.contains('c');
            stdin |= word.starts_with('-') && cluster.contains('s');
            i += if cluster.ends_with(['o', 'O']) { 2 } else { 1 };
        } else {
            break;
        }
    }
    match (code, words.get(i)) {
        (true, Some(c)) => ShellCode::Code(c),
        // `-s`: the operands are arguments, the program still comes from the input.
        (false, _) if stdin => ShellCode::Stdin,
        (false, None) => ShellCode::Stdin,
        _ => ShellCode::Script,
    }
}
