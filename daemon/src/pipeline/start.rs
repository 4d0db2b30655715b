//! Starting the pipeline: loads the plugins, then starts its threads (each a map stage, which
//! hands each mapped ingest to its worker's steps; how many: `route`) and the `on_event`
//! observer. Apart from the handle so that the worker and the observer, which hold the handle
//! weakly, do not import the file that starts them.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::handle::Pipeline;
use super::joins::JoinMemory;
use super::map_stage::MapStage;
use super::observe::observe;
use super::route::thread_count;
use super::settings::PipelineSettings;
use super::shard::Shard;
use super::worker::Worker;
use crate::budget::Budgets;
use crate::checkpoint::Checkpoints;
use crate::config_feed::ConfigFeed;
use crate::hub::Hub;
use crate::plugins::PluginSet;
use crate::plugins::{PLUGIN_STACK_BYTES, allow_inline_calls};
use crate::store::Store;

impl Pipeline {
    /// Loads the plugins and starts the pipeline's threads and the `on_event` observer (on
    /// the current tokio runtime).
    pub fn start(
        store: Store,
        hub: Arc<Hub>,
        checkpoints: Arc<Checkpoints>,
        budgets: Arc<Budgets>,
        feed: Arc<ConfigFeed>,
        redact: Arc<crate::redact::Shared>,
    ) -> std::io::Result<Arc<Pipeline>> {
        let config = feed.current();
        let settings = PipelineSettings::from_config(&config);
        if let Err(e) = std::fs::create_dir_all(&settings.plugins.dir) {
            tracing::warn!(dir = %settings.plugins.dir.display(), error = %e, "cannot create the plugin folder");
        }
        let set = Arc::new(PluginSet::load(&settings.plugins, None));
        for e in &set.errors {
            tracing::error!(file = %e.file, error = %e.error, "plugin not loaded");
        }
        tracing::info!(
            dir = %set.dir.display(),
            plugins = %set.plugins.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
            "plugins loaded"
        );
        let (plugins, _) = watch::channel(set);
        let tool_index: Arc<std::sync::OnceLock<_>> = Arc::default();
        let threads = thread_count(config.plugins.pipeline_threads);
        let pipeline = Arc::new_cyclic(|weak: &std::sync::Weak<Pipeline>| Pipeline {
            shards: (0..threads)
                .map(|_| {
                    Arc::new(Shard::new(Box::new(MapStage {
                        plugins: plugins.subscribe(),
                        worker: Worker {
                            store: store.clone(),
                            checkpoints: checkpoints.clone(),
                            budgets: budgets.clone(),
                            pipeline: weak.clone(),
                            joins: JoinMemory::default(),
                            tool_index: tool_index.clone(),
                        },
                        deferred: None,
                    })))
                })
                .collect(),
            plugins,
            feed,
            settings: Mutex::new(settings.clone()),
            reloading: Mutex::new(()),
            ingested: AtomicU64::new(0),
            observer_lagged: AtomicU64::new(0),
            redact,
            tool_index,
        });
        for (n, shard) in pipeline.shards.iter().enumerate() {
            let shard = shard.clone();
            std::thread::Builder::new()
                .name(format!("dstream-pipe-{n}"))
                .stack_size(PLUGIN_STACK_BYTES)
                .spawn(move || {
                    allow_inline_calls();
                    shard.run()
                })?;
        }
        tokio::spawn(observe(
            hub,
            pipeline.plugins.subscribe(),
            Arc::downgrade(&pipeline),
        ));
        Ok(pipeline)
    }
}
