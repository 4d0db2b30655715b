//! The connection to the daemon: a Unix socket whose peer must be this user, and a small
//! blocking JSON-RPC client on it, one request at a time.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};

use dstream_sdk::protocol::RpcError;
use serde::Serialize;
use serde_json::{Value, json};

use crate::hook::clock::Clock;
use crate::hook::outcome::Failure;

/// The longest reply line the hook accepts from the daemon.
const MAX_REPLY_BYTES: u64 = 64 << 20;

#[cfg(unix)]
type Stream = std::os::unix::net::UnixStream;

/// Connects, and makes sure the daemon at `path` runs as this user: a socket another user
/// planted on a shared path could otherwise answer `allow` (and an edited input) for any call.
///
/// Connecting waits at most `within` (`SO_SNDTIMEO` bounds a Unix socket's connect on Linux):
/// only a daemon whose accept queue is full makes it wait at all.
#[cfg(unix)]
fn connect(path: &std::path::Path, within: Duration) -> io::Result<Stream> {
    use socket2::{Domain, SockAddr, Socket, Type};
    if within.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.set_write_timeout(Some(within))?;
    socket.connect(&SockAddr::unix(path)?)?;
    // The timeout stays: every write sets its own (see `Timed`).
    let stream = Stream::from(socket);
    let theirs = peer_uid(&stream)?;
    // SAFETY: geteuid has no preconditions.
    let mine = unsafe { libc::geteuid() };
    if theirs != mine {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the socket {} is served by uid {theirs}, not by this user (uid {mine}); \
                 not talking to it",
                path.display()
            ),
        ));
    }
    Ok(stream)
}

#[cfg(target_os = "linux")]
fn peer_uid(stream: &Stream) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the buffer and its length describe `cred`, which outlives the call.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

#[cfg(all(unix, not(target_os = "linux")))]
fn peer_uid(stream: &Stream) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    let (mut uid, mut gid) = (0, 0);
    // SAFETY: both out-pointers are valid for the call.
    if unsafe { libc::getpeereid(stream.as_raw_fd(), &mut uid, &mut gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(uid)
}

#[cfg(not(unix))]
type Stream = std::net::TcpStream;

#[cfg(not(unix))]
fn connect(_path: &std::path::Path, _within: Duration) -> io::Result<Stream> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "`dstream hook` talks to the daemon over a Unix socket, which this platform lacks",
    ))
}

/// The socket, each read and write of which waits at most until `until`: a daemon that stops
/// answering, or trickles its reply, cannot hold the hook past its phase's deadline.
struct Timed {
    stream: Stream,
    until: Instant,
}

impl Timed {
    fn left(&self) -> io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        Ok(left)
    }
}

impl Read for Timed {
    #[cfg(unix)]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        // Once poll says readable, the read returns at once with what has come.
        crate::hook::readable::by(self.stream.as_raw_fd(), self.until)?;
        self.stream.read(buf)
    }

    #[cfg(not(unix))]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        self.stream.read(buf)
    }
}

impl Write for Timed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        self.stream.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// Whether `e` is a socket timeout (a timed-out read or write reports `WouldBlock`).
fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

/// One connection to the daemon, used for one request at a time.
pub(crate) struct Conn {
    reader: BufReader<Timed>,
    writer: Timed,
    next_id: u64,
}

impl Conn {
    /// Connects within what the clock's phase has left.
    pub(crate) fn open(socket: &std::path::Path, clock: &Clock) -> Result<Conn, Failure> {
        let stream = connect(socket, clock.left()).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => Failure::NotRunning(e),
            _ if timed_out(&e) => clock.expired(),
            _ => Failure::Io(e),
        })?;
        let until = clock.until();
        Ok(Conn {
            reader: BufReader::new(Timed {
                stream: stream.try_clone().map_err(Failure::Io)?,
                until,
            }),
            writer: Timed { stream, until },
            next_id: 1,
        })
    }

    /// Sends a request and waits for its response, within what the clock's phase has left.
    pub(crate) fn call(
        &mut self,
        method: &str,
        params: &impl Serialize,
        clock: &Clock,
    ) -> Result<Result<Value, RpcError>, Failure> {
        self.writer.until = clock.until();
        self.reader.get_mut().until = clock.until();
        let io_failure = |e: io::Error| {
            if timed_out(&e) {
                clock.expired()
            } else {
                Failure::Io(e)
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        let mut frame = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .map_err(|e| Failure::BadReply(e.to_string()))?;
        frame.push(b'\n');
        self.writer.write_all(&frame).map_err(io_failure)?;
        loop {
            let mut line = Vec::new();
            let n = (&mut self.reader)
                .take(MAX_REPLY_BYTES)
                .read_until(b'\n', &mut line)
                .map_err(io_failure)?;
            if n == 0 {
                return Err(Failure::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the daemon closed the connection",
                )));
            }
            if line.last() != Some(&b'\n') {
                return Err(Failure::BadReply(format!(
                    "a reply longer than {MAX_REPLY_BYTES} bytes, or cut short"
                )));
            }
            let frame: Value =
                serde_json::from_slice(&line).map_err(|e| Failure::BadReply(e.to_string()))?;
            // Anything else on the line (there should be nothing) is not ours.
            if frame.get("id") != Some(&json!(id)) {
                continue;
            }
            if let Some(err) = frame.get("error") {
                let err: RpcError = serde_json::from_value(err.clone())
                    .map_err(|e| Failure::BadReply(e.to_string()))?;
                return Ok(Err(err));
            }
            return Ok(Ok(frame.get("result").cloned().unwrap_or(Value::Null)));
        }
    }
}
