//! Start-up recovery of one session log: check every record (or, with `verify_on_start =
//! false`, the part after the last index entry), find the end of the last good record, and
//! decide what to do with anything after it.
//!
//! - Bad bytes only at the end (a torn write: a line cut short, or garbage after the last good
//!   line): they are cut off, after being saved, and the store records a `log.recovered` event.
//! - Zero bytes (pages a power failure kept from the disk, after the file's size got there):
//!   the same, from the first of them to the end, whatever follows.
//! - A bad record followed by a good one, or a good record with the wrong LSN: the log was
//!   damaged where it had been durable. The file is quarantined, never skipped over silently.

use std::borrow::Cow;
use std::io;

use serde::Deserialize;

use super::gaps::Gaps;
use super::index::{IndexEntry, SparseIndex};
use super::line_read::{LogLines, read_line_at};
use super::record;
use super::recovery_parallel;
use crate::vfs::VfsFile;

/// What the scan found.
#[derive(Debug)]
pub struct ScanResult {
    /// LSN of the last good record (0 for an empty log).
    pub last_lsn: u64,
    /// Byte length of the log up to the end of the last good record.
    pub good_len: u64,
    pub file_len: u64,
    /// The index for the good part.
    pub index: SparseIndex,
    /// True when the index loaded from disk differed from the one the log implies.
    pub index_rebuilt: bool,
    pub first_ts: u64,
    pub last_ts: u64,
    pub stream_id: Option<String>,
    pub damage: Damage,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Damage {
    None,
    /// Bytes after `good_len` are not a complete good record and nothing good follows them.
    TornTail {
        reason: String,
    },
    /// A complete record that fails its checksum, or an LSN out of sequence: the log holds
    /// damaged data that was once durable. `offset` is where the good prefix ends.
    Corrupt {
        reason: String,
        offset: u64,
    },
}

#[derive(Deserialize)]
struct EnvelopeFields<'a> {
    timestamp: u64,
    #[serde(borrow)]
    stream_id: Cow<'a, str>,
}

/// Timestamp and stream id of a stored body from the log of `session`.
fn envelope(body: &[u8], session: &str) -> Option<(u64, String)> {
    let json = crate::event_json::EventJson::full(body, session);
    let f: EnvelopeFields = serde_json::from_slice(&json).ok()?;
    Some((f.timestamp, f.stream_id.into_owned()))
}

/// The first bad line a scan meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bad {
    /// The file ends inside it: a torn write.
    Incomplete,
    /// Complete yet failing its checksum: damage to data that was written whole.
    Complete,
    /// It holds zero bytes, which dstream never writes (JSON lines have no raw NUL): pages
    /// whose writes had not reached the disk when the power failed, the file's size having
    /// reached it. Only unsynced data can look like this (synced data and everything the
    /// write-ahead log holds are whole by now), so from here on the log is a torn tail.
    Hole,
}

/// Timestamp and stream id of the record at `offset`, if it is a good one.
fn envelope_at(
    file: &dyn VfsFile,
    offset: u64,
    session: &str,
) -> io::Result<Option<(u64, String)>> {
    Ok(read_line_at(file, offset)?.and_then(|l| {
        record::open(&l)
            .ok()
            .and_then(|(_, body)| envelope(body, session))
    }))
}

/// Where a scan may start: from the last entry of a trustworthy index, or from the top.
fn starting_point(
    file: &dyn VfsFile,
    loaded: Option<&SparseIndex>,
    verify_all: bool,
) -> io::Result<SparseIndex> {
    let Some(loaded) = loaded.filter(|_| !verify_all) else {
        return Ok(SparseIndex::default());
    };
    let Some(last) = loaded.last() else {
        return Ok(SparseIndex::default());
    };
    let trusted = match read_line_at(file, last.offset)? {
        Some(line) => matches!(record::open(&line), Ok((lsn, _)) if lsn == last.lsn),
        None => false,
    };
    Ok(if trusted {
        loaded.clone()
    } else {
        SparseIndex::default()
    })
}

/// Scans a log. `loaded` is the index read from disk, if any; `interval` is the index spacing.
#[cfg(test)]
pub fn scan(
    file: &dyn VfsFile,
    loaded: Option<&SparseIndex>,
    verify_all: bool,
    interval: u64,
    gaps: &Gaps,
) -> io::Result<ScanResult> {
    scan_from(
        file,
        "test-session",
        loaded,
        verify_all,
        interval,
        gaps,
        None,
    )
}

