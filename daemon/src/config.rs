//! Configuration: the documented defaults embedded from the repository's `config.toml`, a
//! user's file over them, then environment variables and flags over that.

use std::path::{Path, PathBuf};

use dstream_sdk::protocol::{Action, OnTimeout};
use serde::Deserialize;

/// The default configuration, the same text as the documented `config.toml`.
pub const DEFAULT_CONFIG: &str = include_str!("../../config.toml");

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub daemon: DaemonConfig,
    pub store: StoreConfig,
    pub read: ReadConfig,
    pub subscriptions: SubscriptionConfig,
    pub plugins: PluginsConfig,
    pub redact: RedactConfig,
    pub checkpoints: CheckpointsConfig,
    pub relay: RelayConfig,
    pub retention: RetentionConfig,
    pub http: crate::http::settings::HttpConfig,
    /// `[[budgets]]`: none by default.
    #[serde(default)]
    pub budgets: Vec<crate::budget::settings::BudgetConfig>,
    pub otlp: crate::http::settings::OtlpConfig,
    pub search: crate::search::settings::SearchConfig,
    /// The file this configuration was read from, if any (hot reload reads it again).
    #[serde(skip)]
    pub file: Option<PathBuf>,
    /// `--plugin-dir`: wins over `plugins.dir`, also when the file is read again.
    #[serde(skip)]
    pub plugin_dir_override: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    pub socket: PathBuf,
    pub data_dir: PathBuf,
    pub max_frame_bytes: usize,
    pub max_client_memory_bytes: usize,
    pub max_connections: usize,
    pub idle_timeout_ms: u64,
    pub max_subscriptions_per_connection: usize,
    pub autostart: bool,
    pub spool_max_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    Always,
    Interval,
    Never,
}

impl FsyncPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FsyncPolicy::Always => "always",
            FsyncPolicy::Interval => "interval",
            FsyncPolicy::Never => "never",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    pub fsync: FsyncPolicy,
    pub fsync_interval_ms: u64,
    pub index_interval_bytes: u64,
    pub verify_on_start: bool,
    pub max_open_files: usize,
    pub wal_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadConfig {
    pub default_limit: usize,
    pub max_limit: usize,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionConfig {
    pub live_buffer_bytes: usize,
    pub outbound_bytes: usize,
    pub heartbeat_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginsConfig {
    pub dir: PathBuf,
    pub disabled: Vec<String>,
    pub keep_raw: bool,
    /// 0: chosen from the cores (see `pipeline::route`).
    pub pipeline_threads: usize,
    pub call_timeout_ms: u64,
    pub instruction_budget: u64,
    pub memory_bytes: usize,
    pub max_consecutive_errors: u32,
    /// `[plugins.lua.<name>]` tables, handed to each plugin as `host.config`.
    #[serde(default)]
    pub lua: std::collections::BTreeMap<String, toml::Value>,
    /// `[plugins.native.<file stem>]` tables, handed to a native plugin's `init` as JSON.
    #[serde(default)]
    pub native: std::collections::BTreeMap<String, toml::Value>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsConfig {
    pub default_timeout_ms: u64,
    pub default_on_timeout: OnTimeout,
    pub permission_requests: PermissionRequests,
    pub grant_ttl_ms: u64,
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
}

/// What an agent's own permission prompt (Claude Code's PermissionRequest) becomes when no
/// rule matches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PermissionRequests {
    /// The agent asks its user as it normally would.
    Agent,
    /// A checkpoint, decided through dstream.
    Ask,
}

/// One `[[checkpoints.rules]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Glob on the tool name, case-insensitive.
    pub tool: String,
    /// Glob on the tool's main input (command, file path, url, pattern).
    #[serde(default)]
    pub input: Option<String>,
    /// The agent (`claude-code`, `opencode`, …); any when unset.
    #[serde(default)]
    pub source: Option<String>,
    pub action: Action,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub on_timeout: Option<OnTimeout>,
}

/// `[redact]`: what the store's redactor treats as secrets.
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

/// `[retention]`: sessions deleted once their last event is older than `delete_after`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    pub compress_after: String,
    pub delete_after: String,
    pub every: String,
}

