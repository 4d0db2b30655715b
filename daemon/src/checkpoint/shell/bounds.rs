//! The bounds of the analysis, checked before the parser sees a line.
//!
//! A line longer than [`MAX_LEN`], nesting deeper than [`MAX_DEPTH`], or nested strings adding
//! up to more than [`MAX_WORK`] bytes are refused before the parser sees them, so no input makes
//! it slow or deep (the parser backtracks: unclosed `(((…` cost it twice as much per level).
//! Apart because [`nesting`] is a scanner of its own, without the parser, and the limits are
//! what the error messages quote.

/// The longest command line analysed (bytes).
pub const MAX_LEN: usize = 16 * 1024;
/// How deep brackets, compound commands and nested strings may go.
pub const MAX_DEPTH: usize = 12;
/// All the text parsed for one line, nested strings included (bytes).
pub(super) const MAX_WORK: usize = 4 * MAX_LEN;

/// How deep brackets (`(`, `{`, `$(`) and compound commands (`if`, `while`, `for`, `case`, …)
/// go, counted in one pass without parsing: quoting is followed so that `echo '((('` is flat.
/// An overcount only makes a line unparseable, never a nested command unseen.
pub(super) fn nesting(text: &str) -> usize {
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
