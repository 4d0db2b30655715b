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

/// An hour in ms: the grain of usage's hourly sums.
pub const HOUR_MS: u64 = 3_600_000;

/// A time as people write it: ms since the epoch, an RFC 3339 time, or an age before now
/// (`10m`, `7d`); with whether it was an age.
pub fn parse_time(s: &str) -> Result<(u64, bool), String> {
    if let Ok(ms) = s.parse::<u64>() {
        return Ok((ms, false));
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        let ms = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        return Ok((ms, false));
    }
    let age = humantime::parse_duration(s)
        .map_err(|_| format!("{s:?} is not a time (RFC 3339, epoch ms) or an age like 10m"))?;
    Ok((now_ms().saturating_sub(age.as_millis() as u64), true))
}

/// A start for `usage`, as [`parse_time`] reads it, except that an age starts at the top of
/// its hour, so the daemon can answer from its hourly sums (an exact time is kept exact).
pub fn parse_usage_since(s: &str) -> Result<u64, String> {
    let (ms, is_age) = parse_time(s)?;
    Ok(if is_age { ms - ms % HOUR_MS } else { ms })
}