impl RetentionConfig {
    /// `compress_after` as a duration; `None` when "off" (checked when the file was read).
    pub fn compress_after(&self) -> Option<std::time::Duration> {
        crate::util::duration::parse_or_off(&self.compress_after).unwrap_or(None)
    }

    /// `delete_after` as a duration; `None` when "off" (checked when the file was read).
    pub fn delete_after(&self) -> Option<std::time::Duration> {
        crate::util::duration::parse_or_off(&self.delete_after).unwrap_or(None)
    }

    /// How often retention runs while the daemon does (and once at start).
    pub fn every(&self) -> std::time::Duration {
        crate::util::duration::parse_or_off(&self.every)
            .ok()
            .flatten()
            .unwrap_or(std::time::Duration::from_secs(3600))
    }
}

/// `[relay]`: the mirror of every session on a remote Durable Streams server.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    pub url: String,
    pub prefix: String,
    pub token_env: String,
    /// A file holding the bearer token (owner-only), instead of `token_env`.
    pub token_file: PathBuf,
    pub sessions: String,
    pub batch_max_events: usize,
    pub batch_max_bytes: usize,
    pub linger_ms: u64,
    pub retry_min_ms: u64,
    pub retry_max_ms: u64,
    pub max_parallel_streams: usize,
    pub close_on_session_end: bool,
    pub approval_key_env: String,
    /// A file holding the approval key (owner-only), instead of `approval_key_env`.
    pub approval_key_file: PathBuf,
    pub approval_key_id: String,
    pub approval_max_age_ms: u64,
    pub max_page_bytes: usize,
}

impl RelayConfig {
    pub fn enabled(&self) -> bool {
        !self.url.trim().is_empty()
    }

    /// The path segment for this machine: the configured prefix, else the host name.
    pub fn prefix(&self) -> String {
        if !self.prefix.is_empty() {
            return self.prefix.clone();
        }
        // A host name is nearly always a valid segment; anything else becomes `-`.
        host_name()
            .map(|h| {
                h.chars()
                    .map(|c| if is_segment_char(c) { c } else { '-' })
                    .collect::<String>()
            })
            .filter(|h| is_path_segment(h))
            .unwrap_or_else(|| "dstream".into())
    }
}

fn is_segment_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')
}

/// One URL path segment that needs no escaping and is not `.` or `..`.
fn is_path_segment(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && s.chars().all(is_segment_char)
}

/// This machine's host name, where the OS reports one.
fn host_name() -> Option<String> {
    #[cfg(unix)]
    {
        let mut buf = [0u8; 256];
        // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        if rc != 0 {
            return None;
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let name = String::from_utf8_lossy(&buf[..end]).into_owned();
        (!name.is_empty()).then_some(name)
    }
    #[cfg(not(unix))]
    {
        std::env::var("COMPUTERNAME").ok().filter(|n| !n.is_empty())
    }
}

/// A configuration that could not be used; the message names the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {}: {message}", path.display())]
    Syntax { path: PathBuf, message: String },
    #[error("config file {}: key `{key}`: {message}", path.display())]
    Key {
        path: PathBuf,
        key: String,
        message: String,
    },
}

impl Default for Config {
    fn default() -> Self {
        Config::from_toml_str(DEFAULT_CONFIG, Path::new("<built-in config.toml>"))
            .expect("the embedded config.toml is valid")
    }
}

