//! The bottom floor: small helpers every part of the daemon may use and that use nothing of
//! the daemon's (time, one backoff policy, globbing). Nothing here reaches back up.

pub mod backoff;
pub mod glob;
pub mod time;
