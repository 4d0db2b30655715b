//! The hook's stdin, read within a deadline: each read waits (poll) at most what is left, so
//! an agent that never closes the pipe cannot hold the hook.

use std::io::{self, Read};
use std::time::Instant;

pub(crate) struct TimedStdin {
    until: Instant,
    timed_out: bool,
}

impl TimedStdin {
    pub(crate) fn new(until: Instant) -> TimedStdin {
        TimedStdin {
            until,
            timed_out: false,
        }
    }

    /// Whether a read ran out of time (what was read by then is not the whole event).
    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out
    }

    #[cfg(unix)]
    fn wait_readable(&mut self) -> io::Result<()> {
        // Readable, at its end, or not open: the read says which.
        crate::hook::readable::by(libc::STDIN_FILENO, self.until).map_err(|e| {
            if e.kind() == io::ErrorKind::TimedOut {
                self.timed_out = true;
                io::Error::new(io::ErrorKind::TimedOut, "stdin did not end in time")
            } else {
                e
            }
        })
    }

    #[cfg(not(unix))]
    fn wait_readable(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for TimedStdin {
    /// Reads fd 0 itself, not through std's buffered `Stdin`: bytes waiting in that buffer
    /// would not wake `poll`.
    #[cfg(unix)]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.wait_readable()?;
        loop {
            // SAFETY: `buf` is valid for writes of its length for the call.
            let n = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            // No stdin at all reads as an empty one, as std's `Stdin` has it.
            if e.raw_os_error() == Some(libc::EBADF) {
                return Ok(0);
            }
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                // A non-blocking pipe (the agent's choice) with nothing in it yet.
                io::ErrorKind::WouldBlock => self.wait_readable()?,
                _ => return Err(e),
            }
        }
    }

    #[cfg(not(unix))]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        io::stdin().lock().read(buf)
    }
}
