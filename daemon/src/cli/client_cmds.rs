//! The client commands: `append`, `tail`, `sessions`, `query`, `stats`.

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail};
use clap::Args;
use dstream_sdk::protocol::SpoolStats;
use dstream_sdk::protocol::{AppendResult, QueryParams, methods};
use dstream_sdk::{Event, NewEvent, SubscriptionItem};
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::cli::client::{ClientOpts, connect, print_json, runtime};
use crate::cli::output;
use crate::cli::tail_view::{ColorChoice, TailView};

/// Appends in flight at once for `dstream append`.
const APPEND_WINDOW: usize = 256;

#[derive(Args)]
pub struct AppendArgs {
    /// Session for lines that are bare events; a line may instead be
    /// `{"session_id": "...", "event": {...}}`.
    #[arg(long)]
    session: Option<String>,
    #[command(flatten)]
    opts: ClientOpts,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum AppendLine {
    Addressed { session_id: String, event: NewEvent },
    Bare(NewEvent),
}

/// Reads events from stdin, one JSON object per line, and appends them in order. Stops at the
/// first line that is not valid or is refused, saying which line and why.
///
/// Each line is sent as soon as it is read, so `tail -f log | dstream append` streams: stdin
/// is read on its own thread, because a blocking read on this single-threaded runtime would
/// also stop the client's tasks that put the requests on the socket and take the replies.
pub fn append(args: AppendArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = connect(&args.opts).await?;
        let mut lines = stdin_lines();
        let mut in_flight: VecDeque<(usize, PendingAck)> = VecDeque::new();
        let mut line_no = 0usize;
        let mut appended = 0u64;
        let mut range: Option<(u64, u64)> = None;
        let mut failure = None;
        loop {
            // Take acknowledgements as they come, and the next line whenever the window has
            // room for it; a line never waits on an acknowledgement it does not need.
            let step = tokio::select! {
                biased;
                ack = async { in_flight.front_mut().unwrap().1.as_mut().await },
                    if !in_flight.is_empty() => Step::Ack(ack),
                line = lines.recv(), if in_flight.len() < APPEND_WINDOW => Step::Line(line),
            };
            let line = match step {
                Step::Ack(ack) => {
                    let (n, _) = in_flight.pop_front().unwrap();
                    if let Err(e) = report(n, ack, &args.opts, &mut appended, &mut range) {
                        failure = Some(e);
                        break;
                    }
                    continue;
                }
                Step::Line(None) => break,
                Step::Line(Some(Err(e))) => {
                    failure = Some(anyhow::Error::new(e).context("reading stdin"));
                    break;
                }
                Step::Line(Some(Ok(line))) => line,
            };
            line_no += 1;
            if line.trim().is_empty() {
                continue;
            }
            let (session, event) = match serde_json::from_str::<AppendLine>(&line) {
                Ok(AppendLine::Addressed { session_id, event }) => (session_id, event),
                Ok(AppendLine::Bare(event)) => match &args.session {
                    Some(s) => (s.clone(), event),
                    None => {
                        failure = Some(anyhow!("line {line_no}: no session: pass --session or give {{\"session_id\", \"event\"}}"));
                        break;
                    }
                },
                Err(e) => {
                    failure = Some(anyhow!("line {line_no}: not an event: {e}"));
                    break;
                }
            };
            match client.append_pipelined(&session, event) {
                Ok(ack) => in_flight.push_back((line_no, Box::pin(ack))),
                Err(e) => {
                    failure = Some(anyhow!("line {line_no}: {e}"));
                    break;
                }
            }
        }
        // Whatever was sent is settled and reported, even after a failure.
        while let Some((n, ack)) = in_flight.pop_front() {
            if let Err(e) = report(n, ack.await, &args.opts, &mut appended, &mut range) {
                failure.get_or_insert(e);
            }
        }
        if !args.opts.json {
            let events = if appended == 1 { "event" } else { "events" };
            match range {
                Some((lo, hi)) => eprintln!("appended {appended} {events} (lsn {lo}..{hi})"),
                None => eprintln!("appended {appended} {events}"),
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(ExitCode::SUCCESS),
        }
    })
}

/// The acknowledgement of an append sent with `append_pipelined`.
type PendingAck = Pin<Box<dyn Future<Output = Result<AppendResult, dstream_sdk::Error>> + Send>>;

/// One turn of the append loop.
enum Step {
    Ack(Result<AppendResult, dstream_sdk::Error>),
    Line(Option<std::io::Result<String>>),
}

