//! The daemon's own methods: `hello`, `stats`, `repair`, `relay.*` and `plugins.*`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{
    self, HelloResult, PROTOCOL_VERSION, PluginsListResult, StatsResult, codes,
};
use serde_json::value::RawValue;

use super::caller::Caller;
use super::wire::{RpcResult, check_session_id, params, store_error, to_json};
use crate::plugins::PluginSet;
use crate::state::DaemonState;

pub(super) fn hello(state: &DaemonState, caller: &Caller) -> RpcResult {
    to_json(&HelloResult {
        server: "dstream".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        protocol: PROTOCOL_VERSION,
        max_frame_bytes: state.config().daemon.max_frame_bytes,
        fsync: state.config().store.fsync.as_str().into(),
        peer: caller.peer.clone(),
    })
}

/// Compresses a session now, off the async workers.
pub(super) async fn compress(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: protocol::CompressParams = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    let (store, id) = (state.store.clone(), p.session_id.clone());
    let done = tokio::task::spawn_blocking(move || store.compress_blocking(&id))
        .await
        .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))?
        .map_err(store_error)?;
    let result = match done {
        Some(c) => protocol::CompressResult {
            session_id: p.session_id,
            compressed: true,
            upto_lsn: c.upto_lsn,
            log_bytes: c.log_bytes,
            archive_bytes: c.archive_bytes,
            freed: c.freed,
        },
        None => protocol::CompressResult {
            session_id: p.session_id,
            compressed: false,
            upto_lsn: 0,
            log_bytes: 0,
            archive_bytes: 0,
            freed: false,
        },
    };
    to_json(&result)
}

pub(super) async fn repair(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: protocol::RepairParams = params(raw)?;
    check_session_id(&p.session_id, "session_id")?;
    let r = state
        .store
        .repair(&p.session_id)
        .await
        .map_err(store_error)?;
    to_json(&protocol::RepairResult {
        session_id: p.session_id,
        kept_records: r.kept_records,
        moved_bytes: r.moved_bytes,
        moved_to: r.moved_to.display().to_string(),
        lost_lsns: r.lost_lsns,
        resumed_at: r.resumed_at,
    })
}

pub(super) fn stats(state: &DaemonState) -> RpcResult {
    let s = state.store.stats();
    let (sessions, quarantined_sessions) = state.store.counts();
    let relaxed = Ordering::Relaxed;
    to_json(&StatsResult {
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_ms: state.started.elapsed().as_millis() as u64,
        pid: std::process::id(),
        fsync: state.config().store.fsync.as_str().into(),
        sessions,
        quarantined_sessions,
        connections: state.stats.connections.load(relaxed),
        subscriptions: state.stats.subscriptions.load(relaxed),
        appends: s.appends.load(relaxed),
        bytes_written: s.bytes_written.load(relaxed),
        fsyncs: s.fsyncs.load(relaxed),
        direct_appends: s.direct_appends.load(relaxed),
        lagged: state.stats.lagged.load(relaxed),
        frame_errors: state.stats.frame_errors.load(relaxed),
        rss_bytes: crate::state::rss_bytes(),
        open_files: state.store.open_files() as u64,
        client_memory_bytes: state.memory.in_use() as u64,
        overloaded: state.stats.overloaded.load(relaxed),
        ingested: state.pipeline.ingested.load(relaxed),
        plugins: state.pipeline.plugins().infos(),
        pending_checkpoints: state.checkpoints.pending_count() as u64,
        relay: state.relay.totals(),
        spool: state.spool.stats(&state.config().data_dir()),
        http: state.http.stats(),
        search: state.search.stats(),
    })
}

pub(super) async fn relay_status(state: &DaemonState) -> RpcResult {
    to_json(&state.relay.status().await)
}

pub(super) fn relay_retry(state: &DaemonState) -> RpcResult {
    to_json(&serde_json::json!({"enabled": state.relay.retry()}))
}

pub(super) fn plugins(state: &DaemonState) -> RpcResult {
    to_json(&plugins_list(state, &state.pipeline.plugins()))
}

/// Loads the plugin folder again, off the async threads.
pub(super) async fn plugins_reload(state: &Arc<DaemonState>) -> RpcResult {
    let pipeline = state.pipeline.clone();
    match tokio::task::spawn_blocking(move || pipeline.reload()).await {
        Ok(set) => to_json(&plugins_list(state, &set)),
        Err(e) => Err(RpcError::new(codes::INTERNAL_ERROR, e.to_string())),
    }
}

fn plugins_list(state: &DaemonState, set: &PluginSet) -> PluginsListResult {
    PluginsListResult {
        dir: set.dir.display().to_string(),
        plugins: set.infos(),
        errors: set.errors.clone(),
        redaction: Some(state.pipeline.redaction().stats()),
    }
}
