//! What a shell command line runs, for the checkpoint policy: every simple command in it.
//!
//! The line is parsed (brush-parser) and walked through pipelines, lists (`&&`, `||`, `;`),
//! subshells, groups and compound commands, command and process substitutions, here-documents
//! that expand, `sh -c` / `bash -c` / `eval` strings and `find -exec`, each nested string parsed
//! in turn. A simple command is also seen through its wrappers (`sudo`, `env`, `xargs`,
//! `timeout N`, …, options included), so `sudo env A=1 /bin/rm -rf x` is also `rm -rf x`.
//! Words lose their quoting and escapes, and the program its directory: `"\rm"` reads `rm`. A
//! word the shell computes when it runs (`$X`, `$(…)`) keeps its text: it cannot be known here.
//!
//! Bounded: a line longer than [`MAX_LEN`], nesting deeper than [`MAX_DEPTH`], or nested strings
//! adding up to more than [`MAX_WORK`] bytes are refused before the parser sees them, so no
//! input makes it slow or deep (the parser backtracks: unclosed `(((…` cost it twice as much
//! per level).

use brush_parser::ast;
use brush_parser::word::{self, WordPiece, WordPieceWithSource};

/// The longest command line analysed (bytes).
pub const MAX_LEN: usize = 16 * 1024;
/// How deep brackets, compound commands and nested strings may go.
pub const MAX_DEPTH: usize = 12;
/// All the text parsed for one line, nested strings included (bytes).
const MAX_WORK: usize = 4 * MAX_LEN;

/// Why a line could not be analysed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShellError {
    #[error("it is longer than {MAX_LEN} bytes")]
    TooLong,
    #[error("it nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("its nested strings add up to more than {MAX_WORK} bytes")]
    TooMuch,
    #[error("{0}")]
    Syntax(String),
    #[error("`{0}` reads the program it runs from its input, which cannot be seen")]
    Hidden(String),
}

/// One simple command as it runs, seen through its wrappers: `views[0]` as written, then each
/// command a wrapper runs (`sudo env A=1 rm -rf x`, `env A=1 rm -rf x`, `rm -rf x`). In each
/// view the first word is the program's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub views: Vec<Vec<String>>,
}

impl Invocation {
    /// The command finally run, past every wrapper.
    pub fn innermost(&self) -> &[String] {
        self.views.last().map(Vec::as_slice).unwrap_or_default()
    }
}

/// Every simple command the line runs, in order.
pub fn invocations(line: &str) -> Result<Vec<Invocation>, ShellError> {
    let mut walker = Walker::default();
    walker.line(line, 0)?;
    Ok(walker.out)
}

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
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "fish",
];

#[derive(Default)]
struct Walker {
    out: Vec<Invocation>,
    /// Bytes parsed so far, nested strings included.
    work: usize,
}

impl Walker {
    /// Parses `text` (a line, or a string nested `depth` levels in one) and walks it.
    fn line(&mut self, text: &str, depth: usize) -> Result<(), ShellError> {
        if text.len() > MAX_LEN {
            return Err(ShellError::TooLong);
        }
        self.spend(text.len())?;
        if depth + nesting(text) > MAX_DEPTH {
            return Err(ShellError::TooDeep);
        }
        for list in &parse(text)?.complete_commands {
            self.list(list, depth)?;
        }
        Ok(())
    }

    fn spend(&mut self, bytes: usize) -> Result<(), ShellError> {
        self.work += bytes;
        if self.work > MAX_WORK {
            return Err(ShellError::TooMuch);
        }
        Ok(())
    }

