//! The query's text side: how a user's query becomes an FTS5 query, which words it looks for,
//! and the snippet of a hit with those words marked.
//!
//! A query is FTS5 syntax (`AND`, `OR`, `NOT`, `"a phrase"`, `prefix*`, `NEAR(…)`, parentheses).
//! So that plain words with punctuation work as typed (`x.txt`, `foo-bar`, `src/main.rs`,
//! `http://host`), every whitespace-separated word that holds characters FTS5 would reject is
//! quoted as a phrase (`"x.txt"`, the tokens `x` `txt` next to each other); a query that
//! already uses quotes is left exactly as written.

/// FTS5 operators, kept as they are.
const OPERATORS: &[&str] = &["AND", "OR", "NOT", "NEAR"];

/// The FTS5 query for `query`.
pub fn to_fts(query: &str) -> String {
    if query.contains('"') {
        return query.to_string();
    }
    let mut out = Vec::new();
    for word in query.split_whitespace() {
        out.push(quote_word(word));
    }
    out.join(" ")
}

fn quote_word(word: &str) -> String {
    if OPERATORS.contains(&word) || word.chars().all(is_bareword_char) {
        return word.to_string();
    }
    // Parentheses and a leading `^` are grouping and anchoring: the user writes syntax.
    if word.contains(['(', ')']) || word.starts_with('^') {
        return word.to_string();
    }
    match word.strip_suffix('*') {
        Some(stem) if !stem.is_empty() && !stem.contains('*') => format!("\"{stem}\"*"),
        _ => format!("\"{word}\""),
    }
}

/// Characters FTS5 takes in an unquoted word.
fn is_bareword_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || !c.is_ascii() || c == '*'
}

/// A word the query looks for, lowercased; `prefix` when it ended in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub word: String,
    pub prefix: bool,
}

/// The words of `query` (as the index's tokenizer splits them: runs of letters and digits),
/// without the operators, for marking them in snippets.
pub fn terms(query: &str) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    for (start, end) in tokens(query) {
        let word = &query[start..end];
        if OPERATORS.contains(&word) {
            continue;
        }
        let term = Term {
            word: word.to_lowercase(),
            prefix: query[end..].starts_with('*'),
        };
        if !out.contains(&term) {
            out.push(term);
        }
    }
    out
}

/// Byte ranges of the runs of letters and digits in `text`.
fn tokens(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        let (start, _) = chars.by_ref().find(|(_, c)| c.is_alphanumeric())?;
        let mut end = text.len();
        while let Some(&(i, c)) = chars.peek() {
            if !c.is_alphanumeric() {
                end = i;
                break;
            }
            chars.next();
        }
        Some((start, end))
    })
}

/// A snippet of about `width` characters of `text` around its first word in `terms`, on one
/// line, and the byte ranges in it of every such word.
pub fn snippet(text: &str, terms: &[Term], width: usize) -> (String, Vec<(usize, usize)>) {
    let matches = |w: &str| {
        let w = w.to_lowercase();
        terms
            .iter()
            .any(|t| w == t.word || t.prefix && w.starts_with(&t.word))
    };
    let first = tokens(text).find(|&(s, e)| matches(&text[s..e]));
    // Some context before the first match, the rest after it.
    let start = match first {
        Some((s, _)) => back_chars(text, s, width / 4),
        None => 0,
    };
    let end = forward_chars(text, start, width);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    let offset = out.len();
    out.extend(
        text[start..end]
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c }),
    );
    let marks = tokens(&text[start..end])
        .filter(|&(s, e)| matches(&text[start + s..start + e]))
        .map(|(s, e)| (s + offset, e + offset))
        .collect();
    if end < text.len() {
        out.push('…');
    }
    (out, marks)
}

/// The byte offset `n` characters before `at` (or 0).
fn back_chars(text: &str, at: usize, n: usize) -> usize {
    text[..at]
        .char_indices()
        .rev()
        .nth(n.saturating_sub(1))
        .map_or(0, |(i, _)| i)
}

/// The byte offset `n` characters after `from` (or the end).
fn forward_chars(text: &str, from: usize, n: usize) -> usize {
    text[from..]
        .char_indices()
        .nth(n)
        .map_or(text.len(), |(i, _)| from + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_with_punctuation_become_phrases_and_syntax_stays() {
        assert_eq!(to_fts("needle"), "needle");
        assert_eq!(to_fts("x.txt  foo-bar"), "\"x.txt\" \"foo-bar\"");
        assert_eq!(to_fts("src/main* AND cargo"), "\"src/main\"* AND cargo");
        assert_eq!(to_fts("pre* OR NEAR(a b)"), "pre* OR NEAR(a b)");
        assert_eq!(to_fts("\"exact phrase\" x.y"), "\"exact phrase\" x.y");
        assert_eq!(to_fts("http://h:1/p"), "\"http://h:1/p\"");
    }

    #[test]
    fn terms_are_the_words_without_operators() {
        let t = terms("Foo AND bar* NOT \"x.txt\"");
        let words: Vec<_> = t.iter().map(|t| (t.word.as_str(), t.prefix)).collect();
        assert_eq!(
            words,
            [("foo", false), ("bar", true), ("x", false), ("txt", false)]
        );
    }

    #[test]
    fn the_snippet_centres_on_the_first_match_and_marks_every_one() {
        let text = format!(
            "{}\nthe Needle is here, needles too{}",
            "a ".repeat(100),
            " b".repeat(100)
        );
        let (s, marks) = snippet(&text, &terms("needle*"), 60);
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert!(!s.contains('\n'));
        let marked: Vec<_> = marks.iter().map(|&(a, b)| &s[a..b]).collect();
        assert_eq!(marked, ["Needle", "needles"]);
        let (s, marks) = snippet("short text", &terms("absent"), 60);
        assert_eq!((s.as_str(), marks.len()), ("short text", 0));
        let (s, marks) = snippet("ünïcode wörds", &terms("wörds"), 20);
        assert_eq!(&s[marks[0].0..marks[0].1], "wörds");
    }
}
