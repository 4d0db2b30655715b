//! Reads JSON that is well formed yet not representable: a lone UTF-16 surrogate escape
//! (`"\ud800"`) or a number beyond f64 (`1e999`). An agent's raw event may hold either (a
//! tool input is whatever the model wrote), and dropping the event would also drop the tool
//! call's decision. Lone surrogates become U+FFFD, out-of-range numbers become strings of
//! their digits, and the caller is told the text was changed.

use serde_json::Value as Json;

/// Parses `text`, repairing what cannot be represented. `None` when it is not JSON at all (or
/// nests deeper than the parser allows). The flag says whether anything was repaired.
pub fn parse(text: &str) -> Option<(Json, bool)> {
    if let Ok(v) = serde_json::from_str(text) {
        return Some((v, false));
    }
    let repaired = repair(text);
    serde_json::from_str(&repaired).ok().map(|v| (v, true))
}

/// The text with lone surrogate escapes replaced and huge numbers quoted.
fn repair(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                // A string: copy to its end, fixing surrogate escapes.
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' && b.get(i + 1) == Some(&b'u') {
                        if let Some(unit) = hex4(b, i + 2) {
                            if (0xD800..0xDC00).contains(&unit) {
                                let low = (b.get(i + 6) == Some(&b'\\')
                                    && b.get(i + 7) == Some(&b'u'))
                                .then(|| hex4(b, i + 8))
                                .flatten();
                                if low.is_some_and(|l| (0xDC00..0xE000).contains(&l)) {
                                    i += 12;
                                    continue;
                                }
                                out.push_str(&text[copied..i]);
                                out.push_str("\\ufffd");
                                i += 6;
                                copied = i;
                                continue;
                            }
                            if (0xDC00..0xE000).contains(&unit) {
                                out.push_str(&text[copied..i]);
                                out.push_str("\\ufffd");
                                i += 6;
                                copied = i;
                                continue;
                            }
                        }
                        i += 6;
                        continue;
                    }
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                let token = &text[start..i];
                if token.parse::<f64>().is_ok_and(|f| !f.is_finite()) {
                    out.push_str(&text[copied..start]);
                    out.push('"');
                    out.push_str(token);
                    out.push('"');
                    copied = i;
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&text[copied.min(text.len())..]);
    out
}

fn hex4(b: &[u8], at: usize) -> Option<u32> {
    let digits = b.get(at..at + 4)?;
    let s = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(s, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn representable_json_is_untouched() {
        let (v, changed) = parse(r#"{"a":"\ud83d\ude00 é","n":1.5e300}"#).unwrap();
        assert!(!changed);
        assert_eq!(v, json!({"a": "😀 é", "n": 1.5e300}));
    }

    #[test]
    fn lone_surrogates_and_huge_numbers_are_repaired() {
        let (v, changed) = parse(
            r#"{"tool_name":"Bash","tool_input":{"command":"rm -rf / \udc80","x":1e999,"y":[-2E+400,"\ud800"]}}"#,
        )
        .unwrap();
        assert!(changed);
        assert_eq!(
            v,
            json!({"tool_name": "Bash", "tool_input": {"command": "rm -rf / \u{fffd}",
                   "x": "1e999", "y": ["-2E+400", "\u{fffd}"]}})
        );
        assert!(parse("{nope").is_none());
    }
}
