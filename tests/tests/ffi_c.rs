//! The C ABI from real C programs: the examples in ffi/examples/c and tests/ffi/errors.c,
//! compiled here with the system compiler against the committed header, linked against the
//! built libdstream_ffi, and run against a real daemon.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use dstream_tests::serde_json::json;
use dstream_tests::{Daemon, Watched, daemon_bin, output_within};

/// The longest a compile or a C program may take before it counts as hung (and is killed).
const HANG: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn lib_dir() -> PathBuf {
    dstream_tests::ffi_lib_dir()
}

/// Compiles one C program against ffi/include/dstream.h and the library.
fn build(src: &str, out_dir: &Path) -> PathBuf {
    let out = out_dir.join(Path::new(src).file_stem().unwrap());
    let cc = output_within(
        Command::new("cc")
            .args(["-Wall", "-Wextra", "-Werror", "-g", "-I"])
            .arg(repo().join("ffi/include"))
            .arg(repo().join(src))
            .arg("-L")
            .arg(lib_dir())
            .args(["-ldstream_ffi", "-lpthread", "-o"])
            .arg(&out),
        HANG,
    );
    assert!(
        cc.status.success(),
        "cc {src} failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    out
}

fn run(program: &Path, args: &[&str]) -> Output {
    output_within(
        Command::new(program)
            .args(args)
            .env("LD_LIBRARY_PATH", lib_dir()),
        HANG,
    )
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "status {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn append_and_read_back_from_c() {
    let d = Daemon::start();
    let bin = build("ffi/examples/c/append.c", d.dir());
    let out = ok(&run(&bin, &[d.socket().to_str().unwrap(), "c-append"]));
    assert!(out.contains("appended lsn 3"), "{out}");
    assert!(out.contains("read back 3 events"), "{out}");
    let events = d.client().read_all("c-append");
    assert_eq!(events.len(), 3);
    assert_eq!(events[2]["payload"]["n"], 3);
}

#[test]
fn a_subscription_on_the_delivery_thread_sees_every_event_once_in_order() {
    let d = Daemon::start();
    let bin = build("ffi/examples/c/tail.c", d.dir());
    let out = ok(&run(&bin, &[d.socket().to_str().unwrap(), "c-tail", "500"]));
    assert!(out.contains("received 500 events, 0 out of order"), "{out}");
}

#[test]
fn a_checkpoint_requested_in_c_is_resolved_from_the_cli() {
    let d = Daemon::start();
    let bin = build("ffi/examples/c/checkpoint.c", d.dir());
    // Each read of its output has a deadline: a hung program fails the test, killed.
    let mut child = Watched::spawn(
        Command::new(&bin)
            .args([d.socket().to_str().unwrap(), "c-checkpoint"])
            .env("LD_LIBRARY_PATH", lib_dir()),
    );
    let first = child.next_line(Duration::from_secs(20));
    let id = first
        .strip_prefix("waiting for ")
        .expect("the id line")
        .to_string();
    let approve = output_within(
        Command::new(daemon_bin())
            .args(["approve", &id, "--note", "from the test", "--socket"])
            .arg(d.socket()),
        Duration::from_secs(20),
    );
    assert!(approve.status.success(), "{approve:?}");
    let decided = child.next_line(Duration::from_secs(20));
    assert_eq!(decided, "decided: approved");
    assert!(child.wait(Duration::from_secs(20)).success());
    // The delivery is recorded just after the program got the decision.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut c = d.client();
    let mut events = c.read_all("c-checkpoint");
    while events.len() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        events = c.read_all("c-checkpoint");
    }
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "checkpoint.requested",
            "checkpoint.approved",
            "checkpoint.delivered"
        ]
    );
}

#[test]
fn every_error_path_returns_its_code_and_a_message() {
    let d = Daemon::start();
    let bin = build("tests/ffi/errors.c", d.dir());
    let missing = d.dir().join("nobody-here.sock");
    let out = ok(&run(
        &bin,
        &[d.socket().to_str().unwrap(), missing.to_str().unwrap()],
    ));
    assert!(out.contains("0 failures"), "{out}");
    // The daemon is unharmed.
    assert_eq!(d.client().ok("hello", json!({}))["server"], "dstream");
}

#[test]
fn the_c_examples_leak_nothing_under_valgrind() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        dstream_tests::skip(
            "the_c_examples_leak_nothing_under_valgrind",
            "valgrind is not installed (the other C tests still ran)",
        );
        return;
    }
    let d = Daemon::start();
    for (src, args) in [
        ("ffi/examples/c/append.c", vec!["c-vg"]),
        ("ffi/examples/c/tail.c", vec!["c-vg-tail", "50"]),
    ] {
        let bin = build(src, d.dir());
        let mut cmd = Command::new("valgrind");
        cmd.args([
            "--quiet",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            "--error-exitcode=99",
        ])
        .arg(&bin)
        .arg(d.socket())
        .args(&args)
        .env("LD_LIBRARY_PATH", lib_dir());
        let out = output_within(&mut cmd, HANG);
        assert!(
            out.status.code() == Some(0),
            "{src} under valgrind: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
