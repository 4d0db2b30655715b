//! The first of the pipeline's two threads (`dstream-map`): takes ingests in turn from a
//! [`FairQueue`], parses each and runs its mapping plugin, and hands the events it made to the
//! second thread ([`super::worker`]), which filters, decides and appends them.
//!
//! Why two threads: a mapping plugin runs on its own thread and the pipeline used to wait for
//! it, so the map of one event and the filters, decision and append of the one before never
//! overlapped. Now they do, and each session keeps its order: both threads take events in
//! the same order, one at a time, through a FIFO between them. The hand-over holds at most
//! [`HANDED_OVER`] mapped ingests (each bounded by the frame limit), so the map thread waits
//! when the worker is behind, and a flooding client delays another's tool call by at most
//! that many events beyond its own turn (the worker takes about 16 µs an event).

use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Weak};

use serde_json::Value as Json;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, watch};

use super::draft::{Draft, fallback_session};
use super::fair::FairQueue;
use super::handle::Pipeline;
use super::ingest::{Ingest, IngestError};
use super::map::map;
use crate::checkpoint::policy::Policy;
use crate::plugins::PluginSet;

/// Mapped ingests waiting for the worker, at most. Room for a burst: waking the worker takes
/// longer on a VM than mapping an event, and with 2 the map thread spent two thirds of its
/// time waiting to hand over while the worker, not yet running, was idle.
pub(super) const HANDED_OVER: usize = 16;

/// One ingest after its map step: what the worker needs to finish it.
pub(super) struct Mapped {
    /// The ingest as it came (its raw text already dropped: `raw` holds it parsed).
    pub ingest: Ingest,
    pub raw: Arc<Json>,
    pub fallback: String,
    pub drafts: Vec<Draft>,
    /// The plugins it was mapped with: its filters and decisions come from the same set.
    pub set: Arc<PluginSet>,
    pub keep_raw: bool,
    pub policy: Arc<Policy>,
}

/// The map thread's state.
pub(super) struct MapStage {
    pub plugins: watch::Receiver<Arc<PluginSet>>,
    pub pipeline: Weak<Pipeline>,
    pub worker: SyncSender<Mapped>,
}

impl MapStage {
    /// Takes ingests in turn from each client that has some queued (in arrival order within
    /// a client), until the queue closes or the worker is gone.
    pub(super) fn run(mut self, mut rx: mpsc::Receiver<Ingest>) {
        let mut fair = FairQueue::default();
        loop {
            if fair.is_empty() {
                match rx.blocking_recv() {
                    Some(i) => fair.push(i),
                    None => return,
                }
            }
            while let Ok(i) = rx.try_recv() {
                fair.push(i);
            }
            let Some(ingest) = fair.pop() else { continue };
            let Some(mapped) = self.map(ingest) else {
                return;
            };
            if let Err(std::sync::mpsc::SendError(mapped)) = self.worker.send(mapped) {
                (mapped.ingest.done)(Err(IngestError::Stopped));
                return;
            }
        }
    }

    /// Parses the raw event and maps it; `None` once the pipeline is gone (the ingest is
    /// answered "stopped").
    fn map(&mut self, mut ingest: Ingest) -> Option<Mapped> {
        let Some(pipeline) = self.pipeline.upgrade() else {
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
        let raw: Arc<Json> =
            Arc::new(crate::lossy_json::parse(text.get()).map_or(Json::Null, |(v, _)| v));
        drop(text);
        let fallback = fallback_session(&ingest.source, ingest.session_id.as_deref(), &raw);
        let drafts = map(
            &set,
            &ingest.source,
            &raw,
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
