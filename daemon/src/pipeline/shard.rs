//! One shard of the pipeline: the ingests of the sessions that hash to it (`route`), queued in
//! arrival order (clients in turn) and handled one at a time by whoever holds its
//! stage (`map_stage`), so a session's events are stored in the order its hooks fired.
//!
//! The caller of an ingest whose plugins all run anywhere (the built-in Rust ones: no Lua
//! state, no native call that may hang) takes the stage when it is free and handles the queue
//! itself, on its async worker; the shard's thread (`dstream-pipe-N`) takes what it leaves
//! (an ingest meeting a Lua or native plugin, or more than one turn's worth). Handing every
//! ingest to the thread cost each a wake-up and two context switches.

use std::sync::{Condvar, Mutex};

use tokio::sync::Semaphore;

use super::fair::FairQueue;
use super::ingest::{Ingest, IngestError};

/// Ingests waiting for a shard; past it, `submit` waits (each one is also charged to the
/// clients' memory budget by the socket layer).
const QUEUE: usize = 1024;
/// The most ingests an async worker handles in one turn before it leaves the rest to the
/// shard's thread: its own connections wait meanwhile.
const IN_PLACE_STINT: usize = 32;

/// What handles a shard's ingests, one at a time: its map stage (kept behind this trait so
/// that the shard, which the pipeline's handle holds, does not depend on the stage's steps).
pub(super) trait Stage: Send {
    fn handle(&mut self, ingest: Ingest);
}

/// A queued ingest, and whether any thread may handle it.
pub(super) struct Waiting {
    ingest: Ingest,
    in_place: bool,
}

impl super::fair::FromClient for Waiting {
    fn client(&self) -> u64 {
        self.ingest.client
    }
}

pub(super) struct Shard {
    state: Mutex<State>,
    /// Wakes the shard's thread: something waits and the stage is free.
    wake: Condvar,
    /// Room in the queue: a permit per ingest waiting.
    room: Semaphore,
}

struct State {
    waiting: FairQueue<Waiting>,
    /// `None` while an ingest is being handled (by the thread or a caller).
    stage: Option<Box<dyn Stage>>,
    closed: bool,
}

impl Shard {
    pub(super) fn new(stage: Box<dyn Stage>) -> Shard {
        Shard {
            state: Mutex::new(State {
                waiting: FairQueue::default(),
                stage: Some(stage),
                closed: false,
            }),
            wake: Condvar::new(),
            room: Semaphore::new(QUEUE),
        }
    }

    /// Queues `ingest` behind what waits, then, when `in_place` (its plugins run anywhere)
    /// and nobody holds the stage, handles the queue here up to an ingest whose plugins do
    /// not, or [`IN_PLACE_STINT`]; the shard's thread takes what is left.
    pub(super) async fn submit(&self, ingest: Ingest, in_place: bool) {
        let Ok(permit) = self.room.acquire().await else {
            return (ingest.done)(Err(IngestError::Stopped));
        };
        let mut state = self.state.lock().unwrap();
        if state.closed {
            drop(state);
            return (ingest.done)(Err(IngestError::Stopped));
        }
        if !in_place || state.stage.is_none() {
            // The holder of the stage, or the thread, gets to it. The permit is given back
            // when the ingest leaves the queue.
            permit.forget();
            state.waiting.push(Waiting { ingest, in_place });
            let free = state.stage.is_some();
            drop(state);
            if free {
                self.wake.notify_one();
            }
            return;
        }
        let mut stage = state.stage.take().expect("checked just above");
        // Nothing ahead of it: handled without a trip through the queue.
        let mut first = if state.waiting.is_empty() {
            drop(permit);
            Some(ingest)
        } else {
            permit.forget();
            state.waiting.push(Waiting { ingest, in_place });
            None
        };
        for _ in 0..IN_PLACE_STINT {
            let next = match first.take() {
                Some(ingest) => ingest,
                None => match state.waiting.pop_if(|w| w.in_place) {
                    Some(w) => {
                        self.room.add_permits(1);
                        w.ingest
                    }
                    None => break,
                },
            };
            drop(state);
            stage.handle(next);
            state = self.state.lock().unwrap();
        }
        state.stage = Some(stage);
        let queued = !state.waiting.is_empty();
        drop(state);
        if queued {
            self.wake.notify_one();
        }
    }

    /// The shard's thread: handles queued ingests until the shard closes.
    pub(super) fn run(&self) {
        let mut state = self.state.lock().unwrap();
        loop {
            if state.closed {
                return;
            }
            if state.stage.is_some()
                && let Some(next) = state.waiting.pop()
            {
                let mut stage = state.stage.take().expect("checked just above");
                drop(state);
                self.room.add_permits(1);
                stage.handle(next.ingest);
                state = self.state.lock().unwrap();
                state.stage = Some(stage);
                continue;
            }
            state = self.wake.wait(state).unwrap();
        }
    }

    /// Stops the thread and refuses new ingests; those still queued are answered "stopped".
    pub(super) fn close(&self) {
        let mut waiting = {
            let mut state = self.state.lock().unwrap();
            state.closed = true;
            std::mem::take(&mut state.waiting)
        };
        self.room.close();
        self.wake.notify_all();
        while let Some(w) = waiting.pop() {
            (w.ingest.done)(Err(IngestError::Stopped));
        }
    }
}
