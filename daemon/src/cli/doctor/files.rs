//! The daemon's folders: the socket's and the data dir exist, are this user's and nobody
//! else's (the daemon makes them 0700), and the data dir's file system has room.

use std::path::Path;

use super::report::{Check, Context, sh};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Checks 2 and 3.
pub fn check(cx: &Context) -> Vec<Check> {
    let up = cx.daemon.is_some();
    let mut out = Vec::new();
    if let Some(dir) = cx.socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        out.push(private_dir("socket_dir", dir, up));
    }
    out.push(private_dir("data_dir", &cx.data_dir, up));
    out.push(disk_space(&cx.data_dir));
    out
}

/// A folder that must be this user's alone.
#[cfg(unix)]
fn private_dir(name: &'static str, dir: &Path, daemon_up: bool) -> Check {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !daemon_up => {
            // The daemon makes it when it starts.
            return Check::warn(
                name,
                format!(
                    "{} does not exist yet (the daemon creates it)",
                    dir.display()
                ),
                "dstream daemon",
            );
        }
        Err(e) => {
            return Check::fail(
                name,
                format!("{}: {e}", dir.display()),
                format!("mkdir -p -m 700 {}", sh(dir)),
            );
        }
    };
    if !meta.is_dir() {
        return Check::fail(
            name,
            format!("{} is not a folder", dir.display()),
            format!("move {} away, then: dstream daemon", sh(dir)),
        );
    }
    // SAFETY: geteuid cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Check::fail(
            name,
            format!(
                "{} belongs to uid {}, not to you (uid {me})",
                dir.display(),
                meta.uid()
            ),
            format!("sudo chown -R {me} {}", sh(dir)),
        );
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Check::fail(
            name,
            format!(
                "{} has mode {mode:04o}: other users may look into it",
                dir.display()
            ),
            format!("chmod 700 {}", sh(dir)),
        );
    }
    Check::ok(name, format!("{} (mode {mode:04o}, yours)", dir.display()))
}

#[cfg(not(unix))]
fn private_dir(name: &'static str, dir: &Path, _daemon_up: bool) -> Check {
    Check::ok(name, dir.display().to_string())
}

/// Check 3: free space where the data dir is (or will be).
fn disk_space(dir: &Path) -> Check {
    const NAME: &str = "disk_space";
    // The nearest folder that exists: the data dir's file system before it is made.
    let Some(existing) = dir.ancestors().find(|d| d.is_dir()) else {
        return Check::warn(
            NAME,
            format!("no folder of {} exists to measure", dir.display()),
            "dstream daemon",
        );
    };
    let (free, total) = match free_space(existing) {
        Ok(v) => v,
        Err(e) => {
            return Check::warn(
                NAME,
                format!("cannot measure the space at {}: {e}", existing.display()),
                format!("df -h {}", sh(existing)),
            );
        }
    };
    let detail = format!(
        "{} free of {} at {}",
        human(free),
        human(total),
        existing.display()
    );
    let fix = format!(
        "free space on the file system of {} (or set [daemon] data_dir elsewhere)",
        sh(existing)
    );
    if free < 100 * MIB {
        Check::fail(NAME, detail, fix)
    } else if free < GIB || (total > 0 && free.saturating_mul(100) < total.saturating_mul(5)) {
        Check::warn(NAME, detail, fix)
    } else {
        Check::ok(NAME, detail)
    }
}

/// Bytes available to this user, and the file system's size.
#[cfg(unix)]
fn free_space(dir: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs only writes the struct it is given; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let unit = st.f_frsize as u64;
    Ok((st.f_bavail as u64 * unit, st.f_blocks as u64 * unit))
}

#[cfg(not(unix))]
fn free_space(_dir: &Path) -> std::io::Result<(u64, u64)> {
    Err(std::io::Error::other("not measured on this platform"))
}

fn human(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human(3 * GIB / 2), "1.5 GiB");
        assert_eq!(human(200 * MIB), "200 MiB");
    }

    #[cfg(unix)]
    #[test]
    fn a_folder_others_may_enter_fails_with_the_chmod_that_fixes_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let c = private_dir("data_dir", dir.path(), true);
        assert_eq!(c.status, crate::cli::doctor::report::Status::Fail);
        assert!(c.detail.contains("0755"), "{}", c.detail);
        assert_eq!(c.fix.unwrap(), format!("chmod 700 {}", sh(dir.path())));
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(
            private_dir("data_dir", dir.path(), true).status,
            crate::cli::doctor::report::Status::Ok
        );
        let missing = dir.path().join("nope");
        assert_eq!(
            private_dir("data_dir", &missing, false).status,
            crate::cli::doctor::report::Status::Warn
        );
        assert_eq!(
            private_dir("data_dir", &missing, true).status,
            crate::cli::doctor::report::Status::Fail
        );
    }
}
