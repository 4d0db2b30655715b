//! The OpenCode mapping's bounds held to the Lua file's: sequences that cross each bound (of
//! sessions, lineage entries, calls, parts, messages, permissions, stored text and buffered
//! deltas), compared call by call as in [`super::opencode_twin`].

use serde_json::json;

use super::opencode_twin::{Seq, Tally};
use crate::plugins::opencode_map::{
    MAX_CALLS, MAX_MSGS, MAX_PARTS, MAX_PERMS, MAX_ROOTS, MAX_SESSIONS, MAX_TEXT_BYTES,
};

/// The Lua file's MAX_BUF (deltas buffered before they are joined), which the Rust mapping
/// has no counterpart of. Every other bound is the Rust mapping's own constant, so that the
/// sequences below cross it whatever it becomes (the Lua file's must match, or they differ).
const MAX_BUF: usize = 4096;

/// Past each bound: what was forgotten and what was kept shows in later events (the turn as
/// correlation_id, the root as stream_id, a call's ids as causation_id).
#[test]
fn forgets_what_the_lua_file_forgets() {
    let mut tally = Tally::default();
    let ses = |i: usize| format!("ses_{i:05}");

    // Sessions: two generations, a deleted session still counted in its generation.
    let mut q = Seq::default();
    let n = 2 * MAX_SESSIONS + 100;
    for i in 0..n {
        q.user(&ses(i), &format!("msg_{i}"));
    }
    let probe = |q: &mut Seq, i: usize| {
        q.before(&ses(i), &format!("call_{i}"), "bash", json!({}));
    };
    for i in (0..n)
        .step_by(37)
        .chain([0, 1, MAX_SESSIONS - 1, MAX_SESSIONS, n - 1])
    {
        probe(&mut q, i);
    }
    for i in n - 50..n {
        q.bus("session.deleted", json!({"sessionID": ses(i)}));
    }
    for i in n..n + MAX_SESSIONS {
        q.user(&ses(i), &format!("msg_{i}"));
        if i % 101 == 0 {
            probe(&mut q, i - MAX_SESSIONS);
        }
    }
    for i in (0..n + MAX_SESSIONS).step_by(29) {
        probe(&mut q, i);
    }
    tally.compare("sessions", &json!(null), &q.events);

    // Lineage: two generations of roots; a child of a forgotten child is a root of its own.
    let mut q = Seq::default();
    q.user("ses_root", "msg_root");
    let n = 2 * MAX_ROOTS + 100;
    for i in 0..n {
        let parent = match i % 3 {
            0 => "ses_root".to_string(),
            _ => ses(i - 1),
        };
        q.bus(
            "session.created",
            json!({"info": {"id": ses(i), "parentID": parent}}),
        );
    }
    for i in (0..n).step_by(211).chain([MAX_ROOTS - 1, MAX_ROOTS, n - 1]) {
        q.bus(
            "session.created",
            json!({"info": {"id": format!("ses_g{i}"), "parentID": ses(i)}}),
        );
        q.bus("file.edited", json!({"sessionID": ses(i), "file": "a"}));
    }
    tally.compare("roots", &json!(null), &q.events);

    // Calls: past MAX_CALLS a session forgets every call it had.
    let mut q = Seq::default();
    let s = "ses_calls";
    q.user(s, "msg_u");
    let call = |i: usize| format!("call_{i}");
    for i in 0..MAX_CALLS + 10 {
        match i % 3 {
            0 => q.tool(s, &call(i), "task", json!({"status": "pending"})),
            1 => q.before(s, &call(i), "bash", json!({})),
            _ => q.tool(s, &call(i), "bash", json!({"status": "running"})),
        };
    }
    q.bus(
        "session.created",
        json!({"info": {"id": "ses_sub", "parentID": s}}),
    );
    for i in [0, 1, 2, MAX_CALLS - 1, MAX_CALLS, MAX_CALLS + 9] {
        q.tool(s, &call(i), "bash", json!({"status": "pending"}));
        q.tool(
            s,
            &call(i),
            "bash",
            json!({"status": "completed", "output": "x"}),
        );
        q.bus(
            "permission.asked",
            json!({"id": format!("per_{i}"), "sessionID": s, "tool": {"callID": call(i)}}),
        );
    }
    for i in 0..MAX_CALLS + 10 {
        q.after(
            s,
            &call(i),
            "task",
            json!({"output": "ok", "metadata": {"sessionId": "ses_sub"}}),
        );
    }
    tally.compare("calls", &json!(null), &q.events);

    // Deltas: more than MAX_BUF of one part, the text replaced halfway.
    let mut q = Seq::default();
    let s = "ses_buf";
    q.text(s, "msg_a", "prt_b", "", false);
    for i in 0..2 * MAX_BUF + 10 {
        if i == MAX_BUF + 3 {
            q.text(s, "msg_a", "prt_b", "replaced", false);
        }
        q.delta(s, "msg_a", "prt_b", &format!("{} ", i % 10));
    }
    q.bus("session.compacted", json!({"sessionID": s}));
    for _ in 0..MAX_BUF + 1 {
        q.delta(s, "msg_a", "prt_b", "é");
    }
    q.text(s, "msg_a", "prt_b", "x", true);
    tally.compare("deltas", &json!(null), &q.events);

    // Parts: past MAX_PARTS a session forgets every part's stored text and kind (a part
    // stored again then comes whole, not as what was added at an offset).
    let mut q = Seq::default();
    let s = "ses_parts";
    let part = |i: usize| format!("prt_{i:05}");
    q.user(s, "msg_u");
    q.assistant(s, "msg_a", "msg_u", json!({}));
    for i in 0..MAX_PARTS + 10 {
        q.text(s, "msg_a", &part(i), "a", true);
    }
    for i in [0, 1, 9, 10, MAX_PARTS - 1, MAX_PARTS, MAX_PARTS + 9] {
        q.text(s, "msg_a", &part(i), "ab", true);
        q.delta(s, "msg_b", &part(i), "c");
        q.bus("session.compacted", json!({"sessionID": s}));
    }
    tally.compare("parts", &json!(null), &q.events);

    // Stored text: past MAX_TEXT_BYTES a session forgets every other part's text.
    let mut q = Seq::default();
    let s = "ses_bytes";
    let big = "x".repeat(MAX_TEXT_BYTES / 4 + 1);
    q.user(s, "msg_u");
    for i in 0..6 {
        q.text(s, "msg_a", &part(i), &big, true);
    }
    for i in [0, 3, 4, 5] {
        q.text(s, "msg_a", &part(i), &format!("{big}y"), true);
    }
    tally.compare("text bytes", &json!(null), &q.events);

    // Messages: past MAX_MSGS a session forgets which turn each message answers.
    let mut q = Seq::default();
    let s = "ses_msgs";
    let msg = |i: usize| format!("msg_{i:05}");
    for i in 0..MAX_MSGS + 10 {
        if i % 2 == 0 {
            q.user(s, &msg(i));
        } else {
            q.assistant(s, &msg(i), &msg(i - 1), json!({}));
        }
    }
    q.user(s, "msg_last");
    for i in [0, 1, 3, MAX_MSGS - 1, MAX_MSGS + 1, MAX_MSGS + 9] {
        q.text(s, &msg(i), &format!("prt_m{i}"), "t", true);
    }
    tally.compare("messages", &json!(null), &q.events);

    // Permissions: past MAX_PERMS a session forgets the requests still awaiting a reply;
    // a reply forgets its request, so replied ones do not count.
    let mut q = Seq::default();
    let s = "ses_perms";
    let perm = |i: usize| format!("per_{i:05}");
    q.user(s, "msg_u");
    for i in 0..MAX_PERMS + 20 {
        q.bus(
            "permission.asked",
            json!({"id": perm(i), "sessionID": s, "tool": {"callID": format!("call_{i}")}}),
        );
        if i % 3 == 0 && i < 30 {
            q.bus(
                "permission.replied",
                json!({"sessionID": s, "requestID": perm(i), "reply": "once"}),
            );
        }
    }
    for i in 0..MAX_PERMS + 20 {
        q.bus(
            "permission.replied",
            json!({"sessionID": s, "requestID": perm(i), "reply": "always"}),
        );
    }
    tally.compare("permissions", &json!(null), &q.events);

    eprintln!("{tally:?}");
}
