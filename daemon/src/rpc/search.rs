//! `search` and `reindex` (see [`crate::search`]): the index is read and rebuilt off the async
//! workers.

use std::sync::Arc;

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{ReindexResult, SearchParams, SearchResult, codes};
use serde_json::value::RawValue;

use crate::rpc::wire::{RpcResult, check_session_id, params, to_json};
use crate::search::SearchError;
use crate::search::index::Filter;
use crate::state::DaemonState;

/// Hits when `limit` is not given, and the most one query returns.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 1000;

fn rpc_error(e: SearchError) -> RpcError {
    let code = match e {
        SearchError::Syntax { .. } => codes::INVALID_PARAMS,
        SearchError::Disabled | SearchError::Index(_) => codes::SEARCH_UNAVAILABLE,
    };
    RpcError::new(code, e.to_string())
}

pub(crate) async fn search(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: SearchParams = params(raw)?;
    if let Some(s) = &p.session_id {
        check_session_id(s, "session_id")?;
    }
    let limit = p.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            format!("limit: {limit} is not between 1 and {MAX_LIMIT}"),
        ));
    }
    let filter = Filter {
        session: p.session_id,
        type_prefix: p.type_prefix.filter(|t| !t.is_empty()),
        since_ms: p.since_ms,
    };
    let search = Arc::clone(&state.search);
    let query = p.query;
    let hits = tokio::task::spawn_blocking(move || search.search_blocking(&query, &filter, limit))
        .await
        .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))?
        .map_err(rpc_error)?;
    let stats = state.search.stats();
    to_json(&SearchResult {
        hits,
        indexed_events: stats.indexed_events,
        behind_by: stats.behind_by,
    })
}

pub(crate) async fn reindex(state: &DaemonState) -> RpcResult {
    let r = state.search.reindex().await.map_err(rpc_error)?;
    to_json(&ReindexResult {
        sessions: r.sessions,
        events: r.events,
        elapsed_ms: r.elapsed_ms,
    })
}
