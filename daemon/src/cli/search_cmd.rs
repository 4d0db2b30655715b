//! `dstream search` (events across sessions by their text, see the daemon's `search` method)
//! and `dstream reindex` (drop the search index and build it again from the logs).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Args;
use dstream_sdk::protocol::{SearchHit, SearchParams};

use crate::cli::client::{ClientOpts, connect, print_json, runtime};
use crate::cli::client_cmds::parse_time;
use crate::cli::output;

#[derive(Args)]
pub struct SearchArgs {
    /// Words to find: `"a phrase"`, AND / OR / NOT, `prefix*`, parentheses (FTS5 syntax); a
    /// word with punctuation (`x.txt`, `foo-bar`) is matched as a phrase.
    query: String,
    /// Only this session.
    #[arg(long)]
    session: Option<String>,
    /// Only events whose type starts with this (`execution.`, `user.input`).
    #[arg(long = "type")]
    type_prefix: Option<String>,
    /// From this time on: an RFC 3339 time, milliseconds since the epoch, or an age like `7d`.
    #[arg(long)]
    since: Option<String>,
    /// At most this many hits (at most 1000).
    #[arg(long, default_value_t = 20)]
    limit: usize,
    #[command(flatten)]
    opts: ClientOpts,
}

pub fn search(args: SearchArgs) -> anyhow::Result<ExitCode> {
    let params = SearchParams {
        query: args.query.clone(),
        session_id: args.session.clone(),
        type_prefix: args.type_prefix.clone(),
        since_ms: args.since.as_deref().map(parse_time).transpose()?,
        limit: Some(args.limit),
    };
    let result = runtime()?.block_on(async {
        let client = connect(&args.opts).await?;
        anyhow::Ok(client.search(&params).await?)
    })?;
    if args.opts.json {
        for hit in &result.hits {
            print_json(hit)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let bold = std::io::stdout().is_terminal();
    let mut out = std::io::stdout().lock();
    for hit in &result.hits {
        writeln!(out, "{}", hit_line(hit, bold))?;
    }
    if let Some(first) = result.hits.first() {
        writeln!(
            out,
            "open one with: dstream tail {} --from {}",
            first.session_id, first.lsn
        )?;
    } else {
        writeln!(out, "no events match")?;
    }
    if result.behind_by > 0 {
        eprintln!(
            "dstream: the index is {} events behind the logs; it is catching up",
            result.behind_by
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `time  session  lsn  type  snippet`, the matches in bold on a terminal, else in `[…]`.
fn hit_line(hit: &SearchHit, bold: bool) -> String {
    let (open, close) = if bold {
        ("\x1b[1m", "\x1b[0m")
    } else {
        ("[", "]")
    };
    let mut snippet = String::new();
    let mut at = 0;
    for &[start, end] in &hit.highlights {
        let (Some(before), Some(word)) = (hit.snippet.get(at..start), hit.snippet.get(start..end))
        else {
            continue;
        };
        snippet += before;
        snippet += open;
        snippet += word;
        snippet += close;
        at = end;
    }
    snippet += hit.snippet.get(at..).unwrap_or_default();
    format!(
        "{}  {}  {:>7}  {:<24} {snippet}",
        output::time(hit.timestamp),
        output::clip(&hit.session_id, 24),
        hit.lsn,
        hit.event_type,
    )
}

#[derive(Args)]
pub struct ReindexArgs {
    #[command(flatten)]
    opts: ClientOpts,
}

pub fn reindex(args: ReindexArgs) -> anyhow::Result<ExitCode> {
    let result = runtime()?.block_on(async {
        let client = connect(&args.opts).await?;
        anyhow::Ok(client.reindex().await?)
    })?;
    if args.opts.json {
        print_json(&result)?;
    } else {
        println!(
            "reindexed {} events of {} sessions in {:.1}s",
            result.events,
            result.sessions,
            result.elapsed_ms as f64 / 1000.0
        );
    }
    Ok(ExitCode::SUCCESS)
}
