//! The compressed form of a session's log prefix, `sessions/<id>.zst`: the log's own lines
//! (LSN, CRC and all, byte for byte) in independent zstd frames of about 32 KiB each, and a
//! footer saying which LSNs each frame holds, so a read at any LSN decompresses one small
//! frame. Once an archive covers the log's first `covers_bytes`, that part of the log is given
//! back to the file system (a hole): appends, offsets in the write-ahead log and the index
//! stay as they were, and reads of LSNs up to `upto_lsn` come from here.
//!
//! Layout: `frame… | footer (JSON) | crc32c(footer) u32 LE | footer length u64 LE | MAGIC`.
//! It is written to a temporary name, synced, and renamed into place (the commit point).

use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::error::StoreError;
use super::record;
use crate::event_json::EventJson;
use crate::vfs::{Open, Vfs, VfsFile, VfsFileRef};

const MAGIC: &[u8; 8] = b"DSTRZST1";
const TRAILER: usize = 4 + 8 + 8;
/// Uncompressed bytes per frame: small enough that one read decompresses little.
const FRAME_RAW_BYTES: usize = 32 << 10;
/// zstd's default level: fast, and log lines compress well at it.
const LEVEL: i32 = 3;
/// The most a footer may be (a 10 GB session has ~300,000 frames of ~60 bytes of JSON).
const MAX_FOOTER_BYTES: u64 = 64 << 20;

/// One frame: the LSNs it holds and where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Frame {
    pub(crate) first_lsn: u64,
    pub(crate) last_lsn: u64,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) raw_len: u64,
}

/// What an archive holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Footer {
    pub(crate) v: u32,
    /// The last LSN it holds: reads at or below it come from the archive.
    pub(crate) upto_lsn: u64,
    /// The log's bytes it replaces: the log is read from here on.
    pub(crate) covers_bytes: u64,
    pub(crate) first_ts: u64,
    pub(crate) last_ts: u64,
    pub(crate) stream_id: Option<String>,
    pub(crate) frames: Vec<Frame>,
    /// How many times the session was archived with an announcement (a
    /// `lifecycle.session.archived` event naming the stream it continues in).
    #[serde(default)]
    pub(crate) generation: u32,
}

/// An archive, open for reads.
pub struct Archive {
    file: VfsFileRef,
    pub(crate) footer: Footer,
    /// Where the frames end (and the footer begins).
    frames_end: u64,
}

