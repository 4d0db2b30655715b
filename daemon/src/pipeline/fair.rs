//! The pipeline thread's queue: ingests waiting, served one client at a time in turn, so a client
//! flooding the pipeline delays another client's tool call by at most one event of its own.
//! Kept apart from the thread's loop because it is pure bookkeeping, testable on its own.

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

#[cfg(test)]
mod tests {
    use super::*;

    fn ingest(client: u64, n: u64) -> Ingest {
        Ingest {
            client,
            source: format!("{client}:{n}"),
            raw: serde_json::value::to_raw_value(&n).unwrap(),
            session_id: None,
            reply_by_ms: None,
            spooled: None,
            gone: None,
            done: Box::new(|_| {}),
        }
    }

    #[test]
    fn clients_are_served_in_turn_each_in_arrival_order() {
        let mut q = FairQueue::default();
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
        assert!(q.is_empty() && q.by_client.is_empty());
    }
}
