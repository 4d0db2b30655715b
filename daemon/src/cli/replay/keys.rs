//! The replay's key bindings: which key asks for which move. Kept apart from what a move
//! does (`app`) so the bindings and the help screen are read in one place.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// What a key asks for, outside of typing a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    /// One event back or on.
    Prev,
    Next,
    PrevCall,
    NextCall,
    PrevCheckpoint,
    NextCheckpoint,
    PageUp,
    PageDown,
    First,
    Last,
    /// Start typing a search (`/`).
    Search,
    SearchNext,
    SearchPrev,
    /// Scroll the detail pane.
    DetailUp,
    DetailDown,
    Help,
    Nothing,
}

/// The help screen: a key and what it does, a line each.
pub const HELP: &[(&str, &str)] = &[
    ("← → h l  ↑ ↓ k j", "one event back / on"),
    ("[ ]  Shift+← →", "previous / next tool call"),
    ("c C", "next / previous checkpoint"),
    ("PgUp PgDn", "a page of events"),
    ("Home End  g G", "first / last event"),
    ("/ text Enter", "search the lines forward"),
    ("n N", "next / previous match"),
    ("Shift+↑ ↓  K J", "scroll the event's data"),
    ("?", "this help (any key closes it)"),
    ("q Esc", "quit"),
];

pub fn action_of(key: KeyEvent) -> Action {
    let shift = key.modifiers.contains(KeyModifiers::SHIFT);
    match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Left if shift => Action::PrevCall,
        KeyCode::Right if shift => Action::NextCall,
        KeyCode::Up if shift => Action::DetailUp,
        KeyCode::Down if shift => Action::DetailDown,
        KeyCode::Left | KeyCode::Up | KeyCode::Char('h' | 'k') => Action::Prev,
        KeyCode::Right | KeyCode::Down | KeyCode::Char('l' | 'j') => Action::Next,
        KeyCode::Char('[') => Action::PrevCall,
        KeyCode::Char(']') => Action::NextCall,
        KeyCode::Char('c') => Action::NextCheckpoint,
        KeyCode::Char('C') => Action::PrevCheckpoint,
        KeyCode::PageUp => Action::PageUp,
        KeyCode::PageDown | KeyCode::Char(' ') => Action::PageDown,
        KeyCode::Home | KeyCode::Char('g') => Action::First,
        KeyCode::End | KeyCode::Char('G') => Action::Last,
        KeyCode::Char('/') => Action::Search,
        KeyCode::Char('n') => Action::SearchNext,
        KeyCode::Char('N') => Action::SearchPrev,
        KeyCode::Char('K') => Action::DetailUp,
        KeyCode::Char('J') => Action::DetailDown,
        KeyCode::Char('?') => Action::Help,
        _ => Action::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode, modifiers: KeyModifiers) -> Action {
        action_of(KeyEvent::new(code, modifiers))
    }

    #[test]
    fn arrows_letters_and_brackets_move_as_the_help_says() {
        let none = KeyModifiers::NONE;
        assert_eq!(key(KeyCode::Right, none), Action::Next);
        assert_eq!(key(KeyCode::Char('j'), none), Action::Next);
        assert_eq!(key(KeyCode::Char('h'), none), Action::Prev);
        assert_eq!(key(KeyCode::Right, KeyModifiers::SHIFT), Action::NextCall);
        assert_eq!(key(KeyCode::Char(']'), none), Action::NextCall);
        assert_eq!(key(KeyCode::Char('['), none), Action::PrevCall);
        assert_eq!(key(KeyCode::Char('G'), KeyModifiers::SHIFT), Action::Last);
        assert_eq!(key(KeyCode::Char('c'), KeyModifiers::CONTROL), Action::Quit);
        assert_eq!(key(KeyCode::Char('c'), none), Action::NextCheckpoint);
        assert_eq!(key(KeyCode::Esc, none), Action::Quit);
        assert_eq!(key(KeyCode::Char('x'), none), Action::Nothing);
    }
}
