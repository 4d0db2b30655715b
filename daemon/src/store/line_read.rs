//! Reading a log's lines through a positional file: one after another from an offset, or the
//! one line at an offset. Shared by the start-up checks.

use std::io::{self, BufRead, BufReader};

use crate::vfs::VfsFile;

/// Sequential reads through a positional file, for a `BufReader`.
struct ReadFrom<'a> {
    file: &'a dyn VfsFile,
    pos: u64,
}

impl io::Read for ReadFrom<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Reads the whole line starting at `offset` (without its `\n`), or `None` at end of file or
/// when no newline ends it.
pub fn read_line_at(file: &dyn VfsFile, offset: u64) -> io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 8192];
    let mut at = offset;
    loop {
        let n = file.read_at(&mut chunk, at)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(nl) = memchr::memchr(b'\n', &chunk[..n]) {
            out.extend_from_slice(&chunk[..nl]);
            return Ok(Some(out));
        }
        out.extend_from_slice(&chunk[..n]);
        at += n as u64;
    }
}

/// A log's lines from an offset on, read through a 1 MiB buffer.
pub struct LogLines<'a> {
    reader: BufReader<ReadFrom<'a>>,
    line: Vec<u8>,
}

/// One line as read: its bytes without the newline, how many bytes it took with it, and
/// whether a newline ended it (the last line of a torn write has none).
pub struct Line<'l> {
    pub content: &'l [u8],
    pub len: u64,
    pub complete: bool,
}

impl<'a> LogLines<'a> {
    pub fn new(file: &'a dyn VfsFile, pos: u64) -> LogLines<'a> {
        LogLines {
            reader: BufReader::with_capacity(1 << 20, ReadFrom { file, pos }),
            line: Vec::with_capacity(4096),
        }
    }

    /// The next line; `None` at the end of the file.
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        self.line.clear();
        let len = self.reader.read_until(b'\n', &mut self.line)?;
        if len == 0 {
            return Ok(None);
        }
        let complete = self.line.last() == Some(&b'\n');
        let content = &self.line[..len - usize::from(complete)];
        Ok(Some(Line {
            content,
            len: len as u64,
            complete,
        }))
    }
}
