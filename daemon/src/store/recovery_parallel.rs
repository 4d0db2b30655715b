//! The fast path of a start-up check: a big log with its index on disk, checked on two
//! threads, each reading half the log. It answers only for a clean log whose index is exactly
//! the one a full scan would build: every line whole, every checksum right, the LSNs in
//! sequence (or across a recorded gap), the index's entries where the scan would put them.
//! Anything else (damage, a torn tail, an index that differs) returns `None`, and the
//! one-thread scan of [`super::recovery`] runs from the top and decides, as it always did.
//!
//! Why: checking every CRC of a 1,000,000-event log on start was one core's work
//! (checksums 28%, copying from the page cache 17%, finding line ends 10%), with the second
//! core idle.

use std::io;
use std::ops::Range;

use super::gaps::Gaps;
use super::index::{IndexEntry, SparseIndex};
use super::line_read::{LogLines, read_line_at};
use super::record;
use crate::vfs::VfsFile;

/// Logs shorter than this are checked on one thread: a second would not pay for itself.
pub const PARALLEL_MIN_BYTES: u64 = 16 << 20;

/// What one half found, when it found nothing wrong.
struct Half {
    /// LSN and offset of its first and last records.
    first: (u64, u64),
    last: (u64, u64),
}

/// A clean log, checked whole.
pub struct Clean {
    pub last_lsn: u64,
    /// Offset of the last record.
    pub last_offset: u64,
}

/// Checks `file` from its start, on two threads, against `loaded` (its index on disk): `Some`
/// only when the log is clean and `loaded` is what a scan with spacing `interval` builds.
pub fn check_clean(
    file: &dyn VfsFile,
    loaded: &SparseIndex,
    interval: u64,
    gaps: &Gaps,
    min_bytes: u64,
) -> io::Result<Option<Clean>> {
    let len = file.len()?;
    if len < min_bytes.max(2) || loaded.entries().first() != Some(&IndexEntry { lsn: 1, offset: 0 })
    {
        return Ok(None);
    }
    // The second half starts after the first line end past the middle.
    let Some(line) = read_line_at(file, len / 2)? else {
        return Ok(None);
    };
    let split = len / 2 + line.len() as u64 + 1;
    if split >= len {
        return Ok(None);
    }
    let entries = loaded.entries();
    let (a, b) = std::thread::scope(|s| {
        let second = std::thread::Builder::new()
            .name("dstream-check".into())
            .spawn_scoped(s, || check_half(file, split..len, entries, interval, gaps));
        let first = check_half(file, 0..split, entries, interval, gaps);
        let second = match second {
            Ok(handle) => handle.join().unwrap_or(Ok(None)),
            // No second thread: the one-thread scan does it all.
            Err(_) => Ok(None),
        };
        (first, second)
    });
    let (Some(a), Some(b)) = (a?, b?) else {
        return Ok(None);
    };
    if a.first != (1, 0) || !gaps.allows(a.last.0, b.first.0) {
        return Ok(None);
    }
    Ok(Some(Clean {
        last_lsn: b.last.0,
        last_offset: b.last.1,
    }))
}

/// Checks the lines in `range` (which starts at a line start): `None` at the first thing a
/// scan would do differently from passing over a good record. `entries`: the whole index.
fn check_half(
    file: &dyn VfsFile,
    range: Range<u64>,
    entries: &[IndexEntry],
    interval: u64,
    gaps: &Gaps,
) -> io::Result<Option<Half>> {
    // The entry before the range (the chain's last link so far) and the next one to meet.
    let next = entries.partition_point(|e| e.offset < range.start);
    let mut prev = next.checked_sub(1).map(|i| entries[i].offset);
    let mut next = entries[next..].iter().peekable();
    let mut lines = LogLines::new(file, range.start);
    let mut pos = range.start;
    let mut first = None;
    let mut last: Option<(u64, u64)> = None;
    while pos < range.end {
        let Some(line) = lines.next_line()? else {
            return Ok(None);
        };
        let n = line.len;
        if !line.complete || pos + n > range.end {
            return Ok(None);
        }
        let Ok((lsn, _)) = record::open(line.content) else {
            return Ok(None);
        };
        if let Some((before, _)) = last
            && !gaps.allows(before, lsn)
        {
            return Ok(None);
        }
        // Where the scan puts an entry, the index must have this one; nowhere else.
        let due = prev.is_none_or(|p| pos >= p + interval);
        match next.peek() {
            Some(e) if e.offset == pos => {
                if !due || e.lsn != lsn {
                    return Ok(None);
                }
                prev = Some(pos);
                next.next();
            }
            Some(e) if e.offset < pos => return Ok(None),
            _ if due => return Ok(None),
            _ => {}
        }
        first.get_or_insert((lsn, pos));
        last = Some((lsn, pos));
        pos += n;
    }
    // The second half holds the log's end: no entry may point past it.
    if range.end == file.len()? && next.peek().is_some() {
        return Ok(None);
    }
    Ok(first.zip(last).map(|(first, last)| Half { first, last }))
}
