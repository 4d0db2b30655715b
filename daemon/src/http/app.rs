//! What the listener's handlers share: the pipeline records go into, the token and origins
//! the guard checks, the body bound, the forwarder to the user's collector, and the counters
//! `stats` shows (the forwarder keeps its own).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};

use crate::agent_procs::AgentProcs;
use crate::checkpoint::Checkpoints;
use crate::http::forward::Forwarder;
use crate::http::web::WebBackend;
use crate::http::web::login::Logins;
use crate::hub::Hub;
use crate::pipeline::Pipeline;
use crate::store::Store;

/// What the handlers share.
pub struct App {
    pub pipeline: Arc<Pipeline>,
    /// Where Durable Streams reads read from: the logs, then the committed stream.
    pub store: Store,
    pub hub: Arc<Hub>,
    /// Where the HTTP hook waits for a held call's decision.
    pub checkpoints: Arc<Checkpoints>,
    pub token: String,
    /// The agents' processes: an HTTP hook's sender is one (see `hooks`).
    pub agents: Arc<AgentProcs>,
    /// Connections whose sender was looked up already (see `hooks`), the latest few.
    pub noted_peers: Mutex<VecDeque<SocketAddr>>,
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub stats: Arc<HttpStats>,
    pub forward: Arc<Forwarder>,
    /// Where the listener is bound (the other end of each connection, to find its process).
    pub bound: SocketAddr,
    /// The web view's logins and cookies.
    pub logins: Logins,
    /// The name of the web view's cookie (per port).
    pub cookie_name: String,
    /// The daemon's methods, for the web view's API; set once the daemon has started.
    pub web: OnceLock<Arc<dyn WebBackend>>,
}

/// Counters for `dstream stats`.
#[derive(Debug, Default)]
pub struct HttpStats {
    pub otlp_records: AtomicU64,
    pub otlp_metric_points: AtomicU64,
    /// Requests refused by the guard.
    pub refused: AtomicU64,
}