/// [`scan`] of the log of `session` whose part before `floor` (an LSN and its offset) an
/// archive holds: nothing before it is read (it may be a hole).
pub fn scan_from(
    file: &dyn VfsFile,
    session: &str,
    loaded: Option<&SparseIndex>,
    verify_all: bool,
    interval: u64,
    gaps: &Gaps,
    floor: Option<IndexEntry>,
) -> io::Result<ScanResult> {
    // Every record is to be checked, and the log has its index: a clean log is checked on two
    // threads (anything else is left to the one-thread scan, which finds and names it).
    if verify_all
        && floor.is_none()
        && let Some(loaded) = loaded
        && let Some(clean) = scan_clean(
            file,
            session,
            loaded,
            interval,
            gaps,
            recovery_parallel::PARALLEL_MIN_BYTES,
        )?
    {
        return Ok(clean);
    }
    scan_one_thread(file, session, loaded, verify_all, interval, gaps, floor)
}

/// What the scan reports for a clean log of `min_bytes` or more whose index is `loaded`,
/// checked on two threads; `None` for any other log.
fn scan_clean(
    file: &dyn VfsFile,
    session: &str,
    loaded: &SparseIndex,
    interval: u64,
    gaps: &Gaps,
    min_bytes: u64,
) -> io::Result<Option<ScanResult>> {
    let Some(clean) = recovery_parallel::check_clean(file, loaded, interval, gaps, min_bytes)?
    else {
        return Ok(None);
    };
    let file_len = file.len()?;
    let (first_ts, stream_id) = match envelope_at(file, 0, session)? {
        Some((ts, stream)) => (ts, Some(stream)),
        None => (0, None),
    };
    let last_ts = envelope_at(file, clean.last_offset, session)?.map_or(0, |(ts, _)| ts);
    Ok(Some(ScanResult {
        last_lsn: clean.last_lsn,
        good_len: file_len,
        file_len,
        index: loaded.clone(),
        index_rebuilt: false,
        first_ts,
        last_ts,
        stream_id,
        damage: Damage::None,
    }))
}

