//! Drawing the replay: the timeline (lines as `dstream tail` words them, the cursor, new
//! events marked), the state at the cursor beside it, the event's data below, a slider over
//! the LSNs and the key line. Only the rows on screen are laid out.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, LineGauge, Paragraph};

use crate::cli::replay::app::App;
use crate::cli::replay::keys::HELP;
use crate::cli::replay::print::state_lines;
use crate::cli::replay::timeline::Timeline;
use crate::cli::tail_view::Tone;

/// The side pane's width at most; on a narrow terminal it takes a third.
const SIDE: u16 = 46;

fn style(tone: Tone) -> Style {
    let s = Style::new();
    match tone {
        Tone::Plain => s,
        Tone::You => s.fg(Color::Cyan).add_modifier(Modifier::BOLD),
        Tone::Agent => s.fg(Color::Magenta),
        Tone::Tool => s.fg(Color::Blue).add_modifier(Modifier::BOLD),
        Tone::Good => s.fg(Color::Green),
        Tone::Bad => s.fg(Color::Red),
        Tone::Ask => s.fg(Color::Yellow).add_modifier(Modifier::BOLD),
        Tone::Money => s.fg(Color::Yellow),
        Tone::Quiet => s.add_modifier(Modifier::DIM),
    }
}

/// The first row shown, so that the cursor is on screen with some context above it.
fn first_row(cursor: usize, rows: usize, height: usize) -> usize {
    if height == 0 || rows <= height {
        return 0;
    }
    cursor.saturating_sub(height / 3).min(rows - height)
}

pub fn draw(f: &mut Frame, t: &Timeline, app: &mut App, detail: &[String], following: bool) {
    let [top, detail_area, slider, keys] = Layout::vertical([
        Constraint::Min(6),
        Constraint::Percentage(35),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let [list_area, side_area] = Layout::horizontal([
        Constraint::Min(20),
        Constraint::Length(SIDE.min(top.width / 3)),
    ])
    .areas(top);
    draw_timeline(f, t, app, list_area, following);
    let state = t.history.at(app.cursor);
    let side: Vec<Line> = state_lines(&state).into_iter().map(Line::from).collect();
    f.render_widget(
        Paragraph::new(side).block(Block::default().borders(Borders::ALL).title(" state ")),
        side_area,
    );
    let lsn = state.lsn;
    let text: Vec<Line> = detail.iter().map(|l| Line::from(l.as_str())).collect();
    let most = (detail.len() as u16).saturating_sub(detail_area.height.saturating_sub(2));
    app.detail_scroll = app.detail_scroll.min(most);
    f.render_widget(
        Paragraph::new(text).scroll((app.detail_scroll, 0)).block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" event {lsn} "))
                .title_bottom(" Shift+↑↓ scroll "),
        ),
        detail_area,
    );
    let ratio = if state.count == 0 {
        0.0
    } else {
        (state.index + 1) as f64 / state.count as f64
    };
    f.render_widget(
        LineGauge::default()
            .ratio(ratio)
            .label(format!("LSN {}/{} ", state.lsn, state.last_lsn))
            .filled_style(Style::new().fg(Color::Cyan))
            .unfilled_style(Style::new().add_modifier(Modifier::DIM)),
        slider,
    );
    let line = match &app.typing {
        Some(typed) => format!("/{typed}▏ (Enter searches, Esc cancels)"),
        None => format!(
            "←→ event · [] tool call · c checkpoint · / search · ? help · q quit   {}",
            app.status
        ),
    };
    f.render_widget(Paragraph::new(line), keys);
    if app.help {
        draw_help(f);
    }
}

