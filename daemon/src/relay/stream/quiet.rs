//! Warnings a misbehaving server could set off many times a second, logged at most once per
//! kind and interval with a count of those held back, so that the log stays readable.

use std::time::Duration;

/// A warning of one kind is logged at most this often per stream; the rest are counted.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// Warnings that a misbehaving server could repeat many times a second: each kind is logged
/// at most once per [`WARN_EVERY`], with how many were held back.
#[derive(Default)]
pub(super) struct QuietLog {
    last: std::collections::HashMap<&'static str, (std::time::Instant, u64)>,
}

impl QuietLog {
    pub(super) fn warn(&mut self, session: &str, kind: &'static str, message: std::fmt::Arguments) {
        let now = std::time::Instant::now();
        match self.last.get_mut(kind) {
            Some((at, held)) if now.duration_since(*at) < WARN_EVERY => *held += 1,
            entry => {
                let held = entry.map_or(0, |(_, h)| *h);
                if held > 0 {
                    tracing::warn!(%session, "relay: {message} ({held} more like it held back)");
                } else {
                    tracing::warn!(%session, "relay: {message}");
                }
                self.last.insert(kind, (now, 0));
            }
        }
    }
}
