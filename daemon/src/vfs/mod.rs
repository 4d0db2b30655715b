//! The one narrow layer every durable file of the daemon goes through: open, positional read
//! and write, append, truncate, sync, rename, directory sync, remove, list.
//!
//! Why a layer: what survives a power failure is decided by which of these calls happened and
//! which syncs followed them, and that cannot be observed on a real disk (the page cache
//! survives `kill -9`). [`OsVfs`] is the real file system; the test-only [`sim::SimVfs`] keeps
//! what each file and directory held at its last sync and, on a simulated crash, reverts to it
//! (with unsynced writes lost wholly, torn at a page, or scattered), the way SQLite's test VFS
//! and TigerBeetle's simulated storage do.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::Arc;

#[cfg(any(test, feature = "sim"))]
pub mod sim;

/// How [`Vfs::open`] treats a missing or existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// The file must exist.
    Existing,
    /// Created (empty, owner-only) if missing.
    Create,
    /// Created; an existing file is an error.
    CreateNew,
    /// Created, or emptied if it exists.
    Truncate,
}

/// A file opened through a [`Vfs`]. Every method is positional or appends, so one handle serves
/// a writer and any number of readers at once.
#[allow(clippy::len_without_is_empty)] // a file's length is a size, not a count
pub trait VfsFile: Send + Sync {
    /// Reads at `offset`; 0 at the end of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset` (extending the file if needed).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at the end of the file.
    fn append(&self, buf: &[u8]) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data and size durable.
    fn sync(&self) -> io::Result<()>;
    /// Gives the space of `len` bytes at `offset` back to the file system, keeping the
    /// file's length: those bytes read as zeros from then on. `Ok(false)` when the file system
    /// cannot (then nothing changed).
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<bool>;
}

pub type VfsFileRef = Arc<dyn VfsFile>;

/// Holds a data directory for one process; released when dropped.
pub type VfsLock = Box<dyn std::any::Any + Send + Sync>;

/// The file system as the daemon's durable state sees it.
pub trait Vfs: Send + Sync + fmt::Debug {
    fn open(&self, path: &Path, how: Open) -> io::Result<VfsFileRef>;
    /// Renames `from` over `to`; durable only once the directory is synced.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Creates `dir` and its parents, owner-only.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes `dir`'s entries (files created, renamed or removed in it) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// The names in `dir`.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    fn exists(&self, path: &Path) -> bool;
    /// Whether callers may spread work over threads. A simulated disk says no: one call at a
    /// time in a fixed order is what lets a seed replay exactly.
    fn concurrent(&self) -> bool {
        true
    }

    /// A number for a temporary file's name, never the same twice from this file system.
    fn temp_seq(&self) -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes the exclusive lock of `dir` (one daemon per data directory); `Err(None)` when
    /// another process holds it, with its pid when it wrote one.
    fn lock(&self, dir: &Path) -> Result<VfsLock, LockError>;

    /// The whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let file = self.open(path, Open::Existing)?;
        let mut bytes = vec![0u8; file.len()? as usize];
        read_exact_at(&*file, &mut bytes, 0)?;
        Ok(bytes)
    }

    /// Writes `path` atomically and durably: a temporary file beside it, synced, renamed over
    /// it, and the directory synced. A crash leaves the old bytes or the new, never a mix.
    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        // `.<name>.<n>.tmp`: a leading dot is never a session id, so the temporary file of one
        // session's marker cannot be another session's (`x` and `x.tmp`), and the number
        // (unique in this process, which holds the data-dir lock) keeps two writers of one
        // path apart.
        let n = self.temp_seq();
        let mut name = std::ffi::OsString::from(".");
        name.push(path.file_name().unwrap_or_default());
        name.push(format!(".{n}.tmp"));
        let tmp = parent(path).join(name);
        let written = (|| {
            let file = self.open(&tmp, Open::Truncate)?;
            file.write_at(bytes, 0)?;
            file.sync()?;
            drop(file);
            self.rename(&tmp, path)
        })();
        if written.is_err() {
            let _ = self.remove(&tmp);
        }
        written?;
        self.sync_dir(parent(path))
    }

    /// Writes a new file durably (its directory entry included); an existing one is an error.
    fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let file = self.open(path, Open::CreateNew)?;
        file.write_at(bytes, 0)?;
        file.sync()?;
        self.sync_dir(parent(path))
    }
}

