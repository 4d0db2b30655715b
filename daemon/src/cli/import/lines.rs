//! Reading a transcript's lines: each becomes what the mapping is sent (the line, parsed, or
//! its text when it is not JSON) with the id that makes a second import skip it. What cannot
//! be read is reported, never fatal.

use std::path::Path;

use serde_json::{Value as Json, json};

use super::problem::Problem;

/// One line of a transcript, ready to send.
#[derive(Debug)]
pub struct Line {
    /// `<file stem>:<line uuid>`, or `<file stem>:L<line number>` for a line without a uuid.
    pub import_id: String,
    /// The line's `timestamp` (ISO 8601), or the last one before it in its file: the order
    /// in which a session's and its subagents' lines are merged.
    pub order: String,
    /// What the mapping gets: `{transcript, entry[, error]}`.
    pub event: Json,
    /// Not JSON: sent as its text, stored as `unmapped`.
    pub garbage: bool,
}

/// The lines of `file` (a subagent's when `agent` is set) for `session`, with what was wrong.
/// A file that cannot be read, is empty or has no JSON line gives no lines; a last line cut
/// short (no newline, not JSON: Claude Code may be writing it) is left for a later import.
pub fn read(
    file: &Path,
    session: &str,
    agent: Option<&str>,
    problems: &mut Vec<Problem>,
) -> Vec<Line> {
    let bytes = match std::fs::read(file) {
        Ok(b) => b,
        Err(e) => {
            problems.push(Problem::file(file, format!("cannot read: {e}")));
            return Vec::new();
        }
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        problems.push(Problem::file(file, "empty: nothing to import".into()));
        return Vec::new();
    }
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut lines = Vec::new();
    let mut order = String::new();
    let mut parsed_any = false;
    let mut pending_problems = Vec::new();
    let mut segments = bytes.split(|b| *b == b'\n').enumerate().peekable();
    while let Some((i, seg)) = segments.next() {
        let no = i + 1;
        let last = segments.peek().is_none();
        if seg.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let transcript = json!({
            "file": file.to_string_lossy(), "line": no, "session_id": session, "agent_id": agent,
        });
        match serde_json::from_slice::<Json>(seg) {
            Ok(entry) => {
                parsed_any = true;
                if let Some(ts) = entry.get("timestamp").and_then(Json::as_str)
                    && ts > order.as_str()
                {
                    order = ts.to_string();
                }
                let key = match entry.get("uuid").and_then(Json::as_str) {
                    Some(u) => u.to_string(),
                    None => format!("L{no}"),
                };
                let mut transcript = transcript;
                transcript["import_id"] = json!(format!("{stem}:{key}"));
                lines.push(Line {
                    import_id: format!("{stem}:{key}"),
                    order: order.clone(),
                    event: json!({"transcript": transcript, "entry": entry}),
                    garbage: false,
                });
            }
            Err(_) if last => {
                pending_problems.push(Problem::line(
                    file,
                    no,
                    "the last line is cut short (no newline, not JSON): left for a later import"
                        .into(),
                ));
            }
            Err(e) => {
                let text = String::from_utf8_lossy(seg).into_owned();
                let id = format!("{stem}:L{no}");
                let mut transcript = transcript;
                transcript["import_id"] = json!(id);
                pending_problems.push(Problem::line(
                    file,
                    no,
                    format!("not JSON ({e}): kept as unmapped"),
                ));
                lines.push(Line {
                    import_id: id,
                    order: order.clone(),
                    event: json!({"transcript": transcript, "entry": text, "error": e.to_string()}),
                    garbage: true,
                });
            }
        }
    }
    if !parsed_any {
        problems.push(Problem::file(
            file,
            "not a transcript (no line is JSON): skipped".into(),
        ));
        return Vec::new();
    }
    problems.append(&mut pending_problems);
    lines
}

/// A session's lines and its subagents', merged in time order; each file's own order is kept.
pub fn merge(files: Vec<Vec<Line>>) -> Vec<Line> {
    let mut all: Vec<Line> = files.into_iter().flatten().collect();
    // Stable, and each file's keys never go down: a merge that keeps every file's order.
    all.sort_by(|a, b| a.order.cmp(&b.order));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(text: &str) -> (Vec<Line>, Vec<Problem>) {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s1.jsonl");
        std::fs::write(&f, text).unwrap();
        let mut problems = Vec::new();
        let lines = read(&f, "s1", None, &mut problems);
        (lines, problems)
    }

    #[test]
    fn garbage_between_lines_is_kept_and_a_cut_last_line_left() {
        let (lines, problems) = lines_of(
            "{\"uuid\":\"u1\",\"timestamp\":\"2026-01-01T00:00:01Z\"}\nnot json\n{\"type\":\"x\"}\n{\"uuid\":\"u3\",",
        );
        let ids: Vec<_> = lines.iter().map(|l| l.import_id.as_str()).collect();
        assert_eq!(ids, ["s1:u1", "s1:L2", "s1:L3"]);
        assert!(lines[1].garbage && lines[1].event["entry"] == "not json");
        assert_eq!(
            lines[2].order, "2026-01-01T00:00:01Z",
            "inherits the last time"
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(problems[0].line, Some(2));
        assert_eq!(problems[1].line, Some(4));
    }

    #[test]
    fn empty_and_non_json_files_give_nothing() {
        let (lines, problems) = lines_of("\n\n");
        assert!(lines.is_empty() && problems[0].problem.contains("empty"));
        let (lines, problems) = lines_of("hello\nworld\n");
        assert!(lines.is_empty() && problems[0].problem.contains("not a transcript"));
    }

    #[test]
    fn merging_keeps_each_files_order() {
        let l = |id: &str, order: &str| Line {
            import_id: id.into(),
            order: order.into(),
            event: Json::Null,
            garbage: false,
        };
        let merged = merge(vec![
            vec![l("a1", "1"), l("a2", "3"), l("a3", "3")],
            vec![l("b1", "2"), l("b2", "4")],
        ]);
        let ids: Vec<_> = merged.iter().map(|l| l.import_id.as_str()).collect();
        assert_eq!(ids, ["a1", "b1", "a2", "a3", "b2"]);
    }
}
