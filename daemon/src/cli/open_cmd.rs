//! `dstream open [SESSION]`: opens the web view in the browser, logged in. It mints a one-time
//! login link from the daemon's HTTP token (which only this user can read), so the secret
//! itself never appears in a URL, a history or a process list; the link works once, for two
//! minutes, and the browser keeps an HttpOnly cookie instead.

use std::path::PathBuf;
use std::process::{ExitCode, Stdio};

use clap::Args;

use crate::cli::client::runtime;
use dstream_daemon::config::{Config, DaemonFlags};
use dstream_daemon::http::{token, web};

#[derive(Args)]
pub struct OpenArgs {
    /// Open this session's page instead of the list.
    session: Option<String>,
    /// Print the link instead of starting a browser.
    #[arg(long)]
    print: bool,
    /// Socket of the daemon [default: $DSTREAM_SOCKET, else the config's, else the default]
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Data directory (where `http.token` is) [default: $DSTREAM_DATA_DIR, else the config's]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Configuration file [default: $DSTREAM_CONFIG, else the user's config.toml]
    #[arg(long, env = "DSTREAM_CONFIG")]
    config: Option<PathBuf>,
}

pub fn run(args: OpenArgs) -> anyhow::Result<ExitCode> {
    if let Some(s) = &args.session {
        dstream_sdk::validate_session_id(s)
            .map_err(|e| anyhow::anyhow!("{s:?} is not a session id: {e}"))?;
    }
    let flags = DaemonFlags {
        config: args.config.clone(),
        socket: args.socket.clone(),
        data_dir: args.data_dir.clone(),
        ..DaemonFlags::default()
    };
    let config = Config::resolve(&flags)?;
    // Where the running daemon listens (it may have picked a free port): ask it.
    let socket = config.socket_path();
    let stats = runtime()?
        .block_on(async {
            let client = dstream_sdk::Client::connect(&socket).await?;
            client.stats().await
        })
        .map_err(|e| {
            anyhow::anyhow!(
                "no daemon answers at {} ({e}); start one with `dstream start`",
                socket.display()
            )
        })?;
    let Some(listen) = stats.http.listen else {
        anyhow::bail!(
            "the daemon's HTTP listener is off: {}",
            stats.http.off.as_deref().unwrap_or("no reason given")
        );
    };
    // The daemon says where its token is; `--data-dir` or the configuration otherwise.
    let token_file = match (&args.data_dir, &stats.http.token_file) {
        (None, Some(file)) => PathBuf::from(file),
        _ => token::path(&config.data_dir()),
    };
    let secret = std::fs::read_to_string(&token_file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", token_file.display()))?;
    let code = web::login::mint_code(secret.trim(), dstream_daemon::util::time::now_ms())?;
    let next = match &args.session {
        Some(s) => format!("/#/session/{s}"),
        None => "/".to_string(),
    };
    let url = format!(
        "http://{listen}/login?code={code}&next={}",
        percent_encode(&next)
    );
    if args.print || !open_browser(&url) {
        println!("{url}");
        if !args.print {
            eprintln!(
                "dstream: no browser could be started; open the link above (it works once, for two minutes)"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Everything but unreserved characters, percent-encoded (for a query value).
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `$BROWSER`, else the desktop's opener; whether one started.
fn open_browser(url: &str) -> bool {
    let mut candidates: Vec<String> = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .into_iter()
        .collect();
    candidates.push(
        if cfg!(target_os = "macos") {
            "open"
        } else {
            "xdg-open"
        }
        .into(),
    );
    candidates.iter().any(|program| {
        std::process::Command::new(program)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .is_ok()
    })
}

#[cfg(test)]
mod tests {
    use crate::cli::open_cmd::percent_encode;

    #[test]
    fn the_next_path_is_encoded_for_a_query() {
        assert_eq!(percent_encode("/#/session/a b"), "/%23/session/a%20b");
    }
}