    fn list(&mut self, list: &ast::CompoundList, depth: usize) -> Result<(), ShellError> {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            self.pipeline(&and_or.first, depth)?;
            for next in &and_or.additional {
                let (ast::AndOr::And(p) | ast::AndOr::Or(p)) = next;
                self.pipeline(p, depth)?;
            }
        }
        Ok(())
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline, depth: usize) -> Result<(), ShellError> {
        for (i, command) in pipeline.seq.iter().enumerate() {
            self.command(command, i > 0, depth)?;
        }
        Ok(())
    }

    /// `piped`: its standard input is the output of the command before it.
    fn command(&mut self, c: &ast::Command, piped: bool, depth: usize) -> Result<(), ShellError> {
        match c {
            ast::Command::Simple(s) => self.simple(s, piped, depth),
            ast::Command::Compound(compound, redirects) => {
                self.compound(compound, depth)?;
                self.redirects(redirects.as_ref(), depth)
            }
            ast::Command::Function(f) => {
                // Defined here, perhaps run here: its body counts as run.
                self.compound(&f.body.0, depth)?;
                self.redirects(f.body.1.as_ref(), depth)
            }
            ast::Command::ExtendedTest(t) => self.test(&t.expr, depth),
        }
    }

    fn compound(&mut self, c: &ast::CompoundCommand, depth: usize) -> Result<(), ShellError> {
        use ast::CompoundCommand as C;
        match c {
            C::Arithmetic(a) => self.code_in(&a.expr.value, depth),
            C::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.code_in(&e.value, depth)?;
                }
                self.list(&f.body.list, depth)
            }
            C::BraceGroup(b) => self.list(&b.list, depth),
            C::Subshell(s) => self.list(&s.list, depth),
            C::ForClause(f) => {
                for w in f.values.iter().flatten() {
                    self.word(&w.value, depth)?;
                }
                self.list(&f.body.list, depth)
            }
            C::CaseClause(c) => {
                self.word(&c.value.value, depth)?;
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value, depth)?;
                    }
                    if let Some(list) = &item.cmd {
                        self.list(list, depth)?;
                    }
                }
                Ok(())
            }
            C::IfClause(i) => {
                self.list(&i.condition, depth)?;
                self.list(&i.then, depth)?;
                for e in i.elses.iter().flatten() {
                    if let Some(cond) = &e.condition {
                        self.list(cond, depth)?;
                    }
                    self.list(&e.body, depth)?;
                }
                Ok(())
            }
            C::WhileClause(w) | C::UntilClause(w) => {
                self.list(&w.0, depth)?;
                self.list(&w.1.list, depth)
            }
        }
    }

    /// `[[ … ]]`: only its words can run anything. Walked with a stack of its own: a long
    /// `a && b && …` chain is as deep as it is long.
    fn test(&mut self, expr: &ast::ExtendedTestExpr, depth: usize) -> Result<(), ShellError> {
        use ast::ExtendedTestExpr as E;
        let mut todo = vec![expr];
        while let Some(e) = todo.pop() {
            match e {
                E::And(a, b) | E::Or(a, b) => todo.extend([a.as_ref(), b.as_ref()]),
                E::Not(a) | E::Parenthesized(a) => todo.push(a),
                E::UnaryTest(_, w) => {
                    self.word(&w.value, depth)?;
                }
                E::BinaryTest(_, a, b) => {
                    self.word(&a.value, depth)?;
                    self.word(&b.value, depth)?;
                }
            }
        }
        Ok(())
    }

    fn redirects(
        &mut self,
        list: Option<&ast::RedirectList>,
        depth: usize,
    ) -> Result<(), ShellError> {
        for r in list.iter().flat_map(|l| &l.0) {
            self.redirect(r, depth)?;
        }
        Ok(())
    }

    fn redirect(&mut self, r: &ast::IoRedirect, depth: usize) -> Result<(), ShellError> {
        use ast::{IoFileRedirectTarget as T, IoRedirect as R};
        match r {
            R::File(_, _, T::Filename(w) | T::Duplicate(w)) => self.word(&w.value, depth).map(drop),
            R::File(_, _, T::ProcessSubstitution(_, sub)) => self.list(&sub.list, depth),
            R::File(_, _, T::Fd(_)) => Ok(()),
            R::HereDocument(_, doc) if doc.requires_expansion => {
                self.word(&doc.doc.value, depth).map(drop)
            }
            R::HereDocument(..) => Ok(()),
            R::HereString(_, w) | R::OutputAndError(w, _) => self.word(&w.value, depth).map(drop),
        }
    }

    fn simple(
        &mut self,
        s: &ast::SimpleCommand,
        piped: bool,
        depth: usize,
    ) -> Result<(), ShellError> {
        use ast::CommandPrefixOrSuffixItem as Item;
        let mut words = Vec::new();
        let mut stdin = piped;
        let prefix = s.prefix.iter().flat_map(|p| &p.0);
        let suffix = s.suffix.iter().flat_map(|p| &p.0);
        let name = s.word_or_name.iter().map(|w| (None, Some(w)));
        let items = prefix
            .map(|i| (Some(i), None))
            .chain(name)
            .chain(suffix.map(|i| (Some(i), None)));
        for (item, name) in items {
            match (item, name) {
                (_, Some(w)) | (Some(Item::Word(w)), _) => words.push(self.word(&w.value, depth)?),
                (Some(Item::AssignmentWord(a, _)), _) => match &a.value {
                    ast::AssignmentValue::Scalar(w) => drop(self.word(&w.value, depth)?),
                    ast::AssignmentValue::Array(items) => {
                        for (k, v) in items {
                            if let Some(k) = k {
                                self.word(&k.value, depth)?;
                            }
                            self.word(&v.value, depth)?;
                        }
                    }
                },
                (Some(Item::IoRedirect(r)), _) => {
                    stdin |= matches!(
                        r,
                        ast::IoRedirect::File(_, ast::IoFileRedirectKind::Read, _)
                            | ast::IoRedirect::HereDocument(..)
                            | ast::IoRedirect::HereString(..)
                    );
                    self.redirect(r, depth)?;
                }
                (Some(Item::ProcessSubstitution(_, sub)), _) => {
                    self.list(&sub.list, depth)?;
                    words.push("<(…)".to_string());
                }
                (None, None) => {}
            }
        }
        self.invocation(words, stdin, depth)
    }

    /// Records one simple command, then what it runs in turn: a shell's `-c` string, `eval`'s
    /// words, `find -exec`'s command.
    fn invocation(
        &mut self,
        mut words: Vec<String>,
        stdin: bool,
        depth: usize,
    ) -> Result<(), ShellError> {
        let Some(first) = words.first_mut() else {
            return Ok(());
        };
        *first = program_name(first);
        let invocation = Invocation {
            views: unwrap(words),
        };
        let inner = invocation.innermost().to_vec();
        self.out.push(invocation);
        let Some(program) = inner.first() else {
            return Ok(());
        };
        if depth >= MAX_DEPTH {
            return Err(ShellError::TooDeep);
        }
        if SHELLS.contains(&program.as_str()) {
            match shell_code(&inner) {
                ShellCode::Code(code) => self.line(code, depth + 1)?,
                ShellCode::Stdin if stdin => return Err(ShellError::Hidden(program.clone())),
                ShellCode::Stdin | ShellCode::Script => {}
            }
        } else if program == "eval" && inner.len() > 1 {
            self.line(&inner[1..].join(" "), depth + 1)?;
        } else if program == "find" {
            let mut rest = inner.iter();
            while rest.any(|w| matches!(w.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir")) {
                let run: Vec<String> = rest
                    .by_ref()
                    .take_while(|w| !matches!(w.as_str(), ";" | "+"))
                    .cloned()
                    .collect();
                self.invocation(run, false, depth + 1)?;
            }
        }
        Ok(())
    }

    /// A word as the program will see it: quoting and escapes removed, what the shell computes
    /// kept as written. Any command substitution in it is walked.
    fn word(&mut self, raw: &str, depth: usize) -> Result<String, ShellError> {
        if !raw.contains(['\\', '\'', '"', '$', '`']) {
            return Ok(raw.to_string());
        }
        let pieces = word::parse(raw, &options()).map_err(|e| ShellError::Syntax(e.to_string()))?;
        let mut out = String::new();
        self.pieces(raw, &pieces, &mut out, depth)?;
        Ok(out)
    }

    fn pieces(
        &mut self,
        raw: &str,
        pieces: &[WordPieceWithSource],
        out: &mut String,
        depth: usize,
    ) -> Result<(), ShellError> {
        for p in pieces {
            let source = raw.get(p.start_index..p.end_index).unwrap_or_default();
            match &p.piece {
                WordPiece::Text(s) | WordPiece::SingleQuotedText(s) => out.push_str(s),
                WordPiece::AnsiCQuotedText(s) => out.push_str(&ansi_c(s)),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(raw, inner, out, depth)?
                }
                WordPiece::TildePrefix(user) => {
                    out.push('~');
                    out.push_str(user);
                }
                WordPiece::EscapeSequence(s) => {
                    // `\<newline>` joins lines; `\r` is `r`.
                    let c = s.strip_prefix('\\').unwrap_or(s);
                    if c != "\n" {
                        out.push_str(c);
                    }
                }
                WordPiece::CommandSubstitution(code)
                | WordPiece::BackquotedCommandSubstitution(code) => {
                    self.line(code, depth + 1)?;
                    out.push_str(source);
                }
                WordPiece::ParameterExpansion(_) => {
                    let inner = source.strip_prefix("${").and_then(|s| s.strip_suffix('}'));
                    self.code_in(inner.unwrap_or_default(), depth)?;
                    out.push_str(source);
                }
                WordPiece::ArithmeticExpression(e) => {
                    self.code_in(&e.value, depth)?;
                    out.push_str(source);
                }
            }
        }
        Ok(())
    }

    /// Text that is not a command but may hold one (`${X:-$(cmd)}`, `$(( $(cmd) ))`).
    fn code_in(&mut self, text: &str, depth: usize) -> Result<(), ShellError> {
        if !text.contains(['$', '`']) {
            return Ok(());
        }
        if depth >= MAX_DEPTH {
            return Err(ShellError::TooDeep);
        }
        self.spend(text.len())?;
        let pieces =
            word::parse(text, &options()).map_err(|e| ShellError::Syntax(e.to_string()))?;
        self.pieces(text, &pieces, &mut String::new(), depth + 1)
    }
}

