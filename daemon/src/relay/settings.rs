//! The relay's settings in force: `[relay]` with what it takes to act on it (the remote, the
//! approval key, the target a ledger belongs to), rebuilt on every configuration change.

use crate::config::RelayConfig;

use super::remote::Remote;
use super::secret::Source;

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
        let token = Source {
            env_key: "token_env",
            env: &config.token_env,
            file_key: "token_file",
            file: &config.token_file,
        }
        .read()
        .and_then(|t| {
            t.map(|t| {
                String::from_utf8(t).map_err(|_| {
                    "the relay token (relay.token_env or relay.token_file) is not UTF-8".into()
                })
            })
            .transpose()
        });
        let token = match token {
            Ok(t) => t,
            Err(e) => {
                s.error = Some(e);
                return s;
            }
        };
        match (Source {
            env_key: "approval_key_env",
            env: &config.approval_key_env,
            file_key: "approval_key_file",
            file: &config.approval_key_file,
        })
        .read()
        {
            Ok(key) => s.approval_key = key,
            // Not the relay's error: it runs, and refuses every remote decision.
            Err(e) if config.approval_key_file.as_os_str().is_empty() => {
                tracing::warn!(error = %e, "remote decisions are off")
            }
            Err(e) => tracing::error!(error = %e, "remote decisions are off"),
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

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn relay(extra: &str) -> RelayConfig {
        crate::config::Config::from_toml_str(
            &format!("[relay]\nurl = \"http://127.0.0.1:9/v1/stream\"\nprefix = \"p\"\n{extra}"),
            Path::new("c.toml"),
        )
        .unwrap()
        .relay
    }

    fn secret(dir: &Path, name: &str, mode: u32) -> String {
        let p = dir.join(name);
        std::fs::write(&p, format!("{name}-value\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p.display().to_string()
    }

    #[test]
    fn secrets_from_owner_only_files_are_used() {
        let dir = tempfile::tempdir().unwrap();
        let t = secret(dir.path(), "token", 0o600);
        let k = secret(dir.path(), "key", 0o400);
        let s = Settings::build(
            &relay(&format!(
                "token_file = \"{t}\"\napproval_key_file = \"{k}\"\n"
            )),
            0,
        );
        assert_eq!(s.error, None);
        assert!(s.remote.is_some());
        assert_eq!(s.approval_key.as_deref(), Some(&b"key-value"[..]));
    }

    #[test]
    fn a_token_file_others_may_read_keeps_the_relay_from_starting() {
        let dir = tempfile::tempdir().unwrap();
        let t = secret(dir.path(), "token", 0o644);
        let s = Settings::build(&relay(&format!("token_file = \"{t}\"\n")), 0);
        assert!(s.remote.is_none());
        let e = s.error.unwrap();
        assert!(e.contains(&t) && e.contains("0644"), "{e}");
        // Fixed and read again (a reload, `relay retry`): the relay runs.
        std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = Settings::build(&relay(&format!("token_file = \"{t}\"\n")), 1);
        assert!(s.remote.is_some() && s.error.is_none());
    }

    #[test]
    fn an_approval_key_file_others_may_read_only_turns_remote_decisions_off() {
        let dir = tempfile::tempdir().unwrap();
        let k = secret(dir.path(), "key", 0o640);
        let s = Settings::build(&relay(&format!("approval_key_file = \"{k}\"\n")), 0);
        assert!(s.remote.is_some() && s.error.is_none());
        assert_eq!(s.approval_key, None);
    }
}
