//! Secret redaction, native and always on: every event is redacted right before the store
//! queues it (so before the write-ahead log, the session log, the index and the relay), and
//! the pipeline redacts its events after the filters (so `decide`, checkpoints and
//! `on_event` see them redacted too).
//!
//! `config` is the `[redact]` section, `rules` the patterns that find secrets in text,
//! `gate` which texts any rule can match, `keys` which names are secret, `scan` the one-pass
//! pre-check of a field's JSON text, `walk` the JSON walker, `event` the store's entry point
//! (with its fail-closed path).

pub mod config;
mod event;
mod gate;
mod keys;
mod redactor;
mod rules;
mod scan;
mod shared;
mod walk;

pub use config::RedactConfig;
pub use redactor::Redactor;
pub use rules::PatternError;
pub use shared::Shared;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_gate;
