//! The daemon: open the store, listen on the local socket, serve connections, stop cleanly.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use interprocess::local_socket::tokio::Listener;
use interprocess::local_socket::traits::tokio::Listener as _;
use interprocess::local_socket::{GenericFilePath, ListenerOptions, ToFsName};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::checkpoint::Checkpoints;
use crate::component::Components;
use crate::config::Config;
use crate::config_feed::ConfigFeed;
use crate::hub::Hub;
use crate::pipeline::Pipeline;
use crate::state::{DaemonState, MemoryBudget};
use crate::store::{RecoveryNote, Store, StoreSettings};

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
    #[error("cannot start the pipeline: {0}")]
    Pipeline(io::Error),
    #[error("cannot rebuild the checkpoints: {0}")]
    Checkpoints(io::Error),
    #[error("cannot start the relay: {0}")]
    Relay(io::Error),
    #[error("cannot start draining the spool: {0}")]
    Spool(io::Error),
    #[error(transparent)]
    Redact(#[from] crate::redact::PatternError),
}

/// A daemon ready to serve: its store open and recovered, its socket bound.
pub struct Started {
    pub state: Arc<DaemonState>,
    pub listener: Listener,
    pub socket: PathBuf,
}

/// Opens the store (taking the data directory's lock first: holding it proves no other daemon
/// owns this data), recovers it, and binds the socket.
pub async fn start(config: Config) -> Result<Started, StartError> {
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
        pipeline_syncs_over: crate::store::PIPELINE_SYNCS_OVER,
    };
    let hub = Hub::new(config.subscriptions.live_buffer_bytes);
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
            RecoveryNote::UnsyncedLoss {
                session,
                first_lsn,
                last_lsn,
            } => {
                tracing::warn!(%session, first_lsn, last_lsn, "resumed above lsns that may have been acknowledged before a power failure and not synced")
            }
        }
    }
    // Every event is redacted on its way into the store, whoever appends it.
    let redactor = crate::redact::Redactor::new(&config.redact)?;
    let redact = crate::redact::Shared::new(redactor);
    {
        let redact = redact.clone();
        store.set_before_append(Arc::new(move |event| {
            let g = redact.guard(event);
            (g.event, g.error)
        }));
    }
    let listener = listen(&socket)?;
    // The components, started in order and stopped in reverse; each new configuration the
    // feed publishes reaches them all.
    let components = Arc::new(Components::default());
    components.add(Arc::new(store.clone()));
    let checkpoints = Checkpoints::start(store.clone(), &data_dir, config.checkpoints.grant_ttl_ms)
        .map_err(StartError::Checkpoints)?;
    components.add(checkpoints.clone());
    let feed = Arc::new(ConfigFeed::new(config.clone()));
    let budgets = crate::budget::Budgets::start(store.clone(), hub.clone(), &config.budgets);
    components.add(budgets.clone());
    let pipeline = Pipeline::start(
        store.clone(),
        hub.clone(),
        checkpoints.clone(),
        budgets.clone(),
        feed.clone(),
        redact,
    )
    .map_err(StartError::Pipeline)?;
    components.add(pipeline.clone());
    let relay = crate::relay::Relay::start(
        store.clone(),
        hub.clone(),
        checkpoints.clone(),
        pipeline.watch_plugins(),
        &config.relay,
        &data_dir,
    )
    .map_err(StartError::Relay)?;
    components.add(relay.clone());
    components.add(crate::compaction::Compaction::start(store.clone(), &config));
    let retention = crate::retention::Retention::start(
        store.clone(),
        checkpoints.clone(),
        relay.clone(),
        &config.retention,
    );
    components.add(retention.clone());
    // Off the append path: it follows the hub and catches up from the logs on its own thread.
    let search = crate::search::Search::start(store.clone(), hub.clone(), &config);
    pipeline.set_tool_index(search.clone());
    components.add(search.clone());
    // Last: what hooks spooled while no daemon ran goes through everything above.
    let spool = crate::spool::drain::SpoolDrain::start(
        store.clone(),
        pipeline.clone(),
        &data_dir,
        config.daemon.max_frame_bytes,
    )
    .map_err(StartError::Spool)?;
    components.add(spool.clone());
    // Shared with the HTTP listener, whose hooks name agents too.
    let agents = Arc::new(crate::agent_procs::AgentProcs::default());
    let http = crate::http::HttpListener::start(
        &config.http,
        &config.otlp,
        &data_dir,
        crate::http::DaemonParts {
            pipeline: pipeline.clone(),
            store: store.clone(),
            hub: hub.clone(),
            checkpoints: checkpoints.clone(),
            agents: agents.clone(),
        },
    )
    .await;
    components.add(http.clone());
    if let Some(w) = crate::watch::start(pipeline.clone(), config.file.clone()) {
        components.add(Arc::new(w));
    }
    components.follow(&feed);
    tracing::info!(
        socket = %socket.display(),
        data_dir = %data_dir.display(),
        fsync = config.store.fsync.as_str(),
        sessions = store.sessions().len(),
        startup_ms = started.elapsed().as_millis() as u64,
        "dstream daemon ready"
    );
    tokio::spawn(release_unused_pages(search.clone(), store.clone()));
    let state = Arc::new(DaemonState {
        memory: MemoryBudget::new(config.daemon.max_client_memory_bytes),
        slots: crate::slots::Slots::new(connection_limit(&config)),
        feed,
        components,
        store,
        hub,
        pipeline,
        checkpoints,
        budgets,
        relay,
        retention,
        spool,
        http,
        search,
        stats: Default::default(),
        started,
        agents,
    });
    state
        .http
        .set_backend(Arc::new(crate::rpc::web::WebRpc::new(&state)));
    Ok(Started {
        state,
        listener,
        socket,
    })
}

