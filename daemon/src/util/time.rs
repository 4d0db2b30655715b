//! Wall-clock time as the logs and the wire carry it.

/// Milliseconds since the Unix epoch (0 on a clock set before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
