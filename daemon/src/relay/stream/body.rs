//! What a batch's body holds: the stored events as a JSON array, built without parsing them,
//! or, when plugins have `relay` functions, what those let out. Refused control messages
//! never leave the machine. The bodies of the batches in flight and queued are kept for
//! resends.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::OwnedSemaphorePermit;

use crate::plugins::{Hooks, Input, PluginSet};
use crate::relay::shared::Shared;
use crate::store::EventJson;

/// Refused control messages stay local: relaying them back would let a server that sends
/// junk make the relay send it more.
const KEPT_LOCAL: &str = "relay.control_rejected";

/// The bodies of the batches cut and not yet acknowledged, by seq: the one in flight, and
/// those queued behind it, each holding its bytes of the relay's budget for bodies cut ahead.
#[derive(Default)]
pub(super) struct Bodies(Vec<Kept>);

pub(super) struct Kept {
    pub(super) seq: u64,
    pub(super) body: Bytes,
    pub(super) count: u64,
    /// Its bytes of the budget for bodies cut ahead, released with it (none for a batch cut
    /// after an answer or read again for a resend).
    pub(super) _budget: Option<OwnedSemaphorePermit>,
}

impl Bodies {
    /// The body and event count of batch `seq`, if it is kept.
    pub(super) fn get(&self, seq: u64) -> Option<(Bytes, u64)> {
        self.0
            .iter()
            .find(|k| k.seq == seq)
            .map(|k| (k.body.clone(), k.count))
    }

    pub(super) fn put(&mut self, kept: Kept) {
        self.0.retain(|k| k.seq != kept.seq);
        self.0.push(kept);
    }

    /// Batch `seq` is acknowledged: it and any before it are never sent again.
    pub(super) fn acknowledged(&mut self, seq: u64) {
        self.0.retain(|k| k.seq > seq);
    }

    /// A new epoch or stream numbers its batches afresh.
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

/// The body of a batch of `session` and how many events it holds (see `Worker::body_of`).
pub(super) async fn body_of(
    shared: &Shared,
    session: &Arc<str>,
    mut events: Vec<EventJson>,
) -> (Bytes, u64) {
    events.retain(|e| !e.is_type(KEPT_LOCAL));
    let set = shared.plugins.borrow().clone();
    if set.with(Hooks::RELAY).next().is_none() {
        let n = events.len() as u64;
        return (json_array(&events), n);
    }
    let session = session.clone();
    tokio::task::spawn_blocking(move || filtered_array(&set, &session, &events))
        .await
        .unwrap_or_else(|_| (Bytes::new(), 0))
}

/// `[e1,e2,…]` from stored events, without parsing them.
fn json_array(events: &[EventJson]) -> Bytes {
    let mut out = Vec::with_capacity(events.iter().map(|e| e.len() + 1).sum::<usize>() + 2);
    out.push(b'[');
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        e.write_to(&mut out);
    }
    out.push(b']');
    Bytes::from(out)
}

/// `[e1,e2,…]` of what the plugins' `relay` functions let out, each changed as they say; an
/// event a filter keeps back (nil) or fails on stays local. Every event sent keeps its `lsn`,
/// which resyncs rely on.
fn filtered_array(set: &PluginSet, session: &str, events: &[EventJson]) -> (Bytes, u64) {
    let filters: Vec<_> = set
        .with(Hooks::RELAY)
        .filter(|p| p.disabled().is_none())
        .collect();
    let mut out = vec![b'['];
    let mut count = 0;
    let mut buf = Vec::new();
    for e in events {
        buf.clear();
        e.write_to(&mut buf);
        let Ok(mut event) = serde_json::from_slice::<serde_json::Value>(&buf) else {
            continue;
        };
        let mut keep = true;
        for p in &filters {
            match p.call(Hooks::RELAY, Input::Event(Arc::new(event.clone()))) {
                Ok(mut r) => match r.pop() {
                    Some(serde_json::Value::Object(mut o)) => {
                        o.insert("lsn".into(), e.lsn.into());
                        event = serde_json::Value::Object(o);
                    }
                    _ => {
                        keep = false;
                        break;
                    }
                },
                Err(f) => {
                    tracing::warn!(%session, plugin = %p.name(), lsn = e.lsn, error = %f.error, "relay filter failed; the event stays local");
                    keep = false;
                    break;
                }
            }
        }
        if keep {
            if count > 0 {
                out.push(b',');
            }
            if serde_json::to_writer(&mut out, &event).is_ok() {
                count += 1;
            }
        }
    }
    out.push(b']');
    (Bytes::from(out), count)
}
