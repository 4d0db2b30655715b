//! The `[redact]` section of the configuration.

use serde::Deserialize;

/// How secrets are redacted. Redaction itself cannot be switched off.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactConfig {
    /// What a secret is replaced with.
    pub replacement: String,
    /// Object keys whose string values are secrets: a key that ends with one of these (any
    /// case, ignoring `_`, `-`, `.` and trailing digits) is one.
    pub secret_keys: Vec<String>,
    /// More regular expressions (Rust `regex` syntax) whose matches are secrets.
    pub extra_patterns: Vec<String>,
}

impl Default for RedactConfig {
    fn default() -> Self {
        RedactConfig {
            replacement: "[REDACTED]".into(),
            secret_keys: DEFAULT_SECRET_KEYS.iter().map(|s| s.to_string()).collect(),
            extra_patterns: Vec::new(),
        }
    }
}

/// The same list as `config.toml` documents (a test keeps them equal).
pub const DEFAULT_SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "apikey",
    "authorization",
    "auth",
    "credential",
    "credentials",
    "privatekey",
    "accesskey",
    "sessionkey",
    "secretkey",
    "cookie",
    "dsn",
];
