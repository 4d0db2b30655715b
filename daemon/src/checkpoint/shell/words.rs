//! A word as the program will see it: quoting and escapes removed, `$'…'` decoded, what the
//! shell computes (`$X`, `$(…)`) kept as written. A word may hold commands (`$(…)`, `${X:-$(…)}`,
//! `$(( … ))`): those are walked, so this is a second part of the [`Walker`]. Apart because
//! quoting is a job of its own, tested on its own (`quoting_and_paths_are_removed`).

use brush_parser::word::{self, WordPiece, WordPieceWithSource};

use super::bounds::MAX_DEPTH;
use super::outcome::ShellError;
use super::parser::options;
use super::walk::Walker;

impl Walker {
    /// A word as the program will see it: quoting and escapes removed, what the shell computes
    /// kept as written. Any command substitution in it is walked.
    pub(super) fn word(&mut self, raw: &str, depth: usize) -> Result<String, ShellError> {
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
    pub(super) fn code_in(&mut self, text: &str, depth: usize) -> Result<(), ShellError> {
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
