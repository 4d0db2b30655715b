//! What every part of the running daemon shares: the configuration, the store, the stream of
//! committed events, the counters and the memory budget for clients. It sits below the socket
//! layer, so that the flow reads top-down (server → connection → rpc → store → hub →
//! observers) with no module reaching back up.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::checkpoint::Checkpoints;
use crate::component::Components;
use crate::config::Config;
use crate::config_feed::ConfigFeed;
use crate::hub::Hub;
use crate::pipeline::Pipeline;
use crate::store::Store;

/// Counters for `stats`.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub connections: AtomicU64,
    pub subscriptions: AtomicU64,
    pub lagged: AtomicU64,
    pub frame_errors: AtomicU64,
    /// Requests refused because the memory budget for clients was spent.
    pub overloaded: AtomicU64,
}

pub struct DaemonState {
    /// The configuration in force and every one after it (see [`ConfigFeed`]).
    pub feed: Arc<ConfigFeed>,
    /// The components, to stop them in order.
    pub components: Arc<Components>,
    pub store: Store,
    pub hub: Arc<Hub>,
    pub pipeline: Arc<Pipeline>,
    pub checkpoints: Arc<Checkpoints>,
    pub relay: Arc<crate::relay::Relay>,
    pub budgets: Arc<crate::budget::Budgets>,
    /// Deletes sessions past `retention.delete_after`.
    pub retention: Arc<crate::retention::Retention>,
    /// Drains what hooks spooled while no daemon ran.
    pub(crate) spool: Arc<crate::spool::drain::SpoolDrain>,
    /// The HTTP listener (OTLP receiver).
    pub(crate) http: Arc<crate::http::HttpListener>,
    /// The full-text search index.
    pub(crate) search: Arc<crate::search::Search>,
    pub stats: ServerStats,
    pub memory: MemoryBudget,
    pub slots: Arc<crate::slots::Slots>,
    pub started: Instant,
    /// The agents' processes: no decision may come from one of them or their children.
    pub agents: Arc<crate::agent_procs::AgentProcs>,
}

impl DaemonState {
    /// The configuration in force now.
    pub fn config(&self) -> Arc<Config> {
        self.feed.current()
    }
}

/// Bytes the daemon holds for all clients together. Past it, new requests are refused with a
/// clear error instead of the daemon growing until the OS kills it. Half is for requests
/// being handled (appends waiting for their commit, ingests being parsed), half for frames
/// still arriving (beyond the first [`FREE_FRAME_BYTES`] of each connection), so a client
/// that never finishes its frames cannot starve the requests of the others.
pub struct MemoryBudget {
    permits: Arc<Semaphore>,
    frames: Arc<Semaphore>,
    cap: usize,
}

/// Bytes of a connection's frame buffer not charged to the budget (like its read buffer, they
/// are bounded by `daemon.max_connections`), so that small requests always get through.
pub const FREE_FRAME_BYTES: usize = 64 * 1024;

impl MemoryBudget {
    /// `cap_bytes` in all: half for requests, half for frames still arriving.
    pub fn new(cap_bytes: usize) -> MemoryBudget {
        let cap = (cap_bytes / 2).clamp(1, Semaphore::MAX_PERMITS);
        MemoryBudget {
            permits: Arc::new(Semaphore::new(cap)),
            frames: Arc::new(Semaphore::new(cap)),
            cap,
        }
    }

    /// Takes `bytes` from the budget until the returned charge is dropped; `None` when spent.
    pub fn try_charge(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(bytes.clamp(1, self.cap)).unwrap_or(u32::MAX);
        self.permits.clone().try_acquire_many_owned(n).ok()
    }

    /// Bytes currently held for clients.
    pub fn in_use(&self) -> usize {
        2 * self.cap - self.permits.available_permits() - self.frames.available_permits()
    }

    /// Bytes held for requests at most (half the budget).
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// An empty charge on the frames' half, that grows and shrinks with a connection's frame
    /// buffer (less its first [`FREE_FRAME_BYTES`]).
    pub fn held(&self) -> Held {
        Held {
            permits: self.frames.clone(),
            bytes: 0,
            cap: self.cap,
        }
    }
}

/// A charge on the budget that follows the size of something that grows and shrinks.
pub struct Held {
    permits: Arc<Semaphore>,
    bytes: usize,
    cap: usize,
}

impl Held {
    /// Makes the charge fit a buffer of `capacity` bytes; `false` (and the charge unchanged)
    /// when the budget has no room.
    pub fn resize(&mut self, capacity: usize) -> bool {
        let bytes = capacity.saturating_sub(FREE_FRAME_BYTES).min(self.cap);
        if bytes > self.bytes {
            let more = u32::try_from(bytes - self.bytes).unwrap_or(u32::MAX);
            match self.permits.try_acquire_many(more) {
                Ok(p) => p.forget(),
                Err(_) => return false,
            }
        } else {
            self.permits.add_permits(self.bytes - bytes);
        }
        self.bytes = bytes;
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.permits.add_permits(self.bytes);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refuses_past_its_cap_and_recovers_when_charges_end() {
        let budget = MemoryBudget::new(2000);
        let a = budget.try_charge(600).unwrap();
        assert!(budget.try_charge(600).is_none(), "600 + 600 > 1000");
        let b = budget.try_charge(400).unwrap();
        assert_eq!(budget.in_use(), 1000);
        drop((a, b));
        assert_eq!(budget.in_use(), 0);
        // A request larger than the whole budget takes all of it rather than never fitting.
        let all = budget.try_charge(5000).unwrap();
        assert!(budget.try_charge(1).is_none());
        drop(all);
    }

    #[test]
    fn a_held_charge_grows_within_the_budget_and_gives_everything_back() {
        let budget = MemoryBudget::new(2000);
        let mut held = budget.held();
        let mut other = budget.held();
        assert!(held.resize(FREE_FRAME_BYTES + 700));
        assert!(other.resize(FREE_FRAME_BYTES + 200));
        assert!(!held.resize(FREE_FRAME_BYTES + 900), "900 + 200 > 1000");
        let request = budget
            .try_charge(1000)
            .expect("requests have their own half");
        assert_eq!(budget.in_use(), 1900);
        assert!(held.resize(100), "the first FREE_FRAME_BYTES are free");
        assert_eq!(budget.in_use(), 1200);
        drop((held, other, request));
        assert_eq!(budget.in_use(), 0);
    }
}
