//! Checkpoints: a tool call (or anything an SDK caller asks about) held until a person
//! decides, with a deadline and a default, recorded in the session's log.
//!
//! The state machine: `recording` (the `checkpoint.requested` event is being synced; nobody
//! has been told yet) → `pending` (durable; waiters wait, the deadline runs) → `approved`,
//! `rejected` or `expired` (the decision event is durable; waiters are answered). The first
//! valid decision wins: a checkpoint being decided refuses every other decision.
//!
//! Nothing lives only in memory. The log holds every request and decision; a small marker
//! file per session with open checkpoints says which logs to read at start, so a restart
//! rebuilds the pending set without reading every session ever written, and a deadline that
//! passed while the daemon was down is applied as soon as it is back. "Always allow" grants
//! live in `grants.json` as well as in the events.
//!
//! This file only names the parts and what the rest of the daemon may use. The parts, from
//! the bottom up (each uses only those above it):
//!
//! - [`types`]: the shared words (errors, requests, resolutions, ids, standard options);
//! - [`table`]: the in-memory table of checkpoints, pure data;
//! - [`journal`]: `checkpoints/ids`, where the session of an old checkpoint id is found;
//! - [`markers`]: `checkpoints/open/<session>`, the logs to read at start;
//! - [`grants`]: "always allow" grants, their matching, expiry and `grants.json`;
//! - [`events`]: the checkpoint events written to the logs;
//! - [`replay`]: reading them back, at start and for checkpoints memory no longer holds;
//! - [`deadlines`]: the task that applies each checkpoint's default when its time is up;
//! - [`api`]: [`Checkpoints`], which ties them together for the rest of the daemon;
//! - [`decide`]: the one path of a decision, by a person, a remote stop or a deadline.
//!
//! [`policy`] (which calls ask, matching shell commands through [`shell`] and [`shell_rule`])
//! and [`stop`] (remote stops) stand on their own.

mod api;
mod deadlines;
mod decide;
mod events;
mod grants;
mod journal;
mod markers;
pub mod policy;
#[cfg(test)]
mod power_loss;
mod replay;
mod shell;
mod shell_rule;
pub mod stop;
mod table;
mod types;

pub use api::Checkpoints;
pub use types::{
    CheckpointError, NewRequest, Prepared, Resolution, checkpoint_id, default_options,
};
