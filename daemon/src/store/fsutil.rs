//! Small file-system helpers: private files and directories, positional I/O, the data-dir lock.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use super::StoreError;

/// A positional read that leaves the file's cursor alone, so one handle serves every reader.
pub fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    #[cfg(unix)]
    return std::os::unix::fs::FileExt::read_at(file, buf, offset);
    #[cfg(windows)]
    return std::os::windows::fs::FileExt::seek_read(file, buf, offset);
}

pub fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match read_at(file, buf, offset)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

pub fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        #[cfg(unix)]
        let n = std::os::unix::fs::FileExt::write_at(file, buf, offset)?;
        #[cfg(windows)]
        let n = std::os::windows::fs::FileExt::seek_write(file, buf, offset)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
        offset += n as u64;
    }
    Ok(())
}

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
pub fn take_lock(data_dir: &Path) -> Result<File, StoreError> {
    let path = data_dir.join("LOCK");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| StoreError::io("opening the data directory lock", &e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let holder = fs::read_to_string(&path)
                .ok()
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty());
            return Err(StoreError::Locked {
                path: data_dir.into(),
                holder: holder.map(|p| format!(" (pid {p})")).unwrap_or_default(),
            });
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(StoreError::io("locking the data directory", &e));
        }
    }
    file.set_len(0)
        .and_then(|()| file.write_all(std::process::id().to_string().as_bytes()))
        .map_err(|e| StoreError::io("writing the data directory lock", &e))?;
    Ok(file)
}

/// Copies `len` bytes at `offset` of `file` into a new private file `to`, synced.
pub fn save_range(file: &File, offset: u64, len: u64, to: &Path) -> io::Result<()> {
    let mut bytes = vec![0u8; len as usize];
    read_exact_at(file, &mut bytes, offset)?;
    let mut out = private_file().write(true).create_new(true).open(to)?;
    out.write_all(&bytes)?;
    out.sync_all()?;
    sync_dir(to.parent().unwrap_or(Path::new(".")))
}
