//! The web view's files, embedded at build time (see `build.rs`), served with a strict
//! Content-Security-Policy: scripts and styles only from this origin, nothing inline, no
//! frames, so a payload that slipped into the page as markup still could not run.

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));

pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// Headers every page and file carries.
pub fn page_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

fn serve(name: &str, request: &HeaderMap) -> Response {
    let Some((_, bytes)) = ASSETS.iter().find(|(n, _)| *n == name) else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    let etag = format!("\"{:08x}\"", crc32c::crc32c(bytes));
    let mut headers = HeaderMap::new();
    page_headers(&mut headers);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, v);
    }
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag);
    if fresh {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(name)),
    );
    (headers, *bytes).into_response()
}

/// `GET /`: the page.
pub async fn index(request: HeaderMap) -> Response {
    serve("index.html", &request)
}

/// `GET /assets/{name}`.
pub async fn file(Path(name): Path<String>, request: HeaderMap) -> Response {
    serve(&name, &request)
}

#[cfg(test)]
mod tests {
    use crate::http::web::assets::ASSETS;

    #[test]
    fn the_page_is_embedded() {
        assert!(
            ASSETS
                .iter()
                .any(|(n, b)| *n == "index.html" && !b.is_empty())
        );
    }
}
