//! Deadlines: the task that applies each open checkpoint's default (`on_timeout`) when its
//! deadline passes, one at a time, as they come; a deadline that passed while the daemon was
//! down is applied as soon as it is back.
//!
//! The task knows only [`Expire`], which the checkpoints implement, so that it holds them
//! weakly (dropping the daemon's state ends it) and depends on nothing else of theirs.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use dstream_sdk::protocol::OnTimeout;
use tokio::sync::Notify;

use super::types::Resolution;
use crate::util::time::now_ms;

/// How long after a failed expiry it is tried again.
pub(super) const RETRY_MS: u64 = 1000;
/// The longest the task sleeps without a deadline to wait for.
const IDLE: Duration = Duration::from_secs(3600);

/// What the deadline task needs of the checkpoints.
pub(super) trait Expire: Send + Sync + 'static {
    /// The earliest deadline set (passed or not), with its checkpoint.
    fn next_deadline(&self) -> Option<(u64, String)>;
    /// Applies the deadline `deadline` of checkpoint `id`: it expires unless decided, and
    /// the deadline is set again (for [`RETRY_MS`] later) if the expiry cannot be recorded.
    fn expire(this: Arc<Self>, deadline: u64, id: String) -> impl Future<Output = ()> + Send;
}

/// The decision a deadline makes on a checkpoint whose default is `on_timeout`.
pub(super) fn timeout_resolution(on_timeout: OnTimeout) -> Resolution {
    Resolution {
        decision: if on_timeout == OnTimeout::Allow {
            "approve".into()
        } else {
            "reject".into()
        },
        note: None,
        input: None,
        decided_by: "timeout".into(),
        uid: None,
    }
}

/// How long to sleep until `deadline`, at `now`.
fn until(deadline: u64, now: u64) -> Duration {
    Duration::from_millis(deadline.saturating_sub(now))
}

/// Applies the deadlines of `this` as they come, until it is dropped. `wake` is notified when
/// an earlier deadline is set, and when `this` is dropped.
pub(super) async fn run<T: Expire>(this: Weak<T>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(cp) = this.upgrade() else { return };
            match cp.next_deadline() {
                Some((deadline, id)) if deadline <= now_ms() => {
                    T::expire(cp, deadline, id).await;
                    continue;
                }
                next => next.map(|(d, _)| until(d, now_ms())),
            }
        };
        let woken = wake.notified();
        let _ = tokio::time::timeout(next.unwrap_or(IDLE), woken).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    #[test]
    fn a_deadline_decides_the_default() {
        let allow = timeout_resolution(OnTimeout::Allow);
        assert_eq!(
            (allow.decision.as_str(), allow.decided_by.as_str()),
            ("approve", "timeout")
        );
        assert_eq!(timeout_resolution(OnTimeout::Deny).decision, "reject");
    }

    #[test]
    fn a_deadline_just_passed_is_no_wait() {
        assert_eq!(until(10, 20), Duration::ZERO);
        assert_eq!(until(25, 20), Duration::from_millis(5));
    }

    /// Deadlines in a set; an expiry removes its deadline and notes it.
    struct Fake {
        deadlines: Mutex<BTreeSet<(u64, String)>>,
        expired: Mutex<Vec<String>>,
    }

    impl Expire for Fake {
        fn next_deadline(&self) -> Option<(u64, String)> {
            self.deadlines.lock().unwrap().first().cloned()
        }
        async fn expire(this: Arc<Self>, deadline: u64, id: String) {
            this.deadlines
                .lock()
                .unwrap()
                .remove(&(deadline, id.clone()));
            this.expired.lock().unwrap().push(id);
        }
    }

    #[tokio::test]
    async fn passed_deadlines_expire_in_order_and_a_drop_ends_the_task() {
        let now = now_ms();
        let fake = Arc::new(Fake {
            deadlines: Mutex::new(BTreeSet::from([
                (now - 5, "b".to_string()),
                (now - 10, "a".to_string()),
                (now + 3_600_000, "later".to_string()),
            ])),
            expired: Mutex::new(Vec::new()),
        });
        let wake = Arc::new(Notify::new());
        let task = tokio::spawn(run(Arc::downgrade(&fake), wake.clone()));
        for _ in 0..500 {
            if fake.expired.lock().unwrap().len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(*fake.expired.lock().unwrap(), ["a", "b"]);
        // An earlier deadline set later is applied once the task is woken.
        fake.deadlines
            .lock()
            .unwrap()
            .insert((now_ms(), "c".to_string()));
        wake.notify_one();
        for _ in 0..500 {
            if fake.expired.lock().unwrap().len() == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(*fake.expired.lock().unwrap(), ["a", "b", "c"]);
        drop(fake);
        wake.notify_one();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the task ends once the checkpoints are gone")
            .unwrap();
    }
}
