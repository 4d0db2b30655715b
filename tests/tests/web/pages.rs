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