impl Config {
    /// Loads `path` over the embedded defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        let mut config = Config::from_toml_str(&text, path)?;
        config.file = Some(path.to_path_buf());
        Ok(config)
    }

    /// Parses `text` (a whole or partial config) over the embedded defaults.
    pub fn from_toml_str(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let syntax = |e: toml::de::Error| ConfigError::Syntax {
            path: path.into(),
            message: e.message().to_string(),
        };
        let mut merged: toml::Table = toml::from_str(DEFAULT_CONFIG).map_err(syntax)?;
        let user: toml::Table = toml::from_str(text).map_err(syntax)?;
        merge(&mut merged, user);
        let config: Config =
            serde_path_to_error::deserialize(toml::Value::Table(merged)).map_err(|e| {
                let message = e.inner().message().to_string();
                let key = e.path().to_string();
                ConfigError::Key {
                    path: path.into(),
                    key,
                    message,
                }
            })?;
        config.validate(path)?;
        Ok(config)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| {
            Err(ConfigError::Key {
                path: path.into(),
                key: key.into(),
                message: message.into(),
            })
        };
        if self.daemon.max_frame_bytes < 1024 {
            return bad("daemon.max_frame_bytes", "must be at least 1024");
        }
        if let Err(e) = crate::util::duration::parse_or_off(&self.retention.compress_after) {
            return bad("retention.compress_after", &e);
        }
        if let Err(e) = self.http.listen() {
            return bad("http.listen", &e);
        }
        if self.http.max_connections == 0 {
            return bad("http.max_connections", "must be at least 1");
        }
        if self.http.max_body_bytes < 1024 {
            return bad("http.max_body_bytes", "must be at least 1024");
        }
        if let Err((i, e)) = crate::budget::settings::check_all(&self.budgets) {
            return bad(&format!("budgets[{i}]"), &e);
        }
        if let Err(e) = self.otlp.forward_target() {
            return bad("otlp.forward_to", &e);
        }
        if self.daemon.max_connections == 0 {
            return bad("daemon.max_connections", "must be at least 1");
        }
        if self.daemon.idle_timeout_ms == 0 {
            return bad("daemon.idle_timeout_ms", "must be at least 1");
        }
        if self.daemon.max_subscriptions_per_connection == 0 {
            return bad(
                "daemon.max_subscriptions_per_connection",
                "must be at least 1",
            );
        }
        if self.store.fsync_interval_ms == 0 {
            return bad("store.fsync_interval_ms", "must be at least 1");
        }
        if self.store.index_interval_bytes == 0 {
            return bad("store.index_interval_bytes", "must be at least 1");
        }
        if self.store.max_open_files == 0 {
            return bad("store.max_open_files", "must be at least 1");
        }
        if self.read.default_limit == 0 || self.read.default_limit > self.read.max_limit {
            return bad("read.default_limit", "must be between 1 and read.max_limit");
        }
        if self.subscriptions.live_buffer_bytes < 65536 {
            return bad("subscriptions.live_buffer_bytes", "must be at least 65536");
        }
        if self.subscriptions.outbound_bytes < 65536 {
            return bad("subscriptions.outbound_bytes", "must be at least 65536");
        }
        if self.daemon.max_client_memory_bytes < 2 * self.daemon.max_frame_bytes {
            return bad(
                "daemon.max_client_memory_bytes",
                "must be at least twice daemon.max_frame_bytes",
            );
        }
        if self.plugins.call_timeout_ms == 0 {
            return bad("plugins.call_timeout_ms", "must be at least 1");
        }
        if self.plugins.memory_bytes < (1 << 20) {
            return bad("plugins.memory_bytes", "must be at least 1048576");
        }
        if self.plugins.instruction_budget < 10_000 {
            return bad("plugins.instruction_budget", "must be at least 10000");
        }
        if self.plugins.max_consecutive_errors == 0 {
            return bad("plugins.max_consecutive_errors", "must be at least 1");
        }
        for (name, value) in &self.plugins.lua {
            if !value.is_table() {
                return bad(&format!("plugins.lua.{name}"), "must be a table");
            }
        }
        for (name, value) in &self.plugins.native {
            if !value.is_table() {
                return bad(&format!("plugins.native.{name}"), "must be a table");
            }
        }
        if self.subscriptions.heartbeat_ms == 0 {
            return bad("subscriptions.heartbeat_ms", "must be at least 1");
        }
        self.validate_relay(path)?;
        for (key, value) in [
            ("retention.delete_after", &self.retention.delete_after),
            ("retention.every", &self.retention.every),
        ] {
            if let Err(e) = crate::util::duration::parse_or_off(value) {
                return bad(key, &e);
            }
        }
        if self.checkpoints.default_timeout_ms == 0 {
            return bad("checkpoints.default_timeout_ms", "must be at least 1");
        }
        for (i, rule) in self.checkpoints.rules.iter().enumerate() {
            if rule.tool.is_empty() {
                return bad(&format!("checkpoints.rules[{i}].tool"), "must not be empty");
            }
            if rule.timeout_ms == Some(0) {
                return bad(
                    &format!("checkpoints.rules[{i}].timeout_ms"),
                    "must be at least 1",
                );
            }
        }
        Ok(())
    }

    /// The socket path in force: the configured one, else the platform default.
    pub fn socket_path(&self) -> PathBuf {
        if self.daemon.socket.as_os_str().is_empty() {
            dstream_sdk::socket::default_socket_path()
        } else {
            self.daemon.socket.clone()
        }
    }

    /// The data directory in force: the configured one, else `$XDG_DATA_HOME/dstream`, else
    /// `~/.dstream/data`.
    pub fn data_dir(&self) -> PathBuf {
        if !self.daemon.data_dir.as_os_str().is_empty() {
            return self.daemon.data_dir.clone();
        }
        match std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
            Some(dir) => PathBuf::from(dir).join("dstream"),
            None => dstream_sdk::socket::home_dir()
                .join(".dstream")
                .join("data"),
        }
    }
}

