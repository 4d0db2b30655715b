//! Following one session gap-free: catch up from its log, then take its events from the
//! daemon-wide [`Hub`], and go back to the log whenever the hub says the reader lagged.
//!
//! The hub reader is registered before the first disk read, so an event committed in between
//! arrives on the hub and is skipped there as already delivered (LSN below `next`). Nothing is
//! skipped silently: an event from the hub beyond `next` means the log holds what came between.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::hub::{Hub, HubReader, Lagged};
use crate::store::{EventJson, Store, StoreError};

/// Events (and bytes) read from the log per catch-up step: a follower holds no more than this.
const PAGE_EVENTS: usize = 1024;
const PAGE_BYTES: usize = 4 << 20;

/// What a follower yields.
#[derive(Debug)]
pub enum Follow {
    Event(EventJson),
    /// The log has been replayed up to `lsn`; live events follow. Sent once.
    CaughtUp(u64),
    /// The reader fell behind the hub after delivering `last_sent_lsn`; it resumes from the log.
    Lagged {
        last_sent_lsn: u64,
    },
}

pub struct Follower {
    store: Store,
    session: String,
    hub: HubReader,
    /// The next LSN to deliver.
    next: u64,
    caught_up: bool,
    /// Reading from the log (at the start, and after a lag or a gap) rather than the hub.
    from_log: bool,
    /// Read from the log, not yet handed out.
    page: VecDeque<EventJson>,
}

impl Follower {
    pub fn new(store: Store, hub: &Arc<Hub>, session: &str, from_lsn: u64) -> Follower {
        Follower {
            hub: hub.subscribe(),
            store,
            session: session.to_string(),
            next: from_lsn.max(1),
            caught_up: false,
            from_log: true,
            page: VecDeque::new(),
        }
    }

    /// The next item. An error means the log could not be read; the follow is over.
    pub async fn next(&mut self) -> Result<Follow, StoreError> {
        loop {
            if let Some(e) = self.page.pop_front() {
                self.next = e.lsn + 1;
                return Ok(Follow::Event(e));
            }
            if self.from_log {
                if self.fill_from_log().await? {
                    continue;
                }
                self.from_log = false;
                if !self.caught_up {
                    self.caught_up = true;
                    return Ok(Follow::CaughtUp(self.next - 1));
                }
            }
            match self.hub.recv().await {
                Ok(c) if *c.session != *self.session || c.event.lsn < self.next => {}
                Ok(c) if c.event.lsn == self.next => {
                    self.next += 1;
                    return Ok(Follow::Event(c.event.clone()));
                }
                // Beyond `next`: what lies between is in the log.
                Ok(_) => self.from_log = true,
                Err(Lagged) => {
                    self.from_log = true;
                    return Ok(Follow::Lagged {
                        last_sent_lsn: self.next - 1,
                    });
                }
            }
        }
    }

    /// Reads the next page of committed events from `next` on; false when there is none.
    async fn fill_from_log(&mut self) -> Result<bool, StoreError> {
        let Some(session) = self.store.get(&self.session) else {
            return Ok(false);
        };
        let committed = session.committed_lsn();
        if self.next > committed {
            return Ok(false);
        }
        let from = self.next;
        let page = tokio::task::spawn_blocking(move || {
            crate::store::read_range(&session, from, committed, PAGE_EVENTS, PAGE_BYTES)
        })
        .await
        .map_err(|e| StoreError::io("read task", &std::io::Error::other(e.to_string())))??;
        let any = !page.is_empty();
        self.page.extend(page);
        Ok(any)
    }
}
