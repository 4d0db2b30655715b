//! The files `install` edits, handled as what may really be at their paths: only a regular
//! file (or a symbolic link to one) is read, and only up to a bound; a link is written
//! through, and stays a link; a file its owner made read-only is refused rather than replaced;
//! a replacement is atomic. Every refusal happens before anything changes.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};

/// Most bytes read from a file: settings files and the plugin are kilobytes, and a bound keeps
/// a wrong path (a huge log, a device) from filling memory.
pub const MAX_BYTES: u64 = 16 << 20;

/// What is at a path install may edit.
pub enum Found {
    Missing,
    /// A symbolic link whose target (as the link says) does not exist.
    DanglingLink(PathBuf),
    File(File),
}

/// An existing regular file, read.
pub struct File {
    /// The path as given (for messages).
    pub path: PathBuf,
    /// The file itself: `path`, or where its symbolic link leads.
    pub real: PathBuf,
    pub content: Vec<u8>,
    kept: Kept,
}

/// What a replacement keeps of the file it replaces.
#[derive(Clone, Copy)]
struct Kept {
    mode: u32,
    uid: u32,
    gid: u32,
}

impl File {
    pub fn is_link(&self) -> bool {
        self.real != self.path
    }

    /// `path`, and where it leads when it is a link, for messages.
    pub fn shown(&self) -> String {
        if self.is_link() {
            format!(
                "{} (a link to {})",
                self.path.display(),
                self.real.display()
            )
        } else {
            self.path.display().to_string()
        }
    }

    /// Fails unless the file may be changed: a file without write permission is its owner's
    /// way of saying "leave this as it is", which root (and a rename over it) would otherwise
    /// ignore.
    pub fn check_writable(&self) -> anyhow::Result<()> {
        let mode = self.kept.mode;
        if mode & 0o222 == 0 {
            bail!(
                "{} is read-only (mode {mode:04o}), so it was left untouched. To let dstream \
                 edit it, make it writable (chmod u+w {}) and run this again",
                self.shown(),
                self.real.display()
            );
        }
        if let Err(e) = access_write(&self.real) {
            bail!(
                "{} cannot be written by this user ({e}); it was left untouched",
                self.shown()
            );
        }
        Ok(())
    }

    /// Replaces the file's content in one step, keeping its mode, owner and (for a link) the
    /// link.
    pub fn replace(&self, content: &[u8]) -> anyhow::Result<()> {
        self.check_writable()?;
        write_atomically(&self.real, content, Some(self.kept))
    }

    /// Deletes the file, or just the link when `path` is one (what it leads to may be a
    /// dotfiles repository's, and is not ours to delete).
    pub fn remove(&self) -> anyhow::Result<()> {
        if !self.is_link() {
            self.check_writable()?;
        }
        fs::remove_file(&self.path).with_context(|| format!("removing {}", self.path.display()))
    }
}

/// Looks at `path` and reads it when it is a regular file, or a link to one, of at most
/// `limit` bytes. Anything else there (a FIFO, a device, a folder, a socket) is an error,
/// found without opening it in a way that could block or have effects.
pub fn read(path: &Path, limit: u64) -> anyhow::Result<Found> {
    let shown = path.display();
    let here = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return Err(e).with_context(|| format!("looking at {shown}")),
    };
    let real = if here.file_type().is_symlink() {
        match fs::canonicalize(path) {
            Ok(real) => real,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let target = fs::read_link(path).unwrap_or_default();
                return Ok(Found::DanglingLink(target));
            }
            Err(e) => return Err(e).with_context(|| format!("following the link {shown}")),
        }
    } else {
        path.to_path_buf()
    };
    let what = if real == path {
        shown.to_string()
    } else {
        format!("{shown} (a link to {})", real.display())
    };
    let meta = fs::metadata(&real).with_context(|| format!("looking at {what}"))?;
    check_kind(&meta, &what)?;
    check_size(meta.len(), limit, &what)?;
    // Non-blocking and no controlling terminal, in case something else was put there since.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&real)
        .with_context(|| format!("opening {what}"))?;
    let meta = file
        .metadata()
        .with_context(|| format!("looking at {what}"))?;
    check_kind(&meta, &what)?;
    let mut content = Vec::new();
    // One byte past the limit tells a file that grew (or whose size the system does not
    // report) from one that fits.
    file.take(limit + 1)
        .read_to_end(&mut content)
        .with_context(|| format!("reading {what}"))?;
    check_size(content.len() as u64, limit, &what)?;
    Ok(Found::File(File {
        path: path.to_path_buf(),
        real,
        content,
        kept: Kept {
            mode: meta.permissions().mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
        },
    }))
}

