//! Commands that make or end sessions other than by appending: `fork`, `gc`.

use std::process::ExitCode;

use clap::Args;

use super::client::{ClientOpts, connect, print_json, runtime};
use super::output;

#[derive(Args)]
pub struct ForkArgs {
    /// The session to fork.
    session: String,
    /// The fork holds the session's events 1..=LSN; its next append takes LSN + 1.
    #[arg(long = "at", value_name = "LSN")]
    at: u64,
    /// The new session's id [default: <SESSION>.fork-<ulid>].
    #[arg(long = "as", value_name = "NEW")]
    new: Option<String>,
    #[command(flatten)]
    opts: ClientOpts,
}

/// Forks a session and prints the new session's id.
pub fn fork(args: ForkArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = connect(&args.opts).await?;
        let r = client
            .fork(&args.session, args.at, args.new.as_deref())
            .await?;
        if args.opts.json {
            print_json(&r)?;
        } else {
            println!(
                "{} forked from {} at lsn {} ({} copied); appends continue at lsn {}",
                r.session_id,
                r.forked_from,
                r.fork_lsn,
                output::bytes(r.bytes),
                r.fork_lsn + 1
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

#[derive(Args)]
pub struct GcArgs {
    /// Only list what would be deleted (and what is kept, and why).
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    opts: ClientOpts,
}

/// Deletes the sessions past `retention.delete_after` now, or lists them.
pub fn gc(args: GcArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let r = connect(&args.opts).await?.gc(args.dry_run).await?;
        if args.opts.json {
            print_json(&r)?;
            return Ok(ExitCode::SUCCESS);
        }
        let verb = if r.dry_run { "would delete" } else { "deleted" };
        println!(
            "delete_after = {:?}: sessions whose last event is before {}",
            r.delete_after,
            output::time(r.cutoff_ms)
        );
        if !r.deleted.is_empty() {
            println!("{:<40} {:<24} {:>10}", "SESSION", "LAST EVENT", "SIZE");
        }
        for s in &r.deleted {
            println!(
                "{:<40} {:<24} {:>10}",
                s.session_id,
                output::time(s.last_ts),
                output::bytes(s.bytes)
            );
        }
        for s in &r.kept {
            println!(
                "kept {} (last event {}): {}",
                s.session_id,
                output::time(s.last_ts),
                s.kept_because.as_deref().unwrap_or_default()
            );
        }
        println!(
            "{verb} {} session{}, {}",
            r.deleted.len(),
            if r.deleted.len() == 1 { "" } else { "s" },
            output::bytes(r.total_bytes)
        );
        Ok(ExitCode::SUCCESS)
    })
}