fn options() -> brush_parser::ParserOptions {
    brush_parser::ParserOptions::default()
}

fn parse(text: &str) -> Result<ast::Program, ShellError> {
    let options = options();
    let run = || {
        let tokens = brush_parser::uncached_tokenize_str(text, &options.tokenizer_options())
            .map_err(|e| e.to_string())?;
        brush_parser::parse_tokens(&tokens, &options, &brush_parser::SourceInfo::default())
            .map_err(|e| e.to_string())
    };
    // The parser is not ours: should it panic, the line is unparseable, the daemon unharmed.
    std::panic::catch_unwind(run)
        .unwrap_or_else(|_| Err("the shell parser failed".to_string()))
        .map_err(ShellError::Syntax)
}

/// How deep brackets (`(`, `{`, `$(`) and compound commands (`if`, `while`, `for`, `case`, …)
/// go, counted in one pass without parsing: quoting is followed so that `echo '((('` is flat.
/// An overcount only makes a line unparseable, never a nested command unseen.
fn nesting(text: &str) -> usize {
    #[derive(Clone, Copy, PartialEq)]
    enum Ctx {
        Code,
        Double,
    }
    let mut stack = vec![Ctx::Code];
    // Brackets open now (the quotes on the stack are no level), compound commands open now.
    let (mut open, mut keywords, mut max) = (0usize, 0usize, 0usize);
    let mut word = String::new();
    let mut chars = text.chars().peekable();
    let mut single = false;
    while let Some(c) = chars.next() {
        let ctx = *stack.last().unwrap_or(&Ctx::Code);
        if single {
            single = c != '\'';
            continue;
        }
        if ctx == Ctx::Code && !(c.is_alphanumeric() || c == '_') {
            match word.as_str() {
                "if" | "while" | "until" | "for" | "case" | "select" => keywords += 1,
                "fi" | "done" | "esac" => keywords = keywords.saturating_sub(1),
                _ => {}
            }
            word.clear();
        }
        match (ctx, c) {
            (_, '\\') => {
                chars.next();
            }
            (Ctx::Code, '\'') => single = true,
            (Ctx::Code, '"') => stack.push(Ctx::Double),
            (Ctx::Double, '"') => {
                stack.pop();
            }
            (Ctx::Code, '(' | '{') => {
                stack.push(Ctx::Code);
                open += 1;
            }
            (Ctx::Double, '$') if chars.peek() == Some(&'(') => {
                chars.next();
                stack.push(Ctx::Code);
                open += 1;
            }
            (Ctx::Code, ')' | '}') if stack.len() > 1 => {
                stack.pop();
                open -= 1;
            }
            (Ctx::Code, c) if c.is_alphanumeric() || c == '_' => word.push(c),
            _ => {}
        }
        max = max.max(open + keywords);
    }
    max
}

