//! `dstream import claude-code|opencode [PATH…]`: turns the sessions agents already wrote
//! (Claude Code's transcripts, which it deletes after `cleanupPeriodDays`; OpenCode's SQLite
//! database or `opencode export` files) into dstream sessions, through the built-in mappings
//! `claude-code-transcript` and `opencode-export` (see `plugins/`).
//!
//! Idempotent: every event carries `metadata.import_id` (for Claude Code `<file stem>:<line
//! uuid>`, for OpenCode `<session>:<part id>`); before a session is sent, its events (and its
//! subagents') are read back and the lines already stored are skipped (measured on 50 sessions,
//! 6,600 lines, 30 MB, release build: importing took 11.7 s, 566 lines/s, bound by the daemon's
//! pipeline; a second run that reads every session back and skips it all took 1.6 s; a state
//! file would save that, but could claim lines a wiped or other data directory never stored).
//! A session with events from live capture (`metadata.source` = the agent's live source) is
//! left as it is. The jobs: finding transcripts (`find`), reading their lines (`lines`),
//! OpenCode's sessions (`opencode`, read from its database by `opencode_db`), talking to the
//! daemon (`daemon`), progress and summary (`progress`).

mod daemon;
mod find;
mod lines;
mod opencode;
mod opencode_db;
mod problem;
mod progress;
mod unit;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::client::{ClientOpts, connect, print_json, runtime};
use problem::Problem;
use progress::{Progress, Summary};
use unit::{Mapping, Unit};

#[derive(Args)]
pub struct ImportArgs {
    #[command(subcommand)]
    agent: Agent,
}

#[derive(Subcommand)]
enum Agent {
    /// Claude Code transcripts: `~/.claude/projects/<project>/<session>.jsonl` and their
    /// subagents' (`<session>/subagents/agent-<id>.jsonl`).
    ClaudeCode(ImportOpts),
    /// OpenCode sessions: its database (`$XDG_DATA_HOME/opencode/opencode.db`, else
    /// `~/.local/share/opencode/opencode.db`), or JSON files `opencode export <session>` wrote.
    #[command(name = "opencode")]
    OpenCode(ImportOpts),
}

#[derive(Args)]
struct ImportOpts {
    /// Files, or folders to search for them [default: the agent's own storage].
    paths: Vec<PathBuf>,
    /// Read and count, store nothing (no daemon needed).
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    opts: ClientOpts,
}

pub fn run(args: ImportArgs) -> anyhow::Result<ExitCode> {
    match args.agent {
        Agent::ClaudeCode(a) => {
            let paths = paths_or_default(a.paths.clone(), find::default_root(), "Claude Code")?;
            let mut problems = Vec::new();
            let units = find::transcripts(&paths, &mut problems)
                .into_iter()
                .map(|t| Unit {
                    session_id: t.session_id.clone(),
                    sessions: t.sessions(),
                    load: Box::new(move |problems| {
                        let files = t
                            .files()
                            .map(|(agent, file)| lines::read(file, &t.session_id, agent, problems))
                            .collect();
                        lines::merge(files)
                    }),
                })
                .collect();
            import(units, problems, &daemon::CLAUDE_CODE, &a)
        }
        Agent::OpenCode(a) => {
            let paths = paths_or_default(a.paths.clone(), opencode::default_db(), "OpenCode")?;
            let mut problems = Vec::new();
            let units = opencode::units(&paths, &mut problems);
            import(units, problems, &daemon::OPENCODE, &a)
        }
    }
}

/// The paths named, else the agent's default storage, which must exist.
fn paths_or_default(
    paths: Vec<PathBuf>,
    default: Option<PathBuf>,
    agent: &str,
) -> anyhow::Result<Vec<PathBuf>> {
    if !paths.is_empty() {
        return Ok(paths);
    }
    let root = default.ok_or_else(|| anyhow::anyhow!("no HOME: name the files to import"))?;
    if !root.exists() {
        anyhow::bail!(
            "{} does not exist: no {agent} sessions to import here",
            root.display()
        );
    }
    Ok(vec![root])
}

fn import(
    units: Vec<Unit>,
    mut problems: Vec<Problem>,
    mapping: &Mapping,
    args: &ImportOpts,
) -> anyhow::Result<ExitCode> {
    let mut summary = Summary {
        dry_run: args.dry_run,
        sessions_found: units.len() as u64,
        ..Summary::default()
    };
    let mut progress = Progress::new(units.len() as u64, args.opts.json);
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
        for unit in units {
            let mut lines = (unit.load)(&mut problems);
            report(&progress, &mut summary, std::mem::take(&mut problems));
            let id = &unit.session_id;
            if lines.is_empty() {
                progress.session(id, "nothing to import");
                continue;
            }
            let Some(client) = &client else {
                summary.lines += lines.len() as u64;
                summary.unmapped += lines.iter().filter(|l| l.garbage).count() as u64;
                summary.sessions_imported += 1;
                progress.session(id, &format!("{} lines", lines.len()));
                continue;
            };
            let known = daemon::known(client, mapping, &unit.sessions, &existing).await?;
            if known.live {
                summary.sessions_captured_live += 1;
                summary.lines_skipped += lines.len() as u64;
                progress.session(id, "captured live, skipped");
                continue;
            }
            let before = lines.len();
            lines.retain(|l| !known.import_ids.contains(&l.import_id));
            summary.lines_skipped += (before - lines.len()) as u64;
            if lines.is_empty() {
                summary.sessions_already_imported += 1;
                progress.session(id, "already imported, skipped");
                continue;
            }
            let sent = daemon::send(client, mapping, id, lines, |n| progress.events(n)).await?;
            summary.sessions_imported += 1;
            summary.lines += sent.lines;
            summary.events += sent.events;
            summary.unmapped += sent.unmapped;
            let refused: Vec<Problem> = sent
                .refused
                .iter()
                .map(|(line, why)| Problem {
                    file: id.clone(),
                    line: None,
                    problem: format!("line {line} was refused: {why}"),
                })
                .collect();
            report(&progress, &mut summary, refused);
            progress.session(
                id,
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
