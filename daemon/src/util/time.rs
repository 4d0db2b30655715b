//! Wall-clock time as the logs and the wire carry it.

/// Milliseconds since the Unix epoch (0 on a clock set before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `ms` since the Unix epoch as an RFC 3339 UTC time, to the second.
pub fn rfc3339(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}