/// [`scan_from`] on this thread, record by record: decides every case, damage included.
fn scan_one_thread(
    file: &dyn VfsFile,
    session: &str,
    loaded: Option<&SparseIndex>,
    verify_all: bool,
    interval: u64,
    gaps: &Gaps,
    floor: Option<IndexEntry>,
) -> io::Result<ScanResult> {
    let file_len = file.len()?;
    let mut index = match floor {
        None => starting_point(file, loaded, verify_all)?,
        Some(floor) => {
            // Only the entries past the floor can be used; the floor itself is the start.
            let above = loaded.map(|l| {
                let mut kept = SparseIndex::default();
                kept.push(floor);
                for e in l.entries().iter().filter(|e| e.offset > floor.offset) {
                    kept.push(*e);
                }
                kept
            });
            let from = starting_point(file, above.as_ref(), verify_all)?;
            if from.last().is_some() {
                from
            } else {
                let mut only = SparseIndex::default();
                only.push(floor);
                only
            }
        }
    };
    let start = index.last().unwrap_or(IndexEntry { lsn: 1, offset: 0 });

    let mut lines = LogLines::new(file, start.offset);
    let mut expected = start.lsn;
    let mut pos = start.offset;
    let mut good_len = start.offset;
    let mut last_good: Option<(u64, u64)> = None; // (lsn, offset) of the last good record
    let mut first_bad: Option<(String, Bad)> = None;
    let mut damage = Damage::None;
    let mut first_ts = 0;
    let mut stream_id = None;

    while let Some(line) = lines.next_line()? {
        let (n, complete, content) = (line.len, line.complete, line.content);
        let opened = if complete {
            record::open(content).ok()
        } else {
            None
        };
        match (opened, &first_bad) {
            (Some((lsn, body)), None) if lsn == expected || gaps.allows(expected - 1, lsn) => {
                if lsn == 1
                    && let Some((ts, stream)) = envelope(body, session)
                {
                    first_ts = ts;
                    stream_id = Some(stream);
                }
                let due = index.last().is_none_or(|l| pos >= l.offset + interval);
                if due && index.last().is_none_or(|l| l.offset < pos) {
                    index.push(IndexEntry { lsn, offset: pos });
                }
                last_good = Some((lsn, pos));
                expected = lsn + 1;
                good_len = pos + n;
            }
            (Some((lsn, _)), None) => {
                damage = Damage::Corrupt {
                    reason: format!(
                        "record at byte {pos} has lsn {lsn} where lsn {expected} belongs"
                    ),
                    offset: good_len,
                };
                break;
            }
            // After a hole everything is unsynced tail: cut, whatever it holds.
            (_, Some((_, Bad::Hole))) => {}
            (Some((lsn, _)), Some((bad, _))) => {
                damage = Damage::Corrupt {
                    reason: format!("{bad}, yet a good record (lsn {lsn}) follows at byte {pos}"),
                    offset: good_len,
                };
                break;
            }
            (None, None) => {
                first_bad = Some(if memchr::memchr(0, content).is_some() {
                    (
                        format!(
                            "zero bytes at byte {pos} (lsn {expected} expected): writes that had not been synced when the power failed"
                        ),
                        Bad::Hole,
                    )
                } else if complete {
                    (
                        format!(
                            "record at byte {pos} (lsn {expected} expected) fails its checksum"
                        ),
                        Bad::Complete,
                    )
                } else {
                    (
                        format!("the last {n} bytes at byte {pos} are an incomplete record"),
                        Bad::Incomplete,
                    )
                });
            }
            (None, Some(_)) => {}
        }
        pos += n;
    }
    // Only an incomplete last line is a torn write. A complete line that fails its checksum
    // was written whole, acknowledged, and then damaged: that is corruption, even at the end.
    match first_bad {
        Some((reason, Bad::Incomplete | Bad::Hole)) if damage == Damage::None => {
            damage = Damage::TornTail { reason }
        }
        Some((reason, Bad::Complete)) if damage == Damage::None => {
            damage = Damage::Corrupt {
                reason,
                offset: good_len,
            }
        }
        _ => {}
    }

    let last_lsn = last_good.map_or(start.lsn.saturating_sub(1), |(lsn, _)| lsn);
    let last_at = last_good.or((start.offset > 0).then_some((start.lsn, start.offset)));
    let last_ts = match last_at {
        Some((_, offset)) => envelope_at(file, offset, session)?.map_or(0, |(ts, _)| ts),
        None => 0,
    };
    if stream_id.is_none() && last_lsn > 0 {
        // Scan began past the first record: read it for the session's lineage and start time.
        if let Some((ts, stream)) = envelope_at(file, 0, session)? {
            first_ts = ts;
            stream_id = Some(stream);
        }
    }
    let index_rebuilt = loaded != Some(&index);
    Ok(ScanResult {
        last_lsn,
        good_len,
        file_len,
        index,
        index_rebuilt,
        first_ts,
        last_ts,
        stream_id,
        damage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    fn os_file(f: &tempfile::NamedTempFile) -> crate::vfs::VfsFileRef {
        use crate::vfs::Vfs as _;
        crate::vfs::OsVfs
            .open(f.path(), crate::vfs::Open::Existing)
            .unwrap()
    }

    fn log_with(n: u64) -> (tempfile::NamedTempFile, Vec<u64>) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let mut offsets = Vec::new();
        let mut at = 0;
        for lsn in 1..=n {
            let mut line = Vec::new();
            let obj = format!(
                r#"{{"lsn":{lsn},"stream_id":"s","timestamp":{},"payload":"{}"}}"#,
                1000 + lsn,
                "x".repeat(100)
            );
            record::seal(obj.as_bytes(), &mut line);
            offsets.push(at);
            at += line.len() as u64;
            f.write_all(&line).unwrap();
        }
        (f, offsets)
    }

    #[test]
    fn a_clean_log_scans_clean_and_builds_its_index() {
        let (f, _) = log_with(100);
        let r = scan(&*os_file(&f), None, true, 1024, &Gaps::default()).unwrap();
        assert_eq!(r.damage, Damage::None);
        assert_eq!(
            (r.last_lsn, r.good_len, r.first_ts, r.last_ts),
            (100, r.file_len, 1001, 1100)
        );
        assert!(r.index.entries().len() > 5);
        assert!(r.index_rebuilt);
        // Scanning again from the index it built reproduces it exactly.
        let again = scan(&*os_file(&f), Some(&r.index), false, 1024, &Gaps::default()).unwrap();
        assert!(!again.index_rebuilt);
        assert_eq!(
            (again.last_lsn, again.first_ts, again.last_ts),
            (100, 1001, 1100)
        );
    }

    #[test]
    fn a_torn_last_line_is_cut_back_to_the_last_good_record() {
        let (mut f, offsets) = log_with(10);
        f.write_all(br#"{"lsn":11,"stream_id":"s","timest"#)
            .unwrap();
        let r = scan(&*os_file(&f), None, true, 1024, &Gaps::default()).unwrap();
        assert!(
            matches!(r.damage, Damage::TornTail { .. }),
            "{:?}",
            r.damage
        );
        assert_eq!(r.last_lsn, 10);
        assert!(r.good_len > offsets[9] && r.good_len < r.file_len);
    }

    #[test]
    fn damage_before_the_last_good_record_is_corruption() {
        let (f, offsets) = log_with(10);
        f.as_file().write_at(b"X", offsets[3] + 20).unwrap();
        let r = scan(&*os_file(&f), None, true, 1024, &Gaps::default()).unwrap();
        assert!(matches!(r.damage, Damage::Corrupt { .. }), "{:?}", r.damage);
    }

    /// Every field a scan reports, to compare two scans.
    fn summary(r: &ScanResult) -> String {
        format!(
            "{} {} {} {:?} {} {} {} {:?} {:?}",
            r.last_lsn,
            r.good_len,
            r.file_len,
            r.index.entries(),
            r.index_rebuilt,
            r.first_ts,
            r.last_ts,
            r.stream_id,
            r.damage
        )
    }

    /// A log of `n` records of random sizes (some spanning several index intervals).
    fn random_log(n: u64, seed: &mut u64) -> (tempfile::NamedTempFile, Vec<u64>) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let mut offsets = Vec::new();
        let mut at = 0;
        for lsn in 1..=n {
            let size = (next(seed) % 400) as usize
                + if next(seed).is_multiple_of(50) {
                    3000
                } else {
                    0
                };
            let obj = format!(
                r#"{{"lsn":{lsn},"stream_id":"s","timestamp":{},"payload":"{}"}}"#,
                1000 + lsn,
                "y".repeat(size)
            );
            let mut line = Vec::new();
            record::seal(obj.as_bytes(), &mut line);
            offsets.push(at);
            at += line.len() as u64;
            f.write_all(&line).unwrap();
        }
        (f, offsets)
    }

    fn next(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn the_two_thread_check_agrees_with_the_scan_on_clean_and_damaged_logs() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut parallel_answers = 0;
        for round in 0..84 {
            let n = 20 + next(&mut seed) % 400;
            let (f, offsets) = random_log(n, &mut seed);
            let interval = [256, 1024, 4096, 1 << 20][(round % 4) as usize];
            let kind = round % 7;
            let gaps = Gaps::default();
            let file = os_file(&f);
            let built = scan(&*file, None, true, interval, &gaps).unwrap();
            let mut index = built.index.clone();
            // One damage (or none) per round: a flipped byte, a cut, zeros, an index that is
            // not what the scan builds.
            match kind {
                0 => {}
                1 => {
                    let at = next(&mut seed) % f.as_file().metadata().unwrap().len();
                    let mut b = [0u8];
                    f.as_file().read_at(&mut b, at).unwrap();
                    f.as_file().write_at(&[b[0] ^ 0x20], at).unwrap();
                }
                2 => {
                    let len = f.as_file().metadata().unwrap().len();
                    f.as_file().set_len(len - 1 - next(&mut seed) % 50).unwrap();
                }
                3 => {
                    let at = offsets[(next(&mut seed) % n) as usize];
                    f.as_file().write_at(&[0u8; 16], at + 3).unwrap();
                }
                4 => {
                    let mut e = index.entries().to_vec();
                    if e.len() > 1 {
                        let i = 1 + (next(&mut seed) as usize) % (e.len() - 1);
                        e.remove(i);
                    }
                    index = SparseIndex::default();
                    for entry in e {
                        index.push(entry);
                    }
                }
                5 => {
                    // A whole record gone from the middle: the LSNs jump.
                    let i = 1 + (next(&mut seed) % (n - 2)) as usize;
                    let bytes = std::fs::read(f.path()).unwrap();
                    let (from, to) = (offsets[i] as usize, offsets[i + 1] as usize);
                    let mut cut = bytes[..from].to_vec();
                    cut.extend_from_slice(&bytes[to..]);
                    f.as_file().set_len(0).unwrap();
                    f.as_file().write_at(&cut, 0).unwrap();
                }
                _ => {
                    let i = (next(&mut seed) % n) as usize;
                    index.push(IndexEntry {
                        lsn: n + 5,
                        offset: offsets[i].max(index.last().map_or(0, |l| l.offset + 1)),
                    });
                }
            }
            let one =
                scan_one_thread(&*file, "s", Some(&index), true, interval, &gaps, None).unwrap();
            let two = match scan_clean(&*file, "s", &index, interval, &gaps, 1).unwrap() {
                Some(clean) => clean,
                None => {
                    scan_one_thread(&*file, "s", Some(&index), true, interval, &gaps, None).unwrap()
                }
            };
            assert_eq!(summary(&one), summary(&two), "round {round}");
            let clean = recovery_parallel::check_clean(&*file, &index, interval, &gaps, 1).unwrap();
            if clean.is_some() {
                parallel_answers += 1;
                assert_eq!(one.damage, Damage::None, "round {round}");
                assert!(!one.index_rebuilt, "round {round}");
            } else if kind == 0 {
                panic!(
                    "round {round}: a clean log with its own index was not checked on two threads"
                );
            }
        }
        assert!(parallel_answers >= 10, "{parallel_answers}");
    }
}
