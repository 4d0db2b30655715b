//! `usage`: tokens and cost summed over the stored `usage.request` events (see
//! [`crate::usage`]), read off the async workers.

use serde_json::value::RawValue;

use dstream_sdk::RpcError;
use dstream_sdk::protocol::{BudgetsResult, UsageParams, UsageResult, codes};

use super::wire::{RpcResult, check_session_id, params, store_error, to_json};
use crate::state::DaemonState;
use crate::usage::{GROUPINGS, Usage};

pub(crate) async fn usage(state: &DaemonState, raw: Option<&RawValue>) -> RpcResult {
    let p: UsageParams = params(raw)?;
    let by = p.by.as_deref().unwrap_or("day").to_string();
    if !GROUPINGS.contains(&by.as_str()) {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            format!("by: {by:?} is not one of {}", GROUPINGS.join(", ")),
        ));
    }
    if let Some(s) = &p.session_id {
        check_session_id(s, "session_id")?;
    }
    let budgets = state.budgets.status();
    // The index answers ranges on whole hours once it has caught up; the logs anything.
    if !p.scan {
        let (search, by, session) = (state.search.clone(), by.clone(), p.session_id.clone());
        let (since, until) = (p.since_ms.unwrap_or(0), p.until_ms);
        let indexed = tokio::task::spawn_blocking(move || {
            search.usage_blocking(&by, session.as_deref(), since, until)
        })
        .await
        .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))?;
        if let Some(r) = indexed {
            return to_json(&UsageResult {
                budgets,
                source: "index".into(),
                ..r
            });
        }
    }
    let store = state.store.clone();
    // A project is named by a lineage's first events, which may be older than `since`.
    let scan_from = if by == "project" {
        0
    } else {
        p.since_ms.unwrap_or(0)
    };
    let mut usage = Usage::new(&by, p.session_id, p.since_ms.unwrap_or(0), p.until_ms);
    let result = tokio::task::spawn_blocking(move || {
        store
            .scan_since(scan_from, &mut |json| usage.visit(json))
            .map(|()| usage.finish())
    })
    .await
    .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))?
    .map_err(store_error)?;
    to_json(&UsageResult {
        budgets,
        source: "logs".into(),
        ..result
    })
}

/// `budgets`: each configured budget and what its current period has spent.
pub(super) fn budgets(state: &DaemonState) -> RpcResult {
    to_json(&BudgetsResult {
        budgets: state.budgets.status(),
    })
}