fn check_kind(meta: &fs::Metadata, what: &str) -> anyhow::Result<()> {
    let kind = meta.file_type();
    let is = if kind.is_file() {
        return Ok(());
    } else if kind.is_dir() {
        "a folder"
    } else if kind.is_fifo() {
        "a named pipe (FIFO)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "of an unknown kind"
    };
    bail!(
        "{what} is {is}, not a regular file; dstream only edits regular files (or links to \
         one), so it was left untouched"
    )
}

fn check_size(len: u64, limit: u64, what: &str) -> anyhow::Result<()> {
    if len > limit {
        bail!(
            "{what} is larger than {} MiB, far more than this file ever holds; check that it \
             is the right file. It was left untouched",
            limit >> 20
        );
    }
    Ok(())
}

/// `access(path, W_OK)`: whether this user may write the file (and its file system allows it).
fn access_write(path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Creates `path`, which did not exist when looked at, atomically.
pub fn create(path: &Path, content: &[u8]) -> anyhow::Result<()> {
    write_atomically(path, content, None)
}

/// Creates or replaces `path` in one step (as [`create`]), with `mode` whatever the umask.
pub fn write_with_mode(path: &Path, content: &[u8], mode: u32) -> anyhow::Result<()> {
    // SAFETY: getuid and getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    write_atomically(path, content, Some(Kept { mode, uid, gid }))
}

/// Replaces `path` with `content` in one step: writes a temporary file next to it, syncs it,
/// and renames it over the old one, giving it `old`'s mode and (where allowed) owner.
fn write_atomically(path: &Path, content: &[u8], old: Option<Kept>) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("{} is not a file path", path.display()))?;
    let tmp = dir.join(format!(
        ".{}.dstream-{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        if let Some(old) = old {
            // Best effort: only root may give a file to someone else.
            let _ = std::os::unix::fs::fchown(&f, Some(old.uid), Some(old.gid));
            f.set_permissions(fs::Permissions::from_mode(old.mode))?;
        }
        f.write_all(content)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        // The rename is durable once the directory is synced; not every platform allows it.
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    Ok(())
}

/// The error for a path whose symbolic link leads nowhere: nothing is created through it.
pub fn dangling_link(path: &Path, target: &Path) -> anyhow::Error {
    anyhow!(
        "{} is a symbolic link to {}, which does not exist; dstream does not create files \
         through a dangling link, so it was left untouched. Create the file it points to (it \
         may be in a dotfiles folder or on a drive that is not there now), or remove the \
         link, then run this again",
        path.display(),
        target.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(found: Found) -> File {
        match found {
            Found::File(f) => f,
            _ => panic!("not a file"),
        }
    }

    #[test]
    fn regular_files_and_links_to_them_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        fs::write(&real, "{}").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let f = file(read(&real, 100).unwrap());
        assert!(!f.is_link());
        assert_eq!(f.content, b"{}");
        let f = file(read(&link, 100).unwrap());
        assert!(f.is_link());
        assert_eq!(f.real, fs::canonicalize(&real).unwrap());
        f.replace(b"[]").unwrap();
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&real).unwrap(), b"[]");
        assert!(matches!(
            read(&dir.path().join("none"), 100).unwrap(),
            Found::Missing
        ));
        std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("dangling")).unwrap();
        assert!(matches!(
            read(&dir.path().join("dangling"), 100).unwrap(),
            Found::DanglingLink(t) if t == dir.path().join("gone")
        ));
    }

    #[test]
    fn other_kinds_and_big_files_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid path string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read(&fifo, 100).err().unwrap().to_string();
        assert!(
            err.contains("named pipe (FIFO), not a regular file"),
            "{err}"
        );
        let err = read(dir.path(), 100).err().unwrap().to_string();
        assert!(err.contains("a folder"), "{err}");
        let err = read(Path::new("/dev/null"), 100).err().unwrap().to_string();
        assert!(err.contains("character device"), "{err}");
        let big = dir.path().join("big");
        fs::write(&big, [b' '; 101]).unwrap();
        let err = read(&big, 100).err().unwrap().to_string();
        assert!(err.contains("larger than"), "{err}");
        fs::write(&big, [b' '; 100]).unwrap();
        assert_eq!(file(read(&big, 100).unwrap()).content.len(), 100);
    }

    #[test]
    fn read_only_files_are_neither_replaced_nor_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ro.json");
        fs::write(&path, "{}").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
        let f = file(read(&path, 100).unwrap());
        let err = f.replace(b"[]").err().unwrap().to_string();
        assert!(err.contains("read-only (mode 0444)"), "{err}");
        assert!(f.remove().is_err());
        assert_eq!(fs::read(&path).unwrap(), b"{}");
        // A writable file keeps its mode through a replacement.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        file(read(&path, 100).unwrap()).replace(b"[]").unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
