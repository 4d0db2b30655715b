//! A session's page: live without reload, replay, what is new since the last look, and the
//! reconnect across a daemon restart.

use super::*;

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

    let appended = Instant::now();
    append(
        &mut c,
        "live",
        "message.chunk",
        json!({"role": "assistant", "text": "an answer appended after the page loaded", "final": true, "message_id": "m1"}),
    );
    wait_text(&b, "an answer appended after the page loaded");
    // Said, not asserted (no timing thresholds): how long the append took to show.
    eprintln!("appended → shown on the page: {:?}", appended.elapsed());
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

#[test]
fn a_subagents_own_timeline_is_nested_under_its_spawn() {
    let d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    let child = "root.agent-a1";
    append(&mut c, "root", "user.input", json!({"text": "delegate it"}));
    append(
        &mut c,
        "root",
        "agent.spawned",
        json!({"agent_id": "a1", "agent_type": "general-purpose", "child_session_id": child}),
    );
    for (ty, payload) in [
        (
            "execution.tool_use",
            json!({"tool": "Bash", "tool_use_id": "c1", "phase": "requested", "input": {"command": "echo from-the-subagent"}}),
        ),
        (
            "execution.tool_result",
            json!({"tool": "Bash", "tool_use_id": "c1", "ok": true, "output": {"stdout": "from-the-subagent", "stderr": ""}}),
        ),
    ] {
        c.ok(
            "append",
            json!({"session_id": child, "event": {"type": ty, "actor": "claude-code",
                   "stream_id": "root", "payload": payload, "metadata": {"agent_id": "a1"}}}),
        );
    }
    let (b, origin) = logged_in(&d, Some("root"));
    wait_text(&b, "spawned general-purpose");
    let nested = b.wait_for(".item.agent .children .timeline.nested .item.tool");
    b.wait_until("the subagent's call shows with its result", |b| {
        b.text(&nested).contains("echo from-the-subagent") && b.text(&nested).contains("ok")
    });
    // The subagent's events are in its own session, linked from the spawn.
    append(
        &mut c,
        "root",
        "agent.completed",
        json!({"agent_id": "a1", "agent_type": "general-purpose", "child_session_id": child, "last_assistant_message": "the subagent is done"}),
    );
    wait_text(&b, "general-purpose finished: the subagent is done");
    b.screenshot("subagent-nested");
    b.assert_no_console_errors("a session with a subagent");
    b.goto(&format!("{origin}/#/"));
    let row = b.wait_for(&format!("tr.item[data-session=\"{child}\"]"));
    b.wait_until("the list marks the subagent", |b| {
        b.text(&row).contains("(subagent)")
    });
}

#[test]
fn a_page_opened_before_its_session_exists_shows_it_once_it_does() {
    let d = Daemon::start_with(CONFIG);
    let (b, _) = logged_in(&d, Some("soon"));
    b.wait_until("the page says there is no such session", |b| {
        b.find(".conn")
            .is_some_and(|e| b.text(&e) == "no such session")
    });
    let mut c = d.client();
    append(&mut c, "soon", "user.input", json!({"text": "here now"}));
    wait_text(&b, "here now");
    b.wait_until("the timeline follows live", |b| {
        b.find(".conn.good").is_some()
    });
    let errors: Vec<String> = b
        .console()
        .into_iter()
        .filter(|m| m.starts_with("SEVERE"))
        .collect();
    assert!(
        errors.len() == 1 && errors[0].contains("404"),
        "one 404, not a retry loop: {errors:?}"
    );
}

#[test]
fn a_long_session_is_read_across_pages_then_followed() {
    let d = Daemon::start_with(CONFIG);
    // More than one catch-up response holds (the listener answers 10,000 events at most).
    let lines: String = (0..12_000)
        .map(|i| {
            format!("{{\"type\":\"user.input\",\"payload\":{{\"text\":\"prompt number {i}\"}}}}\n")
        })
        .collect();
    d.append_lines("long", &lines);
    let (b, _) = logged_in(&d, Some("long"));
    wait_text(&b, "prompt number 11999");
    b.wait_until("the timeline follows live", |b| {
        b.find(".conn.good").is_some()
    });
    let rows = b.exec(
        "return document.querySelectorAll('.timeline > .item').length",
        json!([]),
    );
    assert_eq!(rows, json!(12_000), "each event once");
    let mut c = d.client();
    append(
        &mut c,
        "long",
        "user.input",
        json!({"text": "and one more"}),
    );
    wait_text(&b, "and one more");
    b.assert_no_console_errors("a long session");
}
