//! Deciding on the page: approve, reject, an edited input, an option, a card decided
//! elsewhere, and the keyboard alone; each releases a waiting `dstream hook` as `web:<user>`.

use super::*;

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
    assert_eq!(c.pending_in("s-edit")["id"], id.as_str(), "still pending");
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
fn a_new_pending_checkpoint_rings() {
    let d = Daemon::start_with(CONFIG);
    let mut c = d.client();
    let (b, origin) = logged_in(&d, None);
    b.wait_for("tr.item, p.empty");
    // Nothing is asked at load: the page offers a button instead.
    assert_eq!(
        b.exec("return Notification.permission", json!([])),
        json!("default")
    );
    b.wait_for("button.notify");
    // As if the person had allowed notifications; a spy counts what the page shows.
    b.cdp(
        "Browser.grantPermissions",
        json!({"origin": origin, "permissions": ["notifications"]}),
    );
    b.exec(
        "window.__notes = []; const Real = window.Notification; \
         window.Notification = class extends Real { \
           constructor(title, options) { super(title, options); window.__notes.push(options.body); } };",
        json!([]),
    );
    let (hook, cp) = held(&d, &mut c, "s-ring", "git push origin ring");
    b.wait_until("the page notified", |b| {
        b.exec("return window.__notes.length", json!([])) == json!(1)
    });
    let note = b.exec("return window.__notes[0]", json!([]));
    assert!(
        note.as_str()
            .is_some_and(|n| n.contains("git push origin ring") && n.contains("s-ring")),
        "{note}"
    );
    b.wait_until("the title counts it", |b| b.title().starts_with("(1) "));
    b.wait_until("the header counts it", |b| {
        b.find("#pending-count.hot")
            .is_some_and(|e| b.text(&e) == "1")
    });
    let out = d.cli_as_person(&["approve", cp["id"].as_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(permission(&hook_output(hook)).0, "allow");
    b.wait_until("the title no longer counts it", |b| {
        !b.title().starts_with("(")
    });
    b.assert_no_console_errors("the ring");
}
