//! What every request must pass before it is served: a `Host` that names this machine's
//! loopback (a DNS-rebinding page names its own host), no foreign `Origin` (a web page may
//! not call the listener unless it is the listener's own page or `[http] allowed_origins`
//! lists it), and then either the token as a bearer header or the web view's session cookie.
//! The cookie is accepted only from the listener's own page: not from another site or another
//! port of this host (`Sec-Fetch-Site`), and for a request that changes anything only with
//! the page's own `Origin`. The page and its files need no credentials (they hold no data).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::http::app::App;
use crate::http::token;
use crate::http::web::login;

pub async fn check(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let public = path == "/" || path == "/login" || path.starts_with("/assets/");
    if let Err((status, why)) = allowed(&app, req.method(), req.headers(), public) {
        app.stats
            .refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut resp = (status, why).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        return resp;
    }
    // Refused before a byte of the body is read (the body limit alone would wait for it).
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > app.max_body_bytes as u64) {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body is larger than [http] max_body_bytes ({})",
                app.max_body_bytes
            ),
        )
            .into_response();
    }
    next.run(req).await
}

fn allowed(
    app: &App,
    method: &Method,
    headers: &HeaderMap,
    public: bool,
) -> Result<(), (StatusCode, &'static str)> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !loopback_host(host) {
        return Err((
            StatusCode::FORBIDDEN,
            "the Host header must name this machine (localhost, 127.0.0.1 or [::1])",
        ));
    }
    let own_origin = format!("http://{host}");
    let origin = headers
        .get(header::ORIGIN)
        .map(|o| o.to_str().unwrap_or(""));
    if let Some(origin) = origin
        && origin != own_origin
        && !app.allowed_origins.iter().any(|o| o == origin)
    {
        return Err((
            StatusCode::FORBIDDEN,
            "requests from web pages are refused unless [http] allowed_origins lists their origin",
        ));
    }
    if public {
        return Ok(());
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if bearer.is_some_and(|t| token::same(t.as_bytes(), app.token.as_bytes())) {
        return Ok(());
    }
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|h| login::cookie_value(h, &app.cookie_name));
    let now = crate::util::time::now_ms();
    if bearer.is_none() && cookie.is_some_and(|c| app.logins.cookie_ok(c, now)) {
        let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
        if fetch_site.is_some_and(|s| s != "same-origin" && s != "none") {
            return Err((
                StatusCode::FORBIDDEN,
                "the web view's cookie is accepted only from its own page",
            ));
        }
        let safe = matches!(*method, Method::GET | Method::HEAD);
        if !safe && origin != Some(own_origin.as_str()) {
            return Err((
                StatusCode::FORBIDDEN,
                "a change made with the web view's cookie must come from its own page (Origin)",
            ));
        }
        return Ok(());
    }
    Err((
        StatusCode::UNAUTHORIZED,
        "a bearer token is required (the one in <data_dir>/http.token), or log in to the web view with `dstream open`",
    ))
}

/// `localhost`, `127.x.x.x` or `[::1]`, with or without a port.
fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((inside, after)) if after.is_empty() || after.starts_with(':') => inside,
            _ => return false,
        }
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use crate::http::guard::loopback_host;

    #[test]
    fn only_loopback_hosts_pass() {
        for ok in [
            "localhost",
            "localhost:4438",
            "127.0.0.1:1",
            "127.9.9.9",
            "[::1]:80",
            "[::1]",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.com",
            "evil.com:4438",
            "localhost.evil.com",
            "10.0.0.1:80",
            "[::2]:1",
            "[::1]x",
        ] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }
}
