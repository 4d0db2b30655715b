//! Waiting, within a deadline, until a descriptor has something to read: stdin (so an agent
//! that never closes the pipe cannot hold the hook) and the daemon's socket (so a daemon that
//! stops answering, or trickles its reply, cannot either).
//!
//! `poll` rather than a blocking read with a timeout: a thread blocked in `read` on a Unix
//! socket is also woken when the daemon takes the request (the kernel wakes every waiter on
//! the socket once its write space frees), a context switch for nothing; `poll` is woken only
//! by what it asked for.

use std::io;
use std::time::Instant;

/// Returns once `fd` is readable, at its end, or in error (the read that follows says which),
/// or `TimedOut` once `until` has passed.
#[cfg(unix)]
pub(crate) fn by(fd: std::os::fd::RawFd, until: Instant) -> io::Result<()> {
    loop {
        let left = until.saturating_duration_since(Instant::now());
        // Rounded up, so a sub-millisecond rest is waited for rather than spun on.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        let mut pollfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the length given.
        let n = unsafe { libc::poll(&mut pollfd, 1, ms) };
        match n {
            1.. => return Ok(()),
            0 if ms == 0 || Instant::now() >= until => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "nothing to read in time",
                ));
            }
            0 => {}
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}
