//! The session as the replay holds it: per event its line in `dstream tail`'s words (cut to a
//! bound, no payload) and its step of the state fold; filled by paging through the log, and
//! by the live subscription under `--follow`.

use dstream_sdk::{Client, Event};

use crate::cli::replay::state::History;
use crate::cli::tail_view::{Line, TailView, Tone};

/// Events read per request: a page's payloads are dropped before the next is read, so this
/// bounds what loading holds at once (the daemon's `read` limits by count, not bytes).
const PAGE: usize = 500;

/// Characters kept of a line: what a wide terminal shows, and what `/` searches.
const MAX_LINE: usize = 300;

/// One event's line: `label text`, with where its last, coloured part starts.
pub struct Row {
    pub text: Box<str>,
    /// Byte length of the label at the start of `text`.
    pub label_len: u16,
    /// Byte offset in `text` of the outcome part (`→ ok 19 ms`), coloured on its own.
    pub tail_at: u32,
    pub label_tone: Tone,
    pub body_tone: Tone,
    pub tail_tone: Tone,
}

impl Row {
    fn of(line: &Line) -> Row {
        let mut text = line.label.clone();
        text.push(' ');
        let label_len = line.label.len().min(u16::MAX as usize) as u16;
        let mut tail_at = usize::MAX;
        let mut body_tone = Tone::Plain;
        let mut tail_tone = Tone::Plain;
        for (i, (part, tone)) in line.parts.iter().enumerate() {
            if i == 0 {
                body_tone = *tone;
            }
            if i > 0 && i + 1 == line.parts.len() && *tone != body_tone {
                tail_at = text.len();
                tail_tone = *tone;
            }
            text.push_str(part);
        }
        // Cut at a character boundary; the outcome keeps its colour only if it survives.
        if let Some((cut, _)) = text.char_indices().nth(MAX_LINE) {
            text.truncate(cut);
            text.push('…');
        }
        let text = text.replace(['\n', '\r', '\t'], " ");
        Row {
            tail_at: tail_at.min(text.len()) as u32,
            text: text.into(),
            label_len,
            label_tone: line.tone,
            body_tone,
            tail_tone,
        }
    }

    pub fn label(&self) -> &str {
        &self.text[..self.label_len as usize]
    }

    /// The words after the label, split where the outcome starts.
    pub fn body(&self) -> (&str, &str) {
        let start = (self.label_len as usize + 1).min(self.text.len());
        let at = (self.tail_at as usize).max(start);
        (&self.text[start..at], &self.text[at..])
    }
}

/// The session's events, folded and worded.
pub struct Timeline {
    pub session: String,
    pub history: History,
    pub rows: Vec<Row>,
    words: TailView,
}

impl Timeline {
    pub fn new(session: &str) -> Timeline {
        Timeline {
            session: session.to_string(),
            history: History::default(),
            rows: Vec::new(),
            words: TailView::plain(),
        }
    }

    /// Takes the next event (ignoring one already held, as a subscription may repeat).
    pub fn push(&mut self, e: &Event) {
        if self.last_lsn().is_some_and(|l| e.lsn <= l) {
            return;
        }
        self.history.push(e);
        self.rows.push(Row::of(&self.words.words(e)));
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn last_lsn(&self) -> Option<u64> {
        self.history.step(self.len().checked_sub(1)?).map(|s| s.lsn)
    }

    /// `HH:MM:SS` of step `i`, as `dstream tail` shows it.
    pub fn clock(&self, i: usize) -> String {
        self.words
            .clock(self.history.step(i).map_or(0, |s| s.timestamp))
    }

    /// The next row after `from` (backwards: before it) whose line contains `needle`,
    /// ignoring case; wraps around once.
    pub fn find(&self, from: usize, needle: &str, forward: bool) -> Option<usize> {
        let needle = needle.to_lowercase();
        let n = self.rows.len();
        if n == 0 || needle.is_empty() {
            return None;
        }
        (1..=n)
            .map(|k| {
                if forward {
                    (from + k) % n
                } else {
                    (from + n - k % n) % n
                }
            })
            .find(|i| self.rows[*i].text.to_lowercase().contains(&needle))
    }

    /// Reads the whole log from the daemon, a page at a time, telling `progress` how many
    /// events it holds after each.
    pub async fn load(
        &mut self,
        client: &Client,
        progress: &mut dyn FnMut(usize),
    ) -> Result<(), dstream_sdk::Error> {
        let mut from = 1;
        loop {
            let page = client.read(&self.session, from, Some(PAGE)).await?;
            for e in &page.events {
                self.push(e);
            }
            progress(self.len());
            from = page.next_lsn;
            if page.up_to_date || page.events.is_empty() {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_keeps_its_label_body_and_outcome_apart() {
        let line = Line::new("Bash", Tone::Tool)
            .then("echo hi", Tone::Plain)
            .then("  → ok 19 ms", Tone::Good);
        let row = Row::of(&line);
        assert_eq!(row.label(), "Bash");
        assert_eq!(row.body(), ("echo hi", "  → ok 19 ms"));
        assert_eq!(row.tail_tone, Tone::Good);
        let long = Line::new("you", Tone::You).then("é".repeat(1000), Tone::Plain);
        let row = Row::of(&long);
        assert_eq!(row.text.chars().count(), MAX_LINE + 1);
        assert_eq!(row.body().1, "");
    }
}
