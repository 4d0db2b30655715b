//! The web view in a real browser: headless Chromium, driven through WebDriver
//! (`dstream_tests::browser`), against a real daemon, logged in through the link `dstream
//! open --print` makes. A session's page shows events appended after it loaded (no reload);
//! approving, rejecting, editing the input and picking an option on the page release a
//! waiting `dstream hook` as `dstream approve` would, recorded as `web:<user>`; the keyboard
//! alone opens a session and approves; markup in an event is shown as text and runs nothing;
//! and no page logs a console error. Screenshots of each page go to
//! `<target>/test-artifacts/web/`.
#![cfg(unix)]

mod decide;
mod pages;
mod session;

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
    let cp = c.pending_in(session);
    (hook, cp)
}

/// The pending card of checkpoint `id` on the pending page, once it shows.
fn card_selector(id: &str) -> String {
    format!(".card[data-checkpoint-card=\"{id}\"]")
}
