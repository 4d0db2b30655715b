//! What the daemon says: whether it answers on its socket and with which version, its plugins
//! that failed to load, and how its relay stands.

use std::future::Future;
use std::time::Duration;

use dstream_sdk::Client;
use dstream_sdk::protocol::{HelloResult, PROTOCOL_VERSION, methods};

use super::report::{Answers, Check, Context, VERSION};
use super::service;

/// How long one question to the daemon may take: a daemon that is up answers in milliseconds.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);
/// Stuck relay streams reported one by one; more are counted.
const MAX_STREAM_LINES: usize = 5;

async fn within<T, E: std::fmt::Display>(
    what: &str,
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(ASK_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "no answer to {what} within {} s",
            ASK_TIMEOUT.as_secs()
        )),
    }
}

async fn call<R: serde::de::DeserializeOwned>(client: &Client, method: &str) -> Result<R, String> {
    let value = within(method, client.call_raw(method, serde_json::json!({}))).await?;
    serde_json::from_value(value).map_err(|e| format!("{method}: unexpected answer: {e}"))
}

/// How to get the daemon running: the service when there is one, else by hand.
fn start_fix() -> String {
    if service::installed().is_some() {
        service::start_command().to_string()
    } else {
        "dstream daemon".into()
    }
}

/// Checks 1: is the daemon up on the socket, and is it this version.
pub fn ask(cx: &Context) -> (Option<Answers>, Vec<Check>) {
    let runtime = match crate::cli::client::runtime() {
        Ok(r) => r,
        Err(e) => {
            return (
                None,
                vec![Check::fail(
                    "daemon",
                    format!("cannot start a runtime: {e}"),
                    "",
                )],
            );
        }
    };
    let socket = cx.socket.clone();
    let answers = runtime.block_on(async {
        let client = within("connect", Client::connect(&socket)).await?;
        let hello: HelloResult = within("hello", client.hello()).await?;
        let plugins = call(&client, methods::PLUGINS_LIST).await;
        let relay = call(&client, methods::RELAY_STATUS).await;
        let stats = call(&client, methods::STATS).await;
        let budgets = call(&client, methods::BUDGETS).await;
        Ok::<_, String>(Answers {
            hello,
            plugins,
            relay,
            stats,
            budgets,
        })
    });
    let shown = socket.display();
    match answers {
        Err(e) => (
            None,
            vec![Check::fail(
                "daemon",
                if e.contains(&shown.to_string()) {
                    format!("not reachable: {e}")
                } else {
                    format!("not reachable at {shown}: {e}")
                },
                start_fix(),
            )],
        ),
        Ok(a) => {
            let mut checks = vec![Check::ok(
                "daemon",
                format!("running at {shown} (dstream {})", a.hello.version),
            )];
            checks.push(if a.hello.protocol != PROTOCOL_VERSION {
                Check::fail(
                    "daemon.version",
                    format!(
                        "the daemon is dstream {} speaking protocol {}; this dstream ({VERSION}) \
                         speaks {PROTOCOL_VERSION}",
                        a.hello.version, a.hello.protocol
                    ),
                    restart_fix(),
                )
            } else if a.hello.version != VERSION {
                Check::warn(
                    "daemon.version",
                    format!(
                        "the daemon is dstream {}, this command is {VERSION}",
                        a.hello.version
                    ),
                    restart_fix(),
                )
            } else {
                Check::ok(
                    "daemon.version",
                    format!("dstream {VERSION}, as this command"),
                )
            });
            (Some(a), checks)
        }
    }
}

fn restart_fix() -> String {
    if service::installed().is_some() {
        service::restart_command().to_string()
    } else {
        "stop the running daemon, then run: dstream daemon".into()
    }
}

