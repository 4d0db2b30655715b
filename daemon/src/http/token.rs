//! The listener's secret: `<data_dir>/http.token`, 32 random bytes as hex, made at the first
//! start with mode 0600 and read at every later one. Every request must carry it (a bearer
//! header), so another user on the machine, or a web page, cannot talk to the daemon.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The token file in `data_dir`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("http.token")
}

/// The token, made first if there is none. A token file that others may read is refused: it
/// would protect nothing.
pub fn load_or_create(data_dir: &Path) -> io::Result<String> {
    let file = path(data_dir);
    match std::fs::read_to_string(&file) {
        // Cut short by a crash while it was made: make it again.
        Ok(text) if text.is_empty() => {
            std::fs::remove_file(&file)?;
            load_or_create(data_dir)
        }
        Ok(text) => {
            check_private(&file)?;
            let token = text.trim().to_string();
            if token.len() < 32 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is not a dstream token; remove it to make a new one",
                        file.display()
                    ),
                ));
            }
            Ok(token)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let token = random_hex(32)?;
            match create_private(&file, format!("{token}\n").as_bytes()) {
                Ok(()) => Ok(token),
                // Another daemon made it first: use that one.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => load_or_create(data_dir),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Creates `file` (never over an existing one) with mode 0600 and `bytes`, synced.
fn create_private(file: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(file)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(unix)]
fn check_private(file: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(file)?;
    if meta.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} may be read by others (mode {:o}); `chmod 600` it",
                file.display(),
                meta.mode() & 0o777
            ),
        ));
    }
    // SAFETY: geteuid has no preconditions.
    if meta.uid() != unsafe { libc::geteuid() } {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} belongs to another user", file.display()),
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_file: &Path) -> io::Result<()> {
    Ok(())
}

pub fn random_hex(bytes: usize) -> io::Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares without stopping at the first difference, so the time taken says nothing about
/// how much of a guess was right.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