/// Lines of stdin, read on a thread of their own. The channel is bounded so a fast producer
/// is held back by the daemon's pace rather than buffered without limit.
fn stdin_lines() -> mpsc::Receiver<std::io::Result<String>> {
    let (tx, rx) = mpsc::channel(APPEND_WINDOW);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let stop = line.is_err();
            if tx.blocking_send(line).is_err() || stop {
                break;
            }
        }
    });
    rx
}

fn report(
    line_no: usize,
    ack: Result<AppendResult, dstream_sdk::Error>,
    opts: &ClientOpts,
    appended: &mut u64,
    range: &mut Option<(u64, u64)>,
) -> anyhow::Result<()> {
    let ack = ack.map_err(|e| anyhow!("line {line_no}: {e}"))?;
    *appended += 1;
    let (lo, hi) = range.get_or_insert((ack.lsn, ack.lsn));
    *lo = (*lo).min(ack.lsn);
    *hi = (*hi).max(ack.lsn);
    if opts.json {
        print_json(&serde_json::json!({"line": line_no, "lsn": ack.lsn, "id": ack.id}))?;
    }
    Ok(())
}

#[derive(Args)]
pub struct TailArgs {
    session: String,
    /// First LSN to print.
    #[arg(long, default_value_t = 1)]
    from: u64,
    /// Keep printing new events as they are appended.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Colours: on a terminal unless NO_COLOR is set (auto), always, or never.
    #[arg(long, value_enum, default_value = "auto")]
    color: ColorChoice,
    #[command(flatten)]
    opts: ClientOpts,
}

/// A tail's events as JSON lines (unchanged), or in words through the tail view.
fn print_tailed(e: &Event, view: &mut Option<TailView>) -> anyhow::Result<()> {
    match view {
        None => print_json(e),
        Some(v) => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", v.line(e))?;
            Ok(())
        }
    }
}

fn print_event(e: &Event, json: bool, with_session: bool) -> anyhow::Result<()> {
    if json {
        return print_json(e);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", output::event_line(e, with_session))?;
    Ok(())
}

pub fn tail(args: TailArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = connect(&args.opts).await?;
        let mut view = (!args.opts.json).then(|| TailView::for_stdout(args.color));
        if !args.follow {
            let mut from = args.from;
            loop {
                let page = client.read(&args.session, from, None).await?;
                for e in &page.events {
                    print_tailed(e, &mut view)?;
                }
                from = page.next_lsn;
                if page.up_to_date {
                    return Ok(ExitCode::SUCCESS);
                }
            }
        }
        let mut sub = client.subscribe(&args.session, args.from).await?;
        while let Some(item) = sub.next().await {
            match item? {
                SubscriptionItem::Event(e) => print_tailed(&e, &mut view)?,
                SubscriptionItem::Lagged { last_sent_lsn } => tracing_note(&format!(
                    "fell behind after lsn {last_sent_lsn}; catching up from disk"
                )),
                SubscriptionItem::CaughtUp { .. } | SubscriptionItem::Heartbeat { .. } => {}
            }
        }
        bail!("the daemon closed the connection")
    })
}

fn tracing_note(msg: &str) {
    eprintln!("dstream: {msg}");
}

#[derive(Args)]
pub struct SessionsArgs {
    /// Also list deleted sessions (their tombstones).
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    opts: ClientOpts,
}

/// The spool in one line: what waits, what was drained, what was lost or set aside.
fn spool_line(s: &SpoolStats) -> String {
    let mut line = format!(
        "{} files waiting ({}), {} events drained",
        s.pending_files,
        output::bytes(s.pending_bytes),
        s.drained_events
    );
    if s.overflow_pending + s.overflow_reported > 0 {
        line.push_str(&format!(
            ", {} events LOST (spool full)",
            s.overflow_pending + s.overflow_reported
        ));
    }
    if s.damaged > 0 {
        line.push_str(&format!(", {} damaged parts set aside", s.damaged));
    }
    if s.refused > 0 {
        line.push_str(&format!(", {} files refused (another user's)", s.refused));
    }
    if let Some(e) = &s.last_error {
        line.push_str(&format!("; last error: {e}"));
    }
    line
}

