//! The daemon-wide stream of committed events: every event, from every session, once it is
//! durable, in commit order. Subscriptions read it now; the pipeline's observers (checkpoints,
//! the relay, plugins' `on_event`) will read it next.
//!
//! It is a ring bounded in *bytes*, not events: a reader that falls further behind than the
//! ring holds is told it lagged (and goes back to the logs, see [`crate::follower`]); the commit
//! thread never waits for a reader, and a stalled reader never holds more than the ring.
//! Events every reader has read are dropped at once: readers only ever start at the next event,
//! so nothing behind the slowest one can be asked for again, and a stream whose readers keep up
//! (the search index, the pipeline's observers) holds next to nothing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::watch;

use crate::event_json::EventJson;

/// One committed event and the session it belongs to.
#[derive(Debug)]
pub struct Committed {
    pub session: Arc<str>,
    pub event: EventJson,
}

pub struct Hub {
    ring: Mutex<Ring>,
    /// Carries the sequence number after the newest event, to wake readers.
    published: watch::Sender<u64>,
    cap_bytes: usize,
}

#[derive(Default)]
struct Ring {
    events: VecDeque<Slot>,
    /// Bytes published since the hub began.
    published: u64,
    /// Sequence number of `events[0]`.
    first_seq: u64,
    /// Each live reader's place.
    readers: Vec<Weak<Place>>,
}

/// One held event, and the bytes published before it: a reader at it is behind by
/// `published - before`.
struct Slot {
    before: u64,
    committed: Arc<Committed>,
}

/// Where a reader is, and how far behind it may hold events.
struct Place {
    /// Its next sequence number.
    next: AtomicU64,
    /// Bytes of events it may keep in the ring; past that, they go and it lags.
    holds: usize,
}

fn size(c: &Committed) -> usize {
    c.event.len() + c.session.len()
}

impl Ring {
    /// Bytes of the events held.
    fn bytes(&self) -> u64 {
        self.events
            .front()
            .map_or(0, |first| self.published - first.before)
    }

    fn pop_front(&mut self) {
        if self.events.pop_front().is_some() {
            self.first_seq += 1;
        }
    }

    /// The first sequence number a reader at `next` that may hold `holds` bytes keeps.
    fn kept_from(&self, next: u64, holds: usize) -> u64 {
        let too_far = |slot: &Slot| self.published - slot.before > holds as u64;
        let at = next.saturating_sub(self.first_seq) as usize;
        if self.events.get(at).is_none_or(|slot| !too_far(slot)) {
            return next;
        }
        self.first_seq + self.events.partition_point(too_far) as u64
    }

    /// Drops the events every live reader is past, or may not hold (and forgets readers that
    /// are gone).
    fn drop_read(&mut self) {
        let mut slowest = u64::MAX;
        let mut places = std::mem::take(&mut self.readers);
        places.retain(|r| match r.upgrade() {
            Some(place) => {
                let next = place.next.load(Ordering::Acquire);
                slowest = slowest.min(self.kept_from(next, place.holds));
                true
            }
            None => false,
        });
        self.readers = places;
        while self.first_seq < slowest && !self.events.is_empty() {
            self.pop_front();
        }
        // A burst's worth of slots is given back once the ring is nearly empty again.
        if self.events.capacity() > 1024 && self.events.len() < self.events.capacity() / 8 {
            self.events.shrink_to(self.events.len() * 2);
        }
    }
}

/// The reader fell behind by more than the ring holds; events were skipped on the stream.
#[derive(Debug, PartialEq, Eq)]
pub struct Lagged;

impl Hub {
    pub fn new(cap_bytes: usize) -> Arc<Hub> {
        Arc::new(Hub {
            ring: Mutex::new(Ring::default()),
            published: watch::channel(0).0,
            cap_bytes: cap_bytes.max(1),
        })
    }

    /// Whether anyone reads the stream (publishing is skipped entirely when not).
    pub fn has_readers(&self) -> bool {
        self.published.receiver_count() > 0
    }

    /// Appends a batch, dropping the oldest events beyond the byte cap, and wakes readers.
    pub fn publish(&self, batch: impl IntoIterator<Item = Committed>) {
        let next = {
            let mut ring = self.ring.lock().unwrap();
            for c in batch {
                let before = ring.published;
                ring.published += size(&c) as u64;
                ring.events.push_back(Slot {
                    before,
                    committed: Arc::new(c),
                });
            }
            ring.drop_read();
            // Keep the newest event even if it alone is over the cap.
            while ring.bytes() > self.cap_bytes as u64 && ring.events.len() > 1 {
                ring.pop_front();
            }
            ring.first_seq + ring.events.len() as u64
        };
        self.published.send_replace(next);
    }

    /// A reader that starts at the next event published.
    pub fn subscribe(self: &Arc<Self>) -> HubReader {
        self.subscribe_holding(usize::MAX)
    }

    /// A reader that keeps at most `holds` bytes of events in the ring however far behind it
    /// falls (and lags past that), for a reader that may be slow on purpose.
    pub fn subscribe_holding(self: &Arc<Self>, holds: usize) -> HubReader {
        let mut ring = self.ring.lock().unwrap();
        let rx = self.published.subscribe();
        // From the ring, not `rx`: a batch already in the ring may not be announced yet, and
        // with no reader it is dropped at once.
        let next = ring.first_seq + ring.events.len() as u64;
        let position = Arc::new(Place {
            next: AtomicU64::new(next),
            holds,
        });
        ring.readers.push(Arc::downgrade(&position));
        HubReader {
            hub: self.clone(),
            rx,
            next,
            position,
        }
    }

