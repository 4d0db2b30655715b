//! `GET /login?code=…&next=/path`: where a link from `dstream open` lands. The code is spent
//! (see `login`), the session cookie set, and the browser sent on to `next`, a path on this
//! listener only, so the link cannot send anyone elsewhere.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::app::App;
use crate::http::web::login::COOKIE_TTL_MS;

/// Spends the code, sets the cookie, sends the browser on.
pub async fn handler(State(app): State<Arc<App>>, Query(q): Query<LoginQuery>) -> Response {
    let now = crate::util::time::now_ms();
    let cookie = match app.logins.redeem(&q.code, now) {
        Ok(c) => c,
        Err(why) => return (StatusCode::UNAUTHORIZED, why.message()).into_response(),
    };
    let next = q.next.as_deref().filter(|n| local_path(n)).unwrap_or("/");
    let set = format!(
        "{}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        app.cookie_name,
        COOKIE_TTL_MS / 1000
    );
    let mut resp = StatusCode::SEE_OTHER.into_response();
    let headers = resp.headers_mut();
    if let (Ok(set), Ok(next)) = (HeaderValue::from_str(&set), HeaderValue::from_str(next)) {
        headers.insert(header::SET_COOKIE, set);
        headers.insert(header::LOCATION, next);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

#[derive(serde::Deserialize)]
pub struct LoginQuery {
    code: String,
    next: Option<String>,
}

/// A path on this origin: `/…`, not `//host` or `/\host` (which browsers read as another
/// host), no control characters.
fn local_path(next: &str) -> bool {
    next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && next.len() <= 2048
        && !next.chars().any(|c| c.is_control())
}

#[cfg(test)]
mod tests {
    use crate::http::web::login_route::local_path;

    #[test]
    fn only_local_paths_are_followed() {
        for ok in ["/", "/#/session/abc", "/?x=1"] {
            assert!(local_path(ok), "{ok}");
        }
        for bad in ["", "//evil.com", "/\\evil.com", "https://evil.com", "/a\nb"] {
            assert!(!local_path(bad), "{bad}");
        }
    }
}
