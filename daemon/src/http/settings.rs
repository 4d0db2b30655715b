//! `[http]`: where the daemon's one HTTP listener listens (loopback only) and how much a
//! request may carry.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// `127.0.0.1:4438`, `[::1]:4438`, `localhost:4438`, `0` (a free port on 127.0.0.1) or
    /// `off`.
    pub listen: String,
    /// The largest request body, compressed or not; a larger one gets 413 before it is read.
    pub max_body_bytes: usize,
    /// Origins (`http://host:port`) whose pages may call the listener; none by default.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
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
