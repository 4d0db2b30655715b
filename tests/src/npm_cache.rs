//! Pinned npm packages (and other tools the tests need) installed once into a cache outside the
//! clone, `$HOME/.cache/dstream/<name>`, and reused until their package files change.
//!
//! Every install holds an exclusive `flock` on `<cache>/.lock`, so test processes that start
//! together install once and the others wait and reuse it.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;

const PACKAGE_FILES: [&str; 2] = ["package.json", "package-lock.json"];
const STAMP: &str = ".dstream-install-stamp";

/// `$HOME/.cache/dstream/<name>`.
pub fn cache_root(name: &str) -> PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_else(|| OsString::from("/tmp"));
    PathBuf::from(home).join(".cache/dstream").join(name)
}

/// Runs `f` while holding the exclusive lock of the `cache` folder (created if missing).
pub fn with_lock<T>(cache: &Path, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    fs::create_dir_all(cache).with_context(|| format!("create {}", cache.display()))?;
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(cache.join(".lock"))
        .context("open the cache lock file")?;
    let _guard = Flock::exclusive(&lock).context("flock the cache lock file")?;
    f()
}

/// Installs the packages pinned by `src`'s package files into `cache` unless the stamp (a hash
/// of those files) shows they are there, then returns what `check` finds in the cache; `check`
/// failing on an installed cache means it is reinstalled.
pub fn ensure<T>(
    src: &Path,
    cache: &Path,
    check: impl Fn(&Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    with_lock(cache, || {
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        let mut contents = Vec::new();
        for f in PACKAGE_FILES {
            let bytes =
                fs::read(src.join(f)).with_context(|| format!("read {}", src.join(f).display()))?;
            hash = fnv1a(f.as_bytes(), hash);
            hash = fnv1a(&bytes, hash);
            contents.push((f, bytes));
        }
        let stamp = format!("{hash:016x}\n");
        let stamp_path = cache.join(STAMP);
        let installed = fs::read_to_string(&stamp_path).ok().as_deref() == Some(stamp.as_str());
        if installed && let Ok(found) = check(cache) {
            return Ok(found);
        }
        let _ = fs::remove_file(&stamp_path);
        for (f, bytes) in &contents {
            fs::write(cache.join(f), bytes).with_context(|| format!("write {f} into the cache"))?;
        }
        let started = Instant::now();
        npm_install(cache)?;
        let found = check(cache).context("after npm install")?;
        fs::write(&stamp_path, &stamp).context("write the install stamp")?;
        eprintln!(
            "dstream tests: installed {} into {} in {:.1?}",
            src.display(),
            cache.display(),
            started.elapsed()
        );
        Ok(found)
    })
}

/// 64-bit FNV-1a: enough to notice that the package files changed.
fn fnv1a(data: &[u8], mut h: u64) -> u64 {
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// `npm ci` from the committed lockfile, without install scripts.
///
/// The lockfile lists only the platform packages the registry had when it was written, and
/// `npm ci` refuses a lockfile that lacks any optional dependency of a package; then this falls
/// back to `npm install --no-save`, which installs exactly the locked versions and skips the
/// missing optional ones.
fn npm_install(cache: &Path) -> anyhow::Result<()> {
    let _ = fs::remove_dir_all(cache.join("node_modules"));
    let common = [
        "--ignore-scripts",
        "--no-audit",
        "--no-fund",
        "--prefer-offline",
        "--loglevel=error",
    ];
    let ci = npm(cache, "ci", &common)?;
    if ci.status.success() {
        return Ok(());
    }
    eprintln!("dstream tests: npm ci refused the lockfile; falling back to npm install --no-save");
    let mut args = common.to_vec();
    args.push("--no-save");
    let install = npm(cache, "install", &args)?;
    if install.status.success() {
        return Ok(());
    }
    anyhow::bail!(
        "npm ci failed:\n{}\nnpm install failed too:\n{}",
        String::from_utf8_lossy(&ci.stderr),
        String::from_utf8_lossy(&install.stderr)
    )
}

fn npm(cache: &Path, verb: &str, args: &[&str]) -> anyhow::Result<std::process::Output> {
    Command::new("npm")
        .arg(verb)
        .args(args)
        .current_dir(cache)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run npm {verb} (is Node.js with npm installed?)"))
}

/// An exclusive `flock`, released on drop.
struct Flock<'a>(&'a File);

impl<'a> Flock<'a> {
    fn exclusive(f: &'a File) -> io::Result<Flock<'a>> {
        loop {
            // SAFETY: flock on a descriptor we own for the lifetime of the guard.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Flock(f));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}
