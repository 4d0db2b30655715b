//! A shard's queue: ingests waiting, served one client at a time in turn, so a client
//! flooding the pipeline delays another client's tool call by at most one event of its own.
//! Kept apart from the thread's loop because it is pure bookkeeping, testable on its own.

use std::collections::{HashMap, VecDeque};

use super::ingest::Ingest;

/// What the queue holds: something from a client.
pub(super) trait FromClient {
    fn client(&self) -> u64;
}

impl FromClient for Ingest {
    fn client(&self) -> u64 {
        self.client
    }
}

/// Items queued per client, and the clients with some, in turn. Bounded by what clients
/// may have in flight (each connection's permits, the daemon's memory budget).
pub(super) struct FairQueue<T> {
    by_client: HashMap<u64, VecDeque<T>>,
    turn: VecDeque<u64>,
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        FairQueue {
            by_client: HashMap::new(),
            turn: VecDeque::new(),
        }
    }
}

impl<T: FromClient> FairQueue<T> {
    pub(super) fn push(&mut self, item: T) {
        let client = item.client();
        let queue = self.by_client.entry(client).or_default();
        if queue.is_empty() {
            self.turn.push_back(client);
        }
        queue.push_back(item);
    }

    pub(super) fn pop(&mut self) -> Option<T> {
        self.pop_if(|_| true)
    }

    /// The next item in turn, if `wanted` says so; else it stays first.
    pub(super) fn pop_if(&mut self, wanted: impl FnOnce(&T) -> bool) -> Option<T> {
        let client = *self.turn.front()?;
        let queue = self.by_client.get_mut(&client)?;
        if !wanted(queue.front()?) {
            return None;
        }
        self.turn.pop_front();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ingest(client: u64, n: u64) -> Ingest {
        Ingest::for_test(client, &format!("{client}:{n}"), &n)
    }

    #[test]
    fn clients_are_served_in_turn_each_in_arrival_order() {
        let mut q = FairQueue::<Ingest>::default();
        assert!(q.is_empty() && q.pop().is_none());
        for n in 0..3 {
            q.push(ingest(1, n));
        }
        q.push(ingest(2, 0));
        q.push(ingest(2, 1));
        let mut order = Vec::new();
        while let Some(i) = q.pop() {
            order.push(i.source);
            if order.len() == 2 {
                q.push(ingest(3, 0)); // joins the turn behind those already waiting
            }
        }
        assert_eq!(order, ["1:0", "2:0", "1:1", "2:1", "3:0", "1:2"]);
        q.push(ingest(4, 0));
        q.push(ingest(5, 0));
        assert!(q.pop_if(|i| i.client == 5).is_none(), "client 4 is first");
        assert_eq!(q.pop_if(|i| i.client == 4).unwrap().source, "4:0");
        assert_eq!(q.pop().unwrap().source, "5:0");
        assert!(q.is_empty() && q.by_client.is_empty());
    }
}
