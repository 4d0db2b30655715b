//! `dstream replay SESSION`: step through one session in the terminal, event by event or
//! tool call by tool call, with the state at each point (files touched, running cost, tool
//! calls, checkpoints) and what is new since the person last looked; `--print` (or output
//! that is not a terminal) writes the state at an LSN as text and exits.
//!
//! `timeline` reads the log in pages and keeps a line and a small step per event; `state`
//! folds the steps (pure); `app` moves through them on `keys`; `view` draws; `print` words
//! the state; `seen` remembers the last LSN viewed per session.

mod app;
mod keys;
mod print;
mod seen;
mod state;
mod timeline;
mod view;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Args;
use crossterm::event::{self, Event as TermEvent, KeyEventKind};
use dstream_sdk::{Client, SubscriptionItem};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use tokio::sync::mpsc;

use crate::cli::client::{ClientOpts, connect, print_json};
use crate::cli::inbox::TerminalGuard;
use crate::cli::replay::app::App;
use crate::cli::replay::seen::SeenFile;
use crate::cli::replay::state::StateAt;
use crate::cli::replay::timeline::Timeline;

/// The event data shown at most: a huge tool output is cut, not held whole.
const MAX_DETAIL_BYTES: usize = 256 * 1024;
/// Events a follow holds between two screen updates before it waits for the screen.
const FOLLOW_QUEUE: usize = 4096;

#[derive(Args)]
pub struct ReplayArgs {
    /// The session to step through.
    session: String,
    /// Start at this LSN (else at the first event new since you last looked).
    #[arg(long)]
    at: Option<u64>,
    /// Print the state at `--at` (default: the last event) as text and exit; also what
    /// happens when output is not a terminal. With `--json`, one JSON object.
    #[arg(long)]
    print: bool,
    /// Keep taking new events as they are appended.
    #[arg(long, short = 'f')]
    follow: bool,
    #[command(flatten)]
    opts: ClientOpts,
}

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    // A worker thread keeps the subscription and the client's socket going while the loop
    // waits for keys.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let client = rt.block_on(connect(&args.opts))?;
    let info = rt
        .block_on(client.session(&args.session))
        .map_err(|e| anyhow!("cannot replay session {:?}: {e}", args.session))?;
    let interactive = !args.print && std::io::stdout().is_terminal();
    // A long session takes seconds to read: say how far it got, where a person watches.
    let show = interactive && std::io::stderr().is_terminal() && info.last_lsn > 10 * 1000;
    let mut progress = |n: usize| {
        if show {
            eprint!("\rreading {n} of about {} events…", info.last_lsn);
        }
    };
    let mut t = Timeline::new(&args.session);
    rt.block_on(t.load(&client, &mut progress))
        .with_context(|| format!("reading session {:?}", args.session))?;
    if show {
        eprint!("\r\x1b[K");
    }
    if t.len() == 0 {
        println!("session {} has no events to replay", args.session);
        return Ok(ExitCode::SUCCESS);
    }
    if !interactive {
        let last = t.last_lsn().unwrap_or(0);
        if let Some(at) = args.at.filter(|a| *a > last) {
            eprintln!("dstream: the session ends at LSN {last} (asked for {at}): its state there");
        }
        let at = args.at.map_or(t.len() - 1, |l| t.history.index_of_lsn(l));
        let state = t.history.at(at);
        if args.opts.json {
            print_json(&state_json(&state))?;
        } else {
            println!("session     {}", args.session);
            for line in print::state_lines(&state) {
                println!("{line}");
            }
            println!("line        {}", t.rows[at].text);
        }
        return Ok(ExitCode::SUCCESS);
    }
    step_through(&rt, &client, t, &args)
}

