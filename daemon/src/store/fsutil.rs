//! Small file-system helpers: private files and directories, the data-dir lock.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;

use super::StoreError;
use crate::vfs::{LockError, Vfs, VfsFile, VfsLock};

/// Options for a file only its owner may read: session data is the user's own business.
pub fn private_file() -> OpenOptions {
    let mut o = OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o
}

pub fn create_private_dir(path: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)
}

pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Opens `path` (owner-only, created if missing) for appending.
pub fn private_append(path: &Path) -> io::Result<File> {
    private_file().append(true).create(true).open(path)
}

/// Writes `path` atomically and durably: a temporary file beside it, synced, renamed over it,
/// and the directory synced. Readers see the old bytes or the new, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = private_file()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    io::Write::write_all(&mut f, bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// The process's limit on open descriptors, where the OS reports one.
pub fn open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we own.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every platform
            return Some(lim.rlim_cur as u64);
        }
    }
    None
}

/// Takes the data directory's lock: one daemon per data directory.
pub fn take_lock(vfs: &dyn Vfs, data_dir: &Path) -> Result<VfsLock, StoreError> {
    vfs.lock(data_dir).map_err(|e| match e {
        LockError::Held(holder) => StoreError::Locked {
            path: data_dir.into(),
            holder: holder.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        },
        LockError::Io(e) => StoreError::io("locking the data directory", &e),
    })
}

/// Copies `len` bytes at `offset` of `file` into a new file `to`, durably.
pub fn save_range(
    vfs: &dyn Vfs,
    file: &dyn VfsFile,
    offset: u64,
    len: u64,
    to: &Path,
) -> io::Result<()> {
    let mut bytes = vec![0u8; len as usize];
    crate::vfs::read_exact_at(file, &mut bytes, offset)?;
    vfs.write_new(to, &bytes)
}
