//! Talking to the daemon for an import: what it already holds of a session (the import ids of
//! its events, whether live capture recorded it) and sending a session's lines as ingests,
//! many in flight on one connection (the pipeline keeps their order).

use std::collections::{HashSet, VecDeque};
use std::pin::Pin;

use dstream_sdk::Client;
use dstream_sdk::protocol::{IngestParams, IngestResult};
use serde_json::Value as Json;

use super::lines::Line;

use super::unit::Mapping;

/// Claude Code's transcripts (`plugins/claude-code-transcript.lua`).
pub const CLAUDE_CODE: Mapping = Mapping {
    source: "claude-code-transcript",
    live_source: "claude-code",
};
/// OpenCode's stored sessions (`plugins/opencode-export.lua`).
pub const OPENCODE: Mapping = Mapping {
    source: "opencode-export",
    live_source: "opencode",
};
/// Ingests in flight at once.
const WINDOW: usize = 256;

/// What the daemon holds of a session and its subagents.
#[derive(Default)]
pub struct Known {
    /// `metadata.import_id` of the events stored.
    pub import_ids: HashSet<String>,
    /// Events from live capture were found.
    pub live: bool,
}

/// Reads every event of `sessions` (those the daemon has) for their import ids and sources.
pub async fn known(
    client: &Client,
    mapping: &Mapping,
    sessions: &[String],
    existing: &HashSet<String>,
) -> anyhow::Result<Known> {
    let mut known = Known::default();
    for s in sessions.iter().filter(|s| existing.contains(*s)) {
        let mut from = 1;
        loop {
            let page = client.read(s, from, None).await?;
            for e in &page.events {
                let meta = e.metadata.as_ref();
                let field = |k: &str| meta.and_then(|m| m.get(k)).and_then(Json::as_str);
                if let Some(id) = field("import_id") {
                    known.import_ids.insert(id.to_string());
                }
                if field("source") == Some(mapping.live_source) {
                    known.live = true;
                }
            }
            if page.up_to_date || page.next_lsn <= from {
                break;
            }
            from = page.next_lsn;
        }
    }
    Ok(known)
}

/// What sending a session's lines stored.
#[derive(Default)]
pub struct Sent {
    pub lines: u64,
    pub events: u64,
    pub unmapped: u64,
    /// `(import id, why)` of lines the daemon refused.
    pub refused: Vec<(String, String)>,
}

type Pending = Pin<Box<dyn Future<Output = Result<IngestResult, dstream_sdk::Error>> + Send>>;

/// Sends `lines` (all of one session) in order, at most [`WINDOW`] in flight, and waits for
/// every result. `progress` is called with the events each line stored.
pub async fn send(
    client: &Client,
    mapping: &Mapping,
    session: &str,
    lines: Vec<Line>,
    mut progress: impl FnMut(u64),
) -> anyhow::Result<Sent> {
    let mut sent = Sent::default();
    let mut in_flight: VecDeque<(String, Pending)> = VecDeque::new();
    let settle = |sent: &mut Sent, id: String, r: Result<IngestResult, dstream_sdk::Error>| {
        sent.lines += 1;
        match r {
            Ok(r) => {
                let events = r.events.len() as u64;
                sent.events += events;
                sent.unmapped += r
                    .events
                    .iter()
                    .filter(|e| e.event_type == "unmapped")
                    .count() as u64;
                events
            }
            Err(e) => {
                sent.refused.push((id, e.to_string()));
                0
            }
        }
    };
    for line in lines {
        if in_flight.len() >= WINDOW {
            let (id, ack) = in_flight.pop_front().unwrap();
            let r = ack.await;
            if matches!(r, Err(dstream_sdk::Error::Closed)) {
                anyhow::bail!("the daemon closed the connection");
            }
            progress(settle(&mut sent, id, r));
        }
        let params = IngestParams {
            source: mapping.source.to_string(),
            event: line.event,
            session_id: Some(session.to_string()),
            reply_by_ms: None,
        };
        let ack = client.ingest_pipelined(&params)?;
        in_flight.push_back((line.import_id, Box::pin(ack)));
    }
    while let Some((id, ack)) = in_flight.pop_front() {
        let r = ack.await;
        if matches!(r, Err(dstream_sdk::Error::Closed)) {
            anyhow::bail!("the daemon closed the connection");
        }
        progress(settle(&mut sent, id, r));
    }
    Ok(sent)
}
