//! What every Durable Streams answer carries: the protocol's header names, the headers that
//! keep a private session log private (never cached, sniffed or embedded), and refusals.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

pub const NEXT_OFFSET: &str = "stream-next-offset";
pub const UP_TO_DATE: &str = "stream-up-to-date";
pub const CURSOR: &str = "stream-cursor";
pub const CLOSED: &str = "stream-closed";

/// A request refused, and why (in words, as the body).
#[derive(Debug)]
pub struct Refused(pub StatusCode, pub String);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let mut r = (self.0, self.1).into_response();
        protect(r.headers_mut());
        r
    }
}

pub fn protect(h: &mut HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("same-origin"),
    );
}

pub fn set(h: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(HeaderName::from_static(name), v);
    }
}
