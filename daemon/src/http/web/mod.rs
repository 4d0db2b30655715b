//! The web view: its page and files (`assets`, embedded), the login that turns a one-time
//! link from `dstream open` into a session cookie (`login`, served by `login_route`), and the JSON API the page reads
//! and decides through (`api`). The API's answers come from the daemon's own methods through a
//! [`WebBackend`] the daemon installs once it has started, so this module needs nothing
//! above it.

pub mod api;
pub mod assets;
pub mod login;
pub mod login_route;

use std::future::Future;
use std::pin::Pin;

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{CheckpointResolveParams, SearchParams, UsageParams};

/// What the page asks of the daemon.
#[derive(Debug)]
pub enum WebCall {
    /// The sessions with the most recent last event first, at most `limit`; only those named
    /// in `ids` when it is given (those that exist).
    Sessions {
        limit: usize,
        ids: Option<Vec<String>>,
    },
    /// Checkpoints in `state` (all when none).
    Checkpoints {
        state: Option<String>,
    },
    /// A person's decision, from the process `pid` (checked against the agents' trees).
    Decide {
        params: CheckpointResolveParams,
        pid: Option<i32>,
    },
    Usage(UsageParams),
    Search(SearchParams),
}

pub type Answer<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>, RpcError>> + Send + 'a>>;

/// Answers [`WebCall`]s with JSON, as the socket's methods do.
pub trait WebBackend: Send + Sync {
    fn call(&self, call: WebCall) -> Answer<'_>;
}
