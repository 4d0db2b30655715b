//! How a client command reaches the daemon: the options every one takes (`--socket`,
//! `--json`), its runtime, its connection, its JSON output.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use dstream_sdk::Client;

/// `--socket` and `--json`, shared by every client command.
#[derive(Args, Clone)]
pub struct ClientOpts {
    /// Socket of the daemon [default: $DSTREAM_SOCKET, else $XDG_RUNTIME_DIR/dstream/dstream.sock, else ~/.dstream/dstream.sock]
    #[arg(long, global = true)]
    pub socket: Option<PathBuf>,
    /// Print JSON (one object per line) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

/// A small runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

pub async fn connect(opts: &ClientOpts) -> anyhow::Result<Client> {
    let path = opts
        .socket
        .clone()
        .unwrap_or_else(dstream_sdk::socket::default_socket_path);
    Ok(Client::connect(path).await?)
}

pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}
