//! One shard of the pipeline: the ingests of the sessions that hash to it (`route`), queued in
//! arrival order (clients in turn) and handled one at a time by whoever holds its
//! stage (`map_stage`), so a session's events are stored in the order its hooks fired.
//!
//! The caller of an ingest whose plugins all run anywhere (the built-in Rust ones: no Lua
//! state, no native call that may hang) takes the stage when it is free and handles the queue
//! itself, on its async worker; the shard's thread (`dstream-pipe-N`) takes what it leaves
//! (an ingest meeting a Lua or native plugin, or more than one turn's worth). Handing every
//! ingest to the thread cost each a wake-up and two context switches. A stage may also leave
//! the rest of an ingest it began in place to the thread (a tool result whose request must be
//! looked up on disk): an async worker does not wait on the disk, and the thread finishes that
//! ingest before it takes the next, so the order holds.

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
    /// Handles `ingest`; `in_place` when on a caller's async worker, where the stage may
    /// keep the rest of it for [`Stage::resume`] on the shard's thread.
    fn handle(&mut self, ingest: Ingest, in_place: bool);
    /// Whether `handle` left the rest of an ingest: nothing else goes before it.
    fn has_deferred(&self) -> bool;
    /// Finishes what `handle` left, if anything.
    fn resume(&mut self);
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
        if !in_place || state.stage.as_ref().is_none_or(|s| s.has_deferred()) {
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
            stage.handle(next, true);
            state = self.state.lock().unwrap();
            if stage.has_deferred() {
                if state.closed {
                    // No thread will take it any more: finished here.
                    stage.resume();
                }
                break;
            }
        }
        let queued = !state.waiting.is_empty() || stage.has_deferred();
        state.stage = Some(stage);
        drop(state);
        if queued {
            self.wake.notify_one();
        }
    }

    /// The shard's thread: finishes what a caller left, then handles queued ingests, until
    /// the shard closes.
    pub(super) fn run(&self) {
        let mut state = self.state.lock().unwrap();
        loop {
            if state.stage.as_ref().is_some_and(|s| s.has_deferred()) {
                // Before anything else, closed or not: it was taken in, and is next in order.
                let mut stage = state.stage.take().expect("checked just above");
                drop(state);
                stage.resume();
                state = self.state.lock().unwrap();
                state.stage = Some(stage);
                continue;
            }
            if state.closed {
                return;
            }
            if state.stage.is_some()
                && let Some(next) = state.waiting.pop()
            {
                let mut stage = state.stage.take().expect("checked just above");
                drop(state);
                self.room.add_permits(1);
                // Whatever it leaves is resumed on the next turn, before the queue.
                stage.handle(next.ingest, false);
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::thread::ThreadId;
    use std::time::{Duration, Instant};

    use super::*;

    /// What a fake stage did: (ingest's source, "handle" or "resume", on which thread).
    type Log = Arc<Mutex<Vec<(String, &'static str, ThreadId)>>>;

    /// Leaves the rest of an ingest whose source is "defer" for the thread, when in place.
    struct Fake {
        log: Log,
        deferred: Option<String>,
    }

    impl Stage for Fake {
        fn handle(&mut self, ingest: Ingest, in_place: bool) {
            let me = std::thread::current().id();
            self.log
                .lock()
                .unwrap()
                .push((ingest.source.clone(), "handle", me));
            if in_place && ingest.source == "defer" {
                self.deferred = Some(ingest.source);
            }
        }
        fn has_deferred(&self) -> bool {
            self.deferred.is_some()
        }
        fn resume(&mut self) {
            if let Some(source) = self.deferred.take() {
                let me = std::thread::current().id();
                self.log.lock().unwrap().push((source, "resume", me));
            }
        }
    }

    fn ingest(source: &str) -> Ingest {
        Ingest::for_test(1, source, &0)
    }

    #[test]
    fn what_a_caller_leaves_is_finished_on_the_shards_thread_before_the_next_ingest() {
        let log = Log::default();
        let shard = Arc::new(Shard::new(Box::new(Fake {
            log: log.clone(),
            deferred: None,
        })));
        let thread = {
            let shard = shard.clone();
            std::thread::spawn(move || shard.run())
        };
        let shard_thread = thread.thread().id();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for source in ["first", "defer", "after"] {
            rt.block_on(shard.submit(ingest(source), true));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while log.lock().unwrap().len() < 4 {
            assert!(Instant::now() < deadline, "{:?}", log.lock().unwrap());
            std::thread::yield_now();
        }
        shard.close();
        thread.join().unwrap();
        let log = log.lock().unwrap().clone();
        let me = std::thread::current().id();
        let steps: Vec<(&str, &str)> = log.iter().map(|(s, step, _)| (s.as_str(), *step)).collect();
        assert_eq!(
            steps,
            [
                ("first", "handle"),
                ("defer", "handle"),
                ("defer", "resume"),
                ("after", "handle")
            ],
            "in order"
        );
        assert_eq!(log[0].2, me, "handled in place");
        assert_eq!(log[1].2, me, "begun in place");
        assert_eq!(log[2].2, shard_thread, "finished on the shard's thread");
    }

    #[test]
    fn what_a_caller_leaves_as_the_shard_closes_is_still_finished() {
        let log = Log::default();
        let shard = Shard::new(Box::new(Fake {
            log: log.clone(),
            deferred: None,
        }));
        // No thread runs: the shard closes with the rest of an ingest left.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(shard.submit(ingest("defer"), true));
        shard.close();
        shard.run();
        let steps: Vec<&str> = log.lock().unwrap().iter().map(|(_, s, _)| *s).collect();
        assert_eq!(steps, ["handle", "resume"]);
    }
}
