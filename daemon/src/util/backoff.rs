//! The one backoff policy of every retry loop (relay streams and control streams, the
//! isolated plugin host, the hook reconnecting, the CLI retrying): exponential from a
//! minimum to a cap, with jitter over the upper half (retries spread out, never near zero),
//! and a server's `Retry-After` honoured up to the cap.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    /// The base of the next delay.
    next: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Backoff {
        let max = max.max(min);
        Backoff {
            min,
            max,
            next: min,
        }
    }

    /// The delay before the next try, and doubles the one after. `retry_after` (what a
    /// server asked for) wins when longer, but never past the cap.
    pub fn next_delay(&mut self, retry_after: Option<Duration>) -> Duration {
        let base = self.next.min(self.max);
        self.next = (base * 2).min(self.max);
        let delay = base / 2 + base / 2 * jitter_per_mille() / 1000;
        match retry_after {
            Some(asked) => delay.max(asked.min(self.max)),
            None => delay,
        }
    }

    /// Progress was made: the next trouble starts again from the minimum.
    pub fn reset(&mut self) {
        self.next = self.min;
    }

    /// Trouble that will not pass soon: the next delays are at the cap.
    pub fn saturate(&mut self) {
        self.next = self.max;
    }

    /// Changes the bounds (a new configuration); the next delay starts from the minimum.
    pub fn set_bounds(&mut self, min: Duration, max: Duration) {
        *self = Backoff::new(min, max);
    }
}

/// A `Retry-After` header's value in seconds (the HTTP-date form is rare for APIs and read as
/// absent), at most an hour; callers cap it further through [`Backoff::next_delay`].
pub fn retry_after(value: &str) -> Option<Duration> {
    let secs: u64 = value.trim().parse().ok()?;
    Some(Duration::from_secs(secs.min(3600)))
}

/// 0..1000, from the OS-seeded generator `ulid` already carries.
fn jitter_per_mille() -> u32 {
    (ulid::Ulid::new().random() % 1000) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_to_the_cap_within_the_upper_half() {
        let mut b = Backoff::new(100 * MS, 400 * MS);
        for base in [100, 200, 400, 400, 400] {
            let d = b.next_delay(None);
            assert!(
                d >= base / 2 * MS && d <= base * MS,
                "{d:?} for base {base}"
            );
        }
        b.reset();
        assert!(b.next_delay(None) <= 100 * MS);
    }

    #[test]
    fn retry_after_wins_but_never_past_the_cap() {
        let mut b = Backoff::new(10 * MS, 1000 * MS);
        assert_eq!(b.next_delay(Some(500 * MS)), 500 * MS);
        assert_eq!(
            b.next_delay(Some(Duration::from_secs(999_999_999))),
            1000 * MS
        );
        assert!(b.next_delay(Some(MS)) >= 10 * MS);
    }
}
