//! Reading a spool file record by record, up to the first damage: a torn last record (a writer
//! died mid-write), a line that is not a record, or a line longer than any event may be.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use serde_json::value::RawValue;

use super::{RECORD_VERSION, SpoolRecord};

/// What the next line of a spool file holds.
pub(crate) enum Next {
    /// The `index`th record of the file (counting from 0).
    Record {
        index: usize,
        record: SpoolRecord<Box<RawValue>>,
    },
    /// The file cannot be read from `offset` on, because of `why`.
    Damage {
        offset: u64,
        why: String,
    },
    End,
}

pub(crate) struct SpoolFile {
    reader: BufReader<File>,
    offset: u64,
    index: usize,
    max_line: usize,
    line: Vec<u8>,
}

impl SpoolFile {
    /// Opens `path`; a line longer than `max_line` bytes is damage.
    pub(crate) fn open(path: &Path, max_line: usize) -> io::Result<SpoolFile> {
        Ok(SpoolFile {
            reader: BufReader::with_capacity(64 << 10, File::open(path)?),
            offset: 0,
            index: 0,
            max_line,
            line: Vec::new(),
        })
    }

    pub(crate) fn next(&mut self) -> Next {
        loop {
            self.line.clear();
            let start = self.offset;
            let damage = |why: String| Next::Damage { offset: start, why };
            let n = match (&mut self.reader)
                .take(self.max_line as u64 + 1)
                .read_until(b'\n', &mut self.line)
            {
                Ok(n) => n,
                Err(e) => return damage(format!("read failed: {e}")),
            };
            if n == 0 {
                return Next::End;
            }
            if self.line.last() != Some(&b'\n') {
                return damage(if n > self.max_line {
                    format!("a line longer than {} bytes", self.max_line)
                } else {
                    "a torn last record (no end of line)".into()
                });
            }
            self.offset += n as u64;
            if self.line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let record: SpoolRecord<Box<RawValue>> = match serde_json::from_slice(&self.line) {
                Ok(r) => r,
                Err(e) => return damage(format!("not a spool record: {e}")),
            };
            if record.v != RECORD_VERSION {
                return damage(format!(
                    "a record of version {} (this dstream reads version {RECORD_VERSION})",
                    record.v
                ));
            }
            let index = self.index;
            self.index += 1;
            return Next::Record { index, record };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8]) -> (Vec<usize>, Option<(u64, String)>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.jsonl");
        std::fs::write(&path, bytes).unwrap();
        let mut f = SpoolFile::open(&path, 1024).unwrap();
        let mut got = Vec::new();
        loop {
            match f.next() {
                Next::Record { index, .. } => got.push(index),
                Next::Damage { offset, why } => return (got, Some((offset, why))),
                Next::End => return (got, None),
            }
        }
    }

    const GOOD: &str = r#"{"v":1,"received_ms":5,"source":"claude-code","event":{"a":1}}"#;

    #[test]
    fn records_up_to_the_damage_and_where_it_starts() {
        let whole = format!("{GOOD}\n\n{GOOD}\n");
        assert_eq!(read_all(whole.as_bytes()), (vec![0, 1], None));

        let torn = format!("{GOOD}\n{}", &GOOD[..20]);
        let (got, damage) = read_all(torn.as_bytes());
        assert_eq!(got, vec![0]);
        let (offset, why) = damage.unwrap();
        assert_eq!(offset, GOOD.len() as u64 + 1);
        assert!(why.contains("torn"), "{why}");

        let garbage = format!("{GOOD}\n\u{0}\u{0}garbage\n{GOOD}\n");
        let (got, damage) = read_all(garbage.as_bytes());
        assert_eq!(got, vec![0]);
        assert!(damage.unwrap().1.contains("not a spool record"));

        let long = format!("{GOOD}\n{{\"v\":1,\"x\":\"{}\"}}\n", "y".repeat(2000));
        let (got, damage) = read_all(long.as_bytes());
        assert_eq!(got, vec![0]);
        assert!(damage.unwrap().1.contains("longer"));
    }
}
