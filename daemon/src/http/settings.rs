//! `[http]`: where the daemon's one HTTP listener listens (loopback only) and how much a
//! request may carry; `[otlp]`: the user's own collector that what it receives is relayed to.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// `127.0.0.1:4438`, `[::1]:4438`, `localhost:4438`, `0` (a free port on 127.0.0.1) or
    /// `off`.
    pub listen: String,
    /// The largest request body, compressed or not; a larger one gets 413 before it is read.
    pub max_body_bytes: usize,
    /// Connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// Origins (`http://host:port`) whose pages may call the listener; none by default.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// The base URL of the user's own OTLP/HTTP collector (`http://collector:4318`): every
    /// request the receiver accepts is posted on to `<forward_to>/v1/logs` or `/v1/metrics`.
    /// Empty: nothing is forwarded.
    pub forward_to: String,
    /// Headers sent with each forwarded request (an `Authorization` the collector wants).
    #[serde(default)]
    pub forward_headers: BTreeMap<String, String>,
}

/// Where forwarded requests go, checked.
#[derive(Debug, Clone)]
pub struct ForwardTarget {
    /// `forward_to` without a trailing `/`.
    pub base: String,
    pub headers: HeaderMap,
}

/// Headers the forwarder sets itself from the request it relays.
const OWN_HEADERS: &[&str] = &[
    "content-type",
    "content-encoding",
    "content-length",
    "host",
    "transfer-encoding",
];

impl OtlpConfig {
    /// The collector to forward to, none when `forward_to` is empty, or what is wrong.
    pub fn forward_target(&self) -> Result<Option<ForwardTarget>, String> {
        let url = self.forward_to.trim();
        if url.is_empty() {
            return Ok(None);
        }
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?}: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(format!(
                "{url:?}: expected a base URL such as http://collector:4318"
            ));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(format!(
                "{url:?}: a base URL without ?query or #fragment (/v1/logs is added to it)"
            ));
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &self.forward_headers {
            let key = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("forward_headers: {name:?} is not a header name"))?;
            if OWN_HEADERS.contains(&key.as_str()) {
                return Err(format!(
                    "forward_headers: {name:?} is set from the request being forwarded"
                ));
            }
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                format!("forward_headers: the value of {name:?} is not a header value")
            })?;
            value.set_sensitive(true);
            headers.insert(key, value);
        }
        Ok(Some(ForwardTarget {
            base: url.trim_end_matches('/').to_string(),
            headers,
        }))
    }
}

/// Where to listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    Off,
    At(SocketAddr),
}

impl HttpConfig {
    pub fn listen(&self) -> Result<Listen, String> {
        parse_listen(&self.listen)
    }
}

/// A `listen` value: a loopback address and port, `0`, or `off`. Anything that could be
/// reached from another machine is refused.
pub fn parse_listen(value: &str) -> Result<Listen, String> {
    let value = value.trim();
    let addr = match value {
        "off" => return Ok(Listen::Off),
        "0" => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
        other => match other.strip_prefix("localhost:") {
            Some(port) => {
                let port = port
                    .parse::<u16>()
                    .map_err(|_| format!("{other:?}: not a port"))?;
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
            }
            None => other.parse::<SocketAddr>().map_err(|_| {
                format!("{other:?}: expected 127.0.0.1:PORT, [::1]:PORT, localhost:PORT, 0 or off")
            })?,
        },
    };
    if !addr.ip().is_loopback() {
        return Err(format!(
            "{value:?} is not a loopback address: the listener must never be reachable from another machine"
        ));
    }
    Ok(Listen::At(addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_to_is_a_base_url_and_headers_are_checked() {
        let otlp = |url: &str, headers: &[(&str, &str)]| OtlpConfig {
            forward_to: url.into(),
            forward_headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        assert!(otlp("", &[]).forward_target().unwrap().is_none());
        let t = otlp("http://collector:4318/", &[("Authorization", "Bearer x")])
            .forward_target()
            .unwrap()
            .unwrap();
        assert_eq!(t.base, "http://collector:4318");
        assert_eq!(t.headers["authorization"], "Bearer x");
        for (url, headers) in [
            ("collector:4318", vec![]),
            ("ftp://collector", vec![]),
            ("http://collector:4318?x=1", vec![]),
            ("http://c:4318", vec![("Content-Type", "text/plain")]),
            ("http://c:4318", vec![("bad name", "x")]),
            ("http://c:4318", vec![("X-Ok", "line\nbreak")]),
        ] {
            assert!(
                otlp(url, &headers).forward_target().is_err(),
                "{url} {headers:?}"
            );
        }
    }

    #[test]
    fn only_loopback_addresses_are_taken() {
        let at = |s: &str| match parse_listen(s) {
            Ok(Listen::At(a)) => a.to_string(),
            other => format!("{other:?}"),
        };
        assert_eq!(at("127.0.0.1:4438"), "127.0.0.1:4438");
        assert_eq!(at("[::1]:9"), "[::1]:9");
        assert_eq!(at("localhost:80"), "127.0.0.1:80");
        assert_eq!(at("0"), "127.0.0.1:0");
        assert_eq!(parse_listen("off"), Ok(Listen::Off));
        for bad in [
            "0.0.0.0:4438",
            "192.168.1.2:80",
            "[::]:1",
            "example.com:80",
            "4438",
            "",
        ] {
            assert!(parse_listen(bad).is_err(), "{bad}");
        }
    }
}
