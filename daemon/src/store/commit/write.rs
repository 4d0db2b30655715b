//! A session's share of a batch, serialized and written to its log (not synced), at the
//! length the commit thread knows; and taken back out when the batch fails.

use bytes::Bytes;
use dstream_sdk::Event;
use serde::Serialize;
use serde_json::value::RawValue;

use super::messages::{approx_len, fail_all};
use super::thread::Committer;
use super::written::{Group, Written};
use crate::event_id;
use crate::event_json::{CompactFields, LogName};
use crate::store::error::StoreError;
use crate::store::index::IndexEntry;
use crate::store::record;
use crate::store::session::Session;
use crate::store::writer_state::WriterState;
use crate::util::time::now_ms;

impl Committer {
    /// Serializes a group and appends it to its log (not synced). `None` when it failed (the
    /// acks are answered).
    pub(super) fn write_group(&mut self, group: Group) -> Option<Written> {
        let session = group.session;
        if let Some(reason) = session.quarantine_reason() {
            let err = StoreError::Quarantined {
                session: session.id.clone(),
                reason: reason.to_string(),
            };
            fail_all(group.appends.into_iter().map(|(_, _, a)| a).collect(), err);
            return None;
        }
        if let Some(t) = session.gone.get() {
            fail_all(
                group.appends.into_iter().map(|(_, _, a)| a).collect(),
                t.error(),
            );
            return None;
        }
        let mut state = session.writer.lock().unwrap();
        if let Some(reason) = &state.failed {
            let err = StoreError::Failed {
                reason: format!("session {}: {reason}", session.id),
            };
            fail_all(group.appends.into_iter().map(|(_, _, a)| a).collect(), err);
            return None;
        }
        let timestamp = now_ms();
        let mut buf = Vec::with_capacity(
            group
                .appends
                .iter()
                .map(|(e, _, _)| approx_len(e) + 160)
                .sum(),
        );
        let mut lines = Vec::with_capacity(group.appends.len());
        let mut acks = Vec::with_capacity(group.appends.len());
        let mut new_lineage = None;
        // An event without a stream_id joins the session's lineage: the first event's stream.
        let mut lineage = state.stream_id.clone();
        let mut object = Vec::with_capacity(512);
        let empty: &RawValue = serde_json::from_str("{}").expect("valid json");
        for (i, (event, preset_id, ack)) in group.appends.into_iter().enumerate() {
            let lsn = state.next_lsn + i as u64;
            // Named by the log, from the batch's own clock reading: the line can leave out
            // both the id and the timestamp (see `event_id`).
            let id = preset_id.unwrap_or_else(|| {
                event_id::text(event_id::derived(session.log_name.seed(), lsn, timestamp))
            });
            if lineage.is_none() {
                let root = event
                    .stream_id
                    .clone()
                    .unwrap_or_else(|| session.id.clone());
                new_lineage = Some(root.clone());
                lineage = Some(root);
            }
            let stored = Event::<&RawValue> {
                lsn,
                id,
                event_type: event.event_type,
                session_id: session.id.clone(),
                stream_id: event
                    .stream_id
                    .or_else(|| lineage.clone())
                    .unwrap_or_default(),
                causation_id: event.causation_id,
                correlation_id: event.correlation_id,
                actor: event.actor,
                timestamp,
                payload: event.payload.as_deref().unwrap_or(empty),
                metadata: event.metadata.as_deref(),
                raw: event.raw.as_deref(),
            };
            object.clear();
            serde_json::to_writer(&mut object, &StoredEvent::new(&stored, &session.log_name))
                .expect("serializing to a Vec cannot fail");
            let start = buf.len();
            record::seal(&object, &mut buf);
            lines.push((lsn, stored.id, start, object.len() - 1));
            acks.push(ack);
        }
        let old_len = state.len;
        let opened = session.log_handle().map(|(file, _created)| file);
        let file = match opened {
            Ok(f) => f,
            Err(e) => {
                drop(state);
                fail_all(acks, StoreError::io("opening the log", &e));
                return None;
            }
        };
        // At the length the commit thread knows, not at the file's end: bytes a failed write
        // left behind are overwritten rather than built upon.
        if let Err(e) = file.write_at(&buf, old_len) {
            tracing::error!(session = %session.id, error = %e, "append failed; cutting the log back");
            if let Err(e2) = file.set_len(old_len) {
                state.failed = Some(format!(
                    "the log could not be restored after a failed write: {e2}"
                ));
            }
            drop(state);
            fail_all(acks, StoreError::io("writing the log", &e));
            return None;
        }
        drop(state);
        self.dirty.insert(session.id.clone(), session.clone());
        Some(Written {
            session,
            buf: Bytes::from(buf),
            lines,
            acks,
            old_len,
            timestamp,
            new_lineage,
        })
    }

