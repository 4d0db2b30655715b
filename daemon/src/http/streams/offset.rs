//! Durable Streams offsets and cursors for local sessions.
//!
//! An offset names the position after an LSN: twenty decimal digits, so offsets sort as
//! strings in stream order, as the protocol requires, and hold no `,&=?/`. `-1` is the start
//! and `now` the tail. A cursor is the number of 20-second intervals since 2024-10-09 UTC (the
//! protocol's collapsing scheme); it never goes back for a client that echoes one.

/// A parsed `offset` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offset {
    /// After this LSN (0: the start).
    After(u64),
    /// The tail, whatever it is when the request is served.
    Now,
}

/// The offset after `lsn`.
pub fn encode(lsn: u64) -> String {
    format!("{lsn:020}")
}

pub fn parse(value: Option<&str>) -> Result<Offset, String> {
    match value {
        None | Some("-1") => Ok(Offset::After(0)),
        Some("now") => Ok(Offset::Now),
        Some(v) if v.len() == 20 && v.bytes().all(|b| b.is_ascii_digit()) => v
            .parse()
            .map(Offset::After)
            .map_err(|_| format!("offset {v:?} is out of range")),
        Some(v) => Err(format!(
            "offset {:?} is not one this server gave (-1, now, or a Stream-Next-Offset value)",
            v.chars().take(64).collect::<String>()
        )),
    }
}

/// 2024-10-09T00:00:00Z, in seconds since the Unix epoch.
const CURSOR_EPOCH_SECS: u64 = 1_728_432_000;
const CURSOR_INTERVAL_SECS: u64 = 20;

/// The cursor for a live response now, strictly above the client's own when it sent one at
/// or ahead of the current interval (so cached responses cannot cycle).
pub fn cursor(now_ms: u64, client: Option<&str>) -> String {
    let current = (now_ms / 1000).saturating_sub(CURSOR_EPOCH_SECS) / CURSOR_INTERVAL_SECS;
    match client.and_then(|c| c.parse::<u64>().ok()) {
        Some(theirs) if theirs >= current => {
            // 1 to 180 intervals (20 s to an hour) of jitter, from the clock's low bits.
            let jitter = 1 + (now_ms.wrapping_mul(2_654_435_761) >> 7) % 180;
            (theirs + jitter).to_string()
        }
        _ => current.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_sort_as_strings_in_stream_order() {
        assert!(encode(9) < encode(10));
        assert!(encode(99_999) < encode(100_000));
        assert_eq!(parse(Some(&encode(42))), Ok(Offset::After(42)));
        assert_eq!(parse(None), Ok(Offset::After(0)));
        assert_eq!(parse(Some("-1")), Ok(Offset::After(0)));
        assert_eq!(parse(Some("now")), Ok(Offset::Now));
        for bad in [
            "",
            "42",
            "x0000000000000000000",
            "-2",
            "99999999999999999999",
        ] {
            assert!(parse(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_cursor_never_goes_back_for_a_client_that_echoes_one() {
        let now = 1_795_000_000_000;
        let c: u64 = cursor(now, None).parse().unwrap();
        assert_eq!(cursor(now, Some("12")), c.to_string(), "an old cursor");
        let ahead: u64 = cursor(now, Some(&c.to_string())).parse().unwrap();
        assert!(ahead > c);
        let further: u64 = cursor(now, Some(&(c + 500).to_string())).parse().unwrap();
        assert!(further > c + 500);
    }
}
