//! The relay's secrets (the bearer token, the approval key): the value of an environment
//! variable, or the content of a file only the daemon's user can read. Read whenever the
//! settings are built, so a rotated file is picked up by a reload or `relay retry`.

use std::io::Read;
use std::path::Path;

/// The most a secret file may hold: a token or key is short; anything larger is a mistake.
const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// Where one secret comes from: `[relay] <env_key>` and `<file_key>` (config validation keeps
/// at most one set).
pub(super) struct Source<'a> {
    pub env_key: &'static str,
    pub env: &'a str,
    pub file_key: &'static str,
    pub file: &'a Path,
}

impl Source<'_> {
    /// The secret: `Ok(None)` when neither is set, `Err` (a message naming the key, and the
    /// variable or the file) when the one set cannot be used.
    pub fn read(&self) -> Result<Option<Vec<u8>>, String> {
        if !self.file.as_os_str().is_empty() {
            return read_file(self.file)
                .map(Some)
                .map_err(|e| format!("relay.{} {}: {e}", self.file_key, self.file.display()));
        }
        if self.env.is_empty() {
            return Ok(None);
        }
        match std::env::var_os(self.env) {
            Some(v) if !v.is_empty() => Ok(Some(os_bytes(v))),
            _ => Err(format!(
                "the environment variable {} (relay.{}) is not set",
                self.env, self.env_key
            )),
        }
    }
}

#[cfg(unix)]
fn os_bytes(v: std::ffi::OsString) -> Vec<u8> {
    std::os::unix::ffi::OsStringExt::into_vec(v)
}

#[cfg(not(unix))]
fn os_bytes(v: std::ffi::OsString) -> Vec<u8> {
    v.to_string_lossy().into_owned().into_bytes()
}

/// The content of a secret file without one trailing newline, if the file is a regular file
/// of this user that nobody else may read or write. The checks are made on the open file, so
/// the file read is the file checked.
fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be opened: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot be examined: {e}"))?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    check_owner_only(&meta)?;
    if meta.len() > MAX_SECRET_BYTES {
        return Err(format!(
            "holds {} bytes, more than a secret ({MAX_SECRET_BYTES} at most)",
            meta.len()
        ));
    }
    let mut data = Vec::new();
    file.take(MAX_SECRET_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if data.len() as u64 > MAX_SECRET_BYTES {
        return Err(format!("holds more than {MAX_SECRET_BYTES} bytes"));
    }
    // Editors and `echo` end a file with a newline; the secret is the line before it.
    if data.ends_with(b"\r\n") {
        data.truncate(data.len() - 2);
    } else if data.ends_with(b"\n") {
        data.truncate(data.len() - 1);
    }
    if data.is_empty() {
        return Err("is empty".into());
    }
    Ok(data)
}

#[cfg(unix)]
fn check_owner_only(meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "is owned by uid {}, not by the daemon's user (uid {me}); a secret must be \
             the daemon user's own file",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "has mode {mode:04o}: group or others may read or change it; make it owner-only \
             (chmod 600)"
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_owner_only(_meta: &std::fs::Metadata) -> Result<(), String> {
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn write(dir: &Path, name: &str, data: &[u8], mode: u32) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    fn from_file(file: &Path) -> Result<Option<Vec<u8>>, String> {
        Source {
            env_key: "token_env",
            env: "",
            file_key: "token_file",
            file,
        }
        .read()
    }

    #[test]
    fn an_owner_only_file_gives_its_content_without_one_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "t", b"s3cret\n", 0o600);
        assert_eq!(from_file(&p).unwrap().unwrap(), b"s3cret");
        let p = write(dir.path(), "r", b"s3cret\r\n", 0o400);
        assert_eq!(from_file(&p).unwrap().unwrap(), b"s3cret");
        // One newline only: a key may end with whitespace of its own.
        let p = write(dir.path(), "two", b"k \n\n", 0o600);
        assert_eq!(from_file(&p).unwrap().unwrap(), b"k \n");
        let p = write(dir.path(), "none", b"raw", 0o600);
        assert_eq!(from_file(&p).unwrap().unwrap(), b"raw");
    }

    #[test]
    fn a_file_others_may_read_or_change_is_refused_naming_the_file_and_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o660] {
            let p = write(dir.path(), &format!("m{mode:o}"), b"s3cret\n", mode);
            let e = from_file(&p).unwrap_err();
            assert!(
                e.contains("relay.token_file")
                    && e.contains(&p.display().to_string())
                    && e.contains(&format!("mode 0{mode:o}"))
                    && e.contains("chmod 600"),
                "{e}"
            );
            assert!(!e.contains("s3cret"), "the secret never reaches a message");
        }
    }

    #[test]
    fn a_directory_a_missing_file_and_an_empty_file_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("d");
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(from_file(&sub).unwrap_err().contains("not a regular file"));
        let e = from_file(&dir.path().join("absent")).unwrap_err();
        assert!(
            e.contains("cannot be opened") && e.contains("absent"),
            "{e}"
        );
        let p = write(dir.path(), "empty", b"\n", 0o600);
        assert!(from_file(&p).unwrap_err().contains("is empty"));
        let p = write(dir.path(), "big", &vec![b'x'; 70_000], 0o600);
        assert!(from_file(&p).unwrap_err().contains("bytes"));
    }

    #[test]
    fn a_variable_is_read_when_no_file_is_named_and_nothing_when_neither_is() {
        let none = Source {
            env_key: "token_env",
            env: "",
            file_key: "token_file",
            file: Path::new(""),
        };
        assert_eq!(none.read(), Ok(None));
        // PATH is set in every test run; a name nobody sets is not.
        let path = Source {
            env: "PATH",
            ..none
        };
        assert!(path.read().unwrap().is_some());
        let unset = Source {
            env: "DSTREAM_TEST_SURELY_UNSET_VARIABLE",
            ..path
        };
        let e = unset.read().unwrap_err();
        assert!(
            e.contains("DSTREAM_TEST_SURELY_UNSET_VARIABLE") && e.contains("relay.token_env"),
            "{e}"
        );
    }
}
