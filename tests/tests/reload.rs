//! One config source: a changed config file, read again (`plugins.reload`, as the file watcher
//! does), reaches every kind of setting without a restart: the defaults of `checkpoint.request`,
//! the grant TTL, the read limits, the redactor and the checkpoint policy (the relay's own test
//! is in relay.rs); a broken file keeps the last good configuration and says why.

use std::time::Duration;

use dstream_tests::relay::wait_for;
use dstream_tests::{Client, Daemon};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(30);

fn rewrite(d: &Daemon, toml: &str) {
    std::fs::write(d.config_path().unwrap(), toml).unwrap();
    d.client().ok("plugins.reload", json!({}));
}

/// A checkpoint with an "always allow" option, decided with it: the approval event.
fn grant_event(c: &mut Client, key: &str) -> Value {
    let ck = c.ok(
        "checkpoint.request",
        json!({
            "session_id": "g",
            "key": key,
            "summary": "grant",
            "options": [{"id": "always", "action": "allow", "scope": "session"}],
        }),
    );
    let id = ck["id"].as_str().unwrap().to_string();
    c.ok(
        "checkpoint.resolve",
        json!({"id": id, "decision": "always"}),
    );
    c.read_all("g")
        .into_iter()
        .rfind(|e| e["type"] == "checkpoint.approved")
        .unwrap()
}

#[test]
fn checkpoint_defaults_and_the_grant_ttl_follow_the_file() {
    let d = Daemon::start_with("[checkpoints]\ndefault_timeout_ms = 60000\ngrant_ttl_ms = 1000\n");
    let mut c = d.client();
    let first = c.ok(
        "checkpoint.request",
        json!({"session_id": "s", "key": "k0", "summary": "x"}),
    );
    let span =
        |ck: &Value| ck["deadline_ms"].as_u64().unwrap() - ck["created_ms"].as_u64().unwrap();
    assert_eq!(span(&first), 60_000, "{first}");
    let g = grant_event(&mut c, "g0");
    let ttl = |e: &Value| {
        e["payload"]["grant_expires_ms"].as_u64().unwrap()
            - e["payload"]["decided_ms"].as_u64().unwrap()
    };
    assert_eq!(ttl(&g), 1000);

    rewrite(
        &d,
        "[checkpoints]\ndefault_timeout_ms = 90000\ngrant_ttl_ms = 7000\n",
    );
    let mut n = 0;
    wait_for("the new checkpoint defaults", LONG, || {
        n += 1;
        let ck = c.ok(
            "checkpoint.request",
            json!({"session_id": "s", "key": format!("k{n}"), "summary": "x"}),
        );
        (span(&ck) == 90_000).then_some(())
    });
    wait_for("the new grant TTL", LONG, || {
        n += 1;
        (ttl(&grant_event(&mut c, &format!("g{n}"))) == 7000).then_some(())
    });
}

#[test]
fn read_limits_follow_the_file() {
    let d = Daemon::start_with("[read]\ndefault_limit = 3\n");
    let mut c = d.client();
    for i in 0..10 {
        c.append("r", "t", json!({"i": i}));
    }
    let page = |c: &mut Client| {
        c.ok("read", json!({"session_id": "r", "from_lsn": 1}))["events"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(page(&mut c), 3);
    rewrite(&d, "[read]\ndefault_limit = 7\n");
    wait_for("the new read limit", LONG, || {
        (page(&mut c) == 7).then_some(())
    });
}

#[test]
fn the_redactor_and_the_policy_follow_the_file_and_a_broken_file_keeps_them() {
    let d = Daemon::start_with("[redact]\nreplacement = \"<one>\"\n");
    let mut c = d.client();
    let stored = |c: &mut Client, i: u32| -> String {
        c.append("p", "t", json!({"password": format!("hunter{i}")}));
        c.read_all("p").last().unwrap()["payload"]["password"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(stored(&mut c, 0), "<one>");
    let policy =
        "[[checkpoints.rules]]\ntool = \"Bash\"\ninput = \"rm -rf *\"\naction = \"deny\"\n";
    rewrite(&d, &format!("[redact]\nreplacement = \"<two>\"\n{policy}"));
    let mut i = 0;
    wait_for("the new replacement", LONG, || {
        i += 1;
        (stored(&mut c, i) == "<two>").then_some(())
    });
    let verdict = |c: &mut Client, call: &str| {
        let r = c.ok(
            "ingest",
            json!({"source": "claude-code", "event": dstream_tests::claude_pre_tool_use("p", call, "rm -rf build")}),
        );
        r["decision"]["action"].as_str().unwrap_or("").to_string()
    };
    assert_eq!(verdict(&mut c, "c1"), "deny", "the new rule is in force");

    // A broken file: the last good configuration stays, and plugins.list says why.
    std::fs::write(d.config_path().unwrap(), "[redact\nreplacement = ").unwrap();
    let list = c.ok("plugins.reload", json!({}));
    assert!(
        list.to_string().contains("config.toml"),
        "the error names the file: {list}"
    );
    i += 1;
    assert_eq!(stored(&mut c, i), "<two>");
    assert_eq!(verdict(&mut c, "c2"), "deny");
}
