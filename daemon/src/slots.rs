//! Connection slots: at most `daemon.max_connections` connections are served at once. A
//! newcomer past that takes the place of a connection that holds nothing: first the oldest
//! that never finished a frame, else the one quiet longest. When every connection is busy
//! (subscribed, say) and one process holds half of them or more, a newcomer from another
//! process takes the place of that process's oldest one. So a flood from one client, idle or
//! busy, never locks out a hook; otherwise the newcomer is refused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};

/// Connections told to make room that may still be closing when the next one is accepted.
const EVICTING: usize = 16;

/// A connection silent for less than this is never taken over: it may be between two frames.
const QUIET_FOR: Duration = Duration::from_secs(1);

pub struct Slots {
    max: usize,
    /// Connections still open, those told to make room included.
    open: AtomicUsize,
    base: Instant,
    held: Mutex<HashMap<u64, Arc<Slot>>>,
    next: AtomicU64,
}

/// One connection's slot, as its connection reports it.
pub struct Slot {
    id: u64,
    opened: Instant,
    /// The peer's process, as the OS reported it.
    pid: Option<i32>,
    framed: AtomicBool,
    /// Milliseconds (since `Slots::base`, plus 1) of its last frame; 0: a frame is arriving.
    quiet_since: AtomicU64,
    /// What it has under way, read when a newcomer needs room (work ends between frames).
    work: OnceLock<Work>,
    /// Wakes the connection when its slot was given to a newcomer.
    pub evicted: Notify,
}

/// A connection's work: subscriptions and waiting requests (a count), and its appends and
/// ingests in flight (the permits of a semaphore of `size`).
pub struct Work {
    pub tasks: Arc<AtomicUsize>,
    pub in_flight: Arc<Semaphore>,
    pub size: usize,
}

impl Work {
    fn idle(&self) -> bool {
        self.tasks.load(Ordering::Relaxed) == 0 && self.in_flight.available_permits() == self.size
    }
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
            open: AtomicUsize::new(0),
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

    /// A slot for a new connection from process `pid`, taking one over if all are held;
    /// `None` if all are busy and no other process holds too many.
    pub fn admit(self: &Arc<Self>, pid: Option<i32>) -> Option<SlotGuard> {
        let mut held = self.held.lock().unwrap();
        if held.len() >= self.max {
            let victim = self.victim(&held).or_else(|| self.hog(&held, pid))?;
            if let Some(v) = held.remove(&victim) {
                v.evicted.notify_one();
            }
        }
        let slot = Arc::new(Slot {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            opened: Instant::now(),
            pid,
            framed: AtomicBool::new(false),
            quiet_since: AtomicU64::new(0),
            work: OnceLock::new(),
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
            .filter(|s| s.work.get().is_none_or(Work::idle))
            .map(|s| (s.quiet_since.load(Ordering::Relaxed), s.id))
            .filter(|&(q, _)| q != 0 && q <= limit)
            .min()
            .map(|(_, id)| id)
    }

    /// The oldest connection of the process holding the most, if it holds half the slots or
    /// more and is not the newcomer's own.
    fn hog(&self, held: &HashMap<u64, Arc<Slot>>, newcomer: Option<i32>) -> Option<u64> {
        let mut per_pid: HashMap<i32, usize> = HashMap::new();
        for pid in held.values().filter_map(|s| s.pid) {
            *per_pid.entry(pid).or_default() += 1;
        }
        let (&pid, &n) = per_pid.iter().max_by_key(|&(_, n)| *n)?;
        if 2 * n < self.max || Some(pid) == newcomer {
            return None;
        }
        held.values()
            .filter(|s| s.pid == Some(pid))
            .min_by_key(|s| s.opened)
            .map(|s| s.id)
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

    /// A frame arrived whole (still busy: it is being handled).
    pub fn frame_done(&self) {
        self.slot.framed.store(true, Ordering::Relaxed);
    }

    /// A frame was handled.
    pub fn framed(&self) {
        self.frame_done();
        self.slot
            .quiet_since
            .store(self.slots.now(), Ordering::Relaxed);
    }

    /// Lets the slot see the connection's work (once).
    pub fn watch(&self, work: Work) {
        let _ = self.slot.work.set(work);
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
        let slots = Slots::new(4);
        let at_work = || {
            let tasks = Arc::new(AtomicUsize::new(1));
            let in_flight = Arc::new(Semaphore::new(1));
            (
                Work {
                    tasks: tasks.clone(),
                    in_flight,
                    size: 1,
                },
                tasks,
            )
        };
        let busy = slots.admit(Some(1)).unwrap();
        let (work, _busy_tasks) = at_work();
        busy.watch(work);
        busy.framed();
        let mine: Vec<SlotGuard> = (0..2).map(|_| slots.admit(Some(2)).unwrap()).collect();
        for s in &mine {
            s.watch(at_work().0);
            s.framed();
        }
        let idle = slots.admit(Some(3)).unwrap();
        let newcomer = slots.admit(Some(3)).expect("the idle one makes room");
        assert!(notified(&idle.slot.evicted));
        let (work, newcomer_tasks) = at_work();
        newcomer.watch(work);
        newcomer.framed();
        let fourth = slots
            .admit(Some(4))
            .expect("process 2 holds half the slots");
        assert!(notified(&mine[0].slot.evicted), "its oldest made room");
        fourth.watch(at_work().0);
        fourth.framed();
        assert!(
            slots.admit(Some(4)).is_none(),
            "all busy, nobody holds half"
        );
        newcomer_tasks.store(0, Ordering::Relaxed);
        assert!(
            slots.admit(Some(4)).is_none(),
            "quiet for less than a second"
        );
        drop(busy);
        assert!(slots.admit(Some(4)).is_some(), "a freed slot is free");
    }

    fn notified(n: &Notify) -> bool {
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