fn draw_timeline(f: &mut Frame, t: &Timeline, app: &mut App, area: Rect, following: bool) {
    let height = area.height.saturating_sub(2) as usize;
    app.page = height.max(1);
    let first = first_row(app.cursor, t.len(), height);
    let mut lines = Vec::with_capacity(height);
    for i in first..(first + height).min(t.len()) {
        let row = &t.rows[i];
        let lsn = t.history.step(i).map_or(0, |s| s.lsn);
        let gutter = match (i == app.cursor, app.is_new(t, i)) {
            (true, _) => "▶",
            (false, true) => "•",
            _ => " ",
        };
        let (body, tail) = row.body();
        let mut line = Line::from(vec![
            Span::raw(format!("{gutter}{lsn:>6} ")),
            Span::raw(format!("{}  ", t.clock(i))),
            Span::styled(format!("{:<8} ", row.label()), style(row.label_tone)),
            Span::styled(body.to_string(), style(row.body_tone)),
            Span::styled(tail.to_string(), style(row.tail_tone)),
        ]);
        if i == app.cursor {
            line = line.patch_style(Style::new().add_modifier(Modifier::REVERSED));
        }
        lines.push(line);
    }
    let mut title = format!(" dstream replay {} ", t.session);
    if following {
        title.push_str("· following ");
    }
    match app.seen_before.map(|s| t.history.count_after(s)) {
        Some(0) | None => {}
        Some(new) => title.push_str(&format!("· {new} new (•) ")),
    }
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
        area,
    );
}

fn draw_help(f: &mut Frame) {
    let area = f.area();
    let w = 60.min(area.width);
    let h = (HELP.len() as u16 + 2).min(area.height);
    let r = Rect::new((area.width - w) / 2, (area.height - h) / 2, w, h);
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, what)| Line::from(format!("{k:<20} {what}")))
        .collect();
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" keys ")),
        r,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use dstream_sdk::Event;
    use ratatui::backend::TestBackend;
    use serde_json::json;

    fn screen(t: &Timeline, app: &mut App) -> String {
        let mut term = ratatui::Terminal::new(TestBackend::new(140, 30)).unwrap();
        let detail = vec!["{".to_string(), "  \"lsn\": 2".to_string(), "}".to_string()];
        term.draw(|f| draw(f, t, app, &detail, false)).unwrap();
        let buf = term.backend().buffer();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol())
                    .collect::<String>()
                    + "\n"
            })
            .collect()
    }

    #[test]
    fn the_screen_shows_the_lines_the_state_the_slider_and_what_is_new() {
        let mut t = Timeline::new("s1");
        for (lsn, ty, payload) in [
            (1, "user.input", json!({"text": "hello there"})),
            (
                2,
                "execution.tool_use",
                json!({"tool": "Edit", "tool_use_id": "a", "input": {"file_path": "/p/x.rs"}}),
            ),
        ] {
            t.push(&Event {
                lsn,
                id: format!("e{lsn}"),
                event_type: ty.into(),
                session_id: "s1".into(),
                stream_id: "s1".into(),
                causation_id: None,
                correlation_id: None,
                actor: None,
                timestamp: 0,
                payload,
                metadata: None,
                raw: None,
            });
        }
        let mut app = App::start(&t, None, Some(1));
        let s = screen(&t, &mut app);
        for want in [
            "dstream replay s1 · 1 new (•)",
            "▶     2 ",
            "Edit     /p/x.rs",
            "you      hello there",
            "LSN 2/2",
            "tool calls  1",
            "  changed   /p/x.rs",
            "\"lsn\": 2",
            "1 new since you last looked",
        ] {
            assert!(s.contains(want), "no {want:?} in:\n{s}");
        }
        app.help = true;
        assert!(screen(&t, &mut app).contains("previous / next tool call"));
    }

    #[test]
    fn the_cursor_stays_on_screen_with_context_above() {
        assert_eq!(first_row(0, 100, 30), 0);
        assert_eq!(first_row(50, 100, 30), 40);
        assert_eq!(first_row(99, 100, 30), 70);
        assert_eq!(first_row(5, 3, 30), 0);
    }
}