/// `<id>.zst` beside `<id>.jsonl`.
pub(crate) fn path_for(log: &Path) -> PathBuf {
    log.with_extension("zst")
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("upto_lsn", &self.footer.upto_lsn)
            .field("covers_bytes", &self.footer.covers_bytes)
            .field("frames", &self.footer.frames.len())
            .finish()
    }
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl Archive {
    /// Opens the archive at `path`; `None` when there is none.
    pub(crate) fn open(vfs: &dyn Vfs, path: &Path) -> io::Result<Option<Archive>> {
        if !vfs.exists(path) {
            return Ok(None);
        }
        let file = vfs.open(path, Open::Existing)?;
        let len = file.len()?;
        if len < TRAILER as u64 + MAGIC.len() as u64 {
            return Err(invalid(format!(
                "{} is too short to be an archive",
                path.display()
            )));
        }
        let mut trailer = [0u8; TRAILER];
        read_exact_at(&*file, &mut trailer, len - TRAILER as u64)?;
        if &trailer[12..] != MAGIC {
            return Err(invalid(format!(
                "{} does not end with the archive mark",
                path.display()
            )));
        }
        let crc = u32::from_le_bytes(trailer[..4].try_into().expect("4 bytes"));
        let footer_len = u64::from_le_bytes(trailer[4..12].try_into().expect("8 bytes"));
        if footer_len > MAX_FOOTER_BYTES || footer_len + TRAILER as u64 > len {
            return Err(invalid(format!(
                "{}: a footer of {footer_len} bytes",
                path.display()
            )));
        }
        let frames_end = len - TRAILER as u64 - footer_len;
        let mut text = vec![0u8; footer_len as usize];
        read_exact_at(&*file, &mut text, frames_end)?;
        if crc32c::crc32c(&text) != crc {
            return Err(invalid(format!(
                "{}: the footer fails its checksum",
                path.display()
            )));
        }
        let footer: Footer = serde_json::from_slice(&text)
            .map_err(|e| invalid(format!("{}: footer: {e}", path.display())))?;
        Ok(Some(Archive {
            file,
            footer,
            frames_end,
        }))
    }

    /// Reads up to `limit` events with `from_lsn <= lsn <= upto` (both within the archive),
    /// stopping once they add up to `max_bytes` (always at least one).
    pub(crate) fn read(
        &self,
        session: &str,
        from_lsn: u64,
        upto: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<EventJson>, StoreError> {
        let corrupt = |lsn: u64, reason: String| StoreError::Corrupt {
            session: session.to_string(),
            lsn,
            reason,
        };
        let frames = &self.footer.frames;
        let name = crate::event_json::LogName::new(session);
        let mut out = Vec::new();
        let mut bytes = 0;
        let first = frames.partition_point(|f| f.last_lsn < from_lsn);
        for f in &frames[first..] {
            let raw = self
                .frame(f)
                .map_err(|e| corrupt(f.first_lsn, format!("archive frame: {e}")))?;
            let mut start = 0;
            while let Some(nl) = memchr::memchr(b'\n', &raw[start..]) {
                let line = &raw[start..start + nl];
                start += nl + 1;
                let (lsn, body) = record::open(line)
                    .map_err(|e| corrupt(f.first_lsn, format!("{e:?} in an archived record")))?;
                if lsn < from_lsn {
                    continue;
                }
                if lsn > upto {
                    return Ok(out);
                }
                bytes += body.len();
                out.push(EventJson::new(lsn, raw.slice_ref(body), &name));
                if lsn >= upto || out.len() >= limit || bytes >= max_bytes {
                    return Ok(out);
                }
            }
        }
        Ok(out)
    }

    fn frame(&self, f: &Frame) -> io::Result<Bytes> {
        if f.offset + f.len > self.frames_end || f.raw_len > (64 << 20) {
            return Err(invalid("a frame outside the archive".into()));
        }
        let mut compressed = vec![0u8; f.len as usize];
        read_exact_at(&*self.file, &mut compressed, f.offset)?;
        let raw = zstd::bulk::decompress(&compressed, f.raw_len as usize)?;
        Ok(Bytes::from(raw))
    }
}

/// Writes an archive of `log` up to `upto_lsn` to `tmp` (synced; the caller renames it into
/// place): the frames of `old`, if there is one, copied as they are, then the log's lines
/// from where `old` ends. Returns its footer.
pub(crate) fn build(
    vfs: &dyn Vfs,
    log: &dyn VfsFile,
    old: Option<&Archive>,
    upto_lsn: u64,
    stamps: (u64, u64, Option<String>),
    generation: u32,
    tmp: &Path,
) -> io::Result<Footer> {
    let out = vfs.open(tmp, Open::Truncate)?;
    let mut frames = Vec::new();
    let mut pos = 0u64;
    let (mut from, mut expected) = (0u64, 1u64);
    if let Some(old) = old {
        let mut buf = vec![0u8; 1 << 20];
        while pos < old.frames_end {
            let n = ((old.frames_end - pos) as usize).min(buf.len());
            read_exact_at(&*old.file, &mut buf[..n], pos)?;
            out.write_at(&buf[..n], pos)?;
            pos += n as u64;
        }
        frames.extend(old.footer.frames.iter().cloned());
        from = old.footer.covers_bytes;
        expected = old.footer.upto_lsn + 1;
    }
    let mut compressor = zstd::bulk::Compressor::new(LEVEL)?;
    compressor.include_checksum(true)?;
    let mut raw = Vec::with_capacity(FRAME_RAW_BYTES + 4096);
    let mut raw_first = expected;
    let mut last_lsn = expected.saturating_sub(1);
    let mut flush = |raw: &mut Vec<u8>, first: u64, last: u64, pos: &mut u64| -> io::Result<()> {
        if raw.is_empty() {
            return Ok(());
        }
        let compressed = compressor.compress(raw)?;
        out.write_at(&compressed, *pos)?;
        frames.push(Frame {
            first_lsn: first,
            last_lsn: last,
            offset: *pos,
            len: compressed.len() as u64,
            raw_len: raw.len() as u64,
        });
        *pos += compressed.len() as u64;
        raw.clear();
        Ok(())
    };
    let mut at = from;
    if last_lsn < upto_lsn {
        let mut reader = LineReader::new(log, from);
        while last_lsn < upto_lsn {
            let Some(line) = reader.next_line()? else {
                return Err(invalid(format!("the log ends before lsn {upto_lsn}")));
            };
            let (lsn, _) = record::open(&line[..line.len() - 1])
                .map_err(|e| invalid(format!("{e:?} in the record after lsn {last_lsn}")))?;
            if lsn <= last_lsn {
                return Err(invalid(format!("lsn {lsn} after lsn {last_lsn}")));
            }
            if raw.is_empty() {
                raw_first = lsn;
            }
            raw.extend_from_slice(&line);
            at += line.len() as u64;
            last_lsn = lsn;
            if raw.len() >= FRAME_RAW_BYTES {
                flush(&mut raw, raw_first, lsn, &mut pos)?;
            }
        }
        flush(&mut raw, raw_first, last_lsn, &mut pos)?;
    }
    let (first_ts, last_ts, stream_id) = stamps;
    let footer = Footer {
        v: 1,
        upto_lsn: last_lsn,
        covers_bytes: at,
        first_ts,
        last_ts,
        stream_id,
        frames,
        generation,
    };
    let text = serde_json::to_vec(&footer).map_err(io::Error::other)?;
    let mut tail = text.clone();
    tail.extend_from_slice(&crc32c::crc32c(&text).to_le_bytes());
    tail.extend_from_slice(&(text.len() as u64).to_le_bytes());
    tail.extend_from_slice(MAGIC);
    out.write_at(&tail, pos)?;
    out.sync()?;
    Ok(footer)
}

fn read_exact_at(file: &dyn VfsFile, buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        done += n;
        offset += n as u64;
    }
    Ok(())
}

