//! Who may use the web view: a one-time login code, minted by `dstream open` from the token
//! it can read (so no extra request to the daemon), is traded once at `/login` for a session
//! cookie (HttpOnly, SameSite=Strict). Both are signed with the token (HMAC-SHA256), so a cookie
//! survives a daemon restart and needs no table; only used codes are remembered, until they
//! expire, so each works once.

use std::collections::HashMap;
use std::sync::Mutex;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::http::token;

/// How long a login link works after `dstream open` made it.
pub const CODE_TTL_MS: u64 = 120_000;
/// How long the browser stays logged in.
pub const COOKIE_TTL_MS: u64 = 7 * 24 * 3600 * 1000;
/// Used codes remembered at once: past it, logins wait for the oldest to expire (a flood of
/// valid codes needs the token, so this only bounds memory).
const MAX_USED: usize = 4096;

/// A login code or cookie value: `<ms>.<nonce>.<mac>`.
fn sign(token: &str, purpose: &str, ms: u64, nonce: &str) -> String {
    format!("{ms}.{nonce}.{}", mac_hex(token, purpose, ms, nonce))
}

fn mac_hex(token: &str, purpose: &str, ms: u64, nonce: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("any key length");
    mac.update(format!("dstream {purpose} {ms}.{nonce}").as_bytes());
    let bytes = mac.finalize().into_bytes();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The (ms, nonce) of a value signed for `purpose`, if the signature holds.
fn verify<'a>(token: &str, purpose: &str, value: &'a str) -> Option<(u64, &'a str)> {
    let mut parts = value.splitn(3, '.');
    let (ms, nonce, mac) = (parts.next()?, parts.next()?, parts.next()?);
    if nonce.is_empty() || nonce.len() > 64 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let ms: u64 = ms.parse().ok()?;
    let want = mac_hex(token, purpose, ms, nonce);
    token::same(mac.as_bytes(), want.as_bytes()).then_some((ms, nonce))
}

/// A login code valid for [`CODE_TTL_MS`] from `now_ms`.
pub fn mint_code(token: &str, now_ms: u64) -> std::io::Result<String> {
    Ok(sign(
        token,
        "login",
        now_ms + CODE_TTL_MS,
        &token::random_hex(16)?,
    ))
}

/// The name of the session cookie: one per port, so two daemons on one machine (each with
/// its own token) do not log each other out.
pub fn cookie_name(port: u16) -> String {
    format!("dstream_{port}")
}

/// Why a login code was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum LoginRefused {
    Invalid,
    Expired,
    Used,
    /// Too many codes used in the last [`CODE_TTL_MS`].
    Busy,
}

impl LoginRefused {
    pub fn message(&self) -> &'static str {
        match self {
            LoginRefused::Invalid => "this login link is not valid: run `dstream open` again",
            LoginRefused::Expired => "this login link has expired: run `dstream open` again",
            LoginRefused::Used => {
                "this login link was used already (each works once): run `dstream open` again"
            }
            LoginRefused::Busy => "too many logins at once; try again in a minute",
        }
    }
}

/// The daemon's side: trades codes for cookies and checks cookies.
pub struct Logins {
    token: String,
    /// Nonces of used codes, with their expiry.
    used: Mutex<HashMap<String, u64>>,
}

impl Logins {
    pub fn new(token: String) -> Logins {
        Logins {
            token,
            used: Mutex::default(),
        }
    }

    /// Spends `code` and returns a cookie value, or why not.
    pub fn redeem(&self, code: &str, now_ms: u64) -> Result<String, LoginRefused> {
        let (expires, nonce) = verify(&self.token, "login", code).ok_or(LoginRefused::Invalid)?;
        if expires <= now_ms {
            return Err(LoginRefused::Expired);
        }
        if expires > now_ms + CODE_TTL_MS {
            return Err(LoginRefused::Invalid);
        }
        {
            let mut used = self.used.lock().unwrap();
            used.retain(|_, until| *until > now_ms);
            if used.contains_key(nonce) {
                return Err(LoginRefused::Used);
            }
            if used.len() >= MAX_USED {
                return Err(LoginRefused::Busy);
            }
            used.insert(nonce.to_string(), expires);
        }
        let nonce = token::random_hex(16).map_err(|_| LoginRefused::Busy)?;
        Ok(sign(&self.token, "web", now_ms, &nonce))
    }

    /// Whether `cookie` is one this daemon's token signed and it has not expired.
    pub fn cookie_ok(&self, cookie: &str, now_ms: u64) -> bool {
        verify(&self.token, "web", cookie)
            .is_some_and(|(issued, _)| issued <= now_ms && now_ms < issued + COOKIE_TTL_MS)
    }
}

#[cfg(test)]
mod tests {
    use crate::http::web::login::*;

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn a_code_works_once_and_its_cookie_is_accepted() {
        let logins = Logins::new("secret".into());
        let code = mint_code("secret", NOW).unwrap();
        let cookie = logins.redeem(&code, NOW + 1).unwrap();
        assert!(logins.cookie_ok(&cookie, NOW + 2));
        assert_eq!(logins.redeem(&code, NOW + 3), Err(LoginRefused::Used));
        // A restarted daemon (no memory of anything) still accepts the cookie.
        assert!(Logins::new("secret".into()).cookie_ok(&cookie, NOW + 5));
    }

    #[test]
    fn forged_expired_and_foreign_values_are_refused() {
        let logins = Logins::new("secret".into());
        let code = mint_code("secret", NOW).unwrap();
        assert_eq!(
            logins.redeem(&code, NOW + CODE_TTL_MS),
            Err(LoginRefused::Expired)
        );
        let other = mint_code("another token", NOW).unwrap();
        assert_eq!(logins.redeem(&other, NOW), Err(LoginRefused::Invalid));
        for bad in ["", "1.2", "x.y.z", "1.ab.cd", &code.replace('.', "")] {
            assert_eq!(logins.redeem(bad, NOW), Err(LoginRefused::Invalid), "{bad}");
        }
        // A code is not a cookie, nor the reverse.
        assert!(!logins.cookie_ok(&code, NOW));
        let cookie = logins
            .redeem(&mint_code("secret", NOW).unwrap(), NOW)
            .unwrap();
        assert_eq!(logins.redeem(&cookie, NOW), Err(LoginRefused::Invalid));
        assert!(!logins.cookie_ok(&cookie, NOW + COOKIE_TTL_MS));
        let mut tampered = cookie.clone();
        tampered.replace_range(0..1, "9");
        assert!(!logins.cookie_ok(&tampered, NOW));
    }
}

/// The value of the cookie named `name` in a `Cookie` header.
pub fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

#[cfg(test)]
mod paths {
    use crate::http::web::login::cookie_value;

    #[test]
    fn the_named_cookie_is_found() {
        let h = "a=1; dstream_4438=v.a.l; dstream_1=x";
        assert_eq!(cookie_value(h, "dstream_4438"), Some("v.a.l"));
        assert_eq!(cookie_value(h, "dstream_9"), None);
    }
}
