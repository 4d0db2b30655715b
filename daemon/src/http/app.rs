//! What the listener's handlers share: the pipeline records go into, the token and origins
//! the guard checks, the body bound, the forwarder to the user's collector, and the counters
//! `stats` shows (the forwarder keeps its own).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::checkpoint::Checkpoints;
use crate::http::forward::Forwarder;
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
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub stats: Arc<HttpStats>,
    pub forward: Arc<Forwarder>,
}

/// Counters for `dstream stats`.
#[derive(Debug, Default)]
pub struct HttpStats {
    pub otlp_records: AtomicU64,
    pub otlp_metric_points: AtomicU64,
    /// Requests refused by the guard.
    pub refused: AtomicU64,
}
