//! Durations as people write them in the configuration: `"30d"`, `"12h"`, `"90m"`, `"1s"`,
//! `"1h 30m"`, or `"off"`.

use std::time::Duration;

/// Parses a duration, or `"off"` (also `""`) for none. Anything else, zero included, is an
/// error that says what is accepted.
pub fn parse_or_off(text: &str) -> Result<Option<Duration>, String> {
    let t = text.trim();
    if t.is_empty() || t.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let d = humantime::parse_duration(t).map_err(|e| {
        format!("{text:?} is not a duration ({e}); write e.g. \"30d\", \"12h\", \"90m\", \"1s\" or \"off\"")
    })?;
    if d.is_zero() {
        return Err(format!("{text:?} is zero; write \"off\" to turn it off"));
    }
    Ok(Some(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_off() {
        let s = |n: u64| Some(Duration::from_secs(n));
        assert_eq!(parse_or_off("30d"), Ok(s(30 * 86_400)));
        assert_eq!(parse_or_off("12h"), Ok(s(12 * 3_600)));
        assert_eq!(parse_or_off("90m"), Ok(s(90 * 60)));
        assert_eq!(parse_or_off("1s"), Ok(s(1)));
        assert_eq!(parse_or_off(" 1h 30m "), Ok(s(5_400)));
        assert_eq!(parse_or_off("off"), Ok(None));
        assert_eq!(parse_or_off("OFF"), Ok(None));
        assert_eq!(parse_or_off(""), Ok(None));
    }

    #[test]
    fn nonsense_is_refused_with_what_is_accepted() {
        for bad in ["30", "d", "-1d", "thirty days", "0s", "1y2"] {
            let e = parse_or_off(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        assert!(parse_or_off("5x").unwrap_err().contains("\"30d\""));
    }
}
