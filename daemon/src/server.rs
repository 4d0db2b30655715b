//! The daemon: open the store, listen on the local socket, serve connections, stop cleanly.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use interprocess::local_socket::tokio::Listener;
use interprocess::local_socket::traits::tokio::Listener as _;
use interprocess::local_socket::{GenericFilePath, ListenerOptions, ToFsName};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::store::{RecoveryNote, Store, StoreSettings};

/// Counters for `stats`.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub connections: AtomicU64,
    pub subscriptions: AtomicU64,
    pub lagged: AtomicU64,
    pub frame_errors: AtomicU64,
}

/// What every connection shares.
pub struct Context {
    pub config: Config,
    pub store: Store,
    pub hub: Arc<crate::hub::Hub>,
    pub stats: Arc<ServerStats>,
    pub started: Instant,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("another dstream daemon is already listening on {}", .0.display())]
    SocketInUse(PathBuf),
    #[error(
        "{} exists and is not a socket (it is {kind}); refusing to start rather than delete it: \
         remove it or choose another socket path",
        path.display()
    )]
    NotASocket { path: PathBuf, kind: &'static str },
    #[error("cannot listen on {}: {source}", path.display())]
    Listen { path: PathBuf, source: io::Error },
}

/// Runs the daemon until SIGINT or SIGTERM. Everything acknowledged is on disk when it returns.
pub async fn run(config: Config) -> Result<(), StartError> {
    let started = Instant::now();
    let data_dir = config.data_dir();
    let socket = config.socket_path();
    let settings = StoreSettings {
        fsync: config.store.fsync,
        fsync_interval_ms: config.store.fsync_interval_ms,
        index_interval_bytes: config.store.index_interval_bytes,
        verify_on_start: config.store.verify_on_start,
        max_open_files: config.store.max_open_files,
        // Room for at least two of the largest events, so one batch always fits.
        wal_bytes: config
            .store
            .wal_bytes
            .max(2 * config.daemon.max_frame_bytes as u64 + (1 << 20)),
    };
    // The data-dir lock comes first: holding it proves no other daemon owns this data.
    let hub = crate::hub::Hub::new(config.subscriptions.live_buffer_bytes);
    let (store, notes) = Store::open(&data_dir, settings, hub.clone()).await?;
    for note in &notes {
        match note {
            RecoveryNote::TornTail {
                session,
                cut_bytes,
                saved_to,
                ..
            } => {
                tracing::warn!(%session, cut_bytes, saved_to = %saved_to.display(), "recovered a torn log tail")
            }
            RecoveryNote::Quarantined {
                session,
                reason,
                offset,
            } => {
                tracing::error!(%session, %reason, offset, "quarantined a corrupt log; `dstream repair` moves the damage aside")
            }
        }
    }
    let listener = listen(&socket)?;
    tracing::info!(
        socket = %socket.display(),
        data_dir = %data_dir.display(),
        fsync = config.store.fsync.as_str(),
        sessions = store.sessions().len(),
        startup_ms = started.elapsed().as_millis() as u64,
        "dstream daemon ready"
    );

    let ctx = Arc::new(Context {
        config,
        store: store.clone(),
        hub,
        stats: Arc::default(),
        started,
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(stream) => {
                    connections.spawn(crate::connection::serve(stream, ctx.clone(), stop_rx.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            signal = &mut stop => {
                tracing::info!(signal, "stopping");
                break;
            }
        }
    }
    // Stop reading requests, let the store write and sync what it has queued, then give the
    // connections a moment to send the acknowledgements.
    drop(listener);
    let _ = stop_tx.send(true);
    store.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    remove_socket(&socket);
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "ctrl-c"
    }
}

#[cfg(unix)]
fn listen(socket: &Path) -> Result<Listener, StartError> {
    use interprocess::os::unix::local_socket::ListenerOptionsExt;
    use std::os::unix::fs::PermissionsExt;
    let err = |source| StartError::Listen {
        path: socket.into(),
        source,
    };
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        let mut b = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(b.recursive(true), 0o700);
        b.create(dir).map_err(err)?;
        // The mode asked of mkdir is masked by the umask; set it outright.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
    }
    // Not followed: a symlink, even to a socket, is not ours to replace.
    match std::fs::symlink_metadata(socket) {
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt;
            let t = meta.file_type();
            if !t.is_socket() {
                let kind = if t.is_file() {
                    "a regular file"
                } else if t.is_dir() {
                    "a directory"
                } else if t.is_symlink() {
                    "a symbolic link"
                } else {
                    "neither a socket nor a regular file"
                };
                return Err(StartError::NotASocket {
                    path: socket.into(),
                    kind,
                });
            }
            // Alive: refuse. Dead (a killed daemon's leftover): replace.
            if std::os::unix::net::UnixStream::connect(socket).is_ok() {
                return Err(StartError::SocketInUse(socket.into()));
            }
            tracing::info!(socket = %socket.display(), "replacing a stale socket");
            std::fs::remove_file(socket).map_err(err)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let name = socket.to_fs_name::<GenericFilePath>().map_err(err)?;
    let listener = ListenerOptions::new()
        .name(name)
        .mode(0o600)
        .reclaim_name(false)
        .create_tokio()
        .map_err(err)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    Ok(listener)
}

#[cfg(windows)]
fn listen(socket: &Path) -> Result<Listener, StartError> {
    // A named pipe: access is limited to the creating user by the default security descriptor.
    let err = |source| StartError::Listen {
        path: socket.into(),
        source,
    };
    let name = socket.to_fs_name::<GenericFilePath>().map_err(err)?;
    ListenerOptions::new()
        .name(name)
        .create_tokio()
        .map_err(err)
}

fn remove_socket(socket: &Path) {
    #[cfg(unix)]
    if let Err(e) = std::fs::remove_file(socket)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(socket = %socket.display(), error = %e, "could not remove the socket");
    }
    #[cfg(not(unix))]
    let _ = socket;
}

/// Resident set size of this process, where the OS reports it.
pub fn rss_bytes() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }
    #[cfg(not(target_os = "linux"))]
    None
}
