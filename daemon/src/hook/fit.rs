//! Fitting an event into one frame: its longest strings are cut, and an event that still does
//! not fit is replaced by a summary that keeps its identity.

use serde_json::{Value, json};

/// Bytes of `s` once written as a JSON string, quotes included (serde_json's escaping).
fn escaped_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// Cuts the longest strings of `event` until it serializes to at most `budget` bytes; each cut
/// string ends with a note of how much was cut. An event that still does not fit (say, a
/// million small strings) is replaced by a summary that keeps its identifying fields. Returns
/// whether anything changed.
pub(crate) fn fit(event: &mut Value, budget: usize) -> bool {
    let Ok(mut size) = serde_json::to_vec(event).map(|v| v.len()) else {
        return false;
    };
    if size <= budget {
        return false;
    }
    let original = size;
    {
        let mut strings = Vec::new();
        let mut stack = vec![&mut *event];
        while let Some(v) = stack.pop() {
            match v {
                Value::String(s) if s.len() >= 1024 => strings.push(s),
                Value::Array(a) => stack.extend(a.iter_mut()),
                Value::Object(m) => stack.extend(m.values_mut()),
                _ => {}
            }
        }
        strings.sort_by_key(|s| std::cmp::Reverse(s.len()));
        for s in strings {
            if size <= budget {
                break;
            }
            let before = escaped_len(s);
            let excess = size - budget;
            // The note added below takes under 64 bytes.
            let mut keep = s.len().saturating_sub(excess + 64);
            while !s.is_char_boundary(keep) {
                keep -= 1;
            }
            let cut = s.len() - keep;
            s.truncate(keep);
            s.push_str(&format!("…[dstream: {cut} bytes cut]"));
            size = size + escaped_len(s) - before;
        }
    }
    if size > budget {
        let mut summary = serde_json::Map::new();
        if let Value::Object(m) = &*event {
            for key in [
                "hook_event_name",
                "session_id",
                "transcript_path",
                "cwd",
                "tool_name",
                "tool_use_id",
            ] {
                if let Some(v @ Value::String(s)) = m.get(key)
                    && s.len() <= 4096
                {
                    summary.insert(key.to_string(), v.clone());
                }
            }
        }
        summary.insert(
            "dstream_truncated".into(),
            json!({"reason": "the event did not fit in one frame", "bytes": original}),
        );
        *event = Value::Object(summary);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_events_are_cut_to_fit_and_keep_their_identity() {
        let mut event = json!({
            "hook_event_name": "PostToolUse",
            "session_id": "s1",
            "tool_response": {"stdout": "é".repeat(300_000), "stderr": "x\n".repeat(50_000)},
            "small": "keep me",
        });
        assert!(fit(&mut event, 100_000));
        let size = serde_json::to_vec(&event).unwrap().len();
        assert!(size <= 100_000, "{size}");
        assert_eq!(event["small"], "keep me");
        assert_eq!(event["session_id"], "s1");
        assert!(
            event["tool_response"]["stdout"]
                .as_str()
                .unwrap()
                .ends_with("bytes cut]")
        );
        // Already small enough: untouched.
        let before = event.clone();
        assert!(!fit(&mut event, 100_000));
        assert_eq!(event, before);
        // Many small strings cannot be cut: a summary replaces the event.
        let mut many = json!({"hook_event_name": "Stop", "session_id": "s2",
            "list": vec!["0123456789"; 20_000]});
        assert!(fit(&mut many, 10_000));
        assert_eq!(many["session_id"], "s2");
        assert!(many.get("list").is_none());
        assert!(many["dstream_truncated"]["bytes"].as_u64().unwrap() > 10_000);
    }

    #[test]
    fn escaped_len_matches_serde_json() {
        for s in [
            "",
            "plain",
            "quote\" and \\ back",
            "tab\t nl\n \u{1} \u{1f} é ✓ \u{7f}",
        ] {
            assert_eq!(
                escaped_len(s),
                serde_json::to_string(s).unwrap().len(),
                "{s:?}"
            );
        }
    }
}
