//! Reading an event's payload for words: fields by name, first lines, durations, counts, who.

use serde_json::Value as Json;

/// A non-empty string field.
pub fn text<'a>(v: &'a Json, key: &str) -> Option<&'a str> {
    v.get(key)
        .and_then(Json::as_str)
        .filter(|s| !s.trim().is_empty())
}

/// The first string field of `keys` that is there.
pub fn text_of<'a>(v: &'a Json, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| text(v, k))
}

/// A whole-number field, also from a float or a string of digits (telemetry sends both).
pub fn number(v: &Json, key: &str) -> Option<i64> {
    match v.get(key)? {
        Json::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Json::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The first line with words in it, trimmed; `…` after it when more lines follow.
pub fn first_line(s: &str) -> String {
    let mut lines = s.lines().map(str::trim).filter(|l| !l.is_empty());
    match (lines.next(), lines.next()) {
        (Some(first), Some(_)) => format!("{first} …"),
        (Some(first), None) => first.to_string(),
        (None, _) => String::new(),
    }
}

/// Whitespace, newlines included, as single spaces: a command on one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `19 ms`, `1.9 s`, `2m 05s`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        ms if ms < 1000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms => {
            let s = ms / 1000;
            if s < 3600 {
                format!("{}m {:02}s", s / 60, s % 60)
            } else {
                format!("{}h {:02}m", s / 3600, s % 3600 / 60)
            }
        }
    }
}

/// `1,234,567`.
pub fn count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// Who decided, for people: `user:alice` is `alice`, `rule:rm` is `rule rm`.
pub fn who(decided_by: &str) -> String {
    match decided_by.split_once(':') {
        Some(("user", name)) => name.to_string(),
        Some((kind, name)) => format!("{kind} {name}"),
        None => decided_by.to_string(),
    }
}

/// The label for what an agent says: `claude` for Claude Code and the SDK.
pub fn agent(actor: Option<&str>) -> String {
    match actor {
        Some(a) if a.starts_with("claude") => "claude".into(),
        Some(a) if !a.is_empty() => a.into(),
        _ => "agent".into(),
    }
}

/// A payload as JSON text, cut to `max` characters.
pub fn clipped(v: &Json, max: usize) -> String {
    if v.is_null() {
        return String::new();
    }
    let s = v.to_string();
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_durations_and_names_read_as_people_write_them() {
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(12), "12");
        assert_eq!(duration(19), "19 ms");
        assert_eq!(duration(1900), "1.9 s");
        assert_eq!(duration(125_000), "2m 05s");
        assert_eq!(who("user:alice"), "alice");
        assert_eq!(who("rule:rm"), "rule rm");
        assert_eq!(who("timeout"), "timeout");
        assert_eq!(first_line("\n  fix it \nand more"), "fix it …");
        assert_eq!(number(&json!({"n": "1200"}), "n"), Some(1200));
        assert_eq!(clipped(&json!({"a": "ééé"}), 8), "{\"a\":\"éé…");
    }
}
