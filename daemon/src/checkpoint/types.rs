//! The words the checkpoint component and its callers share: the errors, a request to open a
//! checkpoint, a decision, and how checkpoint ids and the standard options are made.
//!
//! In a file of its own so that every part of the component (and its facade, `mod.rs`) can
//! use them without any part importing another's internals.

use std::path::PathBuf;

use dstream_sdk::protocol::{Action, CheckpointInfo, CheckpointOption, OnTimeout};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use crate::store::{NewEventRaw, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("no checkpoint {0}")]
    NotFound(String),
    #[error("checkpoint {id} was already decided: {first}")]
    AlreadyDecided { id: String, first: String },
    #[error("checkpoint {0} is still being recorded; try again shortly")]
    NotReady(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("checkpoint state {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A checkpoint to open.
#[derive(Debug, Clone, Default)]
pub struct NewRequest {
    pub session_id: String,
    pub key: String,
    pub tool: Option<String>,
    pub input: Option<Json>,
    pub summary: String,
    pub options: Vec<CheckpointOption>,
    pub timeout_ms: u64,
    pub on_timeout: Option<OnTimeout>,
    pub rule: Option<String>,
    /// The asking rule's input glob: what an "always allow" on this checkpoint covers.
    pub input_glob: Option<String>,
    pub source: Option<String>,
    pub cwd: Option<String>,
    /// The event that asked (the tool call).
    pub causation_id: Option<String>,
}

/// What [`Checkpoints::prepare`](super::Checkpoints::prepare) found or made.
pub enum Prepared {
    /// The key already has a checkpoint (a retried hook): no new request.
    Existing(CheckpointInfo),
    /// A new checkpoint, `recording` until the event is durable: append `event` with the id
    /// `event_id`, then report the outcome with
    /// [`Checkpoints::recorded`](super::Checkpoints::recorded).
    New {
        info: CheckpointInfo,
        event_id: String,
        event: NewEventRaw,
    },
}

/// Who or what decides, and how.
#[derive(Debug, Clone)]
pub struct Resolution {
    pub decision: String,
    pub note: Option<String>,
    pub input: Option<Json>,
    /// `user:<name>`: from the OS credentials of the client, never from its request.
    pub decided_by: String,
    pub uid: Option<u32>,
}

/// The checkpoint id of `key` in `session`: the same key always names the same checkpoint.
pub fn checkpoint_id(session: &str, key: &str) -> String {
    let mut h = Sha256::new();
    h.update(session.as_bytes());
    h.update([0]);
    h.update(key.as_bytes());
    let digest = h.finalize();
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("ck_{hex}")
}

/// The choices of an agent's tool call.
pub fn default_options(with_project: bool) -> Vec<CheckpointOption> {
    let opt = |id: &str, label: &str, action: Action, scope: Option<&str>| CheckpointOption {
        id: id.into(),
        label: Some(label.into()),
        action: action.as_str().into(),
        scope: scope.map(str::to_string),
    };
    let mut v = vec![
        opt("approve", "Approve", Action::Allow, None),
        opt("reject", "Reject", Action::Deny, None),
        opt(
            "approve_session",
            "Approve, and allow such calls for the rest of this session",
            Action::Allow,
            Some("session"),
        ),
    ];
    if with_project {
        v.push(opt(
            "approve_project",
            "Approve, and allow such calls in this project",
            Action::Allow,
            Some("project"),
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_per_session_and_key() {
        assert_eq!(checkpoint_id("s", "k"), checkpoint_id("s", "k"));
        assert_ne!(checkpoint_id("s", "k"), checkpoint_id("s", "k2"));
        assert_ne!(checkpoint_id("s1", "k"), checkpoint_id("s", "1k"));
        assert_eq!(checkpoint_id("s", "k").len(), 27);
    }

    #[test]
    fn the_project_option_comes_only_with_a_project() {
        let ids = |v: Vec<CheckpointOption>| v.into_iter().map(|o| o.id).collect::<Vec<_>>();
        assert_eq!(
            ids(default_options(false)),
            ["approve", "reject", "approve_session"]
        );
        assert_eq!(
            ids(default_options(true)),
            ["approve", "reject", "approve_session", "approve_project"]
        );
    }
}
