//! The relay's settings in force: `[relay]` with what it takes to act on it (the remote, the
//! approval key, the target a ledger belongs to), rebuilt on every configuration change.

use crate::config::RelayConfig;

use super::remote::Remote;

/// The settings in force, rebuilt whenever the configuration changes.
pub(crate) struct Settings {
    pub config: RelayConfig,
    /// Bumped on every change: a stream that failed for good retries on the next one.
    pub generation: u64,
    /// `None` while the relay is off or cannot run (`error` says why).
    pub remote: Option<Remote>,
    /// `{url}/{prefix}`: a ledger belongs to one target.
    pub target: String,
    pub error: Option<String>,
    /// The HMAC key that signs remote decisions; `None`: none are accepted (nor read).
    pub approval_key: Option<Vec<u8>>,
}

impl Settings {
    pub(super) fn build(config: &RelayConfig, generation: u64) -> Settings {
        let mut s = Settings {
            config: config.clone(),
            generation,
            remote: None,
            target: String::new(),
            error: None,
            approval_key: None,
        };
        if !config.enabled() {
            return s;
        }
        let token = if config.token_env.is_empty() {
            None
        } else {
            match std::env::var(&config.token_env) {
                Ok(t) if !t.is_empty() => Some(t),
                _ => {
                    s.error = Some(format!(
                        "the environment variable {} (relay.token_env) is not set",
                        config.token_env
                    ));
                    return s;
                }
            }
        };
        if !config.approval_key_env.is_empty() {
            match std::env::var(&config.approval_key_env) {
                Ok(k) if !k.is_empty() => s.approval_key = Some(k.into_bytes()),
                _ => tracing::warn!(
                    var = %config.approval_key_env,
                    "relay.approval_key_env names an unset variable: remote decisions are off"
                ),
            }
        }
        let prefix = config.prefix();
        s.target = format!("{}/{prefix}", config.url.trim().trim_end_matches('/'));
        match Remote::new(&config.url, &prefix, token, format!("dstream:{prefix}")) {
            Ok(r) => s.remote = Some(r),
            Err(e) => s.error = Some(e),
        }
        s
    }
}
