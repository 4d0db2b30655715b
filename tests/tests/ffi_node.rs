//! The Node package (ffi/node, koffi over libdstream_ffi) against a real daemon: its
//! `node --test` suite covers append/read, ingest, a subscription as an async iterator, a
//! checkpoint round trip and the error codes. Its one npm dependency (koffi, whose package
//! carries prebuilt binaries) is installed from the lockfile on first use, with npm's download
//! cache outside the clone.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;

use dstream_tests::Daemon;

fn package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("ffi/node")
}

fn npm_ci(dir: &Path) {
    if dir.join("node_modules/koffi/package.json").is_file() {
        return;
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let out = Command::new("npm")
        .args([
            "ci",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            "--cache",
        ])
        .arg(home.join(".cache/dstream/npm"))
        .current_dir(dir)
        .output()
        .expect("the Node tests need npm (Node.js 20+)");
    assert!(
        out.status.success(),
        "npm ci in ffi/node failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_node_package_passes_its_suite_against_a_real_daemon() {
    let dir = package();
    npm_ci(&dir);
    let lib = dstream_tests::ffi_lib_dir().join("libdstream_ffi.so");
    assert!(lib.is_file(), "{} is missing", lib.display());
    let d = Daemon::start();
    let out = Command::new(std::env::var("DSTREAM_TEST_NODE").unwrap_or_else(|_| "node".into()))
        .args(["--test", "test/"])
        .current_dir(&dir)
        .envs(dstream_tests::client_env(d.socket()))
        .env("DSTREAM_FFI_LIB", &lib)
        .env("DSTREAM_BIN", dstream_tests::daemon_bin())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "node --test failed:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("# fail 0"), "{report}");
    assert!(!report.contains("# pass 0"), "{report}");
}