    /// Events held now, and their bytes.
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let ring = self.ring.lock().unwrap();
        (ring.events.len(), ring.bytes() as usize)
    }
}

pub struct HubReader {
    hub: Arc<Hub>,
    rx: watch::Receiver<u64>,
    next: u64,
    /// `next`, where the hub sees it (to drop what every reader has read).
    position: Arc<Place>,
}

impl HubReader {
    /// The next event, waiting for one; `Err(Lagged)` once when events were missed (the reader
    /// then continues from the oldest event still held).
    pub async fn recv(&mut self) -> Result<Arc<Committed>, Lagged> {
        loop {
            if let Some(next) = self.try_recv() {
                return next;
            }
            // The sender lives as long as the hub, which this reader holds.
            let _ = self.rx.changed().await;
        }
    }

    /// The next event if one is held, without waiting: for a reader that gathers batches on
    /// its own clock rather than being woken at every commit.
    pub fn try_recv(&mut self) -> Option<Result<Arc<Committed>, Lagged>> {
        let ring = self.hub.ring.lock().unwrap();
        if self.next < ring.first_seq {
            self.next = ring.first_seq;
            self.position.next.store(self.next, Ordering::Release);
            return Some(Err(Lagged));
        }
        let slot = ring.events.get((self.next - ring.first_seq) as usize)?;
        self.next += 1;
        self.position.next.store(self.next, Ordering::Release);
        Some(Ok(slot.committed.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn event(session: &str, lsn: u64, size: usize) -> Committed {
        let body = format!("{{\"lsn\":{lsn},\"x\":\"{}\"", "a".repeat(size));
        let session: std::sync::Arc<str> = session.into();
        Committed {
            event: EventJson::new(
                lsn,
                Bytes::from(body),
                &crate::event_json::LogName::new(&session),
            ),
            session,
        }
    }

    #[tokio::test]
    async fn readers_get_every_event_in_order_or_hear_they_lagged() {
        let hub = Hub::new(10_000);
        let mut fast = hub.subscribe();
        let mut slow = hub.subscribe();
        for lsn in 1..=5 {
            hub.publish([event("s", lsn, 100)]);
            assert_eq!(fast.recv().await.unwrap().event.lsn, lsn);
        }
        // 100 events of ~1 KB exceed the 10 KB ring: the slow reader is told, then resumes
        // with the oldest event still held, and the ring never holds more than its cap.
        for lsn in 6..=105 {
            hub.publish([event("s", lsn, 1000)]);
        }
        assert!(hub.ring.lock().unwrap().bytes() <= 10_000);
        assert_eq!(slow.recv().await.unwrap_err(), Lagged);
        let resumed = slow.recv().await.unwrap().event.lsn;
        assert!(resumed > 6 && resumed <= 105, "{resumed}");
        for lsn in 6..=105 {
            match fast.recv().await {
                Ok(c) => assert_eq!(c.event.lsn, lsn),
                Err(Lagged) => break,
            }
        }
    }

    #[tokio::test]
    async fn a_reader_holding_little_lags_past_it_without_cutting_the_others_short() {
        let hub = Hub::new(1 << 20);
        let mut full = hub.subscribe();
        let mut lazy = hub.subscribe_holding(1_000);
        // Each event is ~100 bytes of body and 1 of session: 30 of them are ~3 KB.
        for lsn in 1..=30 {
            hub.publish([event("s", lsn, 100)]);
        }
        for lsn in 1..=30 {
            assert_eq!(full.recv().await.unwrap().event.lsn, lsn);
        }
        // At the next publish, what the full reader has read is held for the lazy one only
        // up to its 1,000 bytes.
        hub.publish([event("s", 31, 100)]);
        let (held, bytes) = hub.held();
        assert!(bytes <= 1_000 && held > 1, "{held} events, {bytes} bytes");
        assert_eq!(lazy.recv().await.unwrap_err(), Lagged);
        let resumed = lazy.recv().await.unwrap().event.lsn;
        assert!(resumed > 20 && resumed < 31, "{resumed}");
        // Within its allowance it misses nothing.
        for lsn in resumed + 1..=31 {
            assert_eq!(lazy.recv().await.unwrap().event.lsn, lsn);
        }
        assert_eq!(full.recv().await.unwrap().event.lsn, 31);
    }

    #[tokio::test]
    async fn events_every_reader_has_read_are_not_kept() {
        let hub = Hub::new(1 << 20);
        hub.publish([event("s", 1, 100)]);
        assert_eq!(hub.held().0, 0, "no reader: nothing kept");
        let mut a = hub.subscribe();
        let mut b = hub.subscribe();
        for lsn in 2..=11 {
            hub.publish([event("s", lsn, 100)]);
        }
        assert_eq!(hub.held().0, 10);
        for _ in 0..10 {
            a.recv().await.unwrap();
        }
        for _ in 0..4 {
            b.recv().await.unwrap();
        }
        hub.publish([event("s", 12, 100)]);
        // b has read 4 of the 10: 6 of them remain for it, and the new one.
        assert_eq!(hub.held().0, 7);
        drop(b);
        hub.publish([event("s", 13, 100)]);
        // Only a remains, behind by 12 and 13.
        assert_eq!(hub.held().0, 2);
        assert_eq!(a.recv().await.unwrap().event.lsn, 12);
        assert_eq!(a.recv().await.unwrap().event.lsn, 13);
    }
}
