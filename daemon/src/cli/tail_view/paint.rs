//! Putting a worded event on one line: the LSN, the time, the label column, the text, cut to
//! the width (never inside a character) and coloured when colours are on.

use std::fmt::Write;

/// The label column's width; a longer label pushes the text right rather than being cut.
const LABEL: usize = 8;

/// What a part of a line means, which picks its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    You,
    Agent,
    Tool,
    Good,
    Bad,
    Ask,
    Money,
    Quiet,
}

impl Tone {
    fn ansi(self) -> &'static str {
        match self {
            Tone::Plain => "",
            Tone::You => "\x1b[1;36m",
            Tone::Agent => "\x1b[35m",
            Tone::Tool => "\x1b[1;34m",
            Tone::Good => "\x1b[32m",
            Tone::Bad => "\x1b[31m",
            Tone::Ask => "\x1b[1;33m",
            Tone::Money => "\x1b[33m",
            Tone::Quiet => "\x1b[2m",
        }
    }
}

/// An event in words: a label and the text after it, in parts of their own tone.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub label: String,
    pub tone: Tone,
    pub parts: Vec<(String, Tone)>,
}

impl Line {
    pub fn new(label: impl Into<String>, tone: Tone) -> Self {
        Line {
            label: label.into(),
            tone,
            parts: Vec::new(),
        }
    }

    /// Adds `text` in `tone`; nothing when empty. The first part starts right after the
    /// label column, whatever spaces it came with.
    pub fn then(mut self, text: impl Into<String>, tone: Tone) -> Self {
        let mut text = text.into();
        if self.parts.is_empty() {
            text = text.trim_start().to_string();
        }
        if !text.is_empty() {
            self.parts.push((text, tone));
        }
        self
    }
}

/// How lines are put out.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
    /// Characters per line at most; 0 for no limit.
    pub width: usize,
    /// Local time (else UTC, for tests that must not depend on the machine's zone).
    pub local_time: bool,
}

/// `lsn  HH:MM:SS  label    text`, cut to `style.width`.
pub fn paint(line: &Line, lsn: u64, timestamp_ms: u64, style: &Style) -> String {
    let lsn = format!("{lsn:>5}");
    let time = clock(timestamp_ms, style.local_time);
    let label = format!("{:<LABEL$}", line.label);
    // What is left for the text after `lsn time  label `.
    let used = lsn.chars().count() + 1 + time.len() + 2 + label.chars().count() + 1;
    let room = if style.width == 0 {
        usize::MAX
    } else {
        style.width.saturating_sub(used).max(1)
    };
    let mut out = String::new();
    let put = |out: &mut String, text: &str, tone: Tone| {
        if style.color && tone != Tone::Plain {
            let _ = write!(out, "{}{text}\x1b[0m", tone.ansi());
        } else {
            out.push_str(text);
        }
    };
    put(&mut out, &lsn, Tone::Quiet);
    out.push(' ');
    put(&mut out, &time, Tone::Plain);
    out.push_str("  ");
    put(&mut out, &label, line.tone);
    out.push(' ');
    for (text, tone) in fit(&line.parts, room) {
        put(&mut out, &text, tone);
    }
    out.truncate(out.trim_end().len());
    out
}

/// `parts` in at most `room` characters all told. The first part (a call's command) gives way
/// first, so what follows it (`→ ok 19 ms`) stays whole; when that leaves it too little, the
/// line is cut at its end. A cut shows `…`.
fn fit(parts: &[(String, Tone)], room: usize) -> Vec<(String, Tone)> {
    const KEEP_FIRST: usize = 10;
    let len = |t: &str| t.chars().count();
    let total: usize = parts.iter().map(|(t, _)| len(t)).sum();
    if total <= room {
        return parts.to_vec();
    }
    let rest: usize = parts.iter().skip(1).map(|(t, _)| len(t)).sum();
    if parts.len() > 1 && room >= rest + KEEP_FIRST {
        let (first, tone) = &parts[0];
        let keep: String = first.chars().take(room - rest - 1).collect();
        let mut out = vec![(format!("{keep}…"), *tone)];
        out.extend_from_slice(&parts[1..]);
        return out;
    }
    let mut left = room.saturating_sub(1);
    let mut out = Vec::new();
    for (text, tone) in parts {
        let keep: String = text.chars().take(left).collect();
        left -= len(&keep);
        if left == 0 {
            out.push((format!("{keep}…"), *tone));
            break;
        }
        out.push((keep, *tone));
    }
    out
}

/// `HH:MM:SS` of `ms` since the epoch.
pub fn clock(ms: u64, local: bool) -> String {
    let secs = (ms / 1000) as i64;
    let (h, m, s) = if local {
        local_hms(secs).unwrap_or_else(|| utc_hms(secs))
    } else {
        utc_hms(secs)
    };
    format!("{h:02}:{m:02}:{s:02}")
}

fn utc_hms(secs: i64) -> (i64, i64, i64) {
    let day = secs.rem_euclid(86_400);
    (day / 3600, day % 3600 / 60, day % 60)
}

#[cfg(unix)]
fn local_hms(secs: i64) -> Option<(i64, i64, i64)> {
    // time_t is 32 bits on some targets.
    #[allow(clippy::useless_conversion)]
    let t: libc::time_t = secs.try_into().ok()?;
    // SAFETY: `tm` is plain data that localtime_r fills; both pointers are valid for the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    ok.then_some((tm.tm_hour as i64, tm.tm_min as i64, tm.tm_sec as i64))
}

#[cfg(not(unix))]
fn local_hms(_secs: i64) -> Option<(i64, i64, i64)> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Style = Style {
        color: false,
        width: 0,
        local_time: false,
    };

    fn bash() -> Line {
        Line::new("Bash", Tone::Tool)
            .then("echo hi > x.txt", Tone::Plain)
            .then("  → ok 19 ms", Tone::Good)
    }

    #[test]
    fn a_line_has_the_lsn_the_time_the_label_and_the_words() {
        let ms = (12 * 3600 + 60 + 30) * 1000 + 999;
        assert_eq!(
            paint(&bash(), 7, ms, &PLAIN),
            "    7 12:01:30  Bash     echo hi > x.txt  → ok 19 ms"
        );
    }

    #[test]
    fn a_long_line_is_cut_at_the_width_between_characters() {
        let line = Line::new("you", Tone::You).then("héllo wörld ✓✓✓✓✓✓✓✓✓✓", Tone::Plain);
        let style = Style { width: 34, ..PLAIN };
        let out = paint(&line, 1, 0, &style);
        assert_eq!(out, "    1 00:00:00  you      héllo wö…");
        assert_eq!(out.chars().count(), 34);
        // The command gives way to the outcome, which stays whole.
        let out = paint(&bash(), 1, 0, &Style { width: 50, ..PLAIN });
        assert_eq!(out, "    1 00:00:00  Bash     echo hi > x.…  → ok 19 ms");
        assert_eq!(out.chars().count(), 50);
        // Too narrow for that: cut at the end.
        let out = paint(&bash(), 1, 0, &Style { width: 40, ..PLAIN });
        assert_eq!(out, "    1 00:00:00  Bash     echo hi > x.tx…");
    }

    #[test]
    fn colours_only_when_asked() {
        let out = paint(
            &bash(),
            1,
            0,
            &Style {
                color: true,
                ..PLAIN
            },
        );
        assert!(out.contains("\x1b[1;34mBash"), "{out:?}");
        assert!(out.contains("\x1b[32m  → ok 19 ms\x1b[0m"), "{out:?}");
        assert!(!paint(&bash(), 1, 0, &PLAIN).contains('\x1b'));
    }
}
