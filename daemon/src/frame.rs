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
    /// The peer closed the connection.
    Eof,
}

/// How much of a discarded oversize frame is kept (in the buffer) to find its id in.
pub const KEPT_PREFIX: usize = 4096;

/// Reads the next frame into `buf` (cleared first). Never holds more than `max` bytes.
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
    buf: &mut Vec<u8>,
) -> std::io::Result<Frame> {
    buf.clear();
    let mut discarded = 0usize;
    let mut discarding = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            // EOF: a last line without `\n` still counts as a frame.
            return Ok(match (discarding, buf.is_empty()) {
                (true, _) => Frame::TooLong { bytes: discarded },
                (false, true) => Frame::Eof,
                (false, false) => Frame::Line,
            });
        }
        let (chunk, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !discarding && buf.len() + chunk.len() > max {
            discarding = true;
            discarded = buf.len();
            buf.truncate(KEPT_PREFIX);
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
                return Ok(Frame::TooLong { bytes: discarded });
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
            read_frame(&mut reader, 1024, &mut buf).await.unwrap(),
            Frame::TooLong { bytes: 5000 }
        ));
        assert_eq!(buf, "x".repeat(KEPT_PREFIX).as_bytes(), "the kept prefix");
        assert!(matches!(
            read_frame(&mut reader, 1024, &mut buf).await.unwrap(),
            Frame::Line
        ));
        assert_eq!(buf, b"{\"ok\":1}");
        assert!(matches!(
            read_frame(&mut reader, 1024, &mut buf).await.unwrap(),
            Frame::Line
        ));
        assert_eq!(buf, b"last");
        assert!(matches!(
            read_frame(&mut reader, 1024, &mut buf).await.unwrap(),
            Frame::Eof
        ));
    }
}
