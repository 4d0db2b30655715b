//! Components with a lifecycle: every long-lived part of the daemon (the store, the
//! checkpoints, the pipeline, the relay, the file watcher, and the ones to come) is started in
//! one place (`server::start`), told of each new configuration the [`ConfigFeed`] publishes,
//! and stopped in the reverse order of its start when the daemon stops.
//!
//! A component starts in its own constructor (each needs different things to start);
//! what they share is this trait, which the registry drives.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use crate::checkpoint::Checkpoints;
use crate::config::Config;
use crate::config_feed::ConfigFeed;
use crate::pipeline::Pipeline;
use crate::relay::Relay;
use crate::store::Store;
use crate::watch::Watcher;

pub type Stopping<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

pub trait Component: Send + Sync {
    fn name(&self) -> &'static str;

    /// A new configuration is in force: take what concerns this component from it. It runs
    /// off the async workers, so it may block (reloading plugins does).
    fn reconfigure(&self, _config: &Config) {}

    /// Stops: called once, after every component started later has stopped.
    fn stop(&self) -> Stopping<'_> {
        Box::pin(async {})
    }
}

/// The running components, in the order they started.
#[derive(Default)]
pub struct Components {
    started: Mutex<Vec<Arc<dyn Component>>>,
    follower: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Components {
    /// Adds a component that has just started.
    pub fn add(&self, component: Arc<dyn Component>) {
        self.started.lock().unwrap().push(component);
    }

    /// From now on every configuration `feed` publishes reaches each component, in the order
    /// they started (on the current runtime).
    pub fn follow(self: &Arc<Self>, feed: &ConfigFeed) {
        let mut rx = feed.subscribe();
        rx.borrow_and_update();
        let this = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let config = rx.borrow_and_update().clone();
                let Some(this) = this.upgrade() else {
                    return;
                };
                let list = this.started.lock().unwrap().clone();
                let done = tokio::task::spawn_blocking(move || {
                    for c in list {
                        tracing::debug!(component = c.name(), "reconfiguring");
                        c.reconfigure(&config);
                    }
                });
                let _ = done.await;
            }
        });
        *self.follower.lock().unwrap() = Some(task.abort_handle());
    }

    /// Stops every component, the last started first. Later calls do nothing.
    pub async fn stop(&self) {
        if let Some(f) = self.follower.lock().unwrap().take() {
            f.abort();
        }
        let list = std::mem::take(&mut *self.started.lock().unwrap());
        for c in list.iter().rev() {
            tracing::debug!(component = c.name(), "stopping");
            c.stop().await;
        }
    }
}

impl Component for Store {
    fn name(&self) -> &'static str {
        "store"
    }

    fn reconfigure(&self, _config: &Config) {
        // `[store]` (fsync, the WAL, the index) and `[daemon]` are read once, at start: a
        // change takes effect at the next start (config.toml says so).
    }

    /// Everything queued is written, synced and acknowledged; the data-dir lock is released.
    fn stop(&self) -> Stopping<'_> {
        Box::pin(self.shutdown())
    }
}

impl Component for Checkpoints {
    fn name(&self) -> &'static str {
        "checkpoints"
    }

    /// The grant TTL; the policy itself is the pipeline's, and `checkpoint.request` reads its
    /// defaults from the configuration in force.
    fn reconfigure(&self, config: &Config) {
        self.set_grant_ttl_ms(config.checkpoints.grant_ttl_ms);
    }
}

impl Component for Pipeline {
    fn name(&self) -> &'static str {
        "pipeline"
    }

    /// The plugins, the checkpoint policy and the redaction settings, when they changed.
    fn reconfigure(&self, config: &Config) {
        self.apply(config);
    }
}

impl Component for Relay {
    fn name(&self) -> &'static str {
        "relay"
    }

    fn reconfigure(&self, config: &Config) {
        if self.config() != config.relay {
            self.reconfigure(&config.relay);
        }
    }

    fn stop(&self) -> Stopping<'_> {
        self.stop_tasks();
        Box::pin(async {})
    }
}

impl Component for crate::retention::Retention {
    fn name(&self) -> &'static str {
        "retention"
    }

    fn reconfigure(&self, config: &Config) {
        if self.config() != config.retention {
            self.reconfigure(&config.retention);
        }
    }

    fn stop(&self) -> Stopping<'_> {
        crate::retention::Retention::stop(self);
        Box::pin(async {})
    }
}

impl Component for Watcher {
    fn name(&self) -> &'static str {
        "watch"
    }

    fn stop(&self) -> Stopping<'_> {
        self.stop();
        Box::pin(async {})
    }
}
