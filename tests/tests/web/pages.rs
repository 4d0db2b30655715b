//! Every page: markup in events shown as text and run nothing, and no console errors.

use super::*;

#[test]
fn markup_in_events_is_shown_as_text_and_runs_nothing() {
    let d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    let evil = "<script>alert(1)</script>\n<img src=x onerror=\"alert(2)\">";
    append(
        &mut c,
        "evil",
        "user.input",
        json!({"text": "<img src=x onerror=alert(3)><b>bold?</b>"}),
    );
    append(
        &mut c,
        "evil",
        "execution.tool_use",
        json!({"tool": "Bash", "tool_use_id": "x1", "phase": "requested", "input": {"command": "cat <script>alert(4)</script>"}}),
    );
    append(
        &mut c,
        "evil",
        "execution.tool_result",
        json!({"tool": "Bash", "tool_use_id": "x1", "ok": true, "output": {"stdout": evil, "stderr": ""}}),
    );
    append(
        &mut c,
        "evil",
        "execution.tool_use",
        json!({"tool": "Edit", "tool_use_id": "x2", "phase": "requested", "input": {"file_path": "<img src=x onerror=alert(5)>", "old_string": "<b>a</b>", "new_string": "<script>alert(6)</script>"}}),
    );
    append(
        &mut c,
        "evil",
        "custom.thing",
        json!({"text": "<iframe src=\"javascript:alert(7)\"></iframe>"}),
    );
    let (b, origin) = logged_in(&d, Some("evil"));
    wait_text(&b, "<script>alert(1)</script>");
    for shown in [
        "<img src=x onerror=\"alert(2)\">",
        "<img src=x onerror=alert(3)><b>bold?</b>",
        "cat <script>alert(4)</script>",
        "<script>alert(6)</script>",
        "<iframe src=\"javascript:alert(7)\"></iframe>",
    ] {
        wait_text(&b, shown);
    }
    let injected = b.exec(
        "return {
            img: document.querySelectorAll('img').length,
            iframe: document.querySelectorAll('iframe').length,
            b: document.querySelectorAll('main b').length,
            handlers: document.querySelectorAll('[onerror]').length,
            scripts: [...document.scripts].map(s => s.getAttribute('src')),
        };",
        json!([]),
    );
    assert_eq!(
        injected,
        json!({"img": 0, "iframe": 0, "b": 0, "handlers": 0, "scripts": ["/assets/app.js"]}),
        "markup from an event became elements"
    );
    assert_eq!(b.alert(), None, "a dialog opened");
    b.screenshot("markup-as-text");
    b.assert_no_console_errors("a session with markup in its events");

    // The same in search hits and the sessions list.
    b.goto(&format!("{origin}/#/"));
    let q = b.wait_for("#search");
    b.type_into(&q, "alert");
    b.press(&[keys::ENTER]);
    b.wait_for(".hit-list li");
    wait_text(&b, "<script>alert(1)</script>");
    assert_eq!(b.alert(), None);
    assert_eq!(
        b.exec(
            "return document.querySelectorAll('img, iframe, [onerror]').length",
            json!([])
        ),
        json!(0)
    );
    b.screenshot("search-hits");
    b.assert_no_console_errors("search hits with markup");
}

