//! Redaction through the real daemon: the fake secrets of `tests/fixtures/secrets.txt`, in
//! every position, sent through `ingest`, plain `append`, checkpoint requests and decisions
//! (notes and edited inputs); then no file anywhere in the data directory (logs, the
//! write-ahead log, indexes, checkpoint state) may hold any of them. Hostile inputs that used
//! to switch the Lua redaction off are stored redacted, and later events still are.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dstream_tests::serde_json::{Value, json};
use dstream_tests::{Client, Daemon, daemon_bin, spawn_hook, wait_child};

const POLICY: &str = r#"
[[checkpoints.rules]]
tool = "Bash"
action = "ask"
"#;

/// (what must never be stored, a text that holds it), from the corpus.
fn corpus() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/secrets.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = line.split_once(' ').unwrap();
        if name == "context" {
            let (probe, text) = rest.split_once(' ').unwrap();
            out.push((probe.to_string(), text.replace("\\n", "\n")));
        } else {
            out.push((rest.to_string(), rest.to_string()));
        }
    }
    assert!(out.len() > 40, "the corpus is loaded");
    out
}

/// `text` in every position: start of the string, start of a line, an env line, YAML, a CLI
/// argument, a URL query, JSON inside a string (an MCP result) and inside that again.
fn placed(text: &str) -> Value {
    json!({
        "as_is": text,
        "line_start": format!("first line\n{text}\nlast line"),
        "tab": format!("\t{text}"),
        "env": format!("PORT=1\nTHE_VALUE={text}\n"),
        "yaml": format!("config:\n  value: {text}\n"),
        "cli": format!("tool --flag {text} --other"),
        "url": format!("https://example.test/cb?code={text}&x=1"),
        "mcp": {"content": [{"type": "text", "text": json!({"result": {"data": text}}).to_string()}]},
        "nested": json!({"inner": json!({"deep": text}).to_string()}).to_string(),
        "logged": format!("log: {}", json!({"msg": text})),
        "list": [text],
    })
}

/// Every file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// No file of the data directory holds any probe.
fn assert_nothing_on_disk(d: &Daemon, probes: &[String]) {
    let all = files(&d.data_dir());
    assert!(
        all.iter()
            .any(|p| p.file_name().is_some_and(|n| n == "wal")),
        "the write-ahead log is among the files searched: {all:?}"
    );
    for f in &all {
        // Lossy is exact here: the probes are ASCII, and a replaced invalid byte can
        // neither make nor break an ASCII match. (`str::find` is fast on the 64 MB WAL.)
        let bytes = std::fs::read(f).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for probe in probes {
            if let Some(at) = text.find(probe.as_str()) {
                let around: String = text[at..].chars().take(200).collect();
                panic!("{probe:?} was stored in {}: {around}", f.display());
            }
        }
    }
}

fn ingest(c: &mut Client, source: &str, raw: Value) -> Value {
    c.ok("ingest", json!({"source": source, "event": raw}))
}

fn redacted(events: &[Value]) -> bool {
    events.iter().any(|e| e.to_string().contains("[REDACTED]"))
}

#[test]
fn no_secret_reaches_the_disk_however_it_is_sent() {
    let mut d = Daemon::start_with(POLICY);
    let mut c = d.client();
    let corpus = corpus();
    let probes: Vec<String> = corpus.iter().map(|(p, _)| p.clone()).collect();
    let started = Instant::now();
    for (i, (_, text)) in corpus.iter().enumerate() {
        let all = placed(text);
        // ingest: a mapped Claude Code event (prompt and tool output) and an unmapped one.
        ingest(
            &mut c,
            "claude-code",
            json!({"session_id": "ing", "hook_event_name": "UserPromptSubmit",
                   "cwd": "/tmp", "prompt": text}),
        );
        ingest(
            &mut c,
            "claude-code",
            json!({"session_id": "ing", "hook_event_name": "PostToolUse", "cwd": "/tmp",
                   "tool_name": "mcp__db__query", "tool_use_id": format!("toolu_{i}"),
                   "tool_input": all, "tool_response": all}),
        );
        ingest(&mut c, "mystery", json!({"session_id": "raw", "data": all}));
        // Plain append: payload, metadata and raw.
        c.append_event(
            "app",
            json!({"type": "note", "actor": "me", "payload": all, "metadata": {"m": all},
                   "raw": {"r": all}}),
        );
    }
    eprintln!(
        "{} events sent in {:?}",
        corpus.len() * 4,
        started.elapsed()
    );
    let everything: Vec<String> = corpus.iter().map(|(_, t)| t.clone()).collect();
    let everything = everything.join("\n");

    // A checkpoint through the hook: its request, a decision note and an edited input.
    let mut hook = spawn_hook(
        &d.socket(),
        &dstream_tests::claude_pre_tool_use("cp", "toolu_cp", &everything),
    );
    let cp = c.pending_in("cp");
    assert!(
        !cp.to_string().contains(&probes[0]),
        "checkpoint.list shows it redacted"
    );
    c.ok(
        "checkpoint.resolve",
        json!({"id": cp["id"], "decision": "approve", "note": everything,
               "input": {"command": everything, "env": placed(&everything)}}),
    );
    let status = wait_child(&mut hook, Duration::from_secs(15));
    assert!(status.is_some_and(|s| s.success()), "the hook exits");
    // An SDK checkpoint, rejected with a note.
    let sdk = c.ok(
        "checkpoint.request",
        json!({"session_id": "sdk", "key": "k1", "tool": "Bash",
               "input": {"command": everything}, "summary": everything}),
    );
    c.ok(
        "checkpoint.resolve",
        json!({"id": sdk["id"], "decision": "reject", "note": everything}),
    );

    for s in ["ing", "raw", "app", "cp", "sdk"] {
        let events = c.read_all(s);
        assert!(redacted(&events), "session {s} was redacted");
    }
    let app = c.read_all("app");
    assert!(app[0]["metadata"]["redactions"].as_u64().unwrap() > 0);
    // Nothing failed, and `plugins list` says how much was redacted.
    let list = c.ok("plugins.list", json!({}));
    assert_eq!(list["redaction"]["failures"], 0, "{list}");
    assert!(list["redaction"]["redacted"].as_u64().unwrap() > 0);
    drop(c);
    assert!(d.stop().success());
    assert_nothing_on_disk(&d, &probes);
}