/// `/usr/bin/rm` is `rm`.
fn program_name(word: &str) -> String {
    match word.rsplit('/').next() {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => word.to_string(),
    }
}

/// The command as written, then the command each wrapper runs.
fn unwrap(words: Vec<String>) -> Vec<Vec<String>> {
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

enum ShellCode<'a> {
    /// `-c CODE`.
    Code(&'a str),
    /// A script file: not read here.
    Script,
    /// The program comes from standard input.
    Stdin,
}

/// What a shell invocation runs: options first (`-o name` takes a value; a cluster with `c`
/// means the first operand is code), then the code or a script's name.
fn shell_code(words: &[String]) -> ShellCode<'_> {
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

/// `$'…'` as bash reads it: `\xHH`, `\NNN` (octal), `\n` and friends.
fn ansi_c(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let mut number = |radix: u32, first: Option<char>, max: usize| {
            let mut digits: String = first.into_iter().collect();
            while digits.len() < max
                && let Some(d) = chars.next_if(|d| d.is_digit(radix))
            {
                digits.push(d);
            }
            u32::from_str_radix(&digits, radix)
                .ok()
                .and_then(char::from_u32)
        };
        let decoded = match e {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'v' => Some('\x0b'),
            'x' => number(16, None, 2),
            'u' => number(16, None, 4),
            'U' => number(16, None, 8),
            '0'..='7' => number(8, Some(e), 3),
            other => Some(other),
        };
        out.extend(decoded);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Every view of every simple command, each as one line.
    fn seen(line: &str) -> Vec<String> {
        invocations(line)
            .unwrap_or_else(|e| panic!("{line:?}: {e}"))
            .iter()
            .flat_map(|inv| inv.views.iter().map(|v| v.join(" ")))
            .collect()
    }

    fn runs(line: &str, command: &str) {
        let all = seen(line);
        assert!(all.iter().any(|c| c == command), "{line:?} runs {all:?}");
    }

    #[test]
    fn every_simple_command_is_found() {
        runs("/bin/rm -rf x", "rm -rf x");
        runs("true && rm -rf x", "rm -rf x");
        runs("false || rm -rf x", "rm -rf x");
        runs("echo hi; rm -rf x", "rm -rf x");
        runs("(rm -rf x)", "rm -rf x");
        runs("{ rm -rf x; }", "rm -rf x");
        runs("$(rm -rf x)", "rm -rf x");
        runs("echo \"$(rm -rf x)\"", "rm -rf x");
        runs("echo `rm -rf x`", "rm -rf x");
        runs("X=$(rm -rf x) true", "rm -rf x");
        runs("echo ${X:-$(rm -rf x)}", "rm -rf x");
        runs("echo $(( $(rm -rf x) + 1 ))", "rm -rf x");
        runs("cat <(rm -rf x)", "rm -rf x");
        runs("cat <<EOF\n$(rm -rf x)\nEOF", "rm -rf x");
        runs("if true; then rm -rf x; fi", "rm -rf x");
        runs("for f in a; do rm -rf $f; done", "rm -rf $f");
        runs("while true; do rm -rf x; done", "rm -rf x");
        runs("case a in a) rm -rf x;; esac", "rm -rf x");
        runs("f() { rm -rf x; }; f", "rm -rf x");
        runs("[[ $(rm -rf x) ]]", "rm -rf x");
        runs("cmd | rm -rf x &", "rm -rf x");
        runs("find . -name '*.o' -exec rm -rf {} +", "rm -rf {}");
    }

    #[test]
    fn quoting_and_paths_are_removed() {
        runs("\\rm -rf x", "rm -rf x");
        runs("\"rm\" -rf x", "rm -rf x");
        runs("'r'm -rf x", "rm -rf x");
        runs("r\"m\" -rf x", "rm -rf x");
        runs("$'\\x72m' -rf x", "rm -rf x");
        runs("./bin/../rm -rf x", "rm -rf x");
        runs("rm -rf \\\n x", "rm -rf x");
        // What the shell computes stays as written.
        runs("$X -rf x", "$X -rf x");
    }

    #[test]
    fn wrappers_are_seen_through() {
        runs("sudo rm -rf x", "rm -rf x");
        runs("sudo rm -rf x", "sudo rm -rf x");
        runs("sudo -u root -E rm -rf x", "rm -rf x");
        runs("sudo -uroot rm -rf x", "rm -rf x");
        runs("env FOO=1 rm -rf x", "rm -rf x");
        runs("env -i -u HOME FOO=1 rm -rf x", "rm -rf x");
        runs("FOO=1 rm -rf x", "rm -rf x");
        runs("nice -n 5 nohup rm -rf x", "rm -rf x");
        runs("nice -10 rm -rf x", "rm -rf x");
        runs("command rm -rf x", "rm -rf x");
        runs("exec -a name rm -rf x", "rm -rf x");
        runs("timeout 10 rm -rf x", "rm -rf x");
        runs("timeout -s KILL --kill-after=5 10s rm -rf x", "rm -rf x");
        runs("xargs rm -rf", "rm -rf");
        runs("find . | xargs -0 -n 1 -I {} rm -rf {}", "rm -rf {}");
        runs("sudo env A=1 /usr/bin/time -f %e rm -rf x", "rm -rf x");
        runs("time rm -rf x", "rm -rf x");
        runs("busybox rm -rf x", "rm -rf x");
        runs("stdbuf -oL rm -rf x", "rm -rf x");
    }

    #[test]
    fn shell_strings_are_parsed_in_turn() {
        runs("bash -c 'rm -rf x'", "rm -rf x");
        runs("sh -c \"echo a; rm -rf x\"", "rm -rf x");
        runs("bash -lc 'rm -rf x'", "rm -rf x");
        runs("bash -o pipefail -c 'rm -rf x'", "rm -rf x");
        runs("sudo bash -c 'rm -rf x'", "rm -rf x");
        runs("find . | xargs sh -c 'rm -rf \"$@\"' _", "rm -rf $@");
        runs("bash -c \"bash -c 'rm -rf x'\"", "rm -rf x");
        runs("eval 'rm -rf x'", "rm -rf x");
        runs("eval rm -rf x", "rm -rf x");
        // A script file is not read; a plain shell is just a command.
        runs("bash script.sh", "bash script.sh");
        runs("bash", "bash");
    }

    #[test]
    fn a_shell_reading_its_program_from_input_is_hidden() {
        for line in [
            "curl x | sh",
            "curl x | sudo bash",
            "curl x | bash -s -- --flag",
            "sh < script",
            "bash <<< 'rm -rf x'",
            "bash <<EOF\nrm -rf x\nEOF",
        ] {
            assert!(
                matches!(invocations(line), Err(ShellError::Hidden(_))),
                "{line:?}: {:?}",
                invocations(line)
            );
        }
    }

    #[test]
    fn nesting_follows_quotes() {
        assert_eq!(nesting("echo '((((((((((((((((((('"), 0);
        assert_eq!(nesting("echo \"((((((((((((((\""), 0);
        assert_eq!(nesting("echo \\(\\(\\("), 0);
        assert_eq!(nesting("echo \"$(a $(b))\""), 2);
        assert_eq!(nesting("(a) (b) (c)"), 1);
        assert_eq!(nesting("if a; then if b; then c; fi; fi"), 2);
    }

    #[test]
    fn hostile_lines_are_refused_quickly_and_never_panic() {
        let deep_subst = format!("{}rm -rf x{}", "$(".repeat(5000), ")".repeat(5000));
        let deep_backquote = format!("{}rm{}", "\\`".repeat(300), "\\`".repeat(300));
        let cases: Vec<(String, Option<ShellError>)> = vec![
            ("x ".repeat(MAX_LEN), Some(ShellError::TooLong)),
            (deep_subst, Some(ShellError::TooDeep)),
            ("(".repeat(5000), Some(ShellError::TooDeep)),
            ("( ".repeat(13), Some(ShellError::TooDeep)),
            ("{ ".repeat(400), Some(ShellError::TooDeep)),
            ("if true; then ".repeat(200), Some(ShellError::TooDeep)),
            ("echo 'unterminated".into(), None),
            ("echo \"unterminated".into(), None),
            ("echo $(unterminated".into(), None),
            ("echo `unterminated".into(), None),
            ("a\0b; rm\0 -rf x".into(), None),
            ("cat <<EOF\nnever ends".into(), None),
            (deep_backquote, None),
            (")))}}}fi done esac ;;".into(), None),
            (format!("[[ {}a ]]", "a && ".repeat(3000)), None),
            ("a; ".repeat(MAX_LEN / 3 - 1), None),
            ("a | ".repeat(MAX_LEN / 4 - 1) + "a", None),
            (format!("{}a", "bash -c ".repeat(2000)), None),
            (
                format!("{}rm{}", "bash -c \"".repeat(20), "\"".repeat(20)),
                None,
            ),
            ("\u{feff}\u{202e}rm -rf x\u{200b}".into(), None),
        ];
        for (line, want) in cases {
            let start = Instant::now();
            let got = std::panic::catch_unwind(|| invocations(&line));
            let took = start.elapsed();
            let short: String = line.chars().take(40).collect();
            let got = got.unwrap_or_else(|_| panic!("{short:?} panicked"));
            assert!(took < Duration::from_secs(2), "{short:?} took {took:?}");
            if let Some(want) = want {
                assert_eq!(got.as_ref().err(), Some(&want), "{short:?}");
            }
        }
    }

    #[test]
    fn unparseable_lines_are_errors() {
        for line in ["echo 'x", "(((", "a &&", "if true; then"] {
            assert!(
                matches!(invocations(line), Err(ShellError::Syntax(_))),
                "{line:?}: {:?}",
                invocations(line)
            );
        }
    }
}
