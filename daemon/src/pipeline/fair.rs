//! The pipeline thread's queue: ingests waiting, served one client at a time in turn, so a
//! client flooding the pipeline delays another client's tool call by at most one event of its
//! own. Kept apart from the worker because it is pure bookkeeping, testable on its own.

use std::collections::{HashMap, VecDeque};

use super::ingest::Ingest;

/// Ingests queued per client, and the clients with some, in turn. Bounded by what clients
/// may have in flight (each connection's permits, the daemon's memory budget).
#[derive(Default)]
pub(super) struct FairQueue {
    by_client: HashMap<u64, VecDeque<Ingest>>,
    turn: VecDeque<u64>,
}

impl FairQueue {
    pub(super) fn push(&mut self, i: Ingest) {
        let queue = self.by_client.entry(i.client).or_default();
        if queue.is_empty() {
            self.turn.push_back(i.client);
        }
        queue.push_back(i);
    }

    pub(super) fn pop(&mut self) -> Option<Ingest> {
        let client = self.turn.pop_front()?;
        let queue = self.by_client.get_mut(&client)?;
        let next = queue.pop_front();
        if queue.is_empty() {
            self.by_client.remove(&client);
        } else {
            self.turn.push_back(client);
        }
        next
    }

    pub(super) fn is_empty(&self) -> bool {
        self.turn.is_empty()
    }
}

