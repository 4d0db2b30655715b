//! When the index steps aside.
//!
//! Agents append a few events a second; a burst of thousands a second is a load test, an
//! import or a long spool being drained. Indexing such a burst as it commits took CPU, disk
//! bandwidth and memory from the appenders even at `SCHED_IDLE` (its SQLite writes and their
//! writeback run at normal priority): on 2 cores, C=16 appends over 16 sessions ran at
//! 36.7-45.4k/s with p99 667-882 µs against 43.6-51.2k/s and 496-617 µs with the index off,
//! and the daemon's RSS under that load was 27 MB against 15-20. So while appends arrive
//! faster than `[search] busy_appends_per_sec`, the indexing thread lets the live stream go and,
//! once they slow, catches up from the logs (as after a restart). Searches meanwhile answer
//! from what is indexed; joins and `usage` read the logs past it, as they already did.

use std::time::{Duration, Instant};

/// The shortest stretch a rate is judged over: shorter ones would take a single group
/// commit for a burst.
const WINDOW: Duration = Duration::from_millis(100);

/// Judges the append rate from the store's running count of appends.
pub struct Pace {
    count: u64,
    at: Instant,
    busy: bool,
}

impl Pace {
    pub fn new(appends: u64, now: Instant) -> Self {
        Pace {
            count: appends,
            at: now,
            busy: false,
        }
    }

    /// Whether appends are arriving faster than `per_sec` (0: never busy): `appends` is the
    /// store's count now. A verdict stands until a window has passed since the last one, but
    /// a quiet verdict gives way at once to a window's worth of appends: a burst that begins
    /// just after one would otherwise be indexed for a whole window.
    pub fn busy(&mut self, appends: u64, now: Instant, per_sec: u64) -> bool {
        let elapsed = now.saturating_duration_since(self.at);
        let added = appends.saturating_sub(self.count) as u128;
        let window_ms = WINDOW.as_millis();
        let burst_early =
            per_sec > 0 && elapsed < WINDOW && added * 1000 > per_sec as u128 * window_ms;
        if elapsed >= WINDOW || burst_early {
            // An early burst is judged over a whole window: it already holds a window's worth.
            let over_ms = elapsed.as_millis().max(window_ms);
            self.busy = per_sec > 0 && added * 1000 > per_sec as u128 * over_ms;
            self.count = appends;
            self.at = now;
        }
        self.busy
    }

    /// How many events arriving within `within` are more than `per_sec` allows: a batch
    /// gathered over a linger tells a burst by itself, even when the last verdict is old (the
    /// first batch after a quiet spell). None does at 0 per second, nor where `within` is too
    /// short to allow even one event: there a single event says nothing of a rate.
    pub fn burst_within(within: Duration, per_sec: u64) -> usize {
        let allowed = per_sec as u128 * within.as_millis() / 1000;
        if allowed == 0 {
            return usize::MAX;
        }
        usize::try_from(allowed + 1).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_busy_and_the_quiet_after_it_is_not() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut pace = Pace::new(0, t0);
        // 300 appends in 100 ms: 3,000/s.
        assert!(pace.busy(300, ms(100), 2000));
        // Within the window the verdict stands, whatever the count says.
        assert!(pace.busy(300, ms(150), 2000));
        // 150 more over the next 100 ms: 1,500/s.
        assert!(!pace.busy(450, ms(200), 2000));
        // Exactly the threshold is not over it.
        assert!(!pace.busy(650, ms(300), 2000));
        assert!(pace.busy(851, ms(400), 2000));
    }

    #[test]
    fn a_burst_right_after_a_quiet_verdict_is_busy_before_the_window_ends() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut pace = Pace::new(0, t0);
        assert!(!pace.busy(10, ms(100), 2000));
        // 150 appends 20 ms later: under a window's allowance (200), the quiet verdict stands.
        assert!(!pace.busy(160, ms(120), 2000));
        // 201 since the verdict, 30 ms after it: a burst, said at once.
        assert!(pace.busy(211, ms(130), 2000));
        // A busy verdict still stands for its window, however quiet.
        assert!(pace.busy(211, ms(200), 2000));
        assert!(!pace.busy(211, ms(230), 2000));
    }

    #[test]
    fn a_batch_gathered_over_a_linger_tells_a_burst_by_itself() {
        let linger = Duration::from_millis(50);
        // 2,000/s over 50 ms is 100 events: the 101st makes a burst.
        assert_eq!(Pace::burst_within(linger, 2000), 101);
        assert_eq!(Pace::burst_within(linger, 0), usize::MAX);
        assert_eq!(Pace::burst_within(linger, 10), usize::MAX);
        assert_eq!(Pace::burst_within(linger, 20), 2);
    }

    #[test]
    fn a_slow_trickle_over_a_long_stretch_is_not_busy() {
        let t0 = Instant::now();
        let mut pace = Pace::new(1_000_000, t0);
        // 5,000 appends over 10 s: 500/s.
        assert!(!pace.busy(1_005_000, t0 + Duration::from_secs(10), 2000));
    }

    #[test]
    fn zero_is_never_busy() {
        let t0 = Instant::now();
        let mut pace = Pace::new(0, t0);
        assert!(!pace.busy(u64::MAX, t0 + Duration::from_secs(1), 0));
    }
}
