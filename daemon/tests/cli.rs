//! The `dstream` binary's own command-line behaviour. (End-to-end tests of the daemon live in
//! the `dstream-tests` crate; having an integration test here also makes `cargo test` build
//! the binary they run.)

use std::process::Command;

fn dstream() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dstream"))
}

#[test]
fn client_commands_say_clearly_when_no_daemon_runs() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("none.sock");
    for args in [
        vec!["sessions"],
        vec!["stats"],
        vec!["tail", "s1"],
        vec!["query", "--type", "x"],
    ] {
        let out = dstream()
            .args(&args)
            .arg("--socket")
            .arg(&socket)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("no dstream daemon is running") && stderr.contains("none.sock"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_bad_config_file_is_named_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[store]\nfsync = \"sometimes\"\n").unwrap();
    let out = dstream()
        .args(["daemon", "--config"])
        .arg(&config)
        .arg("--socket")
        .arg(dir.path().join("d.sock"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("store.fsync") && stderr.contains("bad.toml"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("data").exists(),
        "nothing is created when the config is refused"
    );
}
