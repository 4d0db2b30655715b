//! Small file-system helpers: the descriptor limit, the data-dir lock, saving a byte range.

use std::io;
use std::path::{Path, PathBuf};

use super::error::StoreError;
use crate::vfs::{LockError, Vfs, VfsFile, VfsLock};

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

/// Copies `len` bytes at `offset` of `file` into a new file at `to` (or beside it, see
/// [`write_new_unique`]), durably. Returns where.
pub fn save_range(
    vfs: &dyn Vfs,
    file: &dyn VfsFile,
    offset: u64,
    len: u64,
    to: &Path,
) -> io::Result<PathBuf> {
    let mut bytes = vec![0u8; len as usize];
    crate::vfs::read_exact_at(file, &mut bytes, offset)?;
    write_new_unique(vfs, to, &bytes)
}

/// Writes a new file durably at `to`, or, if that name is taken (a restart within the same
/// millisecond, a clock set back), at `to.1`, `to.2`, …: what is kept aside never overwrites
/// what was kept aside before. Returns where.
pub fn write_new_unique(vfs: &dyn Vfs, to: &Path, bytes: &[u8]) -> io::Result<PathBuf> {
    let mut path = to.to_path_buf();
    for n in 1..=1000 {
        match vfs.write_new(&path, bytes) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let mut name = to.as_os_str().to_owned();
                name.push(format!(".{n}"));
                path = PathBuf::from(name);
            }
            other => return other.map(|()| path),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{} and 1000 names beside it exist", to.display()),
    ))
}
