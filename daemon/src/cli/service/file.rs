//! The one file `dstream service install` writes: recognised by its marker, written
//! atomically, and never written over or removed when it is someone else's.

use std::fs;
use std::io::{self, Read as _};
use std::path::Path;

use anyhow::{Context as _, anyhow, bail};

/// Text every file we write carries near its top (a comment in both formats). Only a file
/// with it is replaced or removed.
pub const MARKER: &str =
    "Written by `dstream service install`; `dstream service uninstall` removes it.";

/// How far into a file the marker is looked for; a larger file is not ours.
const LOOK: u64 = 64 * 1024;

/// What is at the path.
pub enum Found {
    Missing,
    Ours,
}

/// What [`write_ours`] did.
pub enum Written {
    Created,
    Replaced,
    Unchanged,
}

/// Reads the file at `path` if it is a regular file, up to [`LOOK`] bytes.
fn read(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("looking at {}", path.display())),
    };
    if !meta.file_type().is_file() {
        bail!(
            "{} is not a regular file (a link, a folder or another kind of file), so \
             `dstream service install` did not write it; it was left untouched",
            path.display()
        );
    }
    let mut content = Vec::new();
    fs::File::open(path)
        .and_then(|f| f.take(LOOK + 1).read_to_end(&mut content))
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(Some(content))
}

/// Whether `content` is a file we wrote.
pub fn is_ours(content: &[u8]) -> bool {
    content.len() as u64 <= LOOK && String::from_utf8_lossy(content).contains(MARKER)
}

fn not_ours(path: &Path) -> anyhow::Error {
    anyhow!(
        "{} exists and was not written by `dstream service install`; it was left untouched \
         (move it away, or remove it, and run this again)",
        path.display()
    )
}

/// Whether there is a file of ours at `path`: an error names a file that is there and not ours.
pub fn check_ours(path: &Path) -> anyhow::Result<Found> {
    match read(path)? {
        None => Ok(Found::Missing),
        Some(content) if is_ours(&content) => Ok(Found::Ours),
        Some(_) => Err(not_ours(path)),
    }
}

/// Whether the file at `path` is ours; `Ok(None)` when there is none (for `status`).
pub fn probe(path: &Path) -> anyhow::Result<Option<bool>> {
    Ok(read(path)?.map(|content| is_ours(&content)))
}

/// Writes `content` to `path` (mode 0644), creating its folder, unless a file that is not
/// ours is there.
pub fn write_ours(path: &Path, content: &str) -> anyhow::Result<Written> {
    let written = match read(path)? {
        None => Written::Created,
        Some(old) if old == content.as_bytes() => return Ok(Written::Unchanged),
        Some(old) if is_ours(&old) => Written::Replaced,
        Some(_) => return Err(not_ours(path)),
    };
    let dir = parent(path)?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Mode 0644 whatever the umask: the service manager reads it, only we write it. Written
    // aside, synced and renamed over, so a reader (or a crash) sees one whole file.
    crate::cli::install::files::write_with_mode(path, content.as_bytes(), 0o644)?;
    Ok(written)
}

/// Removes the file at `path`, which [`check_ours`] found to be ours.
pub fn remove_ours(path: &Path) -> anyhow::Result<()> {
    // Looked at again: the service manager's commands ran in between.
    match check_ours(path)? {
        Found::Missing => Ok(()),
        Found::Ours => {
            fs::remove_file(path).with_context(|| format!("removing {}", path.display()))
        }
    }
}

fn parent(path: &Path) -> anyhow::Result<&Path> {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| anyhow!("{} has no parent folder", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_is_told_by_the_marker() {
        assert!(is_ours(format!("# {MARKER}\n[Unit]\n").as_bytes()));
        assert!(!is_ours(b"[Unit]\nDescription=mine\n"));
    }
}
