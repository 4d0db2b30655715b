//! The socket's peer-user rule on the HTTP listener, where the OS can tell: on Linux, a loopback
//! TCP connection's other end is a socket in `/proc/net/tcp` (or `tcp6`) with its owner's uid,
//! so a connection from another user of this machine is closed at accept, before a byte of it
//! is read, as the Unix socket refuses another user's peer. Elsewhere (no `/proc`) the token
//! alone guards the listener.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::http::app::HttpStats;

/// A listener that hands axum only connections from this user, at most `[http]
/// max_connections` at once (past it, it accepts no more until one closes).
pub struct SameUser {
    pub inner: TcpListener,
    /// Counts the connections closed because another user made them (`refused`).
    pub stats: Arc<HttpStats>,
    /// One permit per connection served.
    pub slots: Arc<Semaphore>,
}

/// A connection holding its slot until it is dropped.
pub struct Served {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl AsyncRead for Served {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Served {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl axum::serve::Listener for SameUser {
    type Io = Served;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Served, SocketAddr) {
        loop {
            let Ok(slot) = self.slots.clone().acquire_owned().await else {
                std::future::pending::<()>().await; // never closed
                unreachable!()
            };
            let (stream, peer) = axum::serve::Listener::accept(&mut self.inner).await;
            let _ = stream.set_nodelay(true);
            let Ok(local) = stream.local_addr() else {
                continue;
            };
            // SAFETY: geteuid has no preconditions and cannot fail.
            let me = unsafe { libc::geteuid() };
            match owner_of(peer, local) {
                Some(uid) if uid != me => {
                    self.stats.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%peer, uid, "refused an HTTP connection from another user");
                }
                // Ours, or the OS cannot tell.
                _ => {
                    return (
                        Served {
                            stream,
                            _slot: slot,
                        },
                        peer,
                    );
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// The other end of a connection, as handlers extract it (`ConnectInfo<PeerAddr>`).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, SameUser>>
    for PeerAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, SameUser>) -> PeerAddr {
        PeerAddr(*stream.remote_addr())
    }
}

/// The uid owning the socket at `peer` connected to `local`, from `/proc/net/tcp{,6}`.
fn owner_of(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let table = match peer.ip() {
        IpAddr::V4(_) => "/proc/net/tcp",
        IpAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table).ok()?;
    find_owner(&text, peer, local)
}

/// The uid column of the line whose local address is `peer` and remote address `local`.
fn find_owner(table: &str, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    find_column(table, peer, local, 7)?.parse().ok()
}

/// Column `col` of the line whose local address is `peer` and remote address `local`.
fn find_column(table: &str, peer: SocketAddr, local: SocketAddr, col: usize) -> Option<String> {
    let (want_local, want_remote) = (hex(peer), hex(local));
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        (cols.len() > col
            && cols[1].eq_ignore_ascii_case(&want_local)
            && cols[2].eq_ignore_ascii_case(&want_remote))
        .then(|| cols[col].to_string())
    })
}

/// The process holding the socket at `peer` connected to `local`: its inode from
/// `/proc/net/tcp{,6}`, then the process (of this user) with that socket open. Costly (it reads
/// every process's descriptors), so asked only where it decides something: whether a decision
/// comes from under an agent. `None` where the OS cannot tell.
pub fn pid_of(peer: SocketAddr, local: SocketAddr) -> Option<i32> {
    let table = match peer.ip() {
        IpAddr::V4(_) => "/proc/net/tcp",
        IpAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table).ok()?;
    let inode = find_column(&text, peer, local, 9)?;
    if inode == "0" {
        return None;
    }
    let wanted = format!("socket:[{inode}]");
    let me = std::process::id() as i32;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue; // another user's process, or gone
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

/// An address as the kernel prints it there: the address as 32-bit words in host order, each
/// in hex, then `:` and the port in hex.
fn hex(addr: SocketAddr) -> String {
    let words: Vec<u32> = match addr.ip() {
        IpAddr::V4(ip) => vec![u32::from_ne_bytes(ip.octets())],
        IpAddr::V6(ip) => ip
            .octets()
            .chunks(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    };
    let mut out: String = words.iter().map(|w| format!("{w:08X}")).collect();
    out.push_str(&format!(":{:04X}", addr.port()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_is_read_from_the_line_of_the_peer_socket() {
        // As Linux prints them on a little-endian machine.
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1156 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:C350 0100007F:1156 01 00000000:00000000 00:00000000 00000000  1000        0 2 1 0000000000000000 20 4 30 10 -1\n";
        let local: SocketAddr = "127.0.0.1:4438".parse().unwrap();
        let peer: SocketAddr = "127.0.0.1:50000".parse().unwrap();
        if cfg!(target_endian = "little") {
            assert_eq!(find_owner(table, peer, local), Some(1000));
            assert_eq!(
                find_owner(table, "127.0.0.1:50001".parse().unwrap(), local),
                None
            );
        }
    }

    #[test]
    fn this_process_owns_its_own_loopback_connection() {
        if !std::path::Path::new("/proc/net/tcp").exists() {
            return;
        }
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(server.local_addr().unwrap()).unwrap();
        let (_accepted, peer) = server.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let me = unsafe { libc::geteuid() };
        assert_eq!(owner_of(peer, server.local_addr().unwrap()), Some(me));
    }

    #[test]
    fn the_process_holding_a_loopback_connection_is_found() {
        if !std::path::Path::new("/proc/net/tcp").exists() {
            return;
        }
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = server.local_addr().unwrap();
        // A child process holds the client end (this process is skipped as the daemon).
        let script = format!("exec 3<>/dev/tcp/127.0.0.1/{}; read -r _", local.port());
        let mut child = std::process::Command::new("bash")
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (_accepted, peer) = server.accept().unwrap();
        assert_eq!(pid_of(peer, local), Some(child.id() as i32));
        drop(child.stdin.take());
        child.wait().unwrap();
    }
}