/// Once start-up has settled (the search index opened and caught up, the last thing the
/// daemon starts on a thread of its own), the code pages only start-up ran leave the resident
/// set; a catch-up over a large history is not waited for past `SETTLE_LIMIT`. Then again
/// each time the daemon has taken no append, and its search index indexed nothing, for
/// `IDLE_SPELL` after some work: a burst of it (an agent's session, an import) leaves the code
/// and heap it touched resident, and a daemon kept running all day spends most of it waiting.
async fn release_unused_pages(search: Arc<crate::search::Search>, store: Store) {
    const SETTLE_LIMIT: Duration = Duration::from_secs(10);
    const IDLE_SPELL: Duration = Duration::from_secs(30);
    let release = |why: &'static str| async move {
        if let Ok(bytes) = tokio::task::spawn_blocking(crate::util::unused_pages::release).await {
            tracing::debug!(bytes, why, "unused code pages released");
        }
    };
    let _ = tokio::time::timeout(SETTLE_LIMIT, search.first_pass()).await;
    release("start-up done").await;
    // The index catching up after a burst it let pass is work too.
    let work = || {
        let appends = store
            .stats()
            .appends
            .load(std::sync::atomic::Ordering::Relaxed);
        appends + search.indexed_events()
    };
    let mut spells = crate::util::unused_pages::IdleSpells::new(work());
    loop {
        tokio::time::sleep(IDLE_SPELL).await;
        if spells.release_now(work()) {
            release("idle").await;
        }
    }
}

/// Serves connections until `shutdown` completes, then stops cleanly: no new requests, every
/// append queued is written and synced and acknowledged, the socket file is removed.
pub async fn run(started: Started, shutdown: impl Future<Output = ()>) {
    let Started {
        state,
        listener,
        socket,
    } = started;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut failures = AcceptFailures::default();
    tokio::pin!(shutdown);
    loop {
        // Connections told to make room must close before more are accepted (descriptors).
        let wait_for_room = !state.slots.may_accept();
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(5)), if wait_for_room => {}
            accepted = listener.accept(), if !wait_for_room => match accepted {
                Ok(stream) => {
                    failures.reset();
                    match state.slots.admit(crate::connection::peer_of(&stream).pid) {
                        Some(slot) => {
                            connections.spawn(crate::connection::serve(stream, state.clone(), stop_rx.clone(), slot));
                        }
                        None => {
                            let message = format!(
                                "too many connections: the daemon serves {} (daemon.max_connections) \
                                 and every one is busy; try again shortly",
                                state.slots.max()
                            );
                            connections.spawn(async move {
                                crate::connection::refuse(&stream, dstream_sdk::protocol::codes::TOO_MANY_CONNECTIONS, message).await;
                            });
                        }
                    }
                }
                Err(e) => {
                    let pause = failures.failed(&e);
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = &mut shutdown => break,
                    }
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    // Stop reading requests, let the store write and sync what it has queued, then give the
    // connections a moment to send the acknowledgements.
    drop(listener);
    let _ = stop_tx.send(true);
    // The last started stops first; the store, first started, writes and syncs what it has
    // queued last.
    state.components.stop().await;
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    remove_socket(&socket);
    tracing::info!("stopped");
}

/// How many connections to serve: `daemon.max_connections`, lowered to what the open-file
/// limit leaves once the store's logs and a margin (WAL, plugins, relay) are counted, so that
/// accept never fails for want of descriptors while the daemon is full.
fn connection_limit(config: &Config) -> usize {
    let want = config.daemon.max_connections;
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes only into `lim`.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
            let soft = lim.rlim_cur as u64;
            let room = soft
                .saturating_sub(config.store.max_open_files as u64 + 64)
                .max(8) as usize;
            if room < want {
                tracing::warn!(
                    max_connections = want,
                    open_file_limit = soft,
                    serving = room,
                    "daemon.max_connections lowered to fit the open-file limit"
                );
                return room;
            }
        }
    }
    want
}

