//! Linear scans of JSON text that never recurse, whatever the input.

/// How deeply arrays and objects nest in JSON text: 0 for a scalar, 1 for `{}` or `[1]`.
/// One linear pass without recursion, whatever the input; brackets inside strings (escapes
/// included) do not count. On invalid JSON the result is meaningless but still bounded.
pub fn nesting_depth(json: &[u8]) -> usize {
    let (mut depth, mut max, mut i) = (0usize, 0usize, 0usize);
    while i < json.len() {
        match json[i] {
            b'"' => match string_end(json, i) {
                Some(end) => {
                    i = end;
                    continue;
                }
                None => break,
            },
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    max
}

/// Given `json[start] == b'"'`, the index just past the closing quote, if the string ends.
pub fn string_end(json: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', json.get(i..)?)?;
        if json[i] == b'"' {
            return Some(i + 1);
        }
        i += 2; // a backslash and the character it escapes
    }
}

/// What [`check_storable`] learned of valid JSON text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// As [`nesting_depth`].
    pub depth: usize,
    /// Values of every kind (objects, arrays, strings, numbers, literals; keys not counted):
    /// what a parser allocates for, so the parse can be charged before it happens.
    pub values: usize,
}

/// A token that valid JSON may hold but that a standard parser (serde_json, JavaScript's
/// `JSON.parse` into a UTF-8 string) cannot turn into a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// Where, as `a.b[3]` below the text's root ("" for the root itself).
    pub path: String,
    pub what: &'static str,
}

/// Longest key rendered in a path, so an error message stays short.
const PATH_KEY_CHARS: usize = 64;

enum Level {
    Object { key: Option<(usize, usize)> },
    Array { index: usize },
}

/// One linear pass over valid JSON text (already checked by a parser that ignores values):
/// its depth and value count, or the first number that does not fit an f64 or `\u` escape
/// that is a lone UTF-16 surrogate. Such text would be stored but then fail every reader.
/// Never recurses; on invalid JSON the result is meaningless but the pass still ends.
pub fn check_storable(json: &[u8]) -> Result<Shape, Unreadable> {
    let mut stack: Vec<Level> = Vec::new();
    let (mut max, mut values, mut i) = (0usize, 0usize, 0usize);
    let fail = |stack: &[Level], what| {
        Err(Unreadable {
            path: render(json, stack),
            what,
        })
    };
    while i < json.len() {
        match json[i] {
            b'"' => {
                let Some(end) = string_end(json, i) else {
                    break;
                };
                if let Err(what) = check_escapes(&json[i + 1..end - 1]) {
                    // A key's own problem is reported at its object.
                    return fail(&stack, what);
                }
                match stack.last_mut() {
                    Some(Level::Object { key }) if key.is_none() => *key = Some((i + 1, end - 1)),
                    _ => values += 1,
                }
                i = end;
                continue;
            }
            b'{' | b'[' => {
                values += 1;
                stack.push(if json[i] == b'{' {
                    Level::Object { key: None }
                } else {
                    Level::Array { index: 0 }
                });
                max = max.max(stack.len());
            }
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Level::Object { key }) => *key = None,
                Some(Level::Array { index }) => *index += 1,
                None => {}
            },
            b'-' | b'0'..=b'9' => {
                let len = json[i..]
                    .iter()
                    .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .count();
                values += 1;
                let token = std::str::from_utf8(&json[i..i + len]).unwrap_or("x");
                if !token.parse::<f64>().is_ok_and(f64::is_finite) {
                    return fail(&stack, "a number that does not fit a 64-bit float");
                }
                i += len;
                continue;
            }
            b't' | b'f' | b'n' => {
                values += 1;
                i += json[i..]
                    .iter()
                    .take_while(|b| b.is_ascii_lowercase())
                    .count();
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Ok(Shape { depth: max, values })
}

/// Checks the `\u` escapes of a string's contents (between its quotes): every surrogate must
/// be a high one directly followed by a low one.
fn check_escapes(s: &[u8]) -> Result<(), &'static str> {
    let mut i = 0;
    while let Some(at) = memchr::memchr(b'\\', &s[i..]) {
        i += at;
        if s.get(i + 1) != Some(&b'u') {
            i += 2;
            continue;
        }
        let unit = hex4(s, i + 2);
        i += 6;
        match unit {
            Some(0xD800..=0xDBFF) => {
                let low = (s.get(i) == Some(&b'\\') && s.get(i + 1) == Some(&b'u'))
                    .then(|| hex4(s, i + 2))
                    .flatten();
                if !matches!(low, Some(0xDC00..=0xDFFF)) {
                    return Err(
                        "a lone UTF-16 surrogate escape (\\ud800-\\udbff without a low half)",
                    );
                }
                i += 6;
            }
            Some(0xDC00..=0xDFFF) => {
                return Err("a lone UTF-16 surrogate escape (\\udc00-\\udfff without a high half)");
            }
            _ => {}
        }
    }
    Ok(())
}

