//! Full-text search (`dstream search`, `dstream reindex`): a word found once among 200,000
//! events in the right session and LSN, filters, a burst let pass and found after it, catching
//! up after `kill -9`, a damaged index
//! rebuilt at start, bad query syntax refused clearly, and redacted text never found.

use std::process::Output;
use std::time::Duration;

use dstream_tests::relay::wait_for;
use dstream_tests::{Daemon, codes};
use serde_json::{Value, json};

/// How long the index may take to catch up, bounded so a stuck index fails the test.
const CATCH_UP: Duration = Duration::from_secs(120);

/// `n` events for `session` through `dstream append`, cycling through prompt, command and
/// output shapes; the event at index `special` (if any) carries `word`.
fn append_many(d: &Daemon, session: &str, n: usize, special: Option<(usize, &str)>) {
    let mut buf = String::with_capacity(n * 160);
    for i in 0..n {
        let word = match special {
            Some((at, w)) if at == i => w,
            _ => "ordinary",
        };
        let event = match i % 3 {
            0 => {
                json!({"type": "user.input", "payload": {"text": format!("please look at item {i} {word}")}})
            }
            1 => {
                json!({"type": "execution.tool_use", "payload": {"tool": "Bash", "tool_use_id": format!("t{i}"), "input": {"command": format!("grep -rn {word} src/file{i}.rs")}}})
            }
            _ => {
                json!({"type": "execution.tool_result", "payload": {"output": {"stdout": format!("src/file{i}.rs:1: {word} line")}}})
            }
        };
        buf.push_str(&event.to_string());
        buf.push('\n');
    }
    d.append_lines(session, &buf);
}

