//! The one commit path for every session: a single thread that takes whatever appends are
//! queued (from any session), writes each session's share to its log, writes the whole batch
//! to the shared write-ahead log ([`super::wal`]) and syncs that one file, then publishes and
//! acknowledges every append of the batch.
//!
//! Why one commit thread: an append crosses a fixed number of threads (connection → commit
//! thread → [sync thread →] connection's reply queue) whatever the number of sessions, the
//! thread count is fixed, and one sync covers every session in the batch. The one exception
//! is a lone append (`Store::append_direct`): when nothing is queued or being committed, the
//! connection's thread commits it through the same [`Committer`] (shared under a lock, which
//! the commit thread takes a turn at a time), so a client sending one append at a time does
//! not pay for two hand-overs on top of its sync. The per-session
//! logs are synced at checkpoints only (when the write-ahead log is full, and at shutdown),
//! after which the write-ahead log starts over.
//!
//! Order: the session logs are written before the write-ahead log, so a failed log write
//! leaves nothing in the write-ahead log to replay; readers see an event only once its batch
//! is durable (`committed_lsn` moves after the sync).
//!
//! Under `fsync = "always"`, while the disk's syncs are slow, the sync itself runs on a second
//! thread ([`syncer`]): the commit thread writes the next batch while the current one syncs,
//! and a batch is answered only after a sync that began once it was written. While syncs are
//! quick (the CPU, not the disk, is the bound), the commit thread syncs itself and saves the
//! hand-over; the choice follows a moving average of the syncs' time
//! (`StoreSettings::pipeline_syncs_over`).
//!
//! The parts:
//! - [`thread`]: the thread, gathering batches and syncing the WAL by policy;
//! - [`batch`]: committing one batch (WAL records, then the sync or the hand-over);
//! - [`write`]: a session's share written to its log, the commit thread's view moved past it,
//!   or taken back; [`written`]: that share, as the threads pass it on;
//! - [`syncer`]: the pipelined sync; [`durable`]: a synced batch published and acknowledged;
//! - [`lease`]: LSN leases under the `interval` and `never` policies;
//! - [`checkpoint`]: syncing the logs and starting the WAL over when it is full;
//! - [`delete`]: deleting a session, leaving its tombstone;
//! - [`messages`]: what the thread is sent, and how appends are answered.

mod batch;
mod checkpoint;
mod delete;
mod durable;
mod lease;
mod messages;
mod syncer;
mod thread;
mod write;
mod written;

pub use messages::Ack;
pub(crate) use messages::{Append, CommitMsg};
pub(crate) use thread::Committer;
