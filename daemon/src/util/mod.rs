//! The bottom floor: small helpers every part of the daemon may use and that use nothing of
//! the daemon's (time, one backoff policy, globbing, durations). Nothing here reaches back up.

pub mod backoff;
pub mod duration;
pub mod glob;
pub mod time;
pub mod unused_pages;
pub mod user;
