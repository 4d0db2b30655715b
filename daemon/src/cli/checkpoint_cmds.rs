//! The commands of the person deciding: `pending`, `approve`, `reject`.

use dstream_daemon::util::backoff::Backoff;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use dstream_sdk::protocol::{
    CheckpointInfo, CheckpointListParams, CheckpointResolveParams, CheckpointState, codes,
};
use dstream_sdk::{Client, Error};

use super::client::{ClientOpts, connect, print_json, runtime};
use super::output;

#[derive(Args)]
pub struct PendingArgs {
    /// Only this session's checkpoints.
    #[arg(long)]
    session: Option<String>,
    /// Only calls of this tool (e.g. Bash).
    #[arg(long)]
    tool: Option<String>,
    /// Newest first (default: oldest first).
    #[arg(long)]
    newest: bool,
    /// Show at most this many (default and most: 10,000).
    #[arg(long)]
    limit: Option<usize>,
    #[command(flatten)]
    opts: ClientOpts,
}

#[derive(Args)]
pub struct ApproveArgs {
    /// The checkpoint (as `dstream pending` shows it).
    id: String,
    /// Why, for the agent and the log.
    #[arg(long)]
    note: Option<String>,
    /// Run the call with this input instead: a JSON file (`-` for stdin), e.g. the edited
    /// command `{"command": "ls -la"}`.
    #[arg(long, value_name = "FILE")]
    edit: Option<PathBuf>,
    /// Pick one of the checkpoint's options instead of a plain approve (e.g. approve_session).
    #[arg(long)]
    option: Option<String>,
    #[command(flatten)]
    opts: ClientOpts,
}

#[derive(Args)]
pub struct RejectArgs {
    /// The checkpoint (as `dstream pending` shows it).
    id: String,
    /// Why, for the agent and the log.
    #[arg(long)]
    note: Option<String>,
    #[command(flatten)]
    opts: ClientOpts,
}

pub fn pending(args: PendingArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = connect(&args.opts).await?;
        let page = client
            .checkpoint_list_page(&CheckpointListParams {
                state: Some(CheckpointState::Pending.as_str().into()),
                session_id: args.session.clone(),
                tool: args.tool.clone(),
                newest_first: args.newest,
                limit: args.limit,
            })
            .await?;
        let list = &page.checkpoints;
        if args.opts.json {
            for c in list {
                print_json(c)?;
            }
        } else if list.is_empty() {
            println!("no pending checkpoints");
        } else {
            for c in list {
                println!("{}", pending_line(c, dstream_daemon::util::time::now_ms()));
            }
        }
        // A real checkpoint must not hide behind a flood of others: say what was left out.
        if page.total > list.len() {
            eprintln!(
                "showing {} of {} pending ({} first); narrow with --session or --tool, or see \
                 the rest with --newest",
                list.len(),
                page.total,
                if args.newest { "newest" } else { "oldest" },
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

pub fn approve(args: ApproveArgs) -> anyhow::Result<ExitCode> {
    let input = match &args.edit {
        None => None,
        Some(path) => {
            let text = if path.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("read the edited input")?
            } else {
                std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?
            };
            let value: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", path.display()))?;
            if !value.is_object() {
                bail!(
                    "{} must hold a JSON object: the tool's whole input",
                    path.display()
                );
            }
            Some(value)
        }
    };
    let decision = args.option.clone().unwrap_or_else(|| "approve".into());
    resolve(&args.opts, &args.id, decision, args.note, input)
}

pub fn reject(args: RejectArgs) -> anyhow::Result<ExitCode> {
    resolve(&args.opts, &args.id, "reject".into(), args.note, None)
}

fn resolve(
    opts: &ClientOpts,
    id: &str,
    decision: String,
    note: Option<String>,
    input: Option<serde_json::Value>,
) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = connect(opts).await?;
        let params = CheckpointResolveParams {
            id: id.to_string(),
            decision,
            note,
            input,
        };
        let info = resolve_retrying(&client, &params).await?;
        if opts.json {
            print_json(&info)?;
        } else {
            let d = info.decision.as_ref();
            println!(
                "{} {} ({}) by {}: {}",
                info.id,
                info.state,
                d.map_or("", |d| d.decision.as_str()),
                d.map_or("", |d| d.decided_by.as_str()),
                info.summary
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// A checkpoint seen the instant it was written may still be syncing: try a few times.
pub async fn resolve_retrying(
    client: &Client,
    params: &CheckpointResolveParams,
) -> Result<CheckpointInfo, Error> {
    let mut tries = 0;
    let mut backoff = Backoff::new(Duration::from_millis(25), Duration::from_millis(200));
    loop {
        match client.checkpoint_resolve(params).await {
            Err(e) if e.code() == Some(codes::CHECKPOINT_NOT_READY) && tries < 12 => {
                tries += 1;
                tokio::time::sleep(backoff.next_delay(None)).await;
            }
            other => return other,
        }
    }
}

/// `ck_…  2m ago  4m left  session  Bash: rm -rf build`
pub fn pending_line(c: &CheckpointInfo, now: u64) -> String {
    format!(
        "{}  {:>8} ago  {:>8} left  {}  {}",
        c.id,
        output::age(now.saturating_sub(c.created_ms)),
        output::age(c.deadline_ms.saturating_sub(now)),
        output::clip(&c.session_id, 24),
        output::clip(&c.summary, 100),
    )
}
