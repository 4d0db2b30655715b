//! A shard's stage (see `shard`, which says who runs it: the shard's thread or the caller):
//! parses each ingest and runs its mapping plugin, then has the [`Worker`] filter, decide and
//! append the events it made, one ingest at a time.
//!
//! One stage, not a map thread handing over to a worker thread: with the mapping plugins
//! called on the same thread (Lua when its state is free, the Claude Code mapping as Rust) the
//! two stages overlapped little, and the hand-over cost every ingest a wake-up and two
//! context switches. C=16 `ingest` over 16 sessions, three alternated pairs: 42.1-44.4 µs
//! of daemon CPU an event with two threads, 39.1-40.4 with one.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value as Json;
use serde_json::value::RawValue;
use tokio::sync::watch;

use super::draft::fallback_session;
use super::ingest::{Ingest, IngestError};
use super::map::map;
use super::normalize::verbatim;
use super::shard::Stage;
use super::worker::{Mapped, Worker};
use crate::plugins::PluginSet;

/// A shard's state for the steps of an ingest.
pub(super) struct MapStage {
    pub plugins: watch::Receiver<Arc<PluginSet>>,
    /// The steps after the map; its handle on the pipeline serves the map too.
    pub worker: Worker,
    /// A mapped ingest left for the shard's thread (see [`Stage::handle`]).
    pub deferred: Option<Mapped>,
}

impl Stage for MapStage {
    /// Maps one ingest, then has the worker filter, decide and append its events; on an
    /// async worker, a result whose request must be looked up (in the search index or the
    /// log, which may read the disk) is left for the shard's thread once mapped.
    fn handle(&mut self, ingest: Ingest, in_place: bool) {
        let Some(mapped) = self.map(ingest) else {
            return;
        };
        if in_place && self.worker.joins.would_look_up(&mapped.drafts) {
            self.deferred = Some(mapped);
            return;
        }
        self.worker.handle(mapped);
    }

    fn has_deferred(&self) -> bool {
        self.deferred.is_some()
    }

    fn resume(&mut self) {
        if let Some(mapped) = self.deferred.take() {
            self.worker.handle(mapped);
        }
    }
}

impl MapStage {
    /// Parses the raw event and maps it; `None` once the pipeline is gone (the ingest is
    /// answered "stopped").
    fn map(&mut self, mut ingest: Ingest) -> Option<Mapped> {
        let Some(pipeline) = self.worker.pipeline.upgrade() else {
            (ingest.done)(Err(IngestError::Stopped));
            return None;
        };
        pipeline.ingested.fetch_add(1, Ordering::Relaxed);
        let (keep_raw, policy) = {
            let s = pipeline.settings.lock().unwrap();
            (s.keep_raw, s.policy.clone())
        };
        drop(pipeline);
        let set = self.plugins.borrow_and_update().clone();
        // Well formed (the socket layer checked); what cannot be represented (a lone
        // surrogate, 1e999) is repaired rather than lost, so the call still gets its decision.
        let text = std::mem::replace(&mut ingest.raw, RawValue::NULL.to_owned());
        let (raw, repaired) = crate::lossy_json::parse(text.get()).unwrap_or((Json::Null, true));
        let raw = Arc::new(raw);
        let verbatim_raw = verbatim(text, repaired);
        let fallback = fallback_session(&ingest.source, ingest.session_id.as_deref(), &raw);
        let drafts = map(
            &set,
            &ingest.source,
            &raw,
            verbatim_raw.as_ref(),
            ingest.session_id.as_deref(),
            &fallback,
            keep_raw,
        );
        Some(Mapped {
            ingest,
            raw,
            fallback,
            drafts,
            set,
            keep_raw,
            policy,
        })
    }
}
