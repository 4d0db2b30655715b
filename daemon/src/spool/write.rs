//! The writers' side of the spool: a hook (or `dstream` on the OpenCode plugin's behalf) that
//! could not reach a daemon writes its events here, durably, before it exits. Plain blocking
//! file calls: it runs in the hook, where no async runtime is started.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::overflow::{self, OVERFLOW_FILE};
use super::{SpoolRecord, is_part_name, is_pending_name, spool_dir};

/// Lines about lost events are kept up to this size; past it only stderr says so.
const MAX_OVERFLOW_FILE_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error(
        "the spool is full ({used} of {max} bytes, daemon.spool_max_bytes): {lost} event(s) lost, counted in {}",
        overflow.display()
    )]
    Full {
        used: u64,
        max: u64,
        lost: usize,
        overflow: PathBuf,
    },
    #[error("refusing to spool into {}: {why}", dir.display())]
    Unsafe { dir: PathBuf, why: String },
    #[error("cannot spool: {what}: {source}")]
    Io {
        what: &'static str,
        source: io::Error,
    },
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> SpoolError {
    move |source| SpoolError::Io { what, source }
}

/// Writes spool files into one data directory's spool.
pub struct SpoolWriter {
    dir: PathBuf,
    max_bytes: u64,
}

impl SpoolWriter {
    pub fn new(data_dir: &Path, max_bytes: u64) -> SpoolWriter {
        SpoolWriter {
            dir: spool_dir(data_dir),
            max_bytes,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `records` as one new spool file named after `writer` (`hook`, `opencode`, …),
    /// durable when this returns. When they do not fit in the spool's bound, nothing is
    /// written but a line per lost event in `overflow.jsonl`, and the error says so.
    pub fn write<E: Serialize>(
        &self,
        writer: &str,
        records: &[SpoolRecord<E>],
    ) -> Result<PathBuf, SpoolError> {
        self.prepare_dir()?;
        let mut body = Vec::new();
        let mut sizes = Vec::with_capacity(records.len());
        for r in records {
            let before = body.len();
            serde_json::to_writer(&mut body, r)
                .map_err(|e| io_err("encoding a record")(io::Error::other(e)))?;
            body.push(b'\n');
            sizes.push(body.len() - before);
        }
        let used = self.used_bytes();
        if used.saturating_add(body.len() as u64) > self.max_bytes {
            let overflow = self.dir.join(OVERFLOW_FILE);
            self.note_overflow(records, &sizes);
            return Err(SpoolError::Full {
                used,
                max: self.max_bytes,
                lost: records.len(),
                overflow,
            });
        }
        let name = file_name(writer);
        let part = self.dir.join(format!(".{name}.part"));
        let done = self.dir.join(&name);
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let written = (|| {
            let mut file = options.open(&part)?;
            file.write_all(&body)?;
            file.sync_data()?;
            std::fs::rename(&part, &done)?;
            sync_dir(&self.dir)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&part);
            return Err(io_err("writing the spool file")(e));
        }
        Ok(done)
    }

    /// Creates the spool folder (owner-only) and makes sure it is this user's own folder: a
    /// folder another user controls could be read, or fed events the daemon would take as
    /// the agent's.
    fn prepare_dir(&self) -> Result<(), SpoolError> {
        if let Some(data_dir) = self.dir.parent() {
            crate::autostart::make_private_dir(data_dir)
                .map_err(io_err("creating the data directory"))?;
        }
        if let Err(e) = std::fs::create_dir(&self.dir)
            && e.kind() != io::ErrorKind::AlreadyExists
        {
            return Err(io_err("creating the spool folder")(e));
        }
        let meta =
            std::fs::symlink_metadata(&self.dir).map_err(io_err("checking the spool folder"))?;
        let unsafe_dir = |why: String| SpoolError::Unsafe {
            dir: self.dir.clone(),
            why,
        };
        if !meta.is_dir() {
            return Err(unsafe_dir("it is not a folder".into()));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            if meta.uid() != me {
                return Err(unsafe_dir(format!(
                    "it belongs to uid {}, not to this user (uid {me})",
                    meta.uid()
                )));
            }
            if meta.mode() & 0o077 != 0 {
                std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(io_err("making the spool folder owner-only"))?;
            }
        }
        Ok(())
    }

    /// Bytes the spool holds now: pending files, files being written, the overflow notes.
    fn used_bytes(&self) -> u64 {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        entries
            .flatten()
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                is_pending_name(&name) || is_part_name(&name) || name == OVERFLOW_FILE
            })
            .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
            .sum()
    }

    /// Counts the lost events where a daemon and `dstream doctor` will find them.
    fn note_overflow<E>(&self, records: &[SpoolRecord<E>], sizes: &[usize]) {
        let path = self.dir.join(OVERFLOW_FILE);
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_OVERFLOW_FILE_BYTES) {
            return;
        }
        let mut lines = Vec::new();
        for (r, bytes) in records.iter().zip(sizes) {
            let note = overflow::Note {
                at_ms: r.received_ms,
                source: r.source.clone(),
                session_id: r.session_id.clone(),
                bytes: *bytes as u64,
            };
            if serde_json::to_writer(&mut lines, &note).is_ok() {
                lines.push(b'\n');
            }
        }
        let mut options = OpenOptions::new();
        options.append(true).create(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        if let Ok(mut f) = options.open(&path) {
            let _ = f.write_all(&lines).and_then(|()| f.sync_data());
        }
    }
}

/// `<time in ns, 20 digits>-<writer>-<pid>-<n>.jsonl`: sorts by time; unique per process.
fn file_name(writer: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let writer: String = writer
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(32)
        .collect();
    format!(
        "{ns:020}-{writer}-{}-{}.jsonl",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Makes a rename or a removal in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(i: u64) -> SpoolRecord<serde_json::Value> {
        SpoolRecord {
            v: 1,
            received_ms: i,
            source: "claude-code".into(),
            session_id: Some("s1".into()),
            answered: None,
            event: json!({"i": i, "pad": "x".repeat(100)}),
        }
    }

    #[test]
    fn files_are_whole_owner_only_and_sorted_in_time() {
        let dir = tempfile::tempdir().unwrap();
        let w = SpoolWriter::new(dir.path(), 1 << 20);
        let a = w.write("hook", &[record(1)]).unwrap();
        let b = w.write("hook", &[record(2), record(3)]).unwrap();
        assert!(a.file_name() < b.file_name());
        let text = std::fs::read_to_string(&b).unwrap();
        assert_eq!(text.lines().count(), 2);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(&b).unwrap().permissions().mode() & 0o777,
                0o600
            );
            assert_eq!(
                std::fs::metadata(w.dir()).unwrap().permissions().mode() & 0o777,
                0o700
            );
        }
        // No half-written file is left behind.
        let names: Vec<_> = std::fs::read_dir(w.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| is_pending_name(n)), "{names:?}");
    }

    #[test]
    fn a_full_spool_counts_what_it_loses() {
        let dir = tempfile::tempdir().unwrap();
        let w = SpoolWriter::new(dir.path(), 400);
        w.write("hook", &[record(1), record(2)]).unwrap();
        let err = w.write("hook", &[record(3), record(4)]).unwrap_err();
        assert!(matches!(err, SpoolError::Full { lost: 2, .. }), "{err}");
        assert_eq!(overflow::count(w.dir()), 2);
        assert_eq!(crate::spool::backlog(dir.path()).files, 1);
    }
}
