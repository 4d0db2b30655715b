//! Framing of the local protocol: one JSON-RPC message per `\n`-terminated line, with a size
//! limit that a client cannot get around by never sending a newline.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

pub enum Frame {
    /// A complete line, without its `\n` (or `\r\n`).
    Line,
    /// A line longer than the limit; its bytes were read and thrown away up to its `\n`,
    /// except its first [`KEPT_PREFIX`] bytes, left in the buffer so that the request's id can
    /// still be recovered for the error reply.
    TooLong { bytes: usize },
    /// A line the memory budget for clients had no room for; discarded like `TooLong`.
    Overloaded { bytes: usize },
    /// The peer closed the connection.
    Eof,
}

/// How much of a discarded oversize frame is kept (in the buffer) to find its id in.
pub const KEPT_PREFIX: usize = 4096;

/// Reads the next frame into `buf` (cleared first). Never holds more than `max` bytes, and
/// asks `grow(capacity)` before the buffer grows: an unfinished line is memory a client holds
/// too, so when `grow` says no the line is discarded (`Overloaded`) rather than buffered.
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
    buf: &mut Vec<u8>,
    grow: &mut (dyn FnMut(usize) -> bool + Send),
) -> std::io::Result<Frame> {
    buf.clear();
    let mut discarded = 0usize;
    let mut discarding = false;
    let mut overloaded = false;
    let too_long = |overloaded, bytes| match overloaded {
        true => Frame::Overloaded { bytes },
        false => Frame::TooLong { bytes },
    };
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            // EOF: a last line without `\n` still counts as a frame.
            return Ok(match (discarding, buf.is_empty()) {
                (true, _) => too_long(overloaded, discarded),
                (false, true) => Frame::Eof,
                (false, false) => Frame::Line,
            });
        }
        let (chunk, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        let need = buf.len() + chunk.len();
        let was_discarding = discarding;
        if !discarding && need > max {
            discarding = true;
        } else if !discarding && need > buf.capacity() {
            // Doubling (as Vec would), but never past the frame limit.
            let capacity = (buf.capacity() * 2).max(need).max(4096).min(max);
            if grow(capacity) {
                buf.reserve_exact(capacity - buf.len());
            } else {
                discarding = true;
                overloaded = true;
            }
        }
        if discarding && !was_discarding {
            discarded = buf.len();
            buf.truncate(KEPT_PREFIX);
            buf.shrink_to(KEPT_PREFIX);
            grow(buf.capacity());
        }
        if discarding {
            discarded += chunk.len();
            let room = KEPT_PREFIX.saturating_sub(buf.len());
            buf.extend_from_slice(&chunk[..room.min(chunk.len())]);
        } else {
            buf.extend_from_slice(chunk);
        }
        let consumed = done.unwrap_or(chunk.len());
        reader.consume(consumed);
        if done.is_some() {
            if discarding {
                return Ok(too_long(overloaded, discarded));
            }
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Frame::Line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn oversize_lines_are_skipped_and_the_next_one_is_read() {
        let input = format!("{}\n{{\"ok\":1}}\r\nlast", "x".repeat(5000));
        let mut reader = tokio::io::BufReader::with_capacity(64, input.as_bytes());
        let mut buf = Vec::new();
        assert!(matches!(
            read_frame(&mut reader, 1024, &mut buf, &mut |_| true)
                .await
                .unwrap(),
            Frame::TooLong { bytes: 5000 }
        ));
        assert_eq!(buf, "x".repeat(KEPT_PREFIX).as_bytes(), "the kept prefix");
        assert!(matches!(
            read_frame(&mut reader, 1024, &mut buf, &mut |_| true)
                .await
                .unwrap(),
            Frame::Line
        ));
        assert_eq!(buf, b"{\"ok\":1}");
        assert!(matches!(
            read_frame(&mut reader, 1024, &mut buf, &mut |_| true)
                .await
                .unwrap(),
            Frame::Line
        ));
        assert_eq!(buf, b"last");
        assert!(matches!(
            read_frame(&mut reader, 1024, &mut buf, &mut |_| true)
                .await
                .unwrap(),
            Frame::Eof
        ));
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    #[tokio::test]
    async fn a_line_the_budget_cannot_hold_is_discarded_and_the_next_one_is_read() {
        let input = format!("{}\n{{\"ok\":1}}\n", "y".repeat(20_000));
        let mut reader = tokio::io::BufReader::with_capacity(64, input.as_bytes());
        let mut buf = Vec::new();
        let mut asked = Vec::new();
        let mut grow = |c: usize| {
            asked.push(c);
            c <= 8192
        };
        let frame = read_frame(&mut reader, 1 << 20, &mut buf, &mut grow)
            .await
            .unwrap();
        assert!(matches!(frame, Frame::Overloaded { bytes: 20_000 }));
        assert!(
            buf.capacity() <= 8192,
            "the buffer never outgrew what was granted"
        );
        let frame = read_frame(&mut reader, 1 << 20, &mut buf, &mut grow)
            .await
            .unwrap();
        assert!(matches!(frame, Frame::Line));
        assert_eq!(buf, b"{\"ok\":1}");
        assert!(asked.contains(&16384), "{asked:?}");
    }
}