fn step_through(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    mut t: Timeline,
    args: &ReplayArgs,
) -> anyhow::Result<ExitCode> {
    let seen_path = seen::default_path();
    let seen_before = SeenFile::load(&seen_path).get(&args.session);
    let mut app = App::start(&t, args.at, seen_before.map(|s| s.lsn));
    let mut arrivals = match args.follow {
        true => Some(follow(
            rt,
            client,
            &args.session,
            t.last_lsn().unwrap_or(0),
        )?),
        false => None,
    };
    let guard = TerminalGuard::enter()?;
    let mut terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    let mut detail: (u64, Vec<String>) = (0, Vec::new());
    while !app.quit {
        if let Some(rx) = &mut arrivals {
            let was = t.len();
            while let Ok(item) = rx.try_recv() {
                match item {
                    Ok(e) => t.push(&e),
                    Err(e) => {
                        app.status = format!("following stopped: {e}");
                        arrivals = None;
                        break;
                    }
                }
            }
            if t.len() > was {
                app.arrived(&t, was);
            }
        }
        let lsn = t.history.step(app.cursor).map_or(0, |s| s.lsn);
        if detail.0 != lsn {
            detail = (lsn, detail_lines(rt, client, &args.session, lsn));
        }
        terminal.draw(|f| view::draw(f, &t, &mut app, &detail.1, arrivals.is_some()))?;
        if !event::poll(Duration::from_millis(100))? {
            continue;
        }
        if let TermEvent::Key(key) = event::read()?
            && key.kind == KeyEventKind::Press
        {
            app.key(&t, key);
        }
    }
    drop(guard);
    // Read again: another replay may have saved its own session's mark meanwhile.
    let mut seen = SeenFile::load(&seen_path);
    seen.mark(
        &args.session,
        app.reached_lsn,
        dstream_daemon::util::time::now_ms(),
    );
    if let Err(e) = seen.save(&seen_path) {
        eprintln!(
            "dstream: could not remember where you stopped ({}): {e}",
            seen_path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// New events from `after` on, through the subscription `tail -f` uses, handed over on a
/// bounded channel (a full one holds the subscription back; the daemon then lets it lag and
/// catch up from the log, so nothing is lost).
fn follow(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    session: &str,
    after: u64,
) -> anyhow::Result<mpsc::Receiver<Result<Box<dstream_sdk::Event>, String>>> {
    let mut sub = rt.block_on(client.subscribe(session, after + 1))?;
    let (tx, rx) = mpsc::channel(FOLLOW_QUEUE);
    rt.spawn(async move {
        while let Some(item) = sub.next().await {
            let sent = match item {
                Ok(SubscriptionItem::Event(e)) => tx.send(Ok(e)).await,
                Ok(_) => Ok(()),
                Err(e) => {
                    let _ = tx.send(Err(e.to_string())).await;
                    return;
                }
            };
            if sent.is_err() {
                return;
            }
        }
        let _ = tx
            .send(Err("the daemon closed the connection".into()))
            .await;
    });
    Ok(rx)
}

/// The event at `lsn` as pretty JSON lines, read back from the daemon (the timeline keeps
/// no payloads), cut at `MAX_DETAIL_BYTES`.
fn detail_lines(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    session: &str,
    lsn: u64,
) -> Vec<String> {
    let page = match rt.block_on(client.read(session, lsn, Some(1))) {
        Ok(p) => p,
        Err(e) => return vec![format!("cannot read event {lsn}: {e}")],
    };
    let Some(e) = page.events.into_iter().find(|e| e.lsn == lsn) else {
        return vec![format!("event {lsn} is no longer in the log")];
    };
    let mut text = serde_json::to_string_pretty(&e).unwrap_or_default();
    if text.len() > MAX_DETAIL_BYTES {
        let mut cut = MAX_DETAIL_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n… (cut: the event is larger than the pane shows)");
    }
    text.lines().map(str::to_string).collect()
}

/// The state for scripts: `dstream replay S --at L --print --json`.
fn state_json(s: &StateAt<'_>) -> serde_json::Value {
    let t = &s.totals;
    serde_json::json!({
        "lsn": s.lsn,
        "last_lsn": s.last_lsn,
        "index": s.index,
        "count": s.count,
        "timestamp": s.timestamp,
        "tool_calls": t.calls,
        "model_calls": t.model_calls(),
        "cost_usd_micros": t.cost_micros(),
        "reported_usd_micros": t.reported_micros,
        "files": s.files.iter().map(|(p, changed)| serde_json::json!({"path": p, "changed": changed})).collect::<Vec<_>>(),
        "pending": s.pending.iter().map(|c| serde_json::json!({"id": &*c.id, "summary": &*c.summary})).collect::<Vec<_>>(),
        "decided": s.decided.iter().map(|(c, o)| serde_json::json!({"id": &*c.id, "summary": &*c.summary, "outcome": format!("{o:?}").to_lowercase()})).collect::<Vec<_>>(),
    })
}
