//! `dstream inbox`: decide pending checkpoints from a terminal, as they arrive.
//!
//! A full-screen list (ratatui on crossterm) of the pending checkpoints, refreshed twice a
//! second, with single keys to approve, reject, edit the input in `$EDITOR`, or pick one of
//! the checkpoint's options. A new arrival rings the terminal bell and, where `notify-send`
//! exists, raises a desktop notification. Decisions go through `checkpoint.resolve`, so the
//! daemon records who decided from the connection's OS credentials.

use std::collections::HashSet;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use dstream_sdk::Client;
use dstream_sdk::protocol::{
    CheckpointInfo, CheckpointListParams, CheckpointResolveParams, CheckpointState,
};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table, TableState, Wrap};

use super::checkpoint_cmds::resolve_retrying;
use super::client::{ClientOpts, connect, runtime};
use super::output;
use dstream_daemon::util::time::now_ms;

/// How often the list is read again.
const REFRESH: Duration = Duration::from_millis(500);

#[derive(Args)]
pub struct InboxArgs {
    #[command(flatten)]
    opts: ClientOpts,
}

/// The list as the person sees it: what is pending, which one is selected, what was said.
#[derive(Default)]
pub struct Inbox {
    pub items: Vec<CheckpointInfo>,
    pub selected: usize,
    /// Every id ever shown, so an arrival is noticed once.
    seen: HashSet<String>,
    pub status: String,
    /// A note being typed (after `n`), attached to the next decision.
    pub note: Option<String>,
    pub typing_note: bool,
    /// The crossed budgets, in words (`dstream usage` shows the same lines).
    pub budgets: Vec<String>,
}

impl Inbox {
    /// Takes a fresh list, keeping the selection on the same checkpoint where it still
    /// waits; returns how many are new.
    pub fn merge(&mut self, fresh: Vec<CheckpointInfo>) -> usize {
        let current = self.items.get(self.selected).map(|c| c.id.clone());
        let new = fresh.iter().filter(|c| !self.seen.contains(&c.id)).count();
        self.seen.extend(fresh.iter().map(|c| c.id.clone()));
        self.items = fresh;
        self.selected = current
            .and_then(|id| self.items.iter().position(|c| c.id == id))
            .unwrap_or(self.selected)
            .min(self.items.len().saturating_sub(1));
        new
    }

    pub fn selected(&self) -> Option<&CheckpointInfo> {
        self.items.get(self.selected)
    }

    pub fn down(&mut self) {
        if self.selected + 1 < self.items.len() {
            self.selected += 1;
        }
    }

    pub fn up(&mut self) {
        self.selected = self.selected.saturating_sub(1);
    }
}

/// What a key asks for.
#[derive(Debug, PartialEq)]
pub enum Action {
    Quit,
    Decide(String),
    Edit,
    StartNote,
    Up,
    Down,
    Nothing,
}

/// The key bindings, outside of note typing.
pub fn action_of(
    code: KeyCode,
    modifiers: KeyModifiers,
    selected: Option<&CheckpointInfo>,
) -> Action {
    match code {
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Char('a') => Action::Decide("approve".into()),
        KeyCode::Char('r') => Action::Decide("reject".into()),
        KeyCode::Char('e') => Action::Edit,
        KeyCode::Char('n') => Action::StartNote,
        KeyCode::Up | KeyCode::Char('k') => Action::Up,
        KeyCode::Down | KeyCode::Char('j') => Action::Down,
        KeyCode::Char(d @ '1'..='9') => {
            let i = d as usize - '1' as usize;
            match selected.and_then(|c| c.options.get(i)) {
                Some(o) => Action::Decide(o.id.clone()),
                None => Action::Nothing,
            }
        }
        _ => Action::Nothing,
    }
}

/// Puts the terminal back however a full-screen command ends (the inbox, `replay`), a
/// panic included.
pub struct TerminalGuard;