#[derive(Debug)]
pub enum LockError {
    /// Another process holds the lock (its pid, when it wrote one).
    Held(Option<String>),
    Io(io::Error),
}

pub fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Fills `buf` from `offset`; an early end of file is `UnexpectedEof`.
pub fn read_exact_at(file: &dyn VfsFile, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match file.read_at(buf, offset)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

/// The real file system. Files are created owner-only: session data is the user's own business.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsVfs;

/// The process-wide real file system, for callers that take an `Arc<dyn Vfs>`.
pub fn os() -> Arc<dyn Vfs> {
    Arc::new(OsVfs)
}

struct OsFile(File);

impl VfsFile for OsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        #[cfg(unix)]
        return std::os::unix::fs::FileExt::read_at(&self.0, buf, offset);
        #[cfg(windows)]
        return std::os::windows::fs::FileExt::seek_read(&self.0, buf, offset);
    }

    fn write_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            #[cfg(unix)]
            let n = std::os::unix::fs::FileExt::write_at(&self.0, buf, offset)?;
            #[cfg(windows)]
            let n = std::os::windows::fs::FileExt::seek_write(&self.0, buf, offset)?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            buf = &buf[n..];
            offset += n as u64;
        }
        Ok(())
    }

    fn append(&self, buf: &[u8]) -> io::Result<()> {
        // Not O_APPEND: on Linux that makes every positional write append too. Each file has
        // one writer, so the end cannot move between the two calls.
        self.write_at(buf, self.len()?)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync(&self) -> io::Result<()> {
        // fdatasync: the size is data too; only timestamps are left to the kernel.
        self.0.sync_data()
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<bool> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            // SAFETY: fallocate on an open descriptor; the range is plain numbers.
            let rc = unsafe {
                libc::fallocate(
                    self.0.as_raw_fd(),
                    mode,
                    offset as libc::off_t,
                    len as libc::off_t,
                )
            };
            if rc == 0 {
                return Ok(true);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(false),
                _ => Err(e),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (offset, len);
            Ok(false)
        }
    }
}

fn private_options() -> OpenOptions {
    let mut o = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // A symlink planted where a log belongs would send acknowledged events outside the
        // data directory: refuse to follow it (ELOOP).
        o.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    o
}

/// Whether `e` is the refusal to open a symlink (see `private_options`).
pub fn is_symlink_refusal(e: &io::Error) -> bool {
    #[cfg(unix)]
    return e.raw_os_error() == Some(libc::ELOOP);
    #[cfg(not(unix))]
    return false;
}

impl Vfs for OsVfs {
    fn open(&self, path: &Path, how: Open) -> io::Result<VfsFileRef> {
        let mut o = private_options();
        o.read(true).write(true);
        match how {
            Open::Existing => &mut o,
            Open::Create => o.create(true),
            Open::CreateNew => o.create_new(true),
            Open::Truncate => o.create(true).truncate(true),
        };
        Ok(Arc::new(OsFile(o.open(path)?)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn lock(&self, dir: &Path) -> Result<VfsLock, LockError> {
        let path = dir.join("LOCK");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(LockError::Io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let holder = fs::read_to_string(&path)
                    .ok()
                    .map(|p| p.trim().to_string())
                    .filter(|p| !p.is_empty());
                return Err(LockError::Held(holder));
            }
            Err(fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
        }
        file.set_len(0)
            .and_then(|()| file.write_all(std::process::id().to_string().as_bytes()))
            .map_err(LockError::Io)?;
        Ok(Box::new(file))
    }
}