/// What `dstream daemon` was told on its command line; the environment and the config file
/// fill in the rest (see [`Config::resolve`]).
#[derive(Debug, Clone, Default)]
pub struct DaemonFlags {
    pub config: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    /// `--http-listen`: over `[http] listen` (and `DSTREAM_HTTP_LISTEN`).
    pub http_listen: Option<String>,
}

/// `$XDG_CONFIG_HOME/dstream/config.toml`, else `~/.config/dstream/config.toml`: the file a
/// daemon reads when neither `--config` nor `$DSTREAM_CONFIG` names one (if it exists).
pub fn default_config_path() -> PathBuf {
    match std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("dstream").join("config.toml"),
        None => dstream_sdk::socket::home_dir()
            .join(".config")
            .join("dstream")
            .join("config.toml"),
    }
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

impl Config {
    /// The configuration a daemon started with `flags` runs with: flags, then the environment
    /// (`DSTREAM_CONFIG`, `DSTREAM_SOCKET`, `DSTREAM_DATA_DIR`), then the config file, then the
    /// embedded defaults. One rule for `dstream daemon`, the hook that starts one, and
    /// `dstream doctor`, so all three agree on the socket and the data directory.
    pub fn resolve(flags: &DaemonFlags) -> Result<Config, ConfigError> {
        let file = flags.config.clone().or_else(|| env_path("DSTREAM_CONFIG"));
        let mut config = match file {
            Some(path) => Config::load(&path)?,
            None => {
                let path = default_config_path();
                if path.is_file() {
                    Config::load(&path)?
                } else {
                    Config::default()
                }
            }
        };
        config.apply_overrides(flags);
        Ok(config)
    }

