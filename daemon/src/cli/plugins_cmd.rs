//! `dstream plugins list | check FILE | reload`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use dstream_daemon::Config;
use dstream_sdk::protocol::{PluginsListResult, methods};

use super::client::{ClientOpts, connect, print_json, runtime};
use super::output::print_plugin;

#[derive(Args)]
pub struct PluginsArgs {
    #[command(subcommand)]
    command: PluginsCommand,
    #[command(flatten)]
    opts: ClientOpts,
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// The plugins the daemon runs, their counters, and files that failed to load.
    List,
    /// Load one Lua plugin file in a sandbox here (no daemon needed) and report what it
    /// declares, or why it fails. Exits 1 when it fails.
    Check {
        file: PathBuf,
        /// Configuration whose [plugins] limits and [plugins.lua.<name>] table apply.
        #[arg(long, env = "DSTREAM_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Load the plugin folder and the config file again now (the daemon also does this by
    /// itself when they change). Disabled plugins get another chance.
    Reload,
}

pub fn run(args: PluginsArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        PluginsCommand::Check { file, config } => {
            let config = match config {
                Some(path) => Config::load(&path)?,
                None => Config::default(),
            };
            match dstream_daemon::PluginSet::check(
                &file,
                &dstream_daemon::PluginSettings::from_config(&config),
            ) {
                Ok(info) => {
                    if args.opts.json {
                        print_json(&info)?;
                    } else {
                        println!(
                            "{}: ok: plugin {:?} ({}){}",
                            file.display(),
                            info.name,
                            info.hooks.join(", "),
                            if info.sources.is_empty() {
                                String::new()
                            } else {
                                format!(", maps {}", info.sources.join(", "))
                            }
                        );
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    if args.opts.json {
                        print_json(&serde_json::json!({"file": file, "error": e}))?;
                    } else {
                        eprintln!("{}: {e}", file.display());
                    }
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        PluginsCommand::List | PluginsCommand::Reload => {
            let method = match args.command {
                PluginsCommand::Reload => methods::PLUGINS_RELOAD,
                _ => methods::PLUGINS_LIST,
            };
            let list: PluginsListResult = runtime()?.block_on(async {
                let client = connect(&args.opts).await?;
                let value = client.call_raw(method, serde_json::json!({})).await?;
                anyhow::Ok(serde_json::from_value(value)?)
            })?;
            if args.opts.json {
                print_json(&list)?;
            } else {
                print_list(&list);
            }
            // A redaction failure withheld some event's content: worth a look, like a
            // plugin that does not load.
            let redaction_failed = list.redaction.as_ref().is_some_and(|r| r.failures > 0);
            Ok(if list.errors.is_empty() && !redaction_failed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

fn print_list(list: &PluginsListResult) {
    println!("plugin folder: {}", list.dir);
    println!(
        "{:<18} {:<9} {:<22} {:>8} {:>7} {:>9}  origin",
        "name", "state", "hooks", "calls", "errors", "µs/call"
    );
    for p in &list.plugins {
        print_plugin(p);
    }
    for e in &list.errors {
        println!("error: {}: {}", e.file, e.error);
    }
    if let Some(r) = &list.redaction {
        println!(
            "redaction (built in): {} events, {} redacted, {} failed",
            r.events, r.redacted, r.failures
        );
        if let Some(why) = &r.last_failure {
            println!("error: redaction failed, the event's content was withheld: {why}");
        }
    }
}
