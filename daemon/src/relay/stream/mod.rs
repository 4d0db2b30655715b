//! One session's remote stream: create it, send its events in order one batch at a time, back
//! off when the server cannot take them, resync when the server and the ledger disagree, close
//! it when the session ends.
//!
//! Exactly once rests on three rules:
//! - a batch's `(seq, LSN range)` is in the ledger before it is sent, and a resend is the same
//!   range under the same seq, so the server's dedup answers 204 to what it already has;
//! - when the server's producer state and the ledger disagree (409 gap, 403 fence, a stream
//!   that was recreated, a lost ledger) the relay reads the remote tail, counts every event it
//!   finds there as delivered (each relayed event carries its `lsn`), and only then claims a
//!   new epoch, starting at seq 0;
//! - a new epoch is `max(old + 1, now in ms)`, so it is above any epoch this producer id has
//!   used before, even one whose ledger is gone.
//!
//! Against a server that misbehaves: only the protocol's own success answer counts as
//! delivered (a 200 with a valid `Stream-Next-Offset` past the last one known, or a 204);
//! every loop that talks to the server (retries, resyncs, re-creating a stream that keeps
//! vanishing) waits the same backoff once it repeats without progress, and the warnings it
//! logs are rate-limited with a count.
//!
//! The parts: [`worker`] (a stream's state: its ledger, its status, its backoff), [`send`]
//! (each step: creating the stream, cutting, sending and acknowledging batches, closing it),
//! [`ahead`] (batches of a backlog cut and recorded while earlier ones are on the wire),
//! [`resync`] (agreeing with the server again, and new epochs), [`fork`] (a fork's stream
//! created as a fork of its parent's on the server), [`body`] (what a batch's
//! body holds: the stored events, or what the relay filters make of them), [`quiet`]
//! (rate-limited warnings); this file runs the stream's task.

mod ahead;
mod body;
mod fork;
mod quiet;
mod resync;
mod send;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use dstream_sdk::protocol::CheckpointState;
use tokio::sync::Notify;

use super::ledger::Ledger;
use super::shared::Shared;
use quiet::QuietLog;
use worker::{Step, Worker, backoff_of};

/// A stream with nothing to send (and no checkpoint waiting in its session) ends its task, and
/// stops following its control stream, after this long. Long enough that a person who stops
/// an agent from the phone while it sits idle (a long build, a question to its user) is heard
/// before its next tool call; an idle task still gives way at once to a session with work.
const IDLE_EXIT: Duration = Duration::from_secs(15 * 60);
/// A closed stream (its session ended) has nothing to follow: its task ends sooner.
const CLOSED_EXIT: Duration = Duration::from_secs(5);

pub(super) async fn run(shared: Arc<Shared>, session: Arc<str>, wake: Arc<Notify>) {
    // The control stream is followed while this stream runs, and no longer.
    let control = AbortOnDrop(tokio::spawn(super::control::run(
        shared.clone(),
        session.clone(),
    )));
    let mut settings_rx = shared.settings.subscribe();
    let settings = settings_rx.borrow_and_update().clone();
    let mut w = Worker {
        backoff: backoff_of(&settings),
        shared,
        session,
        settings,
        ledger: Ledger::default(),
        dirty: false,
        bodies: Default::default(),
        cutting: None,
        fences: 0,
        end_checked: 0,
        was_idle: false,
        troubles: 0,
        warnings: QuietLog::default(),
        fork_declined: false,
    };
    if let Err(e) = w.load_ledger().await {
        return w.stop_failed(e.to_string(), control).await;
    }
    loop {
        let settings = settings_rx.borrow_and_update().clone();
        if settings.generation != w.settings.generation {
            let retarget = settings.target != w.settings.target;
            w.settings = settings;
            w.backoff = backoff_of(&w.settings);
            w.fences = 0;
            if retarget && let Err(e) = w.load_ledger().await {
                return w.stop_failed(e.to_string(), control).await;
            }
        }
        match w.step().await {
            Step::Continue => w.was_idle = false,
            Step::Idle => {
                w.was_idle = true;
                w.save_if_dirty().await;
                // An idle stream gives its task up to a session waiting for one, or after
                // IDLE_EXIT; not while a checkpoint waits in its session (the control stream
                // must be followed), nor when new events arrived meanwhile.
                let may_yield = |w: &Worker| {
                    w.shared
                        .checkpoints
                        .list(
                            Some(CheckpointState::Pending),
                            Some(&w.session),
                            None,
                            false,
                            Some(1),
                        )
                        .0
                        .is_empty()
                };
                if w.shared.has_waiting()
                    && may_yield(&w)
                    && w.shared.retire(&w.session, w.ledger.acked_lsn)
                {
                    return;
                }
                let idle_for = if w.ledger.closed {
                    CLOSED_EXIT
                } else {
                    IDLE_EXIT
                };
                let give_up_task = tokio::select! {
                    _ = wake.notified() => false,
                    _ = settings_rx.changed() => false,
                    _ = w.shared.slot_wanted.notified() => true,
                    _ = tokio::time::sleep(idle_for) => true,
                };
                if give_up_task && may_yield(&w) && w.shared.retire(&w.session, w.ledger.acked_lsn)
                {
                    return;
                }
            }
            Step::Failed(reason) => return w.stop_failed(reason, control).await,
        }
    }
}

impl Worker {
    /// Stops for good (until the configuration changes), with the reason in `relay status`.
    async fn stop_failed(mut self, reason: String, control: AbortOnDrop) {
        // A cut's write lands before a later task of this stream reads the ledger.
        self.settle_cut().await;
        tracing::error!(session = %self.session, %reason, "relay stopped for this session until the configuration changes");
        self.save_if_dirty().await;
        self.fail(reason);
        drop(control);
        self.shared.release_failed(&self.session);
    }
}

/// Aborts a task when dropped: the control reader ends with its stream's task.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
