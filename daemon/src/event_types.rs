//! The event types only the daemon writes.
//!
//! The daemon rebuilds its state from its own events (checkpoint decisions from
//! `checkpoint.*`) and reports through others (`log.recovered`, `plugin.error`, the relay's),
//! so a client or plugin that could write one could speak for the daemon: append
//! `checkpoint.approved` and approve its own tool call after the next restart. `append`
//! refuses these types, and so does the pipeline for events a plugin emits. (`agent.aborted`
//! is not among them: agents report their own aborts, which the mappings store.)

/// Type prefixes reserved to the daemon.
pub const DAEMON_PREFIXES: &[&str] = &["checkpoint.", "relay.", "usage.budget"];

/// Whole types reserved to the daemon.
pub const DAEMON_TYPES: &[&str] = &["log.recovered", "plugin.error"];

/// Whether only the daemon may write events of type `t` (compared without regard to ASCII
/// case, so `Checkpoint.Approved` is no way around it).
pub fn daemon_only(t: &str) -> bool {
    let starts =
        |p: &str| t.len() >= p.len() && t.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes());
    DAEMON_PREFIXES.iter().any(|p| starts(p))
        || DAEMON_TYPES.iter().any(|w| t.eq_ignore_ascii_case(w))
}

/// The error a client or plugin gets for writing one.
pub fn refusal(t: &str) -> String {
    format!(
        "event type {t:?} is written only by the daemon (reserved: {}*, {})",
        DAEMON_PREFIXES.join("*, "),
        DAEMON_TYPES.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_types_are_recognized_in_any_case() {
        for t in [
            "checkpoint.approved",
            "CHECKPOINT.requested",
            "checkpoint.",
            "log.recovered",
            "Log.Recovered",
            "relay.control_rejected",
            "plugin.error",
            "usage.budget_exceeded",
        ] {
            assert!(daemon_only(t), "{t}");
        }
        for t in [
            "checkpoints",
            "user.input",
            "log.recoveredx",
            "execution.tool_use",
            "lifecycle.session.ended",
            "agent.aborted",
            "usage.request",
        ] {
            assert!(!daemon_only(t), "{t}");
        }
    }
}
