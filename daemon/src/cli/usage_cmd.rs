//! `dstream usage`: what the model calls cost, summed by day, week, month, session, model,
//! project or agent (see the daemon's `usage` method).

use std::process::ExitCode;

use clap::Args;
use dstream_sdk::protocol::{BudgetStatus, UsageParams, UsageRow};

use super::client::{ClientOpts, connect, print_json, runtime};

#[derive(Args)]
pub struct UsageArgs {
    /// Group by day, week, month, session, model, project or agent.
    #[arg(long, default_value = "day")]
    by: String,
    /// From this time on: an RFC 3339 time, milliseconds since the epoch, or an age like `7d`.
    #[arg(long)]
    since: Option<String>,
    /// Before this time (same forms as --since).
    #[arg(long)]
    until: Option<String>,
    /// Only this session and its subagents.
    #[arg(long)]
    session: Option<String>,
    /// Read every log rather than the search index's sums (slower; the same answer).
    #[arg(long)]
    scan: bool,
    #[command(flatten)]
    opts: ClientOpts,
}

pub fn run(args: UsageArgs) -> anyhow::Result<ExitCode> {
    let params = UsageParams {
        by: Some(args.by.clone()),
        session_id: args.session.clone(),
        since_ms: args.since.as_deref().map(hour_of_age).transpose()?,
        until_ms: args.until.as_deref().map(hour_of_age).transpose()?,
        scan: args.scan,
    };
    let result = runtime()?.block_on(async {
        let client = connect(&args.opts).await?;
        anyhow::Ok(client.usage(&params).await?)
    })?;
    if args.opts.json {
        print_json(&result)?;
        return Ok(ExitCode::SUCCESS);
    }
    let width = result
        .rows
        .iter()
        .map(|r| r.key.chars().count())
        .max()
        .unwrap_or(0)
        .max(result.by.len())
        .max(5);
    println!(
        "{:<width$}  {:>8}  {:>12}  {:>10}  {:>12}  {:>12}  {:>12}",
        result.by, "calls", "input", "output", "cache read", "cache write", "cost"
    );
    let line = |r: &UsageRow| {
        println!(
            "{:<width$}  {:>8}  {:>12}  {:>10}  {:>12}  {:>12}  {:>12}",
            r.key,
            r.requests,
            r.input_tokens,
            r.output_tokens,
            r.cache_read_tokens,
            r.cache_write_tokens,
            dollars(r.cost_usd_micros)
        )
    };
    for r in &result.rows {
        line(r);
    }
    line(&result.total);
    for m in &result.mismatches {
        println!(
            "mismatch: {} reported {}, its calls add up to {}",
            m.session_id,
            dollars(m.reported_usd_micros),
            dollars(m.counted_usd_micros)
        );
    }
    for b in &result.budgets {
        println!("{}", budget_line(b));
    }
    Ok(ExitCode::SUCCESS)
}

/// A time as `dstream query --since` reads it; an age (`7d`) starts at the top of its hour (see
/// `parse_usage_since`).
fn hour_of_age(s: &str) -> anyhow::Result<u64> {
    dstream_daemon::util::time::parse_usage_since(s).map_err(|e| anyhow::anyhow!(e))
}

/// One budget in words: `budget "daily" (day 2026-11-25, ask): $4.10 of $5.00`, and what
/// crossing it did.
pub fn budget_line(b: &BudgetStatus) -> String {
    let mut line = format!(
        "budget {:?} ({} {}, {}): {} of {}",
        b.name,
        b.scope,
        if b.key.is_empty() { "-" } else { &b.key },
        b.action,
        dollars(b.spent_usd_micros),
        dollars(b.limit_usd_micros)
    );
    if b.crossed {
        line.push_str(match b.action.as_str() {
            "ask" => " CROSSED: tool calls wait for approval",
            "deny" => " CROSSED: tool calls are refused",
            _ => " CROSSED",
        });
    }
    if !b.ready {
        line.push_str(" (still summing the logs)");
    }
    line
}

/// `$1.2345` from millionths of a dollar.
fn dollars(micros: u64) -> String {
    format!("${}.{:06}", micros / 1_000_000, micros % 1_000_000)
}
