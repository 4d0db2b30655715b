//! Full-text search over every session's events: an embedded SQLite FTS5 index that is a
//! cache derived from the logs (`<data_dir>/search/index.sqlite`).
//!
//! - [`extract`]: which text of an event is indexed;
//! - [`index`]: the file: schema, batched writes, removal, queries, the damage check;
//! - [`boot`]: telling a machine restart from a daemon crash, since the index never syncs;
//! - [`observer`]: the `dstream-search` thread that fills it from the hub and the logs;
//! - [`pace`]: when it steps aside for a burst of appends and reads the logs after;
//! - [`snippet`]: the user's query as FTS5 syntax, and the highlighted snippets;
//! - [`query`]: answering `search`: ranked hits, each read back from its log for its snippet;
//! - [`tool_uses`]: every tool request by `tool_use_id`, for the pipeline's joins.
//!
//! This module is the component: it starts and stops the thread as `[search] enabled` says,
//! hands `reindex` to it, and reports for `stats`.

pub mod boot;
pub mod extract;
pub mod index;
pub mod observer;
pub mod pace;
pub mod query;
pub mod settings;
pub mod snippet;
pub mod tool_uses;
pub mod usage_rows;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use dstream_sdk::protocol::SearchStats;
use tokio::sync::{mpsc, oneshot};

use crate::component::{Component, Stopping};
use crate::config::Config;
use crate::hub::Hub;
use crate::search::observer::{Command, Reindexed, Shared};
use crate::store::Store;

pub struct Search {
    store: Store,
    hub: Arc<Hub>,
    dir: PathBuf,
    rt: tokio::runtime::Handle,
    shared: Arc<Shared>,
    running: Mutex<Option<Running>>,
    /// Connections for queries, each with the index generation it was opened on.
    readers: Mutex<Vec<(u64, rusqlite::Connection)>>,
}

struct Running {
    thread: std::thread::JoinHandle<()>,
    commands: mpsc::UnboundedSender<Command>,
}

/// Why `search` or `reindex` could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("search is off: `[search] enabled = false` in the configuration")]
    Disabled,
    #[error(
        "invalid search query {query:?}: {detail}. Words match as typed (a word with \
         punctuation, like x.txt, is matched as a phrase); use \"quotes\" for a phrase, AND, \
         OR and NOT between terms, a trailing * for a prefix, and balanced parentheses"
    )]
    Syntax { query: String, detail: String },
    #[error("{0}")]
    Index(String),
}

impl Search {
    /// Starts indexing, on its own thread, when `[search] enabled`. Call on the runtime.
    pub fn start(store: Store, hub: Arc<Hub>, config: &Config) -> Arc<Search> {
        let search = Arc::new(Search {
            store,
            hub,
            dir: index_dir(&config.data_dir()),
            rt: tokio::runtime::Handle::current(),
            shared: Arc::new(Shared::default()),
            running: Mutex::new(None),
            readers: Mutex::new(Vec::new()),
        });
        search.reconfigure(config);
        search
    }

    /// Returns once the index thread has opened the index and caught up with the logs
    /// after start (or failed to), or at once when it is not running.
    pub async fn first_pass(&self) {
        let shared = self.shared.clone();
        let notified = shared.first_pass.notified();
        if shared.first_pass_done.load(Ordering::Acquire) || self.running.lock().unwrap().is_none()
        {
            return;
        }
        notified.await;
    }

    fn turn_on(&self) {
        let mut running = self.running.lock().unwrap();
        if running.is_some() {
            return;
        }
        self.shared.stopping.store(false, Ordering::Relaxed);
        match observer::spawn(
            self.store.clone(),
            &self.hub,
            self.dir.clone(),
            self.shared.clone(),
            self.rt.clone(),
        ) {
            Ok((thread, commands)) => *running = Some(Running { thread, commands }),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the search index thread");
                *self.shared.last_error.lock().unwrap() = Some(e.to_string());
            }
        }
    }

    /// Stops the thread and waits for it (blocking: call off the async workers).
    fn turn_off(&self) {
        let Some(r) = self.running.lock().unwrap().take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::Relaxed);
        drop(r.commands);
        let _ = r.thread.join();
    }

    pub fn enabled(&self) -> bool {
        self.running.lock().unwrap().is_some()
    }

    /// Drops the index and builds it again from the logs; answers once it has caught up.
    pub async fn reindex(&self) -> Result<Reindexed, SearchError> {
        let (tx, rx) = oneshot::channel();
        {
            let running = self.running.lock().unwrap();
            let r = running.as_ref().ok_or(SearchError::Disabled)?;
            r.commands
                .send(Command::Reindex(tx))
                .map_err(|_| SearchError::Disabled)?;
        }
        rx.await
            .map_err(|_| SearchError::Index("the search index stopped".into()))?
            .map_err(SearchError::Index)
    }

    /// Events committed but not indexed yet, over every session.
    pub fn behind_by(&self) -> u64 {
        let indexed = self.shared.indexed.lock().unwrap();
        self.store
            .sessions()
            .iter()
            .map(|s| {
                s.committed_lsn()
                    .saturating_sub(indexed.get(&s.id).copied().unwrap_or(0))
            })
            .sum()
    }

    /// Events indexed since the daemon started.
    pub fn indexed_events(&self) -> u64 {
        self.shared.indexed_events.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> SearchStats {
        SearchStats {
            enabled: self.enabled(),
            indexed_events: self.shared.indexed_events.load(Ordering::Relaxed),
            behind_by: self.behind_by(),
            index_bytes: index::bytes_on_disk(&self.dir),
            last_error: self.shared.last_error.lock().unwrap().clone(),
            waiting_out_burst: self.shared.waiting_out_burst.load(Ordering::Relaxed),
            bursts_waited_out: self.shared.bursts_waited_out.load(Ordering::Relaxed),
        }
    }
}

/// Where the index lives under the data directory.
pub fn index_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("search")
}

impl Component for Search {
    fn name(&self) -> &'static str {
        "search"
    }

    fn reconfigure(&self, config: &Config) {
        self.shared
            .busy_appends_per_sec
            .store(config.search.busy_appends_per_sec, Ordering::Relaxed);
        if config.search.enabled {
            self.turn_on();
        } else {
            self.turn_off();
        }
    }

    fn stop(&self) -> Stopping<'_> {
        let running = self.running.lock().unwrap().take();
        self.shared.stopping.store(true, Ordering::Relaxed);
        Box::pin(async move {
            let Some(r) = running else { return };
            drop(r.commands);
            // Joining blocks until the batch being written is in.
            let _ = tokio::task::spawn_blocking(move || r.thread.join()).await;
        })
    }
}
