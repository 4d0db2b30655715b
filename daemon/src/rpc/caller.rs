//! What a connection's methods know of their client: who it is, where its replies go, and
//! what it has under way (appends in flight, subscriptions, requests answered later).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{PeerInfo, codes};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::outbound::Outbound;
use crate::state::DaemonState;
use crate::subscription::Subscription;

/// Appends one connection may have waiting for their acknowledgement.
const MAX_APPENDS_IN_FLIGHT: usize = 1024;
/// `checkpoint.await`s one connection may have waiting at once.
const MAX_WAITING: usize = 1024;

/// What the methods know of the client calling them: who it is (from the OS), where its
/// replies go, and its subscriptions. Owned by its connection.
pub struct Caller {
    pub peer: PeerInfo,
    pub out: Outbound,
    pub(super) in_flight: Arc<Semaphore>,
    pub(super) subscriptions: HashMap<String, JoinHandle<()>>,
    /// Subscriptions and waiting requests still running (see `TaskCount`).
    tasks: Arc<AtomicUsize>,
    /// Requests answered later (`checkpoint.await`): ended with the connection.
    waiting: Vec<JoinHandle<()>>,
    /// Whether the agent this client sends events for was noted (once per connection).
    agent_noted: std::sync::atomic::AtomicBool,
    /// This connection among all of the daemon's: the pipeline serves clients in turn.
    pub(super) id: u64,
    next_subscription: u64,
    /// Nothing the client sent is waiting behind the request being served: it likely waits
    /// for this reply before sending more, so an append may be committed on the spot
    /// ([`crate::store::Store::append_direct`]). Set by the socket's reader; false elsewhere.
    pub alone: bool,
}

impl Caller {
    /// This client sends an agent's events (or waits for its decisions): note the agent.
    pub(crate) fn note_agent(&self, state: &DaemonState) {
        if !self
            .agent_noted
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            state.agents.note_client(self.peer.pid);
        }
    }

    pub fn new(peer: PeerInfo, out: Outbound) -> Caller {
        Caller {
            peer,
            out,
            in_flight: Arc::new(Semaphore::new(MAX_APPENDS_IN_FLIGHT)),
            subscriptions: HashMap::new(),
            tasks: Arc::default(),
            waiting: Vec::new(),
            agent_noted: Default::default(),
            id: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
            next_subscription: 0,
            alone: false,
        }
    }

    pub(super) fn new_subscription_id(&mut self) -> String {
        self.next_subscription += 1;
        format!("sub-{}", self.next_subscription)
    }

    /// Keeps a request that answers later, so it ends with the connection.
    pub(super) fn keep_waiting(&mut self, task: JoinHandle<()>) {
        self.waiting.push(task);
    }

    /// Room for one more request that answers later (finished ones are forgotten first).
    pub(super) fn may_wait(&mut self) -> Result<(), RpcError> {
        self.waiting.retain(|t| !t.is_finished());
        if self.waiting.len() >= MAX_WAITING {
            return Err(RpcError::new(
                codes::CONNECTION_LIMIT,
                format!("this connection already has {MAX_WAITING} checkpoint.await waiting"),
            ));
        }
        Ok(())
    }

    /// What this connection has under way, for its slot to see.
    pub fn work(&self) -> crate::slots::Work {
        crate::slots::Work {
            tasks: self.tasks.clone(),
            in_flight: self.in_flight.clone(),
            size: MAX_APPENDS_IN_FLIGHT,
        }
    }

    /// Counts a task (subscription, waiting request) as under way until the guard drops.
    pub(super) fn count_task(&self) -> TaskCount {
        self.tasks.fetch_add(1, Ordering::Relaxed);
        TaskCount(self.tasks.clone())
    }

    /// Starts a subscription's feed, after its reply was sent.
    pub fn start(&mut self, sub: Subscription) {
        let count = self.count_task();
        self.subscriptions.insert(sub.id.clone(), sub.spawn(count));
    }
}

/// Held by a running task of a connection; dropped (also on abort) when it ends.
pub struct TaskCount(Arc<AtomicUsize>);

impl Drop for TaskCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        for (_, task) in self.subscriptions.drain() {
            task.abort();
        }
        for task in self.waiting.drain(..) {
            task.abort();
        }
    }
}