impl TerminalGuard {
    pub fn enter() -> anyhow::Result<TerminalGuard> {
        enable_raw_mode().context("this command needs a terminal")?;
        crossterm::execute!(std::io::stdout(), EnterAlternateScreen)?;
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            hook(info);
        }));
        Ok(TerminalGuard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

fn restore() {
    let _ = disable_raw_mode();
    let _ = crossterm::execute!(std::io::stdout(), LeaveAlternateScreen);
}

pub fn run(args: InboxArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    // Connect before taking over the screen, so "no daemon" reads like every other command.
    let client = rt.block_on(connect(&args.opts))?;
    let guard = TerminalGuard::enter()?;
    let mut terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    let mut inbox = Inbox {
        status: "waiting for checkpoints".into(),
        ..Default::default()
    };
    let mut last_refresh: Option<Instant> = None;
    loop {
        if last_refresh.is_none_or(|t| t.elapsed() >= REFRESH) {
            last_refresh = Some(Instant::now());
            match rt.block_on(pending(&client)) {
                Ok(list) => {
                    let arrived = inbox.merge(list);
                    if arrived > 0 {
                        announce(&inbox, arrived);
                    }
                }
                Err(e) => inbox.status = format!("cannot list checkpoints: {e}"),
            }
            // A daemon without budgets (or an older one) has none to show.
            if let Ok(b) = rt.block_on(client.budgets()) {
                let crossed: Vec<String> = b
                    .budgets
                    .iter()
                    .filter(|b| b.crossed)
                    .map(super::usage_cmd::budget_line)
                    .collect();
                if crossed.len() > inbox.budgets.len() {
                    // The daemon raised the desktop notification; the bell is for this screen.
                    let _ = std::io::stdout().write_all(b"\x07");
                }
                inbox.budgets = crossed;
            }
        }
        terminal.draw(|f| draw(f, &inbox))?;
        if !event::poll(Duration::from_millis(100))? {
            continue;
        }
        let Event::Key(key) = event::read()? else {
            continue;
        };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        if inbox.typing_note {
            type_note(&mut inbox, key.code);
            continue;
        }
        match action_of(key.code, key.modifiers, inbox.selected()) {
            Action::Quit => break,
            Action::Up => inbox.up(),
            Action::Down => inbox.down(),
            Action::StartNote => {
                inbox.typing_note = true;
                inbox.note.get_or_insert_with(String::new);
            }
            Action::Decide(decision) => {
                decide(&rt, &client, &mut inbox, decision, None);
                last_refresh = None;
            }
            Action::Edit => {
                let Some(c) = inbox.selected().cloned() else {
                    continue;
                };
                match edit_input(&c, &mut terminal) {
                    Ok(Some(input)) => {
                        decide(&rt, &client, &mut inbox, "approve".into(), Some(input))
                    }
                    Ok(None) => inbox.status = "edit cancelled: the input was not changed".into(),
                    Err(e) => inbox.status = format!("edit: {e:#}"),
                }
                last_refresh = None;
            }
            Action::Nothing => {}
        }
    }
    drop(guard);
    Ok(ExitCode::SUCCESS)
}

async fn pending(client: &Client) -> Result<Vec<CheckpointInfo>, dstream_sdk::Error> {
    client
        .checkpoint_list(&CheckpointListParams {
            state: Some(CheckpointState::Pending.as_str().into()),
            ..Default::default()
        })
        .await
}

fn type_note(inbox: &mut Inbox, code: KeyCode) {
    let note = inbox.note.get_or_insert_with(String::new);
    match code {
        KeyCode::Enter => inbox.typing_note = false,
        KeyCode::Esc => {
            inbox.typing_note = false;
            inbox.note = None;
        }
        KeyCode::Backspace => {
            note.pop();
        }
        KeyCode::Char(ch) => note.push(ch),
        _ => {}
    }
}

fn decide(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    inbox: &mut Inbox,
    decision: String,
    input: Option<serde_json::Value>,
) {
    let Some(c) = inbox.selected() else {
        inbox.status = "nothing selected".into();
        return;
    };
    let params = CheckpointResolveParams {
        id: c.id.clone(),
        decision,
        note: inbox.note.take().filter(|n| !n.is_empty()),
        input,
    };
    inbox.status = match rt.block_on(resolve_retrying(client, &params)) {
        Ok(done) => format!(
            "{} {} by {}: {}",
            done.id,
            done.state,
            done.decision
                .as_ref()
                .map_or("?", |d| d.decided_by.as_str()),
            done.summary
        ),
        Err(e) => format!("{}: {e}", params.id),
    };
}

/// A bell, and a desktop notification where `notify-send` exists.
fn announce(inbox: &Inbox, arrived: usize) {
    let mut out = std::io::stdout();
    let _ = out.write_all(b"\x07");
    let _ = out.flush();
    let latest = inbox
        .items
        .last()
        .map_or(String::new(), |c| c.summary.clone());
    let body = if arrived == 1 {
        latest
    } else {
        format!("{arrived} tool calls wait; latest: {latest}")
    };
    // Spawned and forgotten: a missing notifier is no error.
    let _ = std::process::Command::new("notify-send")
        .args([
            "--app-name=dstream",
            "dstream: a tool call waits for you",
            &body,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

/// Opens the checkpoint's input in `$EDITOR` (the screen handed back meanwhile); the edited
/// input, or `None` when it is unchanged.
fn edit_input(
    c: &CheckpointInfo,
    terminal: &mut Terminal<CrosstermBackend<std::io::Stdout>>,
) -> anyhow::Result<Option<serde_json::Value>> {
    let original = c.input.clone().unwrap_or(serde_json::Value::Null);
    let text = serde_json::to_string_pretty(&original)?;
    let mut file = tempfile_in_tmp()?;
    file.1.write_all(text.as_bytes())?;
    drop(file.1);
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    restore();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(&file.0)
        .status();
    enable_raw_mode()?;
    crossterm::execute!(std::io::stdout(), EnterAlternateScreen)?;
    terminal.clear()?;
    let edited = std::fs::read_to_string(&file.0);
    let _ = std::fs::remove_file(&file.0);
    let status = status.with_context(|| format!("cannot run the editor {editor:?}"))?;
    if !status.success() {
        anyhow::bail!("{editor} exited with {status}; nothing decided");
    }
    let value: serde_json::Value =
        serde_json::from_str(&edited?).context("the edited input is not JSON; nothing decided")?;
    if !value.is_object() {
        anyhow::bail!("the edited input must be a JSON object; nothing decided");
    }
    Ok((value != original).then_some(value))
}

/// A new private file for the editor: (path, handle).
fn tempfile_in_tmp() -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
    let path = std::env::temp_dir().join(format!("dstream-edit-{}.json", ulid::Ulid::new()));
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let f = o.open(&path)?;
    Ok((path, f))
}

fn draw(f: &mut ratatui::Frame, inbox: &Inbox) {
    let [list_area, detail_area, help_area] = Layout::vertical([
        Constraint::Min(5),
        Constraint::Length(8),
        Constraint::Length(3),
    ])
    .areas(f.area());
    let now = now_ms();
    let rows = inbox.items.iter().map(|c| {
        Row::new(vec![
            output::age(now.saturating_sub(c.created_ms)),
            output::age(c.deadline_ms.saturating_sub(now)),
            c.tool.clone().unwrap_or_default(),
            c.summary.clone(),
            output::clip(&c.session_id, 20),
            c.cwd.clone().unwrap_or_default(),
        ])
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Fill(3),
            Constraint::Length(21),
            Constraint::Fill(1),
        ],
    )
    .header(
        Row::new(["age", "left", "tool", "call", "session", "cwd"])
            .style(Style::new().add_modifier(Modifier::BOLD)),
    )
    .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(format!(" dstream inbox: {} pending ", inbox.items.len()))
            .title_bottom(inbox.budgets.join(" · ")),
    );
    let mut state = TableState::default();
    if !inbox.items.is_empty() {
        state.select(Some(inbox.selected));
    }
    f.render_stateful_widget(table, list_area, &mut state);

    let detail = match inbox.selected() {
        Some(c) => {
            let input = c
                .input
                .as_ref()
                .map(|i| serde_json::to_string(i).unwrap_or_default())
                .unwrap_or_default();
            let options: Vec<String> = c
                .options
                .iter()
                .enumerate()
                .map(|(i, o)| format!("{} {}", i + 1, o.label.as_deref().unwrap_or(&o.id)))
                .collect();
            vec![
                Line::from(format!(
                    "{}  {}  on timeout: {}",
                    c.id, c.summary, c.on_timeout
                )),
                Line::from(format!("input: {input}")),
                Line::from(format!("options: {}", options.join(" · "))),
            ]
        }
        None => vec![Line::from("no tool call is waiting")],
    };
    f.render_widget(
        Paragraph::new(detail)
            .wrap(Wrap { trim: false })
            .block(Block::default().borders(Borders::ALL).title(" selected ")),
        detail_area,
    );
    let help = if inbox.typing_note {
        format!(
            "note: {}▏ (Enter keeps it for the next decision, Esc drops it)",
            inbox.note.as_deref().unwrap_or("")
        )
    } else {
        let note = inbox
            .note
            .as_ref()
            .map_or(String::new(), |n| format!(" [note: {n}]"));
        format!(
            "a approve · r reject · e edit · 1-9 option · n note · ↑↓ select · q quit{note}   {}",
            inbox.status
        )
    };
    f.render_widget(
        Paragraph::new(help).block(Block::default().borders(Borders::TOP)),
        help_area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use dstream_sdk::protocol::OnTimeout;

    fn cp(id: &str) -> CheckpointInfo {
        CheckpointInfo {
            id: id.into(),
            session_id: "s".into(),
            key: id.into(),
            state: CheckpointState::Pending,
            tool: Some("Bash".into()),
            input: None,
            summary: format!("Bash: {id}"),
            options: dstream_daemon::default_options(false),
            created_ms: 0,
            deadline_ms: 0,
            on_timeout: OnTimeout::Deny,
            rule: None,
            source: None,
            cwd: None,
            lsn: 1,
            decision: None,
            delivered: false,
        }
    }

    #[test]
    fn merging_keeps_the_selection_and_counts_arrivals_once() {
        let mut inbox = Inbox::default();
        assert_eq!(inbox.merge(vec![cp("a"), cp("b"), cp("c")]), 3);
        inbox.down();
        inbox.down();
        assert_eq!(inbox.selected().unwrap().id, "c");
        // "a" was decided elsewhere, "d" arrived: still on "c", one new.
        assert_eq!(inbox.merge(vec![cp("b"), cp("c"), cp("d")]), 1);
        assert_eq!(inbox.selected().unwrap().id, "c");
        assert_eq!(inbox.merge(vec![cp("b"), cp("c"), cp("d")]), 0);
        // The selected one went away: the selection stays in range.
        assert_eq!(inbox.merge(vec![cp("b")]), 0);
        assert_eq!(inbox.selected().unwrap().id, "b");
        assert_eq!(inbox.merge(vec![]), 0);
        assert!(inbox.selected().is_none());
    }

    #[test]
    fn keys_map_to_decisions_and_options() {
        let c = cp("a");
        let none = KeyModifiers::NONE;
        assert_eq!(
            action_of(KeyCode::Char('a'), none, Some(&c)),
            Action::Decide("approve".into())
        );
        assert_eq!(
            action_of(KeyCode::Char('r'), none, Some(&c)),
            Action::Decide("reject".into())
        );
        assert_eq!(
            action_of(KeyCode::Char('3'), none, Some(&c)),
            Action::Decide("approve_session".into())
        );
        assert_eq!(
            action_of(KeyCode::Char('9'), none, Some(&c)),
            Action::Nothing
        );
        assert_eq!(
            action_of(KeyCode::Char('c'), KeyModifiers::CONTROL, Some(&c)),
            Action::Quit
        );
    }
}
