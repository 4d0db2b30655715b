//! The web view in a real browser: headless Chromium, driven through WebDriver
//! (`dstream_tests::browser`), against a real daemon, logged in through the link `dstream
//! open --print` makes. A session's page shows events appended after it loaded (no reload);
//! approving, rejecting, editing the input and picking an option on the page release a
//! waiting `dstream hook` as `dstream approve` would, recorded as `web:<user>`; the keyboard
//! alone opens a session and approves; markup in an event is shown as text and runs nothing;
//! and no page logs a console error. Screenshots of each page go to
//! `<target>/test-artifacts/web/`.
#![cfg(unix)]

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use dstream_tests::browser::{Browser, keys};
use dstream_tests::{Client, Daemon, claude_pre_tool_use, spawn_hook, wait_child};
use serde_json::{Value, json};

/// The listener on a free port; `git push` waits for a person.
const CONFIG: &str = "[http]\nlisten = \"0\"\n\n[[checkpoints.rules]]\ntool = \"Bash\"\ninput = \"git push *\"\naction = \"ask\"\n";

/// The link `dstream open --print [SESSION]` prints, and the origin it is on.
fn open_link(d: &Daemon, session: Option<&str>) -> (String, String) {
    let mut args = vec!["open", "--print"];
    args.extend(session);
    let out = d.cli(&args);
    assert!(out.status.success(), "dstream open: {out:?}");
    let link = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let rest = link.strip_prefix("http://").expect("an http link");
    let origin = format!("http://{}", &rest[..rest.find('/').unwrap()]);
    (link, origin)
}

/// A browser logged in to `d`'s web view, on the page of `session` (else the list).
fn logged_in(d: &Daemon, session: Option<&str>) -> (Browser, String) {
    let b = Browser::start();
    let (link, origin) = open_link(d, session);
    b.goto(&link);
    b.wait_for("main > *");
    (b, origin)
}

fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn append(c: &mut Client, session: &str, ty: &str, payload: Value) {
    c.ok(
        "append",
        json!({"session_id": session, "event": {"type": ty, "actor": "claude-code", "payload": payload}}),
    );
}

/// Waits until the page's visible text contains `needle`.
fn wait_text(b: &Browser, needle: &str) {
    b.wait_until(&format!("the page shows {needle:?}"), |b| {
        b.page_text().contains(needle)
    });
}