/// Failed accepts (out of descriptors, say): back off, doubling up to a second, and log once
/// per 10 s with a count instead of at every try.
#[derive(Default)]
struct AcceptFailures {
    streak: u32,
    unlogged: u64,
    logged: Option<Instant>,
}

impl AcceptFailures {
    fn failed(&mut self, e: &io::Error) -> Duration {
        self.streak = self.streak.saturating_add(1);
        self.unlogged += 1;
        if self
            .logged
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            tracing::warn!(error = %e, failures = self.unlogged, "accept failed");
            self.unlogged = 0;
            self.logged = Some(Instant::now());
        }
        Duration::from_millis(50u64 << self.streak.min(5).saturating_sub(1))
            .min(Duration::from_secs(1))
    }

    fn reset(&mut self) {
        self.streak = 0;
    }
}

/// Runs the daemon until SIGINT or SIGTERM. Everything acknowledged is on disk when it returns.
pub async fn run_until_signal(config: Config) -> Result<(), StartError> {
    let started = start(config).await?;
    run(started, async {
        let signal = shutdown_signal().await;
        tracing::info!(signal, "stopping");
    })
    .await;
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

/// Binds the local socket: owner-only, in an owner-only directory; never deletes anything
/// that is not a dead daemon's socket.
#[cfg(unix)]
pub fn listen(socket: &Path) -> Result<Listener, StartError> {
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
pub fn listen(socket: &Path) -> Result<Listener, StartError> {
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

#[cfg(test)]
mod tests {
    use dstream_sdk::RpcError;
    use dstream_sdk::protocol::{Method, PeerInfo, codes};
    use serde_json::value::RawValue;

    use super::*;
    use crate::outbound::Outbound;
    use crate::rpc::{Caller, Reply, dispatch};

    /// A daemon's state on a fresh data directory, with no plugins and no relay.
    async fn daemon(dir: &std::path::Path) -> Arc<DaemonState> {
        let mut config = Config::default();
        config.daemon.socket = dir.join("sock");
        config.daemon.data_dir = dir.join("data");
        config.plugins.dir = dir.join("plugins");
        std::fs::create_dir_all(&config.plugins.dir).unwrap();
        start(config).await.unwrap().state
    }

    /// What `name` with empty params answers (`None`: answered later, or a subscription).
    async fn call(
        state: &Arc<DaemonState>,
        caller: &mut Caller,
        name: &str,
    ) -> Option<Result<Vec<u8>, RpcError>> {
        let charge = state.memory.try_charge(1).unwrap();
        let params = RawValue::from_string("{}".into()).unwrap();
        let id = RawValue::from_string("1".into()).unwrap();
        match dispatch(state, caller, name, Some(&params), Some(&id), charge).await {
            Reply::Now(result) => Some(result),
            Reply::Submitted | Reply::Subscribed(_) => None,
        }
    }

    /// `rpc::dispatch` on a daemon started in-process: tested here rather than in `rpc`, which
    /// may not reach up to the layer that assembles a daemon.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_method_name_reaches_a_handler_and_no_other_name_does() {
        let dir = tempfile::tempdir().unwrap();
        let state = daemon(dir.path()).await;
        let (out, _frames) = Outbound::new(1 << 20);
        let peer = PeerInfo {
            uid: None,
            gid: None,
            pid: None,
        };
        let mut caller = Caller::new(peer, out);
        for &method in Method::ALL {
            // Empty params are wrong for many methods: any answer but "unknown method" shows
            // the name reached its handler.
            if let Some(Err(e)) = call(&state, &mut caller, method.as_str()).await {
                assert_ne!(e.code, codes::METHOD_NOT_FOUND, "{method}: {e}");
            }
        }
        for name in ["no.such.method", "", "Append", "relay", "checkpoint.await "] {
            let e = call(&state, &mut caller, name).await.unwrap().unwrap_err();
            assert_eq!(e.code, codes::METHOD_NOT_FOUND, "{name:?}");
            assert_eq!(e.message, format!("unknown method {name:?}"));
        }
        state.store.shutdown().await;
    }
}