/// Check 6: plugins that failed to load or were disabled. With the daemon down, the plugin
/// folder's Lua files are loaded here, in a sandbox, as `dstream plugins check` does.
pub fn plugins(cx: &Context) -> Vec<Check> {
    let Some(a) = &cx.daemon else {
        return plugins_offline(cx);
    };
    let list = match &a.plugins {
        Ok(l) => l,
        Err(e) => {
            return vec![Check::warn(
                "plugins",
                format!("the daemon did not list its plugins: {e}"),
                "dstream plugins list",
            )];
        }
    };
    let mut out = Vec::new();
    for e in &list.errors {
        let file = std::path::Path::new(&e.file);
        // The config file's errors are listed here too.
        let fix = if file.extension().is_some_and(|x| x == "lua") {
            format!("dstream plugins check {}", super::report::sh(file))
        } else {
            format!(
                "fix {}, then: dstream plugins reload",
                super::report::sh(file)
            )
        };
        out.push(Check::fail(
            "plugins",
            format!("{} does not load: {}", e.file, e.error),
            fix,
        ));
    }
    for p in list.plugins.iter().filter(|p| p.state != "active") {
        out.push(Check::warn(
            "plugins",
            format!(
                "plugin {} is {}{}",
                p.name,
                p.state,
                p.error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
            "dstream plugins reload",
        ));
    }
    if out.is_empty() {
        out.push(Check::ok(
            "plugins",
            format!("{} loaded, none failed ({})", list.plugins.len(), list.dir),
        ));
    }
    out
}

fn plugins_offline(cx: &Context) -> Vec<Check> {
    let dir = cx.config.plugin_dir();
    let settings = dstream_daemon::PluginSettings::from_config(&cx.config);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "lua"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut out = Vec::new();
    for f in &files {
        if let Err(e) = dstream_daemon::PluginSet::check(f, &settings) {
            out.push(Check::fail(
                "plugins",
                format!("{} does not load: {e}", f.display()),
                format!("dstream plugins check {}", super::report::sh(f)),
            ));
        }
    }
    if out.is_empty() {
        out.push(Check::ok(
            "plugins",
            format!(
                "{} Lua file{} in {} load (checked here: the daemon is not running)",
                files.len(),
                if files.len() == 1 { "" } else { "s" },
                dir.display()
            ),
        ));
    }
    out
}

/// Check 7: a relay that cannot run, and streams that are stuck.
pub fn relay(cx: &Context) -> Vec<Check> {
    let Some(a) = &cx.daemon else {
        return vec![if cx.config.relay.enabled() {
            Check::warn(
                "relay",
                "configured, but the daemon is not running to relay",
                start_fix(),
            )
        } else {
            Check::ok("relay", "off ([relay] url is not set)")
        }];
    };
    let status = match &a.relay {
        Ok(s) => s,
        Err(e) => {
            return vec![Check::warn(
                "relay",
                format!("the daemon did not say how its relay stands: {e}"),
                "dstream relay status",
            )];
        }
    };
    if !status.enabled {
        return vec![Check::ok("relay", "off ([relay] url is not set)")];
    }
    let target = status.target.as_deref().unwrap_or("?");
    if let Some(e) = &status.error {
        return vec![Check::fail(
            "relay",
            format!("the relay to {target} cannot run: {e}"),
            "fix [relay] in the configuration as the message says, then: dstream relay retry",
        )];
    }
    let mut out = Vec::new();
    let stuck: Vec<_> = status
        .streams
        .iter()
        .filter(|s| matches!(s.state.as_str(), "failed" | "backing_off"))
        .collect();
    // A server that is down holds every stream: a few lines say so, the rest is a count.
    for s in stuck.iter().take(MAX_STREAM_LINES) {
        out.push(Check::warn(
            "relay",
            format!(
                "session {} is {} ({} events behind){}",
                s.session_id,
                s.state,
                s.lag,
                s.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            "dstream relay retry",
        ));
    }
    if stuck.len() > MAX_STREAM_LINES {
        out.push(Check::warn(
            "relay",
            format!(
                "{} more sessions are failed or backing off (dstream relay status lists them)",
                stuck.len() - MAX_STREAM_LINES
            ),
            "dstream relay retry",
        ));
    }
    if out.is_empty() {
        out.push(Check::ok(
            "relay",
            format!(
                "relaying to {target}: {} streams, {} events behind",
                status.totals.streams, status.totals.lag_events
            ),
        ));
    }
    out
}