/// The pending checkpoint of `session`, once it shows (its hook is on its way).
fn pending_in(c: &mut Client, session: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = c.ok(
            "checkpoint.list",
            json!({"state": "pending", "session_id": session}),
        );
        if let Some(first) = list["checkpoints"].as_array().and_then(|a| a.first()) {
            return first.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no pending checkpoint in {session}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a hook printed once it exited.
fn hook_output(mut child: Child) -> Value {
    let status = wait_child(&mut child, Duration::from_secs(30)).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("the hook did not exit after the decision")
    });
    let out = child.wait_with_output().unwrap();
    assert!(status.success(), "hook exit {status}");
    serde_json::from_slice(out.stdout.trim_ascii()).unwrap_or_else(|e| {
        panic!(
            "the hook printed no JSON ({e}): {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn permission(out: &Value) -> (&str, &str) {
    let o = &out["hookSpecificOutput"];
    (
        o["permissionDecision"].as_str().unwrap_or(""),
        o["permissionDecisionReason"].as_str().unwrap_or(""),
    )
}

/// The event that decided checkpoint `id`, from the session's log.
fn decision_of(c: &mut Client, session: &str, id: &str) -> Value {
    c.read_all(session)
        .into_iter()
        .find(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| ["checkpoint.approved", "checkpoint.rejected"].contains(&t))
                && e["payload"]["checkpoint_id"] == id
        })
        .unwrap_or_else(|| panic!("no decision of {id} in {session}"))
}

/// A held `git push` in `session`: its waiting hook and its checkpoint.
fn held(d: &Daemon, c: &mut Client, session: &str, command: &str) -> (Child, Value) {
    let hook = spawn_hook(
        &d.socket(),
        &claude_pre_tool_use(session, &format!("toolu_{session}"), command),
    );
    let cp = pending_in(c, session);
    (hook, cp)
}

/// The pending card of checkpoint `id` on the pending page, once it shows.
fn card_selector(id: &str) -> String {
    format!(".card[data-checkpoint-card=\"{id}\"]")
}

#[test]
fn a_session_page_shows_events_appended_after_it_loaded() {
    let d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    append(
        &mut c,
        "live",
        "user.input",
        json!({"text": "the first prompt"}),
    );
    let (b, _) = logged_in(&d, Some("live"));
    wait_text(&b, "the first prompt");
    b.wait_until("the timeline follows live", |b| {
        b.find(".conn.good").is_some()
    });
    // Set on this document: a reload would lose it.
    b.exec("window.__same_page = 42;", json!([]));

    append(
        &mut c,
        "live",
        "message.chunk",
        json!({"role": "assistant", "text": "an answer appended after the page loaded", "final": true, "message_id": "m1"}),
    );
    wait_text(&b, "an answer appended after the page loaded");
    append(
        &mut c,
        "live",
        "execution.tool_use",
        json!({"tool": "Bash", "tool_use_id": "t1", "phase": "requested", "input": {"command": "cargo test --quiet"}}),
    );
    append(
        &mut c,
        "live",
        "execution.tool_result",
        json!({"tool": "Bash", "tool_use_id": "t1", "ok": false, "error": "Exit code 101\ntest failed", "duration_ms": 1500}),
    );
    wait_text(&b, "exit 101");
    assert_eq!(
        b.exec("return window.__same_page;", json!([])),
        json!(42),
        "the page was reloaded"
    );
    // The call and its result are one row.
    let rows = b.find_all(".timeline .item.tool");
    assert_eq!(rows.len(), 1);
    let row = b.text(&rows[0]);
    assert!(
        row.contains("cargo test --quiet") && row.contains("test failed"),
        "{row}"
    );
    b.screenshot("session-live");
    b.assert_no_console_errors("a session's page");
}

#[test]
fn approving_on_the_page_releases_the_waiting_hook_as_web_user() {
    let d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    let (hook, cp) = held(&d, &mut c, "s-approve", "git push origin main");
    let id = cp["id"].as_str().unwrap();

    let (b, origin) = logged_in(&d, None);
    b.goto(&format!("{origin}/#/pending"));
    let card = card_selector(id);
    b.wait_for(&card);
    wait_text(&b, "git push origin main");
    let note = b.wait_for(&format!("{card} input.note"));
    b.type_into(&note, "looks right");
    b.screenshot("pending");
    b.click(&b.wait_for(&format!("{card} button[data-act=\"approve\"]")));

    let printed = hook_output(hook);
    let (decision, reason) = permission(&printed);
    assert_eq!(decision, "allow", "{printed}");
    assert!(reason.contains("looks right"), "{reason}");
    let by = format!("web:{}", whoami());
    let event = decision_of(&mut c, "s-approve", id);
    assert_eq!(event["type"], "checkpoint.approved");
    assert_eq!(event["payload"]["decided_by"], by.as_str());
    assert_eq!(event["payload"]["note"], "looks right");
    wait_text(&b, &format!("by {by}"));
    b.screenshot("pending-approved");
    b.assert_no_console_errors("the pending page");

    // The session's page shows the call, the checkpoint and who decided it.
    b.goto(&format!("{origin}/#/session/s-approve"));
    wait_text(&b, &format!("approved by {by}"));
    wait_text(&b, "git push origin main");
    b.screenshot("session-decided");
    b.assert_no_console_errors("a decided session's page");
}

#[test]
fn rejecting_editing_the_input_and_picking_an_option_on_the_page() {
    let d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    let (b, origin) = logged_in(&d, None);
    let by = format!("web:{}", whoami());

    // Reject, with a note the agent reads.
    let (hook, cp) = held(&d, &mut c, "s-reject", "git push --force");
    let id = cp["id"].as_str().unwrap().to_string();
    b.goto(&format!("{origin}/#/pending"));
    let card = card_selector(&id);
    b.type_into(&b.wait_for(&format!("{card} input.note")), "not on main");
    b.click(&b.wait_for(&format!("{card} button[data-act=\"reject\"]")));
    let printed = hook_output(hook);
    let (decision, reason) = permission(&printed);
    assert_eq!(decision, "deny");
    assert!(reason.contains("not on main"), "{reason}");
    let event = decision_of(&mut c, "s-reject", &id);
    assert_eq!(event["type"], "checkpoint.rejected");
    assert_eq!(event["payload"]["decided_by"], by.as_str());

    // An edited input: what is not a JSON object is refused on the page and nothing is
    // decided; a valid one is what the agent runs.
    let (hook, cp) = held(&d, &mut c, "s-edit", "git push origin main");
    let id = cp["id"].as_str().unwrap().to_string();
    let card = card_selector(&id);
    b.click(&b.wait_for(&format!("{card} details.edit summary")));
    let area = b.wait_for(&format!("{card} textarea.edit-input"));
    b.clear(&area);
    b.type_into(&area, "{\"command\": ");
    b.click(&b.wait_for(&format!("{card} button[data-act=\"approve-edited\"]")));
    wait_text(&b, "not valid JSON");
    assert_eq!(
        pending_in(&mut c, "s-edit")["id"],
        id.as_str(),
        "still pending"
    );
    b.screenshot("pending-invalid-edit");
    b.clear(&area);
    b.type_into(
        &area,
        "{\"command\": \"git push --dry-run origin main\", \"description\": \"edited\"}",
    );
    b.click(&b.wait_for(&format!("{card} button[data-act=\"approve-edited\"]")));
    let printed = hook_output(hook);
    assert_eq!(permission(&printed).0, "allow");
    assert_eq!(
        printed["hookSpecificOutput"]["updatedInput"]["command"],
        "git push --dry-run origin main"
    );
    let event = decision_of(&mut c, "s-edit", &id);
    assert_eq!(
        event["payload"]["input"]["command"],
        "git push --dry-run origin main"
    );

    // One of the checkpoint's own options.
    let (hook, cp) = held(&d, &mut c, "s-option", "git push origin feature");
    let id = cp["id"].as_str().unwrap().to_string();
    let option = cp["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] != "approve" && o["id"] != "reject")
        .expect("an option beyond approve and reject")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let card = card_selector(&id);
    b.click(&b.wait_for(&format!("{card} button[data-act=\"{option}\"]")));
    assert_eq!(permission(&hook_output(hook)).0, "allow");
    let event = decision_of(&mut c, "s-option", &id);
    assert_eq!(event["payload"]["decision"], option.as_str());
    assert_eq!(event["payload"]["decided_by"], by.as_str());

    // Decided elsewhere first: the card says so and offers nothing more.
    let (hook, cp) = held(&d, &mut c, "s-late", "git push origin late");
    let id = cp["id"].as_str().unwrap().to_string();
    let card = card_selector(&id);
    b.wait_for(&format!("{card} button[data-act=\"approve\"]"));
    let out = d.cli_as_person(&["reject", &id, "--note", "the CLI was first"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(permission(&hook_output(hook)).0, "deny");
    b.wait_until("the card says it was decided elsewhere", |b| {
        b.find(&format!("{card} .decide-status"))
            .is_some_and(|s| b.text(&s).contains("decided elsewhere"))
    });
    assert!(
        b.find(&format!("{card} button[data-act=\"approve\"]:enabled"))
            .is_none(),
        "a decided checkpoint still offers approve"
    );
    b.screenshot("pending-decided-elsewhere");
    b.assert_no_console_errors("the pending page after decisions");
}

#[test]
fn the_keyboard_alone_opens_a_session_and_approves() {
    let d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    let (hook, cp) = held(&d, &mut c, "s-keys", "git push origin keys");
    let id = cp["id"].as_str().unwrap().to_string();
    let (b, _) = logged_in(&d, None);
    b.wait_for("tr.item[data-session=\"s-keys\"]");

    // j to the first row (the only session), Enter to open it.
    b.press(&["j"]);
    b.wait_until("the session's row has the focus", |b| {
        b.focused().contains("s-keys")
    });
    b.press(&[keys::ENTER]);
    b.wait_for(".decide.pending");
    wait_text(&b, "git push origin keys");
    // n to the pending checkpoint, a to approve it.
    b.press(&["n"]);
    b.wait_until("the pending checkpoint has the focus", |b| {
        b.exec(
            "const a = document.activeElement; return !!(a && a.querySelector('.decide.pending'));",
            json!([]),
        ) == json!(true)
    });
    b.screenshot("keyboard-focused");
    b.press(&["a"]);
    assert_eq!(permission(&hook_output(hook)).0, "allow");
    let event = decision_of(&mut c, "s-keys", &id);
    assert_eq!(event["type"], "checkpoint.approved");
    assert_eq!(
        event["payload"]["decided_by"],
        format!("web:{}", whoami()).as_str()
    );
    wait_text(&b, "approved by web:");

    // Replay with keys: back one tool call hides what came after it.
    b.press(&[keys::SHIFT, keys::LEFT]);
    b.wait_until("the replay left live", |b| {
        b.find(".replay.replaying").is_some()
    });
    b.press(&["?"]);
    b.wait_until("the help shows", |b| {
        b.find("#help:not([hidden])").is_some()
    });
    b.screenshot("keyboard-help");
    b.press(&[keys::ESCAPE]);
    b.assert_no_console_errors("the keyboard's pages");
}

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

/// The text of the replay's state line (cost, tool calls, files), as shown.
fn replay_state(b: &Browser) -> String {
    b.text(&b.wait_for(".replay-state"))
}

#[test]
fn replay_steps_through_events_and_tool_calls_with_the_state_at_each_point() {
    let d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    let s = "replay";
    append(&mut c, s, "user.input", json!({"text": "make it work"}));
    append(
        &mut c,
        s,
        "execution.tool_use",
        json!({"tool": "Edit", "tool_use_id": "e1", "phase": "requested",
               "input": {"file_path": "/p/src/a.rs", "old_string": "old line", "new_string": "new line"}}),
    );
    append(
        &mut c,
        s,
        "usage.request",
        json!({"model": "m", "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.01}),
    );
    append(
        &mut c,
        s,
        "execution.tool_use",
        json!({"tool": "Write", "tool_use_id": "w1", "phase": "requested",
               "input": {"file_path": "/p/b.md", "content": "hello"}}),
    );
    append(
        &mut c,
        s,
        "usage.request",
        json!({"model": "m", "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.02}),
    );
    append(
        &mut c,
        s,
        "execution.tool_use",
        json!({"tool": "Bash", "tool_use_id": "b1", "phase": "requested", "input": {"command": "make check"}}),
    );
    let (b, _) = logged_in(&d, Some(s));
    wait_text(&b, "make check");
    let state = replay_state(&b);
    assert!(
        state.contains("$0.0300") && state.contains("tool calls so far 3"),
        "{state}"
    );
    assert!(
        state.contains("/p/src/a.rs") && state.contains("/p/b.md"),
        "{state}"
    );
    // The edit is shown as a diff.
    wait_text(&b, "- old line");
    wait_text(&b, "+ new line");

    // [ back to the tool call before the last (the Write): what came after it is hidden,
    // the state is the state there.
    b.press(&["["]);
    b.wait_until("the replay is at LSN 4", |b| {
        b.text(&b.wait_for(".replay .where")).contains("at 4 of 6")
    });
    let state = replay_state(&b);
    assert!(
        state.contains("$0.0100") && state.contains("tool calls so far 2"),
        "{state}"
    );
    assert!(!b.page_text().contains("make check"), "a later call shows");
    b.screenshot("replay-at-write");

    // ← one event: the first usage; Home: the start, nothing touched yet.
    b.press(&[keys::LEFT]);
    b.wait_until("the replay is at LSN 3", |b| {
        b.text(&b.wait_for(".replay .where")).contains("at 3 of 6")
    });
    assert!(replay_state(&b).contains("tool calls so far 1"));
    b.press(&[keys::HOME]);
    b.wait_until("the replay is at the start", |b| {
        b.text(&b.wait_for(".replay .where")).contains("at 1 of 6")
    });
    let state = replay_state(&b);
    assert!(
        state.contains("tool calls so far 0") && state.contains("none yet"),
        "{state}"
    );
    // The slider moves the point too.
    b.exec(
        "const s = document.querySelector('.replay .slider'); s.value = '5'; \
         s.dispatchEvent(new Event('input', {bubbles: true}));",
        json!([]),
    );
    b.wait_until("the replay is at LSN 5", |b| {
        b.text(&b.wait_for(".replay .where")).contains("at 5 of 6")
    });
    assert!(replay_state(&b).contains("$0.0300"));

    // A new event while replaying stays hidden until End goes back to live.
    append(
        &mut c,
        s,
        "message.chunk",
        json!({"role": "assistant", "text": "all done now", "final": true, "message_id": "m9"}),
    );
    b.wait_until("the slider reaches the new event", |b| {
        b.text(&b.wait_for(".replay .where")).contains("of 7")
    });
    assert!(!b.page_text().contains("all done now"));
    b.press(&[keys::END]);
    wait_text(&b, "all done now");
    b.assert_no_console_errors("the replay");
}

#[test]
fn what_is_new_since_the_last_look_is_marked() {
    let d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    append(
        &mut c,
        "seen",
        "user.input",
        json!({"text": "looked at once"}),
    );
    let (b, origin) = logged_in(&d, Some("seen"));
    wait_text(&b, "looked at once");
    assert!(b.find(".item.new").is_none(), "a first visit marks nothing");
    b.goto(&format!("{origin}/#/"));
    b.wait_for("tr.item[data-session=\"seen\"]");
    append(&mut c, "seen", "user.input", json!({"text": "came later"}));
    append(
        &mut c,
        "seen",
        "user.input",
        json!({"text": "and this too"}),
    );
    b.goto(&format!("{origin}/#/session/seen"));
    wait_text(&b, "and this too");
    wait_text(&b, "2 new since you last looked");
    let marked: Vec<String> = b
        .find_all(".timeline .item.new")
        .iter()
        .map(|e| b.text(e))
        .collect();
    assert_eq!(marked.len(), 2, "{marked:?}");
    assert!(marked[0].contains("came later"), "{marked:?}");
    b.screenshot("new-since-last-look");
    b.assert_no_console_errors("a session with new events");
}

#[test]
fn the_page_reconnects_from_its_offset_when_the_daemon_restarts() {
    // A fixed port, so the page's origin is the same after the restart.
    let port = dstream_tests::browser::free_port();
    let mut d = Daemon::start_with(&format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"));
    let mut c = d.client();
    append(
        &mut c,
        "again",
        "user.input",
        json!({"text": "before the restart"}),
    );
    let (b, _) = logged_in(&d, Some("again"));
    wait_text(&b, "before the restart");
    b.wait_until("the timeline follows live", |b| {
        b.find(".conn.good").is_some()
    });
    b.exec("window.__same_page = 7;", json!([]));
    drop(c);
    d.stop();
    b.wait_until("the page sees the daemon gone", |b| {
        b.find(".conn.good").is_none()
    });
    d.restart();
    let mut c = d.client();
    append(
        &mut c,
        "again",
        "user.input",
        json!({"text": "after the restart"}),
    );
    wait_text(&b, "after the restart");
    assert_eq!(b.exec("return window.__same_page;", json!([])), json!(7));
    // Each event once: nothing read twice across the reconnect.
    let rows: Vec<String> = b
        .find_all(".timeline .item")
        .iter()
        .map(|e| b.text(e))
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    b.screenshot("reconnected");
}
