//! Where the person is in the replay and what a move does: the cursor, the search, the
//! detail pane's scroll, the help screen. No I/O: the loop in `mod.rs` feeds it keys and new
//! events, `view` draws it.

use crossterm::event::{KeyCode, KeyEvent};

use crate::cli::replay::keys::{Action, action_of};
use crate::cli::replay::state::Mark;
use crate::cli::replay::timeline::Timeline;

#[derive(Default)]
pub struct App {
    /// The step under the cursor.
    pub cursor: usize,
    /// The highest LSN the cursor reached: what was seen, for next time.
    pub reached_lsn: u64,
    /// The last LSN seen before this replay started: later events are new.
    pub seen_before: Option<u64>,
    /// The last search, for `n`/`N`; the one being typed after `/`.
    pub search: Option<String>,
    pub typing: Option<String>,
    pub help: bool,
    pub detail_scroll: u16,
    /// Rows the timeline shows at once, for PgUp/PgDn (set by the view).
    pub page: usize,
    pub status: String,
    pub quit: bool,
}

impl App {
    /// Where a replay starts: at `at` when given, else the first event not seen before,
    /// else where the person left off.
    pub fn start(t: &Timeline, at: Option<u64>, seen_before: Option<u64>) -> App {
        let last = t.last_lsn().unwrap_or(0);
        let lsn = match (at, seen_before) {
            (Some(at), _) => at,
            (None, Some(seen)) if seen < last => seen + 1,
            (None, Some(seen)) => seen,
            (None, None) => 1,
        };
        let mut app = App {
            seen_before,
            page: 10,
            ..App::default()
        };
        app.go(t, t.history.index_of_lsn(lsn));
        app.status = match seen_before.map(|s| t.history.count_after(s)) {
            Some(0) => "nothing new since you last looked".into(),
            Some(new) => format!("{new} new since you last looked"),
            None => String::new(),
        };
        app
    }

    /// Whether step `i` came after what was seen before.
    pub fn is_new(&self, t: &Timeline, i: usize) -> bool {
        match (self.seen_before, t.history.step(i)) {
            (Some(seen), Some(s)) => s.lsn > seen,
            _ => false,
        }
    }

    fn go(&mut self, t: &Timeline, i: usize) {
        self.cursor = i.min(t.len().saturating_sub(1));
        self.detail_scroll = 0;
        if let Some(s) = t.history.step(self.cursor) {
            self.reached_lsn = self.reached_lsn.max(s.lsn);
        }
    }

    /// A new event arrived (`--follow`): a cursor on the last event follows it.
    pub fn arrived(&mut self, t: &Timeline, was_last: usize) {
        if self.cursor + 1 == was_last {
            self.go(t, t.len() - 1);
        }
    }

    pub fn key(&mut self, t: &Timeline, key: KeyEvent) {
        if let Some(typed) = &mut self.typing {
            match key.code {
                KeyCode::Enter => {
                    let needle = std::mem::take(typed);
                    self.typing = None;
                    if !needle.is_empty() {
                        self.search = Some(needle);
                    }
                    self.find(t, true);
                }
                KeyCode::Esc => self.typing = None,
                KeyCode::Backspace => {
                    typed.pop();
                }
                KeyCode::Char(ch) => typed.push(ch),
                _ => {}
            }
            return;
        }
        if self.help {
            self.help = false;
            return;
        }
        self.status.clear();
        self.act(t, action_of(key));
    }

    pub fn act(&mut self, t: &Timeline, action: Action) {
        let c = self.cursor;
        let mark = |mark, forward, what: &str, app: &mut App| match t
            .history
            .next_mark(c, mark, forward)
        {
            Some(i) => app.go(t, i),
            None => {
                app.status = format!(
                    "no {what} {}",
                    if forward { "after this" } else { "before this" }
                )
            }
        };
        match action {
            Action::Quit => self.quit = true,
            Action::Prev => self.go(t, c.saturating_sub(1)),
            Action::Next => self.go(t, c + 1),
            Action::PrevCall => mark(Mark::Call, false, "tool call", self),
            Action::NextCall => mark(Mark::Call, true, "tool call", self),
            Action::PrevCheckpoint => mark(Mark::Checkpoint, false, "checkpoint", self),
            Action::NextCheckpoint => mark(Mark::Checkpoint, true, "checkpoint", self),
            Action::PageUp => self.go(t, c.saturating_sub(self.page.max(1))),
            Action::PageDown => self.go(t, c + self.page.max(1)),
            Action::First => self.go(t, 0),
            Action::Last => self.go(t, usize::MAX),
            Action::Search => self.typing = Some(String::new()),
            Action::SearchNext => self.find(t, true),
            Action::SearchPrev => self.find(t, false),
            Action::DetailUp => self.detail_scroll = self.detail_scroll.saturating_sub(1),
            Action::DetailDown => self.detail_scroll = self.detail_scroll.saturating_add(1),
            Action::Help => self.help = true,
            Action::Nothing => {}
        }
    }