    /// The group is in its log and the WAL: the commit thread's view of the log moves past it
    /// (length, next LSN, lineage, sparse index), so the next batch goes after it even while
    /// this one is still being synced.
    pub(super) fn advance(&self, w: &Written) {
        let mut state = w.session.writer.lock().unwrap();
        self.index_lines(&w.session, &mut state, w.old_len, &w.lines);
        state.len = w.old_len + w.buf.len() as u64;
        state.next_lsn = w.last_lsn() + 1;
        if let Some(root) = &w.new_lineage {
            state.stream_id = Some(root.clone());
        }
    }

    /// Adds sparse index entries for the lines just written (same rule as recovery's rebuild).
    /// An entry may name an LSN not yet committed: readers look up only committed ones.
    fn index_lines(
        &self,
        session: &Session,
        state: &mut WriterState,
        base: u64,
        lines: &[(u64, String, usize, usize)],
    ) {
        let interval = self.settings.index_interval_bytes;
        let mut added = Vec::new();
        for &(lsn, _, start, _) in lines {
            let offset = base + start as u64;
            if state
                .last_index_offset
                .is_none_or(|last| offset >= last + interval)
            {
                added.push(IndexEntry { lsn, offset });
                state.last_index_offset = Some(offset);
            }
        }
        if added.is_empty() {
            return;
        }
        let mut index = session.index.write().unwrap();
        for e in &added {
            index.push(*e);
        }
        state.unsaved_index.extend(added);
    }

    /// Takes a written group back out of its log after the batch failed.
    pub(super) fn cut_back(&self, w: &Written) {
        self.cut_back_to(&w.session, w.old_len);
    }

    /// Cuts a log back to `old_len`, never lengthening it: after a failed pipelined sync the
    /// cuts of several batches arrive in any order, and the shortest must win.
    pub(super) fn cut_back_to(&self, session: &Session, old_len: u64) {
        // Reopened if need be: a batch holds no descriptors beyond the file cache's, however
        // many sessions it touches.
        let restored = session.log_handle().and_then(|(file, _)| {
            if file.len()? > old_len {
                file.set_len(old_len)?;
            }
            Ok(())
        });
        let mut state = session.writer.lock().unwrap();
        match restored {
            Ok(()) => state.len = state.len.min(old_len),
            Err(e) => {
                state.failed = Some(format!(
                    "the log could not be restored after a failed write: {e}"
                ))
            }
        }
    }
}

/// An event as its log line holds it: [`Event`]'s fields in its order, less those
/// [`CompactFields`] lets the line leave out (every reader puts them back).
#[derive(Serialize)]
struct StoredEvent<'a> {
    lsn: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    /// In place of an id the log named itself: the millisecond it was named at.
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<u64>,
    #[serde(rename = "type")]
    event_type: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    causation_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    correlation_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    actor: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<u64>,
    payload: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw: Option<&'a RawValue>,
}

impl<'a> StoredEvent<'a> {
    /// `e` as a line of its own session's log, `log`.
    fn new(e: &'a Event<&'a RawValue>, log: &LogName) -> Self {
        let left_out =
            CompactFields::for_event(log, &e.session_id, &e.stream_id, &e.id, e.lsn, e.timestamp);
        StoredEvent {
            lsn: e.lsn,
            id: (!left_out.id).then_some(e.id.as_str()),
            ts: left_out.id.then_some(e.timestamp),
            event_type: &e.event_type,
            session_id: (!left_out.session_id).then_some(e.session_id.as_str()),
            stream_id: (!left_out.stream_id).then_some(e.stream_id.as_str()),
            causation_id: e.causation_id.as_deref(),
            correlation_id: e.correlation_id.as_deref(),
            actor: e.actor.as_deref(),
            timestamp: (!left_out.timestamp).then_some(e.timestamp),
            payload: e.payload,
            metadata: e.metadata,
            raw: e.raw,
        }
    }
}
