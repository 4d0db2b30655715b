//! The OTLP/HTTP receiver: `POST /v1/logs` and `/v1/metrics`, `application/x-protobuf` or
//! `application/json`, gzip or not. Log records become ingests of source `otlp`, which the
//! built-in `claude-code-otel` mapping turns into events of the session their `session.id`
//! names (`usage.request`, `execution.permission`, `session.error`, …); the answer waits until
//! they are stored, so an exporter that got 200 can forget them. Metrics are decoded and
//! counted, not stored: the same figures come as log records. An accepted request (logs once
//! stored, metrics once decoded) is offered to the forwarder (`crate::http::forward`) as it
//! came. The jobs: reading a body (`body`), OTLP records as plain JSON (`records`).

mod body;
mod records;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message;

use crate::http::app::App;
use crate::http::forward::Item;
use crate::pipeline::{Ingest, IngestError};
use body::Encoding;

/// The ingest source of every record (see `plugins/claude-code-otel.lua`).
pub const SOURCE: &str = "otlp";
/// The pipeline's client id for the listener: served in turn with the socket's clients.
const CLIENT: u64 = u64::MAX - 1;

pub async fn logs(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let (encoding, request) = match parse::<ExportLogsServiceRequest>(&app, &headers, body.clone())
    {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let records = records::logs(&request);
    app.stats
        .otlp_records
        .fetch_add(records.len() as u64, std::sync::atomic::Ordering::Relaxed);
    if let Err(why) = store(&app, records).await {
        return (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    }
    app.forward.offer(Item::new("/v1/logs", &headers, &body));
    answer(encoding, &ExportLogsServiceResponse::default())
}

pub async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let (encoding, request) =
        match parse::<ExportMetricsServiceRequest>(&app, &headers, body.clone()) {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        };
    let points = records::metric_points(&request);
    app.stats
        .otlp_metric_points
        .fetch_add(points, std::sync::atomic::Ordering::Relaxed);
    app.forward.offer(Item::new("/v1/metrics", &headers, &body));
    answer(encoding, &ExportMetricsServiceResponse::default())
}

/// The request in the body (its encoding from the headers, gzip undone), or why not.
fn parse<T>(app: &App, headers: &HeaderMap, body: Bytes) -> Result<(Encoding, T), body::Refused>
where
    T: Message + Default + serde::de::DeserializeOwned,
{
    let (encoding, bytes) = body::read(headers, body, app.max_body_bytes)?;
    let request = match encoding {
        Encoding::Protobuf => T::decode(&bytes[..])
            .map_err(|e| body::Refused::bad(format!("not an OTLP protobuf message: {e}"))),
        Encoding::Json => serde_json::from_slice(&bytes)
            .map_err(|e| body::Refused::bad(format!("not an OTLP JSON message: {e}"))),
    }?;
    Ok((encoding, request))
}

fn answer<T: Message + serde::Serialize>(encoding: Encoding, response: &T) -> Response {
    match encoding {
        Encoding::Protobuf => (
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            response.encode_to_vec(),
        )
            .into_response(),
        Encoding::Json => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(response).unwrap_or_else(|_| b"{}".to_vec()),
        )
            .into_response(),
    }
}

/// Ingests every record and waits until all are stored (or refused by the pipeline, which
/// stores an `unmapped` event instead where it can).
async fn store(app: &App, records: Vec<serde_json::Value>) -> Result<(), String> {
    let mut waits = Vec::with_capacity(records.len());
    for record in records {
        let raw = match serde_json::value::to_raw_value(&record) {
            Ok(r) => r,
            Err(e) => return Err(format!("cannot encode a record: {e}")),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        app.pipeline
            .ingest(Ingest {
                client: CLIENT,
                source: SOURCE.to_string(),
                raw,
                session_id: None,
                reply_by_ms: None,
                gone: None,
                done: Box::new(move |r| {
                    let _ = tx.send(r);
                }),
                spooled: None,
            })
            .await;
        waits.push(rx);
    }
    for rx in waits {
        match rx.await {
            Ok(Ok(_)) => {}
            Ok(Err(IngestError::Store(e))) => return Err(format!("a record was not stored: {e}")),
            Ok(Err(IngestError::Stopped)) | Err(_) => {
                return Err("the daemon is shutting down".into());
            }
        }
    }
    Ok(())
}
