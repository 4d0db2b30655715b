//! `dstream relay status`: where each session stands on the remote Durable Streams server;
//! `dstream relay retry`: try again now, instead of after the backoff or a config change.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use dstream_sdk::protocol::{RelayStatusResult, RelayStreamStatus, methods};

use super::client::{ClientOpts, connect, print_json, runtime};
use super::output;

#[derive(Args)]
pub struct RelayArgs {
    #[command(subcommand)]
    command: RelayCommand,
    #[command(flatten)]
    opts: ClientOpts,
}

#[derive(Subcommand)]
enum RelayCommand {
    /// Per session: the last local LSN, the last one the server acknowledged, the lag, the
    /// state (live, catching_up, backing_off with the next try, failed with the reason).
    Status,
    /// Ends every backoff now and restarts the streams that stopped (as a configuration
    /// change would): for when the server is back, or its answer was fixed.
    Retry,
}

pub fn run(args: RelayArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        RelayCommand::Status => status(&args.opts),
        RelayCommand::Retry => retry(&args.opts),
    }
}

fn retry(opts: &ClientOpts) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = connect(opts).await?;
        let value = client
            .call_raw(methods::RELAY_RETRY, serde_json::json!({}))
            .await?;
        if opts.json {
            print_json(&value)?;
        } else if value["enabled"] == true {
            println!("relay: every stream tries again now");
        } else {
            println!("relay: off (set [relay] url in the configuration)");
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn status(opts: &ClientOpts) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = connect(opts).await?;
        let value = client
            .call_raw(methods::RELAY_STATUS, serde_json::json!({}))
            .await?;
        if opts.json {
            print_json(&value)?;
            return Ok(ExitCode::SUCCESS);
        }
        let status: RelayStatusResult = serde_json::from_value(value)?;
        print_status(&status);
        Ok(ExitCode::SUCCESS)
    })
}

fn print_status(s: &RelayStatusResult) {
    if !s.enabled {
        println!("relay: off (set [relay] url in the configuration)");
        return;
    }
    println!("relay: {}", s.target.as_deref().unwrap_or("?"));
    if let Some(e) = &s.error {
        println!("error: {e}");
    }
    let t = &s.totals;
    println!(
        "{} streams, {} events behind, {} failed; sent {} events ({}) in {} batches, {} retries",
        t.streams,
        t.lag_events,
        t.failed_streams,
        t.events_sent,
        output::bytes(t.bytes_sent),
        t.batches,
        t.retries
    );
    if s.streams.is_empty() {
        return;
    }
    println!(
        "{:<30} {:>9} {:>9} {:>7} {:>10}  state",
        "session", "local", "acked", "lag", "sent"
    );
    for st in &s.streams {
        println!(
            "{:<30} {:>9} {:>9} {:>7} {:>10}  {}",
            output::clip(&st.session_id, 30),
            st.local_lsn,
            st.acked_lsn,
            st.lag,
            output::bytes(st.bytes_sent),
            describe(st)
        );
    }
}

fn describe(st: &RelayStreamStatus) -> String {
    let mut s = st.state.replace('_', " ");
    if let Some(ms) = st.next_try_in_ms {
        s.push_str(&format!(" (next try in {:.1} s)", ms as f64 / 1000.0));
    }
    if let Some(r) = &st.reason {
        s.push_str(": ");
        s.push_str(r);
    }
    s
}