fn hex4(s: &[u8], at: usize) -> Option<u32> {
    let digits = std::str::from_utf8(s.get(at..at + 4)?).ok()?;
    u32::from_str_radix(digits, 16).ok()
}

fn render(json: &[u8], stack: &[Level]) -> String {
    let mut path = String::new();
    for level in stack {
        match level {
            Level::Object { key: Some((a, b)) } => {
                if !path.is_empty() {
                    path.push('.');
                }
                let key = String::from_utf8_lossy(&json[*a..*b]);
                path.extend(key.chars().take(PATH_KEY_CHARS));
            }
            Level::Object { key: None } => {}
            Level::Array { index } => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// A readable copy of valid JSON text that [`check_storable`] refuses (an event stored before
/// the daemon checked for this): each number that does not fit an f64 becomes a string of its
/// digits, each lone surrogate escape becomes `\ufffd` (what any UTF-16 decoder makes of it).
/// `None` when the text is readable as it is. Linear, no recursion.
pub fn make_readable(json: &[u8]) -> Option<Vec<u8>> {
    if !may_need_repair(json) {
        return None;
    }
    check_storable(json).err()?;
    let mut out = Vec::with_capacity(json.len() + 16);
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => {
                let end = string_end(json, i).unwrap_or(json.len());
                let s = &json[i..end];
                if check_escapes(s.get(1..s.len().saturating_sub(1)).unwrap_or_default()).is_ok() {
                    out.extend_from_slice(s);
                } else {
                    out.extend_from_slice(&replace_lone_surrogates(s));
                }
                i = end;
            }
            b'-' | b'0'..=b'9' => {
                let len = json[i..]
                    .iter()
                    .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .count();
                let token = &json[i..i + len];
                let fits = std::str::from_utf8(token)
                    .ok()
                    .and_then(|t| t.parse::<f64>().ok())
                    .is_some_and(f64::is_finite);
                if !fits {
                    out.push(b'"');
                }
                out.extend_from_slice(token);
                if !fits {
                    out.push(b'"');
                }
                i += len;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

/// Digits in a row past which a number may not fit an f64 whatever its exponent (two digits of
/// exponent reach 1e99; 1e308 is the largest finite power of ten), in two windows' worth.
const DIGIT_WINDOW: usize = 100;

/// Whether `json` may hold what [`make_readable`] repairs, in a few vectorised passes: a `\u`
/// escape of a surrogate (`\ud800` to `\udfff`), an exponent of three or more digits, or a
/// run of `2 * DIGIT_WINDOW` digits or more. It looks at bytes, not tokens, so text in strings
/// can say yes too; a yes only costs the full check. Readers run it on every event they send,
/// and almost every event says no.
fn may_need_repair(json: &[u8]) -> bool {
    let digits = |from: usize, n: usize| {
        json.get(from..from + n)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    // Every backslash, not `memmem` for `\u`: a `memmem` searcher is built per call, which
    // cost more than the search on a few hundred bytes (reads of the last 100 events spent
    // ~5% of the daemon's CPU there), and most events hold no backslash at all.
    let surrogate = memchr::memchr_iter(b'\\', json).any(|at| {
        json.get(at + 1) == Some(&b'u')
            && matches!(json.get(at + 2), Some(b'd' | b'D'))
            && matches!(
                json.get(at + 3),
                Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
            )
    });
    let exponent = || {
        memchr::memchr2_iter(b'e', b'E', json).any(|at| {
            let sign = matches!(json.get(at + 1), Some(b'+' | b'-'));
            digits(at + 1 + sign as usize, 3)
        })
    };
    // A run of 2 * DIGIT_WINDOW digits holds a whole window starting at a multiple of it.
    let long_run = || {
        (0..json.len())
            .step_by(DIGIT_WINDOW)
            .any(|at| digits(at, DIGIT_WINDOW))
    };
    surrogate || exponent() || long_run()
}

/// Makes `out[start..]` (one stored event just written there) readable in place: see
/// [`make_readable`]. Readers call it on every event they send.
pub fn readable_tail(out: &mut Vec<u8>, start: usize) {
    if let Some(fixed) = out.get(start..).and_then(make_readable) {
        out.truncate(start);
        out.extend_from_slice(&fixed);
    }
}

/// A quoted JSON string with its lone surrogate escapes replaced by `\ufffd`.
fn replace_lone_surrogates(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] != b'\\' {
            out.push(s[i]);
            i += 1;
            continue;
        }
        if s.get(i + 1) != Some(&b'u') {
            out.extend_from_slice(&s[i..(i + 2).min(s.len())]);
            i += 2;
            continue;
        }
        let unit = hex4(s, i + 2);
        let low = (s.get(i + 6) == Some(&b'\\') && s.get(i + 7) == Some(&b'u'))
            .then(|| hex4(s, i + 8))
            .flatten();
        match (unit, low) {
            (Some(0xD800..=0xDBFF), Some(0xDC00..=0xDFFF)) => {
                out.extend_from_slice(&s[i..i + 12]);
                i += 12;
            }
            (Some(0xD800..=0xDFFF), _) => {
                out.extend_from_slice(b"\\ufffd");
                i += 6;
            }
            _ => {
                out.extend_from_slice(&s[i..(i + 6).min(s.len())]);
                i += 6;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(json: &str) -> String {
        check_storable(json.as_bytes()).unwrap_err().path
    }

    #[test]
    fn storable_json_passes_with_its_shape() {
        let s = check_storable(br#"{"a":[1,-2.5e10,"x\ud83d\ude00\n",true,null],"b":{}}"#);
        assert_eq!(
            s,
            Ok(Shape {
                depth: 2,
                values: 8
            })
        );
        assert_eq!(
            check_storable(b"1e-999999").map(|s| s.values),
            Ok(1),
            "underflow is 0"
        );
        assert!(
            check_storable(br#""\\ud800""#).is_ok(),
            "an escaped backslash, not an escape"
        );
    }

    #[test]
    fn unreadable_tokens_are_found_with_their_path() {
        assert_eq!(path(r#"{"n":1e999999}"#), "n");
        assert_eq!(path(r#"{"a":{"b":[0,{"c":"ok"},"\ud800"]}}"#), "a.b[2]");
        assert_eq!(path(r#"["\udc00x"]"#), "[0]");
        assert_eq!(path(r#"{"k":"\ud800\u0041"}"#), "k");
        assert_eq!(path(r#"{"x":1,"\ud800":2}"#), "");
        assert_eq!(path(&format!("{{\"big\":1{}}}", "0".repeat(400))), "big");
        let e = check_storable(b"-1E400").unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.what),
            ("", "a number that does not fit a 64-bit float")
        );
    }

    #[test]
    fn the_cheap_pass_says_yes_to_everything_make_readable_repairs() {
        let needs = [
            r#"{"n":1e999}"#,
            r#"{"n":-2.5E+308}"#,
            r#"[1e-4000]"#,
            r#"{"s":"a\ud800"}"#,
            r#"{"s":"\uDC00"}"#,
        ];
        for json in needs {
            assert!(may_need_repair(json.as_bytes()), "{json}");
        }
        let huge = format!("[{}]", "9".repeat(400));
        assert!(may_need_repair(huge.as_bytes()));
        assert!(make_readable(huge.as_bytes()).is_some());
        // What a stored event usually is: no full check.
        let plain = br#"{"lsn":12,"id":"01M8","type":"x","timestamp":1795728806743,"payload":{"n":1.5e10,"s":"caf\u00e9"}}"#;
        assert!(!may_need_repair(plain));
        // A surrogate pair is a yes of the cheap pass, and the full check leaves it alone.
        let pair = br#"{"s":"\ud83d\ude00"}"#;
        assert!(may_need_repair(pair) && make_readable(pair).is_none());
        assert!(!may_need_repair(br#"{"n":1e99,"m":12345678901234567890}"#));
    }

    #[test]
    fn unreadable_text_is_made_readable_and_readable_text_is_left_alone() {
        assert_eq!(make_readable(br#"{"a":[1e5,"\ud83d\ude00"]}"#), None);
        let fixed = make_readable(br#"{"n":1e999999,"s":"a\ud800b\udc00","ok":"\ud83d\ude00"}"#);
        assert_eq!(
            String::from_utf8(fixed.unwrap()).unwrap(),
            r#"{"n":"1e999999","s":"a\ufffdb\ufffd","ok":"\ud83d\ude00"}"#
        );
        let v: serde_json::Value =
            serde_json::from_slice(&make_readable(br#"["\ud800\ud800\udc00"]"#).unwrap()).unwrap();
        assert_eq!(v[0], "\u{fffd}\u{10000}");
    }
}
