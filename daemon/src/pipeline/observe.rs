//! The **observe** step: plugins' `on_event` read the daemon-wide stream of committed events.
//! An async task of its own, apart from the pipeline thread, so that a slow observer only
//! ever misses events (counted as lagged) and never delays a store or a decision.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value as Json;
use tokio::sync::watch;

use super::handle::Pipeline;
use crate::hub::{Hub, Lagged};
use crate::plugins::{Hooks, Plugin, PluginSet};

/// Feeds committed events to the plugins that define `on_event`. Holds a reader of the
/// daemon-wide stream only while such a plugin is loaded.
pub(super) async fn observe(
    hub: Arc<Hub>,
    mut plugins: watch::Receiver<Arc<PluginSet>>,
    pipeline: std::sync::Weak<Pipeline>,
) {
    loop {
        let set = plugins.borrow_and_update().clone();
        let sinks: Vec<Arc<Plugin>> = set.with(Hooks::ON_EVENT).cloned().collect();
        drop(set);
        if sinks.is_empty() {
            if plugins.changed().await.is_err() {
                return;
            }
            continue;
        }
        let mut reader = hub.subscribe();
        loop {
            tokio::select! {
                changed = plugins.changed() => {
                    if changed.is_err() { return; }
                    break; // a new set: start over with its sinks
                }
                next = reader.recv() => match next {
                    Ok(committed) => {
                        let mut bytes = Vec::with_capacity(committed.event.len() + 1);
                        committed.event.write_to(&mut bytes);
                        let Ok(event) = serde_json::from_slice::<Json>(&bytes) else { continue };
                        let event = Arc::new(event);
                        for sink in &sinks {
                            sink.notify(event.clone(), bytes.len());
                        }
                    }
                    Err(Lagged) => {
                        if let Some(p) = pipeline.upgrade() {
                            p.observer_lagged.fetch_add(1, Ordering::Relaxed);
                        }
                        tracing::warn!("on_event plugins fell behind the live stream; events skipped for them");
                    }
                }
            }
        }
    }
}
