//! The one commit path for every session: a single thread that takes whatever appends are
//! queued (from any session), writes each session's share to its log, writes the whole batch
//! to the shared write-ahead log ([`super::wal`]) and syncs that one file, then publishes and
//! acknowledges every append of the batch.
//!
//! Why one thread: an append crosses threads twice (connection → commit thread → connection's
//! reply queue) whatever the number of sessions, the thread count is fixed, and one sync covers
//! every session in the batch. The per-session logs are synced at checkpoints only (when the
//! write-ahead log is full, and at shutdown), after which the write-ahead log starts over.
//!
//! Order: the session logs are written before the write-ahead log, so a failed log write
//! leaves nothing in the write-ahead log to replay; readers see an event only once its batch
//! is durable (`committed_lsn` moves after the sync).
//!
//! The parts: [`thread`] (the thread: gathering batches, syncing the WAL by policy),
//! [`batch`] (committing one batch: WAL records, sync, publish, acknowledge), [`write`] (a
//! session's share written to its log, or taken back), [`lease`] (LSN leases under the
//! `interval` and `never` policies), [`checkpoint`] (syncing the logs and starting the WAL
//! over when it is full), [`delete`] (deleting a session, leaving its tombstone), [`messages`] (what the thread is sent, and how appends are
//! answered).

mod batch;
mod checkpoint;
mod delete;
mod lease;
mod messages;
mod thread;
mod write;

pub use messages::Ack;
pub(crate) use messages::{Append, CommitMsg};
pub(crate) use thread::Committer;
