//! A simulated disk for power-loss tests: every file and directory remembers what it held at
//! its last sync, and [`SimVfs::reboot`] builds the disk a power failure would leave behind.
//!
//! The model (after SQLite's test VFS and TigerBeetle's storage simulator):
//! - a file's content is durable up to its last `sync`; writes after it survive a crash wholly,
//!   not at all, torn at a page (a prefix of the pages in write order), or scattered (any subset
//!   of pages, later ones without earlier ones), and the file's size may have reached the disk
//!   without the data (the missing pages read as zeros);
//! - a directory's entries are durable up to its last `sync_dir`: files created, renamed or
//!   removed after it keep a random prefix of those changes, often none. A file whose data was
//!   synced but whose directory entry was not is gone;
//! - from the crash point on (a chosen count of mutating calls, or [`SimVfs::crash_now`]) every
//!   call fails, as on a machine that lost power, so nothing later can leak into the image.
//!
//! Randomness comes from a seeded [`SimRng`], so a failing seed replays exactly.
//!
//! One job a file: `disk` the in-memory disk (nodes, what is durable, what is pending), `crash`
//! the model of what a power failure leaves of it, `fs` the [`Vfs`](super::Vfs) over it
//! ([`SimVfs`]), `rng` the seeded generator. This file only declares them and re-exports.

mod crash;
mod disk;
mod fs;
mod rng;

pub use crash::CrashReport;
pub use fs::SimVfs;
pub use rng::SimRng;

#[cfg(test)]
mod tests;
