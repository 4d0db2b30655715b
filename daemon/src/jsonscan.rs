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