    fn find(&mut self, t: &Timeline, forward: bool) {
        let Some(needle) = self.search.clone() else {
            self.status = "no search yet: / to type one".into();
            return;
        };
        match t.find(self.cursor, &needle, forward) {
            Some(i) => {
                if (i <= self.cursor) == forward {
                    self.status = format!("{needle:?}: wrapped around");
                }
                self.go(t, i);
            }
            None => self.status = format!("{needle:?} is not in any line"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyModifiers;
    use dstream_sdk::Event;
    use serde_json::{Value as Json, json};

    fn timeline() -> Timeline {
        let mut t = Timeline::new("s");
        let ev = |lsn: u64, ty: &str, payload: Json| Event {
            lsn,
            id: format!("e{lsn}"),
            event_type: ty.into(),
            session_id: "s".into(),
            stream_id: "s".into(),
            causation_id: None,
            correlation_id: None,
            actor: None,
            timestamp: lsn * 1000,
            payload,
            metadata: None,
            raw: None,
        };
        t.push(&ev(1, "user.input", json!({"text": "hello"})));
        t.push(&ev(
            2,
            "execution.tool_use",
            json!({"tool": "Bash", "tool_use_id": "a", "input": {"command": "ls"}}),
        ));
        t.push(&ev(3, "user.input", json!({"text": "needle here"})));
        t.push(&ev(
            4,
            "execution.tool_use",
            json!({"tool": "Read", "tool_use_id": "b", "input": {"file_path": "/x"}}),
        ));
        t.push(&ev(5, "user.input", json!({"text": "bye"})));
        t
    }

    fn press(app: &mut App, t: &Timeline, code: KeyCode) {
        app.key(t, KeyEvent::new(code, KeyModifiers::NONE));
    }

    #[test]
    fn the_start_is_the_first_new_event_or_the_lsn_asked_for() {
        let t = timeline();
        assert_eq!(App::start(&t, None, None).cursor, 0);
        let app = App::start(&t, None, Some(3));
        assert_eq!(app.cursor, 3, "lsn 4 is the first new one");
        assert!(!app.is_new(&t, 2) && app.is_new(&t, 3));
        assert_eq!(app.status, "2 new since you last looked");
        assert_eq!(App::start(&t, None, Some(5)).cursor, 4);
        assert_eq!(App::start(&t, Some(2), Some(3)).cursor, 1);
    }

    #[test]
    fn keys_move_by_event_by_call_and_by_search() {
        let t = timeline();
        let mut app = App::start(&t, None, None);
        press(&mut app, &t, KeyCode::Char(']'));
        assert_eq!(app.cursor, 1);
        press(&mut app, &t, KeyCode::Char(']'));
        assert_eq!(app.cursor, 3);
        press(&mut app, &t, KeyCode::Char(']'));
        assert_eq!(app.cursor, 3);
        assert!(app.status.contains("no tool call after"), "{}", app.status);
        press(&mut app, &t, KeyCode::Left);
        assert_eq!(app.cursor, 2);
        press(&mut app, &t, KeyCode::End);
        assert_eq!(app.cursor, 4);
        assert_eq!(app.reached_lsn, 5);
        press(&mut app, &t, KeyCode::Home);
        press(&mut app, &t, KeyCode::Char('/'));
        for ch in "NEEDLE".chars() {
            press(&mut app, &t, KeyCode::Char(ch));
        }
        press(&mut app, &t, KeyCode::Enter);
        assert_eq!(app.cursor, 2, "found, ignoring case");
        press(&mut app, &t, KeyCode::Char('n'));
        assert_eq!(app.cursor, 2);
        assert!(app.status.contains("wrapped"), "{}", app.status);
        press(&mut app, &t, KeyCode::Char('q'));
        assert!(app.quit);
    }
}
