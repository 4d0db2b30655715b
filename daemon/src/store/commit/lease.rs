//! LSN leases: under the `interval` and `never` policies an event is acknowledged before it is
//! synced, so each session holds a synced lease (a WAL record "up to LSN m") on every LSN it
//! acknowledges, and an LSN a power loss took is never handed out again.

use super::thread::Committer;
use super::written::Written;

/// The first lease of a session in a WAL epoch covers this many LSNs; each renewal doubles
/// it up to [`LEASE_MAX`], so a busy session renews rarely and an idle one risks a small gap.
const LEASE_MIN: u64 = 64;
const LEASE_MAX: u64 = 1 << 16;

pub(super) struct LeaseDecision {
    /// The new lease written to the WAL (its last LSN and size), if one was.
    pub(super) renewed: Option<(u64, u64)>,
    /// The batch goes past the synced lease: it must be synced before it is acknowledged.
    pub(super) needs_sync: bool,
}

impl Committer {
    /// Under `interval` and `never`, an event is acknowledged before it is synced, so a power
    /// loss may take it; its LSN must then never be handed out again. Before acknowledging LSN
    /// `n`, a session holds a synced lease on it: a WAL record saying "up to `m >= n`". After a
    /// crash, recovery resumes each session above its lease and records the gap. Renewed (in
    /// this batch's WAL write, synced by the next interval) when half of it is used; the batch
    /// syncs at once only when it would go past the synced lease.
    pub(super) fn lease(&self, w: &Written, wal_buf: &mut Vec<u8>) -> Option<LeaseDecision> {
        let last = w.lines.last()?.0;
        let state = w.session.writer.lock().unwrap();
        let renewed = (last + state.lease_step / 2 > state.lease).then(|| {
            let step = (state.lease_step * 2).clamp(LEASE_MIN, LEASE_MAX);
            let upto = last + step;
            self.wal.encode_lease(&w.session.id, upto, wal_buf);
            (upto, step)
        });
        Some(LeaseDecision {
            renewed,
            needs_sync: last > state.lease_synced,
        })
    }
}
