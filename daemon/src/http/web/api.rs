//! The JSON API of the web view: `/api/whoami`, `/api/sessions`, `/api/checkpoints` (and
//! `POST /api/checkpoints/{id}/decide`), `/api/usage`, `/api/search`. Each is a thin
//! translation of the query or body into a [`WebCall`]; errors keep the daemon's words, with
//! the HTTP status that fits.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dstream_sdk::RpcError;
use dstream_sdk::protocol::{CheckpointResolveParams, SearchParams, UsageParams, codes};
use serde::Deserialize;

use crate::http::app::App;
use crate::http::peer::PeerAddr;
use crate::http::web::WebCall;

/// The most sessions one list answers.
const MAX_SESSIONS: usize = 1000;

fn json(body: Vec<u8>) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// `{"error": "..."}` with the status for the daemon's error code.
pub fn error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn status_of(e: &RpcError) -> StatusCode {
    match e.code {
        codes::INVALID_PARAMS | codes::INVALID_SESSION_ID | codes::PARSE_ERROR => {
            StatusCode::BAD_REQUEST
        }
        codes::SESSION_NOT_FOUND | codes::CHECKPOINT_NOT_FOUND => StatusCode::NOT_FOUND,
        codes::CHECKPOINT_DECIDED | codes::CHECKPOINT_NOT_READY => StatusCode::CONFLICT,
        codes::DECISION_FROM_AGENT | codes::PEER_REFUSED => StatusCode::FORBIDDEN,
        codes::OVERLOADED | codes::SHUTTING_DOWN => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

async fn answer(app: &App, call: WebCall) -> Response {
    let Some(backend) = app.web.get() else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the daemon is starting");
    };
    match backend.call(call).await {
        Ok(body) => json(body),
        Err(e) => error(status_of(&e), &e.message),
    }
}

/// `GET /api/whoami`: the user the page acts as (decisions are recorded as `web:<user>`).
pub async fn whoami() -> Response {
    let user = crate::util::user::me()
        .and_then(crate::util::user::name)
        .unwrap_or_else(|| "unknown".into());
    json(serde_json::json!({ "user": user }).to_string().into_bytes())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsQuery {
    limit: Option<usize>,
    /// Only these sessions (comma-separated): a page following one session, and the
    /// subagents it waits for, asks for them without the whole list (and without a 404
    /// for one that does not exist yet).
    ids: Option<String>,
}

/// Ids one `ids` may name.
const MAX_IDS: usize = 100;

pub async fn sessions(State(app): State<Arc<App>>, Query(q): Query<SessionsQuery>) -> Response {
    let limit = q.limit.unwrap_or(200).clamp(1, MAX_SESSIONS);
    let ids = match q.ids {
        None => None,
        Some(text) => {
            let ids: Vec<String> = text
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            if ids.len() > MAX_IDS {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("ids: at most {MAX_IDS} sessions at once"),
                );
            }
            if let Some(bad) = ids
                .iter()
                .find(|id| dstream_sdk::validate_session_id(id).is_err())
            {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("ids: {bad:?} is not a session id"),
                );
            }
            Some(ids)
        }
    };
    answer(&app, WebCall::Sessions { limit, ids }).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsQuery {
    state: Option<String>,
}

pub async fn checkpoints(
    State(app): State<Arc<App>>,
    Query(q): Query<CheckpointsQuery>,
) -> Response {
    answer(&app, WebCall::Checkpoints { state: q.state }).await
}

/// The body of a decision: as `dstream approve`/`reject` take it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    decision: String,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    input: Option<serde_json::Value>,
}

/// `POST /api/checkpoints/{id}/decide`: the first decision wins (409 after it); recorded as
/// decided by `web:<user>`; refused (403) when the request comes from under an agent.
pub async fn decide(
    State(app): State<Arc<App>>,
    ConnectInfo(PeerAddr(peer)): ConnectInfo<PeerAddr>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let body: DecideBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "expected {{\"decision\": \"approve\"|\"reject\"|<option>, \"note\"?, \"input\"?}}: {e}"
                ),
            );
        }
    };
    if id.is_empty() || id.len() > 128 {
        return error(StatusCode::BAD_REQUEST, "not a checkpoint id");
    }
    // Which process asks is looked up only here: it decides whether an agent asks.
    let local = app.bound;
    let pid = tokio::task::spawn_blocking(move || crate::http::peer::pid_of(peer, local))
        .await
        .ok()
        .flatten();
    let params = CheckpointResolveParams {
        id,
        decision: body.decision,
        note: body.note,
        input: body.input,
    };
    answer(&app, WebCall::Decide { params, pid }).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    by: Option<String>,
    /// An age (`30d`, `12h`), an RFC 3339 time or a time in ms since the epoch.
    since: Option<String>,
    until: Option<u64>,
    session: Option<String>,
}

pub async fn usage(State(app): State<Arc<App>>, Query(q): Query<UsageQuery>) -> Response {
    let since = match q
        .since
        .as_deref()
        .map(crate::util::time::parse_usage_since)
        .transpose()
    {
        Ok(s) => s,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.as_str()),
    };
    let params = UsageParams {
        by: q.by,
        session_id: q.session,
        since_ms: since,
        until_ms: q.until,
        scan: false,
    };
    answer(&app, WebCall::Usage(params)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchQuery {
    q: String,
    session: Option<String>,
    #[serde(rename = "type")]
    type_prefix: Option<String>,
    limit: Option<usize>,
}

pub async fn search(State(app): State<Arc<App>>, Query(q): Query<SearchQuery>) -> Response {
    let params = SearchParams {
        query: q.q,
        session_id: q.session,
        type_prefix: q.type_prefix,
        since_ms: None,
        limit: q.limit,
    };
    answer(&app, WebCall::Search(params)).await
}
