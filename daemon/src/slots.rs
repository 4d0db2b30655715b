//! Connection slots: at most `daemon.max_connections` connections are served at once. A
//! newcomer past that takes the place of a connection that holds nothing: first the oldest
//! that never finished a frame, else the one quiet longest. So a flood of idle or quiet sockets
//! from one client never locks out a hook, whose connection sends its frame at once; only when
//! every connection is busy is the newcomer refused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Connections told to make room that may still be closing when the next one is accepted.
const EVICTING: usize = 16;

/// A connection silent for less than this is never taken over: it may be between two frames.
const QUIET_FOR: Duration = Duration::from_secs(1);

pub struct Slots {
    max: usize,
    /// Connections still open, those told to make room included.
    open: std::sync::atomic::AtomicUsize,
    base: Instant,
    held: Mutex<HashMap<u64, Arc<Slot>>>,
    next: AtomicU64,
}

/// One connection's slot, as its connection reports it.
pub struct Slot {
    id: u64,
    opened: Instant,
    framed: AtomicBool,
    /// Milliseconds (since `Slots::base`, plus 1) since the connection holds nothing; 0: busy.
    quiet_since: AtomicU64,
    /// Wakes the connection when its slot was given to a newcomer.
    pub evicted: Notify,
}

/// A slot in use; dropping it frees the slot.
pub struct SlotGuard {
    slots: Arc<Slots>,
    pub slot: Arc<Slot>,
}

impl Slots {
    pub fn new(max: usize) -> Arc<Slots> {
        Arc::new(Slots {
            max: max.max(1),
            open: std::sync::atomic::AtomicUsize::new(0),
            base: Instant::now(),
            held: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        })
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Whether another connection may be accepted now: connections told to make room close
    /// a moment later, and accepting faster than they do would run out of descriptors.
    pub fn may_accept(&self) -> bool {
        self.open.load(Ordering::Relaxed) < self.max + EVICTING
    }

    /// A slot for a new connection, taking one over if all are held; `None` if all are busy.
    pub fn admit(self: &Arc<Self>) -> Option<SlotGuard> {
        let mut held = self.held.lock().unwrap();
        if held.len() >= self.max {
            let victim = self.victim(&held)?;
            if let Some(v) = held.remove(&victim) {
                v.evicted.notify_one();
            }
        }
        let slot = Arc::new(Slot {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            opened: Instant::now(),
            framed: AtomicBool::new(false),
            quiet_since: AtomicU64::new(0),
            evicted: Notify::new(),
        });
        held.insert(slot.id, slot.clone());
        self.open.fetch_add(1, Ordering::Relaxed);
        Some(SlotGuard {
            slots: self.clone(),
            slot,
        })
    }

    fn victim(&self, held: &HashMap<u64, Arc<Slot>>) -> Option<u64> {
        let unframed = held
            .values()
            .filter(|s| !s.framed.load(Ordering::Relaxed))
            .min_by_key(|s| s.opened);
        if let Some(s) = unframed {
            return Some(s.id);
        }
        // Quiet since at most `limit` (in `now` units): quiet for QUIET_FOR or longer.
        let limit = self.now().checked_sub(QUIET_FOR.as_millis() as u64)?;
        held.values()
            .map(|s| (s.quiet_since.load(Ordering::Relaxed), s.id))
            .filter(|&(q, _)| q != 0 && q <= limit)
            .min()
            .map(|(_, id)| id)
    }

    fn now(&self) -> u64 {
        self.base.elapsed().as_millis() as u64 + 1
    }
}

impl SlotGuard {
    /// A frame started arriving: the connection is busy.
    pub fn busy(&self) {
        self.slot.quiet_since.store(0, Ordering::Relaxed);
    }

    /// A frame was handled; `holding` when subscriptions or requests are still under way.
    pub fn framed(&self, holding: bool) {
        self.slot.framed.store(true, Ordering::Relaxed);
        let since = if holding { 0 } else { self.slots.now() };
        self.slot.quiet_since.store(since, Ordering::Relaxed);
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.slots.held.lock().unwrap().remove(&self.slot.id);
        self.slots.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newcomer_takes_the_place_of_an_unframed_then_a_quiet_connection_never_a_busy_one() {
        let slots = Slots::new(2);
        let busy = slots.admit().unwrap();
        busy.framed(true);
        let idle = slots.admit().unwrap();
        let newcomer = slots.admit().expect("the idle one makes room");
        assert!(tokio_test_notified(&idle.slot.evicted));
        newcomer.framed(true);
        assert!(slots.admit().is_none(), "both connections are busy");
        newcomer.framed(false);
        assert!(slots.admit().is_none(), "quiet for less than a second");
        drop(busy);
        assert!(slots.admit().is_some(), "a freed slot is free");
    }

    fn tokio_test_notified(n: &Notify) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(10), n.notified())
                .await
                .is_ok()
        })
    }
}