#[test]
fn inputs_that_disabled_the_lua_redaction_are_stored_redacted() {
    let d = Daemon::start();
    let mut c = d.client();
    let secret = "ghp_FAKE0123456789abcdefghijklmnopqrstuv";
    let post = |session: &str, input: Value, output: Value| {
        json!({"session_id": session, "hook_event_name": "PostToolUse", "cwd": "/tmp",
               "tool_name": "Bash", "tool_use_id": "toolu_1",
               "tool_input": input, "tool_response": output})
    };
    // 54 KB of BEGIN PRIVATE KEY without an END, with a secret after it.
    let begins = "-----BEGIN PRIVATE KEY-----".repeat(2000);
    let t = Instant::now();
    ingest(
        &mut c,
        "claude-code",
        post(
            "hostile",
            json!({"command": format!("{begins}\nMIIEFAKEkeybody {secret}")}),
            json!({}),
        ),
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // Ten values under a secret key that end in a backslash.
    for i in 0..10 {
        ingest(
            &mut c,
            "claude-code",
            post(
                "hostile",
                json!({"password": format!("FAKEbackslash{i}\\")}),
                json!({}),
            ),
        );
    }
    // 2 MB of output, secrets spread through it.
    let mut big = String::new();
    while big.len() < 2 << 20 {
        big.push_str("ordinary output line, nothing to see here, status ok\n");
        if big.len() % 100_000 < 60 {
            big.push_str(&format!("export GITHUB_TOKEN={secret}\n"));
        }
    }
    big.push_str(&format!("{secret}\n"));
    ingest(
        &mut c,
        "claude-code",
        post(
            "hostile",
            json!({"command": "cat big"}),
            json!({"stdout": big}),
        ),
    );
    // Other sessions, afterwards, are still redacted.
    ingest(
        &mut c,
        "claude-code",
        json!({"session_id": "later", "hook_event_name": "UserPromptSubmit", "cwd": "/tmp",
               "prompt": format!("use\n{secret}")}),
    );
    let later = c.read_all("later");
    assert!(redacted(&later), "{later:?}");
    let hostile = c.read_all("hostile");
    assert!(hostile.len() >= 12);
    assert!(
        !hostile.iter().any(|e| e["type"] == "plugin.error"),
        "nothing failed"
    );
    let list = dstream(&d, &["plugins", "list"]);
    assert!(list.status.success(), "{list:?}");
    assert!(String::from_utf8_lossy(&list.stdout).contains("redaction (built in)"));
    let mut probes: Vec<String> = (0..10).map(|i| format!("FAKEbackslash{i}")).collect();
    probes.push(secret.into());
    probes.push("MIIEFAKEkeybody".into());
    drop(c);
    let mut d = d;
    assert!(d.stop().success());
    assert_nothing_on_disk(&d, &probes);
}

/// A number serde_json cannot hold would make redaction fail; `append` refuses such events
/// before they reach it (readers could not parse them either), so nothing is stored in clear.
/// The redactor's own fail-closed path (content withheld, `plugin.error`) is covered by the
/// unit tests in daemon/src/redact/tests.rs.
#[test]
fn an_event_the_redactor_could_not_read_is_refused_not_stored_in_clear() {
    let mut d = Daemon::start();
    let mut c = d.client();
    let line = r#"{"jsonrpc":"2.0","id":1,"method":"append","params":{"session_id":"bad","event":{"type":"note","payload":{"n":1e400,"password":"FAKEwithheld01"}}}}"#;
    c.send_raw(format!("{line}\n").as_bytes());
    let reply = c.any_response();
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    // Other events are still redacted.
    c.append_event(
        "good",
        json!({"type": "note", "payload": {"text": "AKIAFAKE0123456789AB"}}),
    );
    assert_eq!(c.read_all("good")[0]["payload"]["text"], "[REDACTED]");
    drop(c);
    assert!(d.stop().success());
    assert_nothing_on_disk(&d, &["FAKEwithheld01".to_string()]);
}

#[test]
fn the_redact_section_sets_the_replacement_and_extra_patterns() {
    let d = Daemon::start_with(
        "[redact]\nreplacement = \"<gone>\"\nextra_patterns = [\"ACME-[0-9]{6}\"]\n",
    );
    let mut c = d.client();
    c.append_event(
        "cfg",
        json!({"type": "note", "payload": {"text": "id ACME-123456, key\nAKIAFAKE0123456789AB"}}),
    );
    let events = c.read_all("cfg");
    assert_eq!(events[0]["payload"]["text"], "id <gone>, key\n<gone>");
    assert_eq!(events[0]["metadata"]["redactions"], 2);
}

fn dstream(d: &Daemon, args: &[&str]) -> std::process::Output {
    Command::new(daemon_bin())
        .args(args)
        .arg("--socket")
        .arg(d.socket())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}
