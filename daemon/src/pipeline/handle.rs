//! The pipeline as the rest of the daemon holds it: [`Pipeline`] queues ingests for its
//! threads, runs the filters for callers outside it, and tells which plugins and settings are
//! in force. Starting it is `start`'s job, replacing what it runs under `reload`'s.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use serde_json::Value as Json;
use tokio::sync::watch;

use super::draft::{Draft, object};
use super::filter::process;
use super::ingest::Ingest;
use super::route::shard;
use super::settings::PipelineSettings;
use super::shard::Shard;
use crate::config_feed::ConfigFeed;
use crate::plugins::PluginSet;

pub struct Pipeline {
    /// One shard per pipeline thread; an ingest goes to its session's (see `route`).
    pub(super) shards: Vec<Arc<Shard>>,
    pub(super) plugins: watch::Sender<Arc<PluginSet>>,
    /// Where the settings come from: a reload reads the file again through it.
    pub(super) feed: Arc<ConfigFeed>,
    /// The settings the current set was built with; a reload replaces them.
    pub(super) settings: Mutex<PipelineSettings>,
    /// One reload at a time.
    pub(super) reloading: Mutex<()>,
    pub ingested: AtomicU64,
    pub observer_lagged: AtomicU64,
    /// The redactor in force (the store's entry point uses the same one).
    pub(super) redact: Arc<crate::redact::Shared>,
    /// Shared with the pipeline thread: see [`Pipeline::set_tool_index`].
    pub(super) tool_index: Arc<std::sync::OnceLock<Arc<dyn crate::pipeline::joins::ToolIndex>>>,
}

impl Drop for Pipeline {
    /// Stops the shards' threads; what they still hold queued is answered "stopped".
    fn drop(&mut self) {
        for s in &self.shards {
            s.close();
        }
    }
}

impl Pipeline {
    /// Gives the joins an index of every stored tool request (the search index, which
    /// starts after the pipeline).
    pub fn set_tool_index(&self, index: Arc<dyn crate::pipeline::joins::ToolIndex>) {
        let _ = self.tool_index.set(index);
    }

    /// Handles a raw event, here or on its shard's thread (see `shard`); `ingest.done` is
    /// called once it is stored (or refused).
    pub async fn ingest(&self, ingest: Ingest) {
        let n = shard(
            self.shards.len(),
            &ingest.source,
            ingest.session_id.as_deref(),
            &ingest.raw,
        );
        let in_place = self.plugins.borrow().runs_anywhere(&ingest.source);
        self.shards[n].submit(ingest, in_place).await;
    }

    /// Runs the filters (`process`, redaction included) over an event that did not come in
    /// through `ingest`, such as an SDK caller's checkpoint request, so that what is stored is
    /// filtered the same way. Blocking. The first event the filters kept, or `None` if they
    /// dropped it; filter failures are logged and the event goes on unchanged.
    pub fn filter(&self, session: &str, source: &str, event: Json) -> Option<Json> {
        let set = self.plugins();
        let draft = Draft::new(session.to_string(), object(event));
        let mut notes = Vec::new();
        let redactor = self.redact.get();
        let kept = process(
            &set,
            &redactor,
            vec![draft],
            source,
            &Json::Null,
            &mut notes,
        );
        for note in notes {
            tracing::warn!(error = %Json::Object(note.event), "a filter failed on a checkpoint request");
        }
        kept.into_iter().next().map(|d| Json::Object(d.event))
    }

    /// The redactor in force and its counters.
    pub fn redaction(&self) -> &Arc<crate::redact::Shared> {
        &self.redact
    }

    /// The plugins in force.
    pub fn plugins(&self) -> Arc<PluginSet> {
        self.plugins.borrow().clone()
    }

    /// The plugin set in force, and every set that replaces it (for components outside the
    /// pipeline that call plugins, like the relay's filters).
    pub fn watch_plugins(&self) -> watch::Receiver<Arc<PluginSet>> {
        self.plugins.subscribe()
    }

    pub fn settings(&self) -> PipelineSettings {
        self.settings.lock().unwrap().clone()
    }
}
