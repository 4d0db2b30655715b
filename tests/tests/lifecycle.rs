//! Start-up and shut-down behaviour: permissions, signals, one daemon per data dir, config errors.
#![cfg(unix)]

use std::fs;

use dstream_tests::serde_json::json;
use dstream_tests::{Daemon, EXIT_TIMEOUT, mode_of, run_expect_exit};

#[test]
fn socket_dir_is_0700_and_socket_is_0600() {
    let d = Daemon::start();
    let sock = d.socket();
    assert_eq!(
        mode_of(sock.parent().unwrap()),
        0o700,
        "socket directory mode"
    );
    assert_eq!(mode_of(&sock), 0o600, "socket mode");
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::metadata(&sock).unwrap().file_type().is_socket());
}

#[test]
fn sigint_stops_cleanly_and_removes_the_socket() {
    let mut d = Daemon::start();
    let mut c = d.client();
    c.append("x", "t", json!({}));
    d.signal(libc::SIGINT);
    let status = d.wait_exit(EXIT_TIMEOUT);
    assert_eq!(status.code(), Some(0), "SIGINT exit status: {status}");
    assert!(!d.socket().exists(), "socket file removed after SIGINT");
}

#[test]
fn second_daemon_on_the_same_data_dir_is_refused() {
    let d = Daemon::start();
    let mut c = d.client();
    c.append("mine", "t", json!({}));

    // Same data dir, another socket.
    let other_sock = d.dir().join("run2").join("dstream.sock");
    let second_log = d.dir().join("second.stderr");
    let mut cmd = d.command_for(&other_sock, &d.data_dir(), None);
    cmd.stderr(fs::File::create(&second_log).unwrap());
    let status = run_expect_exit(cmd, EXIT_TIMEOUT);
    assert!(
        !status.success(),
        "a second daemon on the same data dir must fail ({status})"
    );
    let err = fs::read_to_string(&second_log).unwrap().to_lowercase();
    assert!(
        err.contains("lock") || err.contains("in use") || err.contains("already running"),
        "stderr must say the data dir is in use / locked:\n{err}"
    );
    assert!(
        !other_sock.exists(),
        "the refused daemon must not leave a socket behind"
    );

    // Same data dir and the same socket: refused, and the running daemon's socket survives.
    let status = run_expect_exit(d.command(), EXIT_TIMEOUT);
    assert!(
        !status.success(),
        "a second daemon on the same socket and data dir must fail ({status})"
    );
    let mut c2 = d.client();
    assert!(
        c2.call("hello", json!({})).is_ok(),
        "the first daemon still accepts connections"
    );
    assert_eq!(c.append("mine", "t", json!({})).0, 2, "and keeps working");
}

/// Start with a bad config; it must exit non-zero and name `must_name` and the file on stderr.
/// Returns stderr.
fn config_error(toml: &str, must_name: &[&str]) -> String {
    let d = Daemon::new(Some(toml));
    let path = d.config_path().unwrap().to_path_buf();
    let status = run_expect_exit(d.command(), EXIT_TIMEOUT);
    assert!(
        !status.success(),
        "config {toml:?} must be rejected ({status})"
    );
    let err = d.stderr();
    for s in must_name {
        assert!(
            err.contains(s),
            "stderr must name {s:?} for config {toml:?}:\n{err}"
        );
    }
    assert!(
        err.contains(&*path.to_string_lossy()),
        "stderr must name the config file {}:\n{err}",
        path.display()
    );
    assert!(
        !d.socket().exists(),
        "no socket left behind after a config error"
    );
    err
}

#[test]
fn bad_config_value_names_the_key_and_file() {
    config_error("[store]\nfsync = \"sometimes\"\n", &["store.fsync"]);
}

#[test]
fn unknown_config_key_names_the_key_and_file() {
    let err = config_error("[store]\nfsyncc = 1\n", &["store.fsyncc"]);
    assert!(
        !err.contains("fsyncc.fsyncc"),
        "the unknown key must be named by its own path, store.fsyncc:\n{err}"
    );
}

#[test]
fn wrongly_typed_config_value_names_the_key_and_file() {
    config_error(
        "[subscriptions]\nlive_buffer_bytes = \"lots\"\n",
        &["subscriptions.live_buffer_bytes"],
    );
}

#[test]
fn invalid_toml_names_the_file() {
    config_error("[store\nfsync = \n", &[]);
}