    /// The socket and data directory from `flags`, else `DSTREAM_SOCKET` / `DSTREAM_DATA_DIR`,
    /// over what the file said.
    pub fn apply_overrides(&mut self, flags: &DaemonFlags) {
        if let Some(socket) = flags.socket.clone().or_else(|| env_path("DSTREAM_SOCKET")) {
            self.daemon.socket = socket;
        }
        if let Some(dir) = flags
            .data_dir
            .clone()
            .or_else(|| env_path("DSTREAM_DATA_DIR"))
        {
            self.daemon.data_dir = dir;
        }
        let listen = flags.http_listen.clone().or_else(|| {
            std::env::var("DSTREAM_HTTP_LISTEN")
                .ok()
                .filter(|v| !v.is_empty())
        });
        if let Some(listen) = listen {
            self.http.listen = listen;
        }
    }
}

impl Config {
    /// The plugin folder in force: the configured one, else `$XDG_CONFIG_HOME/dstream/plugins`,
    /// else `~/.config/dstream/plugins`.
    pub fn plugin_dir(&self) -> PathBuf {
        if let Some(dir) = &self.plugin_dir_override {
            return dir.clone();
        }
        if !self.plugins.dir.as_os_str().is_empty() {
            return self.plugins.dir.clone();
        }
        match std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
            Some(dir) => PathBuf::from(dir).join("dstream").join("plugins"),
            None => dstream_sdk::socket::home_dir()
                .join(".config")
                .join("dstream")
                .join("plugins"),
        }
    }
}

impl Config {
    fn validate_relay(&self, path: &Path) -> Result<(), ConfigError> {
        let r = &self.relay;
        let bad = |key: &str, message: String| {
            Err(ConfigError::Key {
                path: path.into(),
                key: format!("relay.{key}"),
                message,
            })
        };
        if r.enabled() {
            let url = r.url.trim();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return bad(
                    "url",
                    format!("must start with http:// or https://, not {url:?}"),
                );
            }
            if let Err(e) = reqwest::Url::parse(url) {
                return bad("url", format!("{url:?} is not a URL: {e}"));
            }
        }
        if !r.prefix.is_empty() && !is_path_segment(&r.prefix) {
            return bad(
                "prefix",
                "must be one path segment of letters, digits, '.', '-' or '_'".into(),
            );
        }
        if r.batch_max_events == 0 {
            return bad("batch_max_events", "must be at least 1".into());
        }
        if r.batch_max_bytes < 1024 {
            return bad("batch_max_bytes", "must be at least 1024".into());
        }
        if r.retry_min_ms == 0 || r.retry_max_ms < r.retry_min_ms {
            return bad(
                "retry_min_ms",
                "must be at least 1 and at most relay.retry_max_ms".into(),
            );
        }
        if r.max_parallel_streams == 0 {
            return bad("max_parallel_streams", "must be at least 1".into());
        }
        if !(4096..=(1 << 30)).contains(&r.max_page_bytes) {
            return bad(
                "max_page_bytes",
                "must be between 4096 and 1073741824".into(),
            );
        }
        if r.approval_key_id.is_empty() || r.approval_key_id.contains(char::is_whitespace) {
            return bad("approval_key_id", "must be a non-empty word".into());
        }
        // A secret comes from one place: with both, which one wins would be a guess.
        for (env_key, env, file_key, file) in [
            ("token_env", &r.token_env, "token_file", &r.token_file),
            (
                "approval_key_env",
                &r.approval_key_env,
                "approval_key_file",
                &r.approval_key_file,
            ),
        ] {
            if file.as_os_str().is_empty() {
                continue;
            }
            if !env.is_empty() {
                return bad(
                    file_key,
                    format!("set relay.{env_key} or relay.{file_key}, not both"),
                );
            }
            // A daemon's working directory is not the user's, and `~` is not expanded.
            if !file.is_absolute() {
                return bad(
                    file_key,
                    format!(
                        "must be an absolute path, not {:?}",
                        file.display().to_string()
                    ),
                );
            }
        }
        Ok(())
    }
}

/// Overlays `over` onto `base`, table by table, so a user file may set single keys.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
