//! What a plugin may write to the daemon's log: one line, not forged ones, not a flood.
//!
//! `host.log` text goes to the daemon's log as it is written, so a newline in it could fake a
//! whole log line of the daemon's own, and a plugin logging in a loop could fill the disk.
//! Control characters are escaped, a message is cut at [`MAX_BYTES`], and each plugin may
//! log [`PER_SECOND`] lines a second; the rest are counted and said once the second is over.

use std::borrow::Cow;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest message kept, in bytes (cut at a character boundary).
pub const MAX_BYTES: usize = 4096;
/// Lines a plugin may log per second.
pub const PER_SECOND: u32 = 20;

/// `msg` as one log line: control characters escaped, at most [`MAX_BYTES`].
pub fn clean(msg: &str) -> Cow<'_, str> {
    if msg.len() <= MAX_BYTES && !msg.chars().any(char::is_control) {
        return Cow::Borrowed(msg);
    }
    let mut out = String::with_capacity(msg.len().min(MAX_BYTES) + 16);
    for c in msg.chars() {
        if out.len() >= MAX_BYTES {
            out.push_str("…(cut)");
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Counts one plugin's lines per second.
#[derive(Default)]
pub struct Throttle(Mutex<Window>);

#[derive(Default)]
struct Window {
    started: Option<Instant>,
    lines: u32,
    dropped: u64,
}

/// What to do with a line.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Log it; first say how many were dropped in the last window, if any.
    Log {
        dropped_before: u64,
    },
    Drop,
}

impl Throttle {
    pub fn check(&self) -> Verdict {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Verdict {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut dropped_before = 0;
        if w.started
            .is_none_or(|s| now.duration_since(s) >= Duration::from_secs(1))
        {
            dropped_before = std::mem::take(&mut w.dropped);
            w.started = Some(now);
            w.lines = 0;
        }
        if w.lines >= PER_SECOND {
            w.dropped += 1;
            return Verdict::Drop;
        }
        w.lines += 1;
        Verdict::Log { dropped_before }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_stays_one_line_and_short() {
        assert_eq!(clean("plain"), "plain");
        assert_eq!(
            clean("ok\n2026-11-25T00:00:00Z ERROR dstream: forged\u{1b}[0m"),
            "ok\\n2026-11-25T00:00:00Z ERROR dstream: forged\\u{1b}[0m"
        );
        let long = "é".repeat(10_000);
        let cut = clean(&long);
        assert!(cut.len() <= MAX_BYTES + 16 && cut.ends_with("…(cut)"));
    }

    #[test]
    fn a_flood_is_cut_and_counted() {
        let t = Throttle::default();
        let start = Instant::now();
        for _ in 0..PER_SECOND {
            assert!(matches!(t.check_at(start), Verdict::Log { .. }));
        }
        for _ in 0..5 {
            assert_eq!(t.check_at(start), Verdict::Drop);
        }
        assert_eq!(
            t.check_at(start + Duration::from_secs(1)),
            Verdict::Log { dropped_before: 5 }
        );
    }
}