fn stats(d: &Daemon) -> Value {
    let out = d.cli(&["stats", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits until the index holds every committed event (none behind) and at least `events`.
fn wait_indexed(d: &Daemon, events: u64) -> Value {
    wait_for("the index to catch up", CATCH_UP, || {
        let s = stats(d)["search"].clone();
        (s["behind_by"] == 0 && s["indexed_events"].as_u64() >= Some(events)).then_some(s)
    })
}

/// `dstream search ARGS --json`: the hits.
fn search(d: &Daemon, args: &[&str]) -> Vec<Value> {
    let out = search_out(d, args, true);
    assert!(
        out.status.success(),
        "search {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn search_out(d: &Daemon, args: &[&str], json: bool) -> Output {
    let mut all = vec!["search"];
    all.extend_from_slice(args);
    if json {
        all.push("--json");
    }
    d.cli(&all)
}

fn hit_at(hits: &[Value]) -> Vec<(String, u64)> {
    hits.iter()
        .map(|h| {
            (
                h["session_id"].as_str().unwrap().to_string(),
                h["lsn"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_word_that_appears_once_in_200000_events_is_found_in_its_session_and_lsn() {
    let d = Daemon::start();
    // Four sessions of 50,000; the word is in the third session's event 31,339 (LSN 31,340),
    // a tool call (index % 3 == 1).
    for (i, s) in ["alpha", "bravo", "charlie", "delta"].iter().enumerate() {
        let special = (i == 2).then_some((31_339, "quetzalcoatl"));
        append_many(&d, s, 50_000, special);
    }
    wait_indexed(&d, 200_000);
    let hits = search(&d, &["quetzalcoatl"]);
    assert_eq!(hit_at(&hits), [("charlie".to_string(), 31_340)]);
    let hit = &hits[0];
    assert_eq!(hit["type"], "execution.tool_use");
    let snippet = hit["snippet"].as_str().unwrap();
    assert!(
        snippet.contains("grep -rn quetzalcoatl src/file31339.rs"),
        "{hit}"
    );
    let [a, b] = [0, 1].map(|k| hit["highlights"][0][k].as_u64().unwrap() as usize);
    assert_eq!(&snippet[a..b], "quetzalcoatl");

    // Filters: the session, the type prefix, the time.
    assert_eq!(
        search(&d, &["quetzalcoatl", "--session", "charlie"]).len(),
        1
    );
    assert!(search(&d, &["quetzalcoatl", "--session", "alpha"]).is_empty());
    assert_eq!(
        search(&d, &["quetzalcoatl", "--type", "execution."]).len(),
        1
    );
    assert!(search(&d, &["quetzalcoatl", "--type", "user.input"]).is_empty());
    assert!(search(&d, &["quetzalcoatl", "--since", "4102444800000"]).is_empty());
    // A word with punctuation is a phrase; a limit bounds the hits.
    assert_eq!(
        hit_at(&search(&d, &["src/file31339.rs", "--session", "charlie"])),
        [("charlie".to_string(), 31_340)]
    );
    assert_eq!(search(&d, &["ordinary", "--limit", "7"]).len(), 7);

    // For people: one line a hit, the match marked, and how to open it.
    let out = search_out(&d, &["quetzalcoatl"], false);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("charlie") && text.contains("31340"), "{text}");
    assert!(text.contains("[quetzalcoatl]"), "{text}");
    assert!(text.contains("dstream tail charlie --from 31340"), "{text}");
}

#[test]
fn a_burst_of_appends_is_let_pass_and_then_every_event_of_it_is_found() {
    // A threshold any pipelined burst is over, however slow the machine.
    let d = Daemon::start_with("[search]\nbusy_appends_per_sec = 50\n");
    append_many(&d, "burst", 30_000, Some((29_998, "xylophone")));
    append_many(&d, "burst-two", 3_000, Some((0, "marimba")));
    let s = wait_indexed(&d, 33_000);
    assert!(s["bursts_waited_out"].as_u64() >= Some(1), "{s}");
    assert_eq!(s["waiting_out_burst"], false, "{s}");
    assert_eq!(
        hit_at(&search(&d, &["xylophone"])),
        [("burst".to_string(), 29_999)]
    );
    assert_eq!(
        hit_at(&search(&d, &["marimba"])),
        [("burst-two".to_string(), 1)]
    );
    // Events after the burst are indexed as they come again.
    d.append_lines(
        "quiet",
        "{\"type\":\"user.input\",\"payload\":{\"text\":\"glockenspiel\"}}\n",
    );
    wait_for("the quiet event to be found", CATCH_UP, || {
        (hit_at(&search(&d, &["glockenspiel"])) == [("quiet".to_string(), 1)]).then_some(())
    });
}

#[test]
fn after_kill_9_the_index_catches_up_with_events_appended_just_before() {
    let mut d = Daemon::start();
    append_many(&d, "before", 2_000, None);
    wait_indexed(&d, 2_000);
    // Acknowledged (so in the log), then the daemon dies before the index may have them.
    append_many(&d, "late", 500, Some((499, "pterodactyl")));
    d.kill9();
    d.restart();
    let hits = wait_for("the late events to be searchable", CATCH_UP, || {
        let hits = search(&d, &["pterodactyl"]);
        (!hits.is_empty()).then_some(hits)
    });
    assert_eq!(hit_at(&hits), [("late".to_string(), 500)]);
    // Caught up exactly: nothing lost, nothing twice.
    let s = wait_indexed(&d, 2_500);
    assert_eq!(s["indexed_events"], 2_500, "{s}");
    // Caught up where it was, not rebuilt: a daemon crash loses none of the index's writes.
    assert!(s["last_error"].is_null(), "{s}");
    assert_eq!(
        search(&d, &["item", "--session", "late", "--limit", "1000"]).len(),
        167
    );
}

#[test]
fn a_damaged_index_is_rebuilt_from_the_logs_at_start_and_by_reindex() {
    let mut d = Daemon::start();
    append_many(&d, "s", 300, Some((150, "archaeopteryx")));
    wait_indexed(&d, 300);
    assert!(d.stop().success());
    let dir = d.data_dir().join("search");
    std::fs::write(dir.join("index.sqlite"), vec![0x5a; 64 * 1024]).unwrap();
    for f in ["index.sqlite-wal", "index.sqlite-shm"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    d.restart();
    let s = wait_indexed(&d, 300);
    assert_eq!(s["indexed_events"], 300, "{s}");
    assert!(
        s["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("rebuilt"),
        "{s}"
    );
    assert_eq!(
        hit_at(&search(&d, &["archaeopteryx"])),
        [("s".to_string(), 151)]
    );

    let out = d.cli(&["reindex", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (r["events"].as_u64(), r["sessions"].as_u64()),
        (Some(300), Some(1)),
        "{r}"
    );
    assert_eq!(
        hit_at(&search(&d, &["archaeopteryx"])),
        [("s".to_string(), 151)]
    );
}

/// An index closed cleanly is opened on its header alone (checking every page would cost each
/// start CPU in proportion to the history): damage inside it is found by the first query that
/// reads it, and the file is then rebuilt from the logs.
#[test]
fn damage_a_query_finds_in_a_cleanly_closed_index_has_it_rebuilt() {
    let mut d = Daemon::start();
    append_many(&d, "s", 3_000, Some((1_500, "archaeopteryx")));
    wait_indexed(&d, 3_000);
    assert!(d.stop().success());
    let path = d.data_dir().join("search").join("index.sqlite");
    let mut bytes = std::fs::read(&path).unwrap();
    let half = bytes.len() / 2;
    bytes[half..].fill(0xA5);
    std::fs::write(&path, bytes).unwrap();
    d.restart();
    // Found by the index's thread (its first count of the documents) or by this query,
    // whichever reads the damaged pages first; a query that does gets a clear error.
    let first = search_out(&d, &["ordinary", "--limit", "1000"], true);
    if !first.status.success() {
        let err = String::from_utf8_lossy(&first.stderr);
        assert!(err.contains("malformed"), "{err}");
    }
    let hits = wait_for("the damaged index to be rebuilt", CATCH_UP, || {
        let out = search_out(&d, &["archaeopteryx"], true);
        let hits: Vec<Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (out.status.success() && !hits.is_empty()).then_some(hits)
    });
    assert_eq!(hit_at(&hits), [("s".to_string(), 1_501)]);
    let s = wait_indexed(&d, 3_000);
    assert_eq!(s["indexed_events"], 3_000, "{s}");
    assert!(
        s["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("malformed"),
        "{s}"
    );
    assert_eq!(search(&d, &["ordinary", "--limit", "1000"]).len(), 1_000);
}

#[test]
fn a_query_that_is_not_valid_syntax_is_a_clear_error_and_the_daemon_serves_on() {
    let d = Daemon::start();
    append_many(&d, "s", 30, Some((4, "velociraptor")));
    wait_indexed(&d, 30);
    for bad in [
        "\"unterminated",
        "velociraptor AND",
        "(velociraptor",
        "velociraptor)",
        "   ",
    ] {
        let out = search_out(&d, &[bad], false);
        assert!(!out.status.success(), "{bad:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("invalid search query"), "{bad:?}: {err}");
    }
    let mut c = d.client();
    let e = c
        .call("search", json!({"query": "NOT"}))
        .expect_err("a lone operator is refused");
    assert_eq!(e.code, codes::INVALID_PARAMS, "{e}");
    let e = c
        .call("search", json!({"query": "x", "limit": 0}))
        .expect_err("limit 0");
    assert_eq!(e.code, codes::INVALID_PARAMS, "{e}");
    assert_eq!(
        hit_at(&search(&d, &["velociraptor"])),
        [("s".to_string(), 5)]
    );
}

#[test]
fn redacted_text_is_never_in_the_index() {
    let d = Daemon::start();
    let mut c = d.client();
    c.append_event(
        "secret",
        json!({"type": "execution.tool_use", "payload": {"tool": "Bash", "input": {"command": "export AWS_KEY=AKIAFAKE0123456789AB && deploy"}}}),
    );
    wait_indexed(&d, 1);
    assert!(search(&d, &["AKIAFAKE0123456789AB"]).is_empty());
    assert!(search(&d, &["AKIAFAKE*"]).is_empty());
    // The event itself is found, by what the log holds.
    let hits = search(&d, &["deploy"]);
    assert_eq!(hit_at(&hits), [("secret".to_string(), 1)]);
    let snippet = hits[0]["snippet"].as_str().unwrap();
    assert!(
        snippet.contains("[REDACTED]") && !snippet.contains("AKIA"),
        "{snippet}"
    );
}

#[test]
fn search_turns_on_and_off_with_the_config_file() {
    let d = Daemon::start_with("[search]\nenabled = false\n");
    append_many(&d, "s", 20, Some((3, "diplodocus")));
    let out = search_out(&d, &["diplodocus"], false);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("search is off"), "{err}");
    assert!(!d.data_dir().join("search").exists());
    assert_eq!(stats(&d)["search"]["enabled"], false);
    // Read again, as the file watcher does: on, it catches up with what came while it was off.
    let reload = |toml: &str| {
        std::fs::write(d.config_path().unwrap(), toml).unwrap();
        d.client().ok("plugins.reload", json!({}));
    };
    reload("[search]\nenabled = true\n");
    wait_indexed(&d, 20);
    assert_eq!(hit_at(&search(&d, &["diplodocus"])), [("s".to_string(), 4)]);
    reload("[search]\nenabled = false\n");
    wait_for("search to be off", CATCH_UP, || {
        (stats(&d)["search"]["enabled"] == false).then_some(())
    });
    assert!(!search_out(&d, &["diplodocus"], false).status.success());
}

#[test]
fn a_session_retention_deleted_leaves_the_index() {
    let mut d = Daemon::start_with("[retention]\ndelete_after = \"1s\"\n");
    append_many(&d, "doomed", 40, Some((7, "brontosaurus")));
    wait_indexed(&d, 40);
    // Deleted once its last event is a second old (polled: retention goes by event age).
    let mut c = d.client();
    wait_for("gc to delete the session", CATCH_UP, || {
        let r = c.ok("gc", json!({}));
        (r["deleted"].as_array().is_some_and(|a| !a.is_empty())).then_some(())
    });
    // Hits in a deleted session are never answered; at the next start its rows go too.
    assert!(search(&d, &["brontosaurus"]).is_empty());
    drop(c);
    assert!(d.stop().success());
    d.restart();
    append_many(&d, "kept", 10, None);
    let s = wait_indexed(&d, 10);
    assert_eq!(s["indexed_events"], 10, "{s}");
}

/// A tool result whose request the daemon no longer remembers (it restarted) and that lies far
/// back in the log (further than the pipeline would ever read) is still joined to it: the index
/// keeps every request by `tool_use_id`.
#[test]
fn a_result_finds_its_request_far_back_after_a_restart() {
    let mut d = Daemon::start();
    let mut pre = dstream_tests::claude_pre_tool_use("join-far", "toolu_far", "make");
    pre["hook_event_name"] = json!("PreToolUse");
    let ingested = d.client().ok(
        "ingest",
        json!({"source": "claude-code", "session_id": "join-far", "event": pre}),
    );
    let request_id = ingested["events"][0]["id"].as_str().unwrap().to_string();
    let filler: String = (0..3000)
        .map(|i| format!("{{\"type\":\"test.step\",\"payload\":{{\"i\":{i}}}}}\n"))
        .collect();
    d.append_lines("join-far", &filler);
    d.stop();
    d.restart();
    wait_indexed(&d, 1);
    let mut post = dstream_tests::claude_pre_tool_use("join-far", "toolu_far", "make");
    post["hook_event_name"] = json!("PostToolUse");
    post["tool_response"] = json!({"stdout": "built", "stderr": "", "interrupted": false});
    d.client().ok(
        "ingest",
        json!({"source": "claude-code", "session_id": "join-far", "event": post}),
    );
    let events = d.client().read_all("join-far");
    let result = events.last().unwrap();
    assert_eq!(result["type"], "execution.tool_result", "{result}");
    assert_eq!(result["causation_id"], request_id.as_str(), "{result}");
}
