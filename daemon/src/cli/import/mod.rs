//! `dstream import claude-code [PATH…]`: turns the transcripts Claude Code already wrote (and
//! deletes after `cleanupPeriodDays`) into dstream sessions, through the built-in mapping
//! `claude-code-transcript` (see `plugins/claude-code-transcript.lua`).
//!
//! Idempotent: every event carries `metadata.import_id` (`<file stem>:<line uuid>`); before a
//! session is sent, its events (and its subagents') are read back and the lines already
//! stored are skipped (measured on 50 sessions, 6,600 lines, 30 MB, release build: importing
//! took 11.7 s, 566 lines/s, bound by the daemon's pipeline; a second run that reads every
//! session back and skips it all took 1.6 s; a state file would save that, but could claim
//! lines a wiped or other data directory never stored). A session with events from live capture (`metadata.source =
//! "claude-code"`) is left as it is. The jobs: finding transcripts (`find`), reading lines
//! (`lines`), talking to the daemon (`daemon`), progress and summary (`progress`).

mod daemon;
mod find;
mod lines;
mod problem;
mod progress;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::client::{ClientOpts, connect, print_json, runtime};
use problem::Problem;
use progress::{Progress, Summary};

#[derive(Args)]
pub struct ImportArgs {
    #[command(subcommand)]
    agent: Agent,
}

#[derive(Subcommand)]
enum Agent {
    /// Claude Code transcripts: `~/.claude/projects/<project>/<session>.jsonl` and their
    /// subagents' (`<session>/subagents/agent-<id>.jsonl`).
    ClaudeCode(ClaudeCodeArgs),
}

#[derive(Args)]
struct ClaudeCodeArgs {
    /// Transcript files, or folders to search for them [default: $CLAUDE_CONFIG_DIR/projects,
    /// else ~/.claude/projects].
    paths: Vec<PathBuf>,
    /// Read and count, store nothing (no daemon needed).
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    opts: ClientOpts,
}

pub fn run(args: ImportArgs) -> anyhow::Result<ExitCode> {
    match args.agent {
        Agent::ClaudeCode(a) => claude_code(a),
    }
}

fn claude_code(args: ClaudeCodeArgs) -> anyhow::Result<ExitCode> {
    let paths = if args.paths.is_empty() {
        let root = find::default_root()
            .ok_or_else(|| anyhow::anyhow!("no HOME: name the transcripts to import"))?;
        if !root.exists() {
            anyhow::bail!(
                "{} does not exist: no Claude Code transcripts to import here",
                root.display()
            );
        }
        vec![root]
    } else {
        args.paths.clone()
    };
    let mut problems = Vec::new();
    let transcripts = find::transcripts(&paths, &mut problems);
    let mut summary = Summary {
        dry_run: args.dry_run,
        sessions_found: transcripts.len() as u64,
        ..Summary::default()
    };
    let mut progress = Progress::new(transcripts.len() as u64, args.opts.json);
    let report = |progress: &Progress, summary: &mut Summary, new: Vec<Problem>| {
        for p in new {
            progress.problem(&p);
            summary.errors += p.cost_data() as u64;
            summary.problems.push(p);
        }
    };
    report(&progress, &mut summary, std::mem::take(&mut problems));

    runtime()?.block_on(async {
        let client = match args.dry_run {
            true => None,
            false => Some(connect(&args.opts).await?),
        };
        let existing: HashSet<String> = match &client {
            Some(c) => c
                .sessions()
                .await?
                .into_iter()
                .map(|s| s.session_id)
                .collect(),
            None => HashSet::new(),
        };
        for t in &transcripts {
            let mut files = Vec::new();
            for (agent, file) in t.files() {
                files.push(lines::read(file, &t.session_id, agent, &mut problems));
            }
            report(&progress, &mut summary, std::mem::take(&mut problems));
            let mut lines = lines::merge(files);
            if lines.is_empty() {
                progress.session(&t.session_id, "nothing to import");
                continue;
            }
            let Some(client) = &client else {
                summary.lines += lines.len() as u64;
                summary.unmapped += lines.iter().filter(|l| l.garbage).count() as u64;
                summary.sessions_imported += 1;
                progress.session(&t.session_id, &format!("{} lines", lines.len()));
                continue;
            };
            let known = daemon::known(client, &t.sessions(), &existing).await?;
            if known.live {
                summary.sessions_captured_live += 1;
                summary.lines_skipped += lines.len() as u64;
                progress.session(&t.session_id, "captured live, skipped");
                continue;
            }
            let before = lines.len();
            lines.retain(|l| !known.import_ids.contains(&l.import_id));
            summary.lines_skipped += (before - lines.len()) as u64;
            if lines.is_empty() {
                summary.sessions_already_imported += 1;
                progress.session(&t.session_id, "already imported, skipped");
                continue;
            }
            let sent = daemon::send(client, &t.session_id, lines, |n| progress.events(n)).await?;
            summary.sessions_imported += 1;
            summary.lines += sent.lines;
            summary.events += sent.events;
            summary.unmapped += sent.unmapped;
            let refused: Vec<Problem> = sent
                .refused
                .iter()
                .map(|(id, why)| Problem {
                    file: t.session_id.clone(),
                    line: None,
                    problem: format!("line {id} was refused: {why}"),
                })
                .collect();
            report(&progress, &mut summary, refused);
            progress.session(
                &t.session_id,
                &format!("imported {} lines, {} events", sent.lines, sent.events),
            );
        }
        anyhow::Ok(())
    })?;
    progress.finish(&mut summary);
    if args.opts.json {
        print_json(&summary)?;
    } else {
        progress::print_text(&summary);
    }
    Ok(ExitCode::SUCCESS)
}
