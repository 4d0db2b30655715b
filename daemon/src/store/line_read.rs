//! Reading a log's lines through a positional file: sequentially (for a `BufReader`), or the
//! one line at an offset. Shared by the start-up checks.

use std::io;

use crate::vfs::VfsFile;

/// Sequential reads through a positional file, for a `BufReader`.
pub struct ReadFrom<'a> {
    pub file: &'a dyn VfsFile,
    pub pos: u64,
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