/// Reads whole lines (each with its `\n`) from a file, from an offset on.
struct LineReader<'a> {
    file: &'a dyn VfsFile,
    pos: u64,
    buf: Vec<u8>,
    start: usize,
}

impl<'a> LineReader<'a> {
    fn new(file: &'a dyn VfsFile, pos: u64) -> LineReader<'a> {
        LineReader {
            file,
            pos,
            buf: Vec::new(),
            start: 0,
        }
    }

    fn next_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(nl) = memchr::memchr(b'\n', &self.buf[self.start..]) {
                let line = self.buf[self.start..self.start + nl + 1].to_vec();
                self.start += nl + 1;
                return Ok(Some(line));
            }
            self.buf.drain(..self.start);
            self.start = 0;
            let have = self.buf.len();
            self.buf.resize(have + (256 << 10), 0);
            let n = self.file.read_at(&mut self.buf[have..], self.pos)?;
            self.buf.truncate(have + n);
            if n == 0 {
                return Ok(None);
            }
            self.pos += n as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::OsVfs;

    fn log_of(dir: &Path, lsns: std::ops::RangeInclusive<u64>) -> PathBuf {
        let path = dir.join("s.jsonl");
        let file = OsVfs.open(&path, Open::Truncate).unwrap();
        let mut out = Vec::new();
        for lsn in lsns {
            let body = format!(
                r#"{{"lsn":{lsn},"id":"x","type":"t","session_id":"s","stream_id":"s","timestamp":{lsn},"payload":{{"pad":"{}"}}}}"#,
                "x".repeat((lsn % 300) as usize)
            );
            record::seal(body.as_bytes(), &mut out);
        }
        file.write_at(&out, 0).unwrap();
        path
    }

    #[test]
    fn an_archive_reads_back_every_record_byte_for_byte_and_grows() {
        let dir = tempfile::tempdir().unwrap();
        let log_path = log_of(dir.path(), 1..=2000);
        let log = OsVfs.open(&log_path, Open::Existing).unwrap();
        let zst = path_for(&log_path);
        let tmp = dir.path().join("s.zst.tmp");
        let footer = build(
            &OsVfs,
            &*log,
            None,
            1500,
            (1, 1500, Some("s".into())),
            0,
            &tmp,
        )
        .unwrap();
        OsVfs.rename(&tmp, &zst).unwrap();
        assert_eq!(footer.upto_lsn, 1500);
        assert!(footer.frames.len() > 2, "{}", footer.frames.len());
        let a = Archive::open(&OsVfs, &zst).unwrap().unwrap();
        assert_eq!(a.footer, footer);
        let all = a.read("s", 1, 1500, usize::MAX, usize::MAX).unwrap();
        assert_eq!(all.len(), 1500);
        let plain = std::fs::read(&log_path).unwrap();
        let mut joined = Vec::new();
        for e in &all {
            let mut line = Vec::new();
            e.write_to(&mut line);
            joined.extend_from_slice(&line);
        }
        let expected: Vec<u8> = plain[..footer.covers_bytes as usize]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .flat_map(|l| {
                let (_, body) = record::open(l).unwrap();
                let mut v = body.to_vec();
                v.push(b'}');
                v
            })
            .collect();
        assert_eq!(joined, expected, "byte-identical bodies");
        // A seek anywhere, and the limits.
        let some = a.read("s", 777, 1500, 5, usize::MAX).unwrap();
        assert_eq!(
            some.iter().map(|e| e.lsn).collect::<Vec<_>>(),
            vec![777, 778, 779, 780, 781]
        );
        assert_eq!(a.read("s", 1500, 1500, 10, usize::MAX).unwrap().len(), 1);
        // Grown over the rest of the log: the old frames are kept as they are.
        let tmp2 = dir.path().join("s.zst.tmp2");
        let grown = build(&OsVfs, &*log, Some(&a), 2000, (1, 2000, None), 0, &tmp2).unwrap();
        assert_eq!(&grown.frames[..footer.frames.len()], &footer.frames[..]);
        OsVfs.rename(&tmp2, &zst).unwrap();
        let b = Archive::open(&OsVfs, &zst).unwrap().unwrap();
        assert_eq!(
            b.read("s", 1, 2000, usize::MAX, usize::MAX).unwrap().len(),
            2000
        );
        assert_eq!(b.footer.covers_bytes, plain.len() as u64);
        // A damaged footer is refused, not misread.
        let mut bytes = std::fs::read(&zst).unwrap();
        let n = bytes.len();
        bytes[n - 30] ^= 1;
        std::fs::write(&zst, bytes).unwrap();
        assert!(Archive::open(&OsVfs, &zst).is_err());
    }
}
