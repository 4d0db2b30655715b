//! `[redact]` is defined with the rest of the configuration (config.rs depends on nothing of
//! the daemon's); the redactor reads it from there.

pub use crate::config::RedactConfig;
