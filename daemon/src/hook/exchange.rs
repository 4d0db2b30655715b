//! The exchange with the daemon: `ingest` the event (cut to the daemon's frame limit), and
//! when the call is held by a checkpoint, await the decision across daemon restarts.

use std::time::{Duration, Instant};

use crate::claude_reply::decision_of;
use crate::util::backoff::Backoff;
use dstream_sdk::protocol::{
    Action, CheckpointAwaitParams, CheckpointInfo, DEFAULT_MAX_FRAME_BYTES, HelloResult,
    IngestParams, IngestResult, codes, methods,
};
use serde_json::json;

use crate::hook::clock::Clock;
use crate::hook::conn::Conn;
use crate::hook::fit::fit;
use crate::hook::input::Input;
use crate::hook::outcome::{Failure, Outcome};

/// Pauses between attempts to reach a daemon that went away while a checkpoint was pending.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(1);
/// Room in a frame for the JSON-RPC envelope around the event.
const ENVELOPE_ROOM: usize = 4096;

/// Sends the event with `ingest` and returns the result, and whether the event had to be
/// altered (then an `updated_input` in the reply must not be applied).
pub(crate) fn exchange(
    source: &str,
    socket: &std::path::Path,
    input: &mut Input,
    reply_by_ms: u64,
    clock: &mut Clock,
) -> Outcome {
    clock.connecting();
    let mut conn = Conn::open(socket, clock)?;
    clock.connected();
    let session_id = input
        .session_id
        .clone()
        .filter(|s| dstream_sdk::validate_session_id(s).is_ok());
    let mut altered = input.altered.is_some();
    let mut budget = DEFAULT_MAX_FRAME_BYTES - ENVELOPE_ROOM;
    let mut asked_limit = false;
    loop {
        altered |= fit(&mut input.event, budget);
        let params = IngestParams {
            source: source.to_string(),
            event: &input.event,
            session_id: session_id.clone(),
            reply_by_ms: Some(reply_by_ms),
        };
        match conn.call(methods::INGEST, &params, clock)? {
            Ok(result) => {
                let mut result: IngestResult =
                    serde_json::from_value(result).map_err(|e| Failure::BadReply(e.to_string()))?;
                if let Some(d) = &mut result.decision
                    && d.action == Action::Ask
                    && let Some(checkpoint) = d.checkpoint.clone()
                    && checkpoint.decision.is_none()
                {
                    clock.waiting(checkpoint.deadline_ms);
                    let decided = await_decision(conn, socket, checkpoint, clock)?;
                    *d = decision_of(decided);
                }
                return Ok((result, altered));
            }
            // The daemon runs with a smaller frame limit than the default: learn it, cut the
            // event to fit and send it once more.
            Err(e) if e.code == codes::FRAME_TOO_LARGE && !asked_limit => {
                asked_limit = true;
                let hello: HelloResult = match conn.call(methods::HELLO, &json!({}), clock)? {
                    Ok(v) => serde_json::from_value(v).map_err(|_| Failure::Rpc(e.clone()))?,
                    Err(_) => return Err(Failure::Rpc(e)),
                };
                budget = hello
                    .max_frame_bytes
                    .saturating_sub(ENVELOPE_ROOM)
                    .max(1024);
            }
            Err(e) => return Err(Failure::Rpc(e)),
        }
    }
}

/// Waits for a person's decision on `checkpoint`, across daemon restarts: a lost connection
/// is made again (the checkpoint is rebuilt from the log on the daemon's side) and the await
/// sent again, until the clock's deadline (the checkpoint's, plus grace): then its default
/// applies.
fn await_decision(
    conn: Conn,
    socket: &std::path::Path,
    checkpoint: CheckpointInfo,
    clock: &Clock,
) -> Result<CheckpointInfo, Failure> {
    let params = CheckpointAwaitParams {
        id: checkpoint.id.clone(),
        session_id: Some(checkpoint.session_id.clone()),
        timeout_ms: None,
    };
    let undecided = |checkpoint: CheckpointInfo| Failure::Undecided(Box::new(checkpoint));
    let mut conn = Some(conn);
    let mut backoff = Backoff::new(RECONNECT_MIN, RECONNECT_MAX);
    loop {
        if Instant::now() >= clock.until() {
            return Err(undecided(checkpoint));
        }
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match Conn::open(socket, clock) {
                Ok(c) => {
                    backoff.reset();
                    conn.insert(c)
                }
                Err(_) => {
                    std::thread::sleep(backoff.next_delay(None).min(clock.left()));
                    continue;
                }
            },
        };
        match c.call(methods::CHECKPOINT_AWAIT, &params, clock) {
            Ok(Ok(v)) => {
                let info: CheckpointInfo =
                    serde_json::from_value(v).map_err(|e| Failure::BadReply(e.to_string()))?;
                if info.decision.is_some() {
                    return Ok(info);
                }
            }
            // A daemon on its way down: wait for the next one.
            Ok(Err(e)) if e.code == codes::SHUTTING_DOWN => conn = None,
            Ok(Err(e)) => return Err(Failure::Rpc(e)),
            Err(_) => conn = None,
        }
    }
}
