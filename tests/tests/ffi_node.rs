//! The Node package (ffi/node, koffi over libdstream_ffi) against a real daemon: its
//! `node --test` suite covers append/read, ingest, a subscription as an async iterator, a
//! checkpoint round trip and the error codes; and its `DstreamSessionStore` under the real
//! Claude Agent SDK. Its one npm dependency (koffi, whose package
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
    // Both tests need it; one `npm ci` at a time in the folder.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
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

/// The real Agent SDK (mock model) with dstream's `SessionStore`: a session written through
/// it, then resumed from dstream alone by a fresh process (an empty Claude config folder, so no
/// local transcript exists).
#[test]
fn the_agent_sdk_keeps_and_resumes_a_session_through_the_session_store() {
    use dstream_tests::agents::{self, AgentEnv};
    use dstream_tests::mock_model::{MockModel, Reply, Script};
    use serde_json::Value;

    let dir = package();
    npm_ci(&dir);
    let paths = agents::ensure_installed();
    let d = Daemon::start();
    let env = AgentEnv::new();
    let mock = MockModel::anthropic(Script::new().on(
        "remember-42",
        vec![Reply::text("noted-42"), Reply::text("resumed-from-dstream")],
    ));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/sdk-sessionstore.mjs");
    let socket = d.socket();
    let lib = dstream_tests::ffi_lib_dir().join("libdstream_ffi.so");
    let package_js = dir.join("index.js");
    let run = |prompt: &str, resume: Option<&str>, config_dir: &Path| {
        let mut vars = vec![
            ("DSTREAM_SOCKET", socket.to_str().unwrap()),
            ("DSTREAM_FFI_LIB", lib.to_str().unwrap()),
            ("DSTREAM_NODE_PACKAGE", package_js.to_str().unwrap()),
            ("DSTREAM_SDK_PROMPT", prompt),
            ("CLAUDE_CONFIG_DIR", config_dir.to_str().unwrap()),
        ];
        if let Some(id) = resume {
            vars.push(("DSTREAM_SDK_RESUME", id));
        }
        let out = agents::run_node_script(
            &paths,
            &env,
            &mock,
            &script,
            &vars,
            std::time::Duration::from_secs(120),
        );
        out.assert_success("the Agent SDK with the dstream SessionStore");
        out.stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect::<Vec<Value>>()
    };
    let first = run("remember-42", None, &env.root().join("claude-a"));
    let result = first
        .iter()
        .find(|m| m["type"] == "result")
        .expect("a result");
    let session_id = result["session_id"].as_str().unwrap().to_string();
    assert!(result.to_string().contains("noted-42"), "{result}");

    // The transcript is in dstream, one event per entry, each uuid once.
    let mut c = d.client();
    let stored = c.read_all(&format!("{session_id}.transcript"));
    assert!(stored.len() >= 2, "{stored:#?}");
    assert!(stored.iter().all(|e| e["type"] == "transcript.entry"));
    let mut uuids: Vec<&str> = stored
        .iter()
        .filter_map(|e| e["payload"]["uuid"].as_str())
        .collect();
    let n = uuids.len();
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), n, "each entry once");
    assert!(stored.iter().any(|e| e.to_string().contains("remember-42")));

    // A fresh process with an empty config folder resumes it from dstream.
    let second = run(
        "what did I ask you to remember?",
        Some(&session_id),
        &env.root().join("claude-b"),
    );
    let result = second
        .iter()
        .find(|m| m["type"] == "result")
        .expect("a result");
    assert!(
        result.to_string().contains("resumed-from-dstream"),
        "the resumed conversation went on: {result}"
    );
    let last_call = mock
        .requests()
        .into_iter()
        .rfind(|r| r.is_model_call())
        .unwrap();
    let body = String::from_utf8_lossy(&last_call.body);
    assert!(
        body.contains("remember-42") && body.contains("noted-42"),
        "the model saw the history loaded from dstream: {body}"
    );
}