/// Whatever sits at the socket path and is not a socket (a user's file, a directory, a
/// symlink) is someone else's: the daemon refuses to start, names it, and leaves it alone.
#[test]
fn a_socket_path_that_is_not_a_socket_is_refused_and_left_intact() {
    use std::os::unix::fs::symlink;
    for kind in ["regular file", "directory", "symlink to a file"] {
        let d = Daemon::new(None);
        let sock = d.socket();
        fs::create_dir_all(sock.parent().unwrap()).unwrap();
        let target = d.dir().join("precious.txt");
        let content = format!("precious data, not a socket ({kind})\n");
        match kind {
            "regular file" => fs::write(&sock, &content).unwrap(),
            "directory" => {
                fs::create_dir(&sock).unwrap();
                fs::write(sock.join("inside.txt"), &content).unwrap();
            }
            _ => {
                fs::write(&target, &content).unwrap();
                symlink(&target, &sock).unwrap();
            }
        }

        let status = run_expect_exit(d.command(), EXIT_TIMEOUT);
        assert!(
            !status.success(),
            "{kind} at the socket path: must not start ({status})"
        );
        let err = d.stderr();
        assert!(
            err.contains(&*sock.to_string_lossy()) && err.contains("is not a socket"),
            "{kind}: stderr must name {} and say it is not a socket:\n{err}",
            sock.display()
        );
        let meta = fs::symlink_metadata(&sock)
            .unwrap_or_else(|e| panic!("{kind} at the socket path was removed: {e}"));
        match kind {
            "regular file" => {
                assert!(meta.is_file(), "{kind}: still a regular file");
                assert_eq!(
                    fs::read_to_string(&sock).unwrap(),
                    content,
                    "{kind}: content"
                );
            }
            "directory" => {
                assert!(meta.is_dir(), "{kind}: still a directory");
                assert_eq!(
                    fs::read_to_string(sock.join("inside.txt")).unwrap(),
                    content,
                    "{kind}: content"
                );
            }
            _ => {
                assert!(meta.file_type().is_symlink(), "{kind}: still a symlink");
                assert_eq!(fs::read_link(&sock).unwrap(), target, "{kind}: link target");
                assert_eq!(
                    fs::read_to_string(&target).unwrap(),
                    content,
                    "{kind}: content"
                );
            }
        }
    }
}

/// A second daemon (its own data dir) on the socket of a live one says so, and the live one's
/// socket keeps working.
#[test]
fn a_second_daemon_on_a_live_socket_is_refused() {
    let d = Daemon::start();
    let mut c = d.client();
    c.append("mine", "t", json!({}));

    let second_log = d.dir().join("second.stderr");
    let mut cmd = d.command_for(&d.socket(), &d.dir().join("data2"), None);
    cmd.stderr(fs::File::create(&second_log).unwrap());
    let status = run_expect_exit(cmd, EXIT_TIMEOUT);
    assert!(
        !status.success(),
        "a second daemon on a live socket must fail ({status})"
    );
    let err = fs::read_to_string(&second_log).unwrap();
    assert!(
        err.contains("another dstream daemon is already listening on")
            && err.contains(&*d.socket().to_string_lossy()),
        "stderr must say another daemon listens on {}:\n{err}",
        d.socket().display()
    );
    assert_eq!(
        c.append("mine", "t", json!({})).0,
        2,
        "the first daemon keeps working"
    );
    assert!(
        d.client().call("hello", json!({})).is_ok(),
        "and accepts new connections"
    );
}

/// Only the daemon's own user may talk to it, even when the socket's mode lets others connect:
/// another uid gets one `-32009` error frame (id null) and the connection is closed.
#[test]
fn a_peer_with_another_uid_is_refused_even_on_a_world_writable_socket() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    const NOBODY: u32 = 65534;
    const TEST: &str = "a_peer_with_another_uid_is_refused_even_on_a_world_writable_socket";
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        dstream_tests::skip(TEST, "switching to another uid needs root");
        return;
    }
    // A python outside root's home, so that uid 65534 can run it.
    let Some(python) = ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
    else {
        dstream_tests::skip(TEST, "no system python3 to connect as another uid");
        return;
    };
    let d = Daemon::start();
    let sock = d.socket();
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o777)).unwrap();
    for dir in sock.ancestors().skip(1) {
        let mode = mode_of(dir);
        if dir.starts_with(d.dir()) {
            fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o005)).unwrap();
        } else if mode & 0o001 == 0 {
            let why = format!("{} is not searchable by other users", dir.display());
            dstream_tests::skip(TEST, &why);
            return;
        }
    }

    let script = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("CONNECT FAILED:", e, file=sys.stderr)
    sys.exit(3)
try:
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"hello"}\n')
except OSError as e:
    print("send:", e, file=sys.stderr)
data = b""
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except OSError as e:
    print("recv:", e, file=sys.stderr)
sys.stdout.write(data.decode("utf-8", "replace"))
"#;
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(&sock)
        .uid(NOBODY)
        .gid(NOBODY)
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .expect("run python3 as uid 65534");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(3),
        "uid {NOBODY} could not even connect, so the test proves nothing: {stderr}"
    );
    let frames: Vec<dstream_tests::serde_json::Value> = stdout
        .lines()
        .map(|l| {
            dstream_tests::serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not a JSON frame ({e}): {l:?}"))
        })
        .collect();
    assert!(
        frames.iter().all(|f| f.get("result").is_none()),
        "uid {NOBODY} must get no result: {stdout}"
    );
    assert_eq!(
        frames.len(),
        1,
        "exactly one frame, the refusal, then the connection is closed: {stdout:?} {stderr}"
    );
    let f = &frames[0];
    assert_eq!(f["id"], json!(null), "{f}");
    assert_eq!(f["error"]["code"], json!(-32009), "{f}");
    let msg = f["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("only uid 0"),
        "the refusal names the allowed uid: {msg}"
    );
    assert!(msg.contains("65534"), "and the refused one: {msg}");

    // The daemon's own user still gets in, on old and new connections alike.
    let mut c = d.client();
    assert_eq!(c.append("mine", "t", json!({})).0, 1);
    assert!(d.client().call("hello", json!({})).is_ok());
}