pub fn sessions(args: SessionsArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = connect(&args.opts).await?;
        let list = client.sessions_all().await?;
        let sessions = list.sessions;
        let gone = if args.all { list.gone } else { Vec::new() };
        // Events still in the spool belong to sessions not listed (or not complete) yet.
        if !args.opts.json
            && let Ok(stats) = client.call_raw(methods::STATS, serde_json::json!({})).await
            && let Some(spool) = stats.get("spool")
            && let Ok(s) = serde_json::from_value::<SpoolStats>(spool.clone())
            && (s.pending_files > 0 || s.overflow_pending > 0)
        {
            eprintln!("spool: {}", spool_line(&s));
        }
        if args.opts.json {
            for s in &sessions {
                print_json(s)?;
            }
            for g in &gone {
                print_json(&serde_json::json!({"gone": g}))?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        for g in &gone {
            println!(
                "GONE {}: deleted {} ({}); had {} events, last {}, {} freed",
                g.session_id,
                output::time(g.deleted_at_ms),
                g.reason,
                g.last_lsn,
                output::time(g.last_ts),
                output::bytes(g.bytes_freed)
            );
        }
        if sessions.is_empty() {
            println!("no sessions");
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "{:<40} {:>8} {:>10}  {:<24}  STREAM",
            "SESSION", "EVENTS", "SIZE", "LAST EVENT"
        );
        for s in &sessions {
            let stream = if s.stream_id == s.session_id {
                "-"
            } else {
                &s.stream_id
            };
            println!(
                "{:<40} {:>8} {:>10}  {:<24}  {stream}",
                s.session_id,
                s.last_lsn,
                output::bytes(s.bytes),
                output::time(s.last_ts)
            );
        }
        for s in sessions.iter().filter(|s| s.forked_from.is_some()) {
            println!(
                "FORK {}: of {} at lsn {}",
                s.session_id,
                s.forked_from.as_deref().unwrap_or_default(),
                s.fork_lsn.unwrap_or_default()
            );
        }
        let damaged: Vec<_> = sessions.iter().filter(|s| s.quarantined.is_some()).collect();
        for s in &damaged {
            let q = s.quarantined.as_ref().expect("filtered");
            println!(
                "QUARANTINED {}: {} (readable up to lsn {}, damage from byte {}); `dstream repair {}` fixes it",
                s.session_id, q.reason, q.last_good_lsn, q.offset, s.session_id
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

#[derive(Args)]
pub struct RepairArgs {
    /// The quarantined session to repair.
    session: String,
    #[command(flatten)]
    opts: ClientOpts,
}

/// Repairs a quarantined session and says what moved where.
pub fn repair(args: RepairArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let r = connect(&args.opts).await?.repair(&args.session).await?;
        if args.opts.json {
            print_json(&r)?;
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "repaired {}: kept {} valid record{}, moved {} damaged byte{} to {}",
            r.session_id,
            r.kept_records,
            if r.kept_records == 1 { "" } else { "s" },
            r.moved_bytes,
            if r.moved_bytes == 1 { "" } else { "s" },
            r.moved_to
        );
        for (from, to) in &r.lost_lsns {
            println!("  lsn {from}..={to} no longer in the log");
        }
        println!("appends continue after lsn {}", r.resumed_at);
        Ok(ExitCode::SUCCESS)
    })
}

#[derive(Args)]
pub struct CompressArgs {
    /// The session to compress now (retention.compress_after does it by itself).
    session: String,
    #[command(flatten)]
    opts: ClientOpts,
}

pub fn compress(args: CompressArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = connect(&args.opts).await?;
        let r: dstream_sdk::protocol::CompressResult = client
            .call(
                methods::COMPRESS,
                &dstream_sdk::protocol::CompressParams {
                    session_id: args.session.clone(),
                },
            )
            .await?;
        if args.opts.json {
            print_json(&r)?;
        } else if !r.compressed {
            println!("{}: nothing new to compress", r.session_id);
        } else {
            println!(
                "compressed {} up to lsn {}: {} of log in {} of archive{}",
                r.session_id,
                r.upto_lsn,
                output::bytes(r.log_bytes),
                output::bytes(r.archive_bytes),
                if r.freed {
                    ""
                } else {
                    " (this file system cannot free the log's compressed part)"
                }
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

#[derive(Args)]
pub struct QueryArgs {
    /// Only this session.
    #[arg(long)]
    session: Option<String>,
    /// Only this lineage (root session), across its child sessions.
    #[arg(long)]
    stream: Option<String>,
    /// Only types starting with this, e.g. `execution.` or `checkpoint.requested`.
    #[arg(long = "type")]
    type_prefix: Option<String>,
    #[arg(long)]
    actor: Option<String>,
    /// From this time on: an RFC 3339 time, milliseconds since the epoch, or an age like `10m`.
    #[arg(long)]
    since: Option<String>,
    /// Before this time (same forms as --since).
    #[arg(long)]
    until: Option<String>,
    #[arg(long)]
    limit: Option<usize>,
    /// Only events whose text matches this search query (see `dstream search`).
    #[arg(long)]
    text: Option<String>,
    #[command(flatten)]
    opts: ClientOpts,
}

/// Parses `1763719200123`, `2026-11-21T10:00:00Z` or an age such as `15m` into epoch ms.
pub(super) fn parse_time(s: &str) -> anyhow::Result<u64> {
    dstream_daemon::util::time::parse_time(s)
        .map(|(ms, _)| ms)
        .map_err(|e| anyhow!(e))
}

pub fn query(args: QueryArgs) -> anyhow::Result<ExitCode> {
    let params = QueryParams {
        session_id: args.session,
        stream_id: args.stream,
        type_prefix: args.type_prefix,
        actor: args.actor,
        since_ms: args.since.as_deref().map(parse_time).transpose()?,
        until_ms: args.until.as_deref().map(parse_time).transpose()?,
        limit: args.limit,
        text: args.text,
    };
    runtime()?.block_on(async {
        let result = connect(&args.opts).await?.query(&params).await?;
        for e in &result.events {
            print_event(e, args.opts.json, true)?;
        }
        if result.truncated {
            eprintln!("dstream: more events matched; raise --limit or narrow the query");
        }
        Ok(ExitCode::SUCCESS)
    })
}

#[derive(Args)]
pub struct StatsArgs {
    #[command(flatten)]
    opts: ClientOpts,
}

pub fn stats(args: StatsArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = connect(&args.opts).await?;
        let stats = client
            .call_raw(methods::STATS, serde_json::json!({}))
            .await?;
        if args.opts.json {
            print_json(&stats)?;
            return Ok(ExitCode::SUCCESS);
        }
        let Some(map) = stats.as_object() else {
            bail!("unexpected stats reply: {stats}")
        };
        for (key, value) in map {
            if key == "plugins" || key == "relay" || key == "spool" || key == "search" {
                continue; // printed below
            }
            let shown = match (key.as_str(), value.as_u64()) {
                ("rss_bytes" | "bytes_written", Some(n)) => output::bytes(n),
                ("uptime_ms", Some(n)) => {
                    humantime::format_duration(Duration::from_secs(n / 1000)).to_string()
                }
                _ => value.to_string().trim_matches('"').to_string(),
            };
            // The value shown is a duration, not a count of milliseconds.
            let key = if key == "uptime_ms" { "uptime" } else { key };
            println!("{key:<22} {shown}");
        }
        if let Some(spool) = map.get("spool")
            && let Ok(s) = serde_json::from_value::<SpoolStats>(spool.clone())
        {
            println!("{:<22} {}", "spool", spool_line(&s));
        }
        if let Some(search) = map.get("search")
            && let Ok(s) =
                serde_json::from_value::<dstream_sdk::protocol::SearchStats>(search.clone())
        {
            let state = if s.enabled { "on" } else { "off" };
            let waiting = if s.waiting_out_burst {
                " (letting a burst of appends pass; it catches up after)"
            } else {
                ""
            };
            println!(
                "{:<22} {state}, {} events indexed, {} behind{waiting}, {}{}",
                "search",
                s.indexed_events,
                s.behind_by,
                output::bytes(s.index_bytes),
                s.last_error
                    .map(|e| format!(", last error: {e}"))
                    .unwrap_or_default()
            );
        }
        if let Some(relay) = map.get("relay")
            && let Ok(t) =
                serde_json::from_value::<dstream_sdk::protocol::RelayTotals>(relay.clone())
            && t.enabled
        {
            println!(
                "{:<22} {} streams, {} events behind, {} failed, {} events sent ({})",
                "relay",
                t.streams,
                t.lag_events,
                t.failed_streams,
                t.events_sent,
                output::bytes(t.bytes_sent)
            );
        }
        if let Some(plugins) = map.get("plugins").and_then(|p| p.as_array())
            && !plugins.is_empty()
        {
            println!("plugins:");
            for p in plugins {
                if let Ok(info) = serde_json::from_value(p.clone()) {
                    output::print_plugin(&info);
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}
