//! The one source of configuration while the daemon runs: it reads the config file (at start,
//! and again when the file changes or `plugins.reload` asks), checks the result whole, and
//! publishes each good one on a `watch` channel that every component follows. A file that does
//! not parse or check keeps the last good configuration in force, and the error is kept for
//! `plugins.list` to show.
//!
//! What cannot change while the daemon runs (the socket, the data directory, the flags given
//! on the command line) is carried over from the running configuration.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::config::Config;

/// Why a file was not taken.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedError {
    pub file: PathBuf,
    pub error: String,
}

pub struct ConfigFeed {
    tx: watch::Sender<Arc<Config>>,
    last_error: Mutex<Option<FeedError>>,
    /// One reload at a time: two readers of the file must not publish out of order.
    reloading: Mutex<()>,
}

impl ConfigFeed {
    pub fn new(config: Config) -> ConfigFeed {
        ConfigFeed {
            tx: watch::channel(Arc::new(config)).0,
            last_error: Mutex::new(None),
            reloading: Mutex::new(()),
        }
    }

    /// The configuration in force.
    pub fn current(&self) -> Arc<Config> {
        self.tx.borrow().clone()
    }

    /// The configuration in force and every one published after it.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Config>> {
        self.tx.subscribe()
    }

    /// Why the file was last refused, until a good one is read.
    pub fn last_error(&self) -> Option<FeedError> {
        self.last_error.lock().unwrap().clone()
    }

    /// Reads the file again, if the daemon was started with one. A good file that differs
    /// from the one in force is published (`Ok(true)`); a bad one is refused, logged and kept
    /// as the last error. Blocking (it reads a file).
    pub fn reload(&self) -> Result<bool, FeedError> {
        let _one = self.reloading.lock().unwrap();
        let running = self.current();
        let Some(path) = running.file.clone() else {
            return Ok(false);
        };
        match load_checked(&path, &running) {
            Ok(config) => {
                *self.last_error.lock().unwrap() = None;
                if config == *running {
                    return Ok(false);
                }
                tracing::info!(file = %path.display(), "configuration reloaded");
                self.tx.send_replace(Arc::new(config));
                Ok(true)
            }
            Err(error) => {
                tracing::error!(file = %path.display(), %error, "configuration not reloaded; keeping the last good one");
                let e = FeedError { file: path, error };
                *self.last_error.lock().unwrap() = Some(e.clone());
                Err(e)
            }
        }
    }
}

/// `path` over the defaults, checked whole (what only the components can check, such as the
/// redaction patterns compiling, included), with what cannot change at run time carried over
/// from `running`.
fn load_checked(path: &Path, running: &Config) -> Result<Config, String> {
    let mut config = Config::load(path).map_err(|e| e.to_string())?;
    if let Err(e) = crate::redact::Redactor::new(&config.redact) {
        return Err(format!(
            "config file {}: redact.extra_patterns: {e}",
            path.display()
        ));
    }
    config.daemon.socket = running.daemon.socket.clone();
    config.daemon.data_dir = running.daemon.data_dir.clone();
    config.plugin_dir_override = running.plugin_dir_override.clone();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("config.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_good_file_is_published_and_a_bad_one_keeps_the_last_good() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "[checkpoints]\ngrant_ttl_ms = 1000\n");
        let mut first = Config::load(&path).unwrap();
        first.daemon.socket = "/run/keep.sock".into();
        let feed = ConfigFeed::new(first);
        let mut rx = feed.subscribe();
        rx.borrow_and_update();

        assert_eq!(feed.reload(), Ok(false), "nothing changed");
        write(dir.path(), "[checkpoints]\ngrant_ttl_ms = 2000\n");
        assert_eq!(feed.reload(), Ok(true));
        assert!(rx.has_changed().unwrap());
        let now = feed.current();
        assert_eq!(now.checkpoints.grant_ttl_ms, 2000);
        assert_eq!(now.daemon.socket, Path::new("/run/keep.sock"));

        write(dir.path(), "[redact]\nextra_patterns = [\"(\"]\n");
        let e = feed.reload().unwrap_err();
        assert!(e.error.contains("redact.extra_patterns"), "{e:?}");
        assert_eq!(feed.current().checkpoints.grant_ttl_ms, 2000);
        assert_eq!(feed.last_error(), Some(e));

        write(dir.path(), "[checkpoints\n");
        assert!(feed.reload().is_err());
        write(dir.path(), "[checkpoints]\ngrant_ttl_ms = 2000\n");
        assert_eq!(feed.reload(), Ok(false));
        assert_eq!(feed.last_error(), None, "a good file clears the error");
    }
}
