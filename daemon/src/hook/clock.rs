//! The hook's phases and their deadlines: what each blocking step (reading stdin, connecting,
//! a request, waiting for a decision) may still wait, and the failure of running out.

use std::time::{Duration, Instant};

use crate::autostart;
use crate::hook::outcome::Failure;
use crate::util::time::now_ms;

/// How long connecting to the daemon's socket may take. A local socket connects at once or
/// fails at once; this only bounds a daemon so swamped that its accept queue is full.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long past a checkpoint's deadline the hook waits for the daemon's verdict before it
/// applies the checkpoint's default itself (the daemon may be restarting).
const CHECKPOINT_GRACE: Duration = Duration::from_secs(5);

/// The phase the hook is in and until when it may last.
pub(crate) struct Clock {
    /// The whole exchange's deadline.
    overall: Instant,
    phase: &'static str,
    until: Instant,
}

impl Clock {
    pub(crate) fn new(timeout: Duration) -> Clock {
        let overall = Instant::now() + timeout;
        Clock {
            overall,
            phase: "reading the event from stdin",
            until: overall,
        }
    }

    fn enter(&mut self, phase: &'static str, until: Instant) {
        self.phase = phase;
        self.until = until;
    }

    pub(crate) fn connecting(&mut self) {
        let until = self.overall.min(Instant::now() + CONNECT_TIMEOUT);
        self.enter("connecting to the daemon", until);
    }

    pub(crate) fn connected(&mut self) {
        let until = self.overall;
        self.enter("waiting for the daemon's reply", until);
    }

    /// The call waits for a person: from now on the deadline is the checkpoint's, plus grace.
    pub(crate) fn waiting(&mut self, deadline_ms: u64) {
        let left = Duration::from_millis(deadline_ms.saturating_sub(now_ms()));
        self.enter(
            "waiting for a decision",
            Instant::now() + left + CHECKPOINT_GRACE,
        );
    }

    pub(crate) fn starting(&mut self) {
        let until = self
            .overall
            .min(Instant::now() + autostart::wait_bound() + CONNECT_TIMEOUT);
        self.enter("starting the daemon", until);
    }

    /// When the current phase ends.
    pub(crate) fn until(&self) -> Instant {
        self.until
    }

    /// What the phase has left; zero once it is over.
    pub(crate) fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }

    /// The failure of running out of time in the current phase.
    pub(crate) fn expired(&self) -> Failure {
        Failure::Timeout(self.phase)
    }
}