#[test]
fn every_page_loads_without_console_errors() {
    let d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    append(
        &mut c,
        "pages",
        "lifecycle.session.created",
        json!({"cwd": "/tmp/project", "source": "startup"}),
    );
    append(
        &mut c,
        "pages",
        "user.input",
        json!({"text": "find the needle"}),
    );
    append(
        &mut c,
        "pages",
        "usage.request",
        json!({"model": "claude-sonnet-4-5", "input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.0123}),
    );
    let (b, origin) = logged_in(&d, None);
    b.wait_for("tr.item[data-session=\"pages\"]");
    wait_text(&b, "/tmp/project");
    b.screenshot("sessions");
    b.assert_no_console_errors("the sessions list");

    b.goto(&format!("{origin}/#/usage"));
    b.wait_for(".chart-row.item");
    wait_text(&b, "claude-sonnet-4-5");
    b.screenshot("usage");
    b.assert_no_console_errors("the usage page");

    b.goto(&format!("{origin}/#/pending"));
    wait_text(&b, "Nothing waits for a decision.");
    b.screenshot("pending-empty");
    b.assert_no_console_errors("the pending page");

    // A search hit opens its session at the hit's LSN.
    b.goto(&format!("{origin}/#/"));
    let q = b.wait_for("#search");
    b.type_into(&q, "needle");
    b.press(&[keys::ENTER]);
    let hit = b.wait_for(".hit-list li a");
    b.click(&hit);
    b.wait_for(".timeline .item.hit");
    b.wait_until("the hit's row has the focus", |b| {
        b.focused().contains("find the needle")
    });
    assert!(b.url().contains("lsn=2"), "{}", b.url());
    b.screenshot("session-at-hit");
    b.assert_no_console_errors("a session opened from a search hit");
}

#[test]
fn without_a_login_the_page_says_how_to_get_one() {
    let d = Daemon::start_with(CONFIG);
    let (_, origin) = open_link(&d, None);
    let b = Browser::start();
    b.goto(&format!("{origin}/"));
    let banner = b.wait_for("#banner:not([hidden])");
    b.wait_until("the banner names dstream open", |b| {
        b.text(&banner).contains("dstream open")
    });
    // Nothing else was shown or asked for after the first refusal.
    assert!(b.find("main table, main .timeline").is_none());
    let errors: Vec<String> = b
        .console()
        .into_iter()
        .filter(|m| m.starts_with("SEVERE"))
        .collect();
    assert!(
        errors.iter().all(|m| m.contains("401")),
        "only the refusal itself: {errors:?}"
    );
    b.screenshot("not-logged-in");
}

/// The sessions a mapping snapshot holds (`tests/tests/snapshots/`, what real agents' runs
/// stored), appended again to `c`: real shapes of Claude Code's and OpenCode's events.
fn load_snapshot(c: &mut Client, name: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let body = text.splitn(3, "---").nth(2).expect("an insta snapshot");
    let sessions: serde_json::Map<String, Value> = serde_json::from_str(body).unwrap();
    for (id, events) in &sessions {
        for e in events.as_array().unwrap() {
            let mut e = e.clone();
            // Their ids were normalized for the snapshot; the daemon gives new ones.
            for k in ["id", "lsn", "causation_id"] {
                e.as_object_mut().unwrap().remove(k);
            }
            c.ok("append", json!({"session_id": id, "event": e}));
        }
    }
    sessions.keys().cloned().collect()
}

#[test]
fn real_agent_runs_render_without_errors() {
    let d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    let (b, origin) = logged_in(&d, None);
    for (snapshot, session, shown) in [
        (
            "mappings__claude-code__run-basic.snap",
            "713d29a2-d15d-4094-88d2-5bac935ebd59",
            vec![
                "Run echo hello-from-dstream",
                "echo hello-from-dstream",
                "ok · 28 ms",
            ],
        ),
        (
            "mappings__claude-code__run-subagent.snap",
            "ab4044e0-38b7-4a93-815b-70a9cb05f7af",
            vec!["spawned general-purpose", "echo hello-from-subagent"],
        ),
        (
            "mappings__opencode__run-subagent.snap",
            "ses_df73bfd4bffe0arfBKn8y00GRU",
            vec!["Delegate an echo to a subagent", "The subagent is done."],
        ),
        (
            "mappings__claude-code__run-permission.snap",
            "b7de1b5b-a75f-4aef-89c9-9979e92e1e3c",
            vec!["/tmp/dstream-never-written.txt"],
        ),
    ] {
        load_snapshot(&mut c, snapshot);
        b.goto(&format!("{origin}/#/session/{session}"));
        for text in shown {
            wait_text(&b, text);
        }
        b.screenshot(&format!(
            "real-{}",
            snapshot
                .trim_start_matches("mappings__")
                .trim_end_matches(".snap")
        ));
        b.assert_no_console_errors(snapshot);
    }
}
