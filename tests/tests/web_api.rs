//! The web view's front door against a real daemon: `dstream open` makes a link that logs a
//! browser in once (an HttpOnly, SameSite=Strict cookie), the cookie reads the API only from
//! the page's own origin and changes nothing without it, a decision from the page is the
//! first-decision-wins path recorded as `web:<user>`, and an agent cannot decide its own call
//! over HTTP any more than over the socket. (The page itself is driven in a real browser in
//! `web.rs`.)
#![cfg(unix)]

use dstream_tests::relay::{HttpReply, http};
use dstream_tests::{Daemon, claude_pre_tool_use, run_detached, spawn_hook};
use serde_json::{Value, json};

const ASK_GIT_PUSH: &str = "[http]\nlisten = \"0\"\n\n[[checkpoints.rules]]\ntool = \"Bash\"\ninput = \"git push *\"\naction = \"ask\"\n";

struct Web {
    addr: String,
    /// `name=value` of the session cookie.
    cookie: String,
}

fn addr(d: &Daemon) -> String {
    let stats = d.client().ok("stats", json!({}));
    stats["http"]["listen"].as_str().unwrap().to_string()
}

/// The link `dstream open --print` prints.
fn open_link(d: &Daemon, session: Option<&str>) -> String {
    let mut args = vec!["open", "--print"];
    args.extend(session);
    let out = d.cli(&args);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The path and query of a link on this listener.
fn path_of(link: &str) -> &str {
    let rest = link.strip_prefix("http://").unwrap();
    &rest[rest.find('/').unwrap()..]
}

fn login(d: &Daemon) -> Web {
    let addr = addr(d);
    let link = open_link(d, None);
    let r = http(&addr, "GET", path_of(&link), &[], b"").unwrap();
    assert_eq!(r.status, 303, "{}", String::from_utf8_lossy(&r.body));
    let set = r.header("set-cookie").expect("a cookie").to_string();
    Web {
        addr,
        cookie: set.split(';').next().unwrap().to_string(),
    }
}

impl Web {
    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn get(&self, path: &str) -> HttpReply {
        let cookie = self.cookie.clone();
        http(&self.addr, "GET", path, &[("cookie", &cookie)], b"").unwrap()
    }

    fn json(&self, path: &str) -> Value {
        let r = self.get(path);
        assert_eq!(
            r.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        serde_json::from_slice(&r.body).unwrap()
    }

    fn decide(&self, id: &str, body: Value, extra: &[(&str, &str)]) -> HttpReply {
        let mut headers = vec![
            ("cookie", self.cookie.as_str()),
            ("content-type", "application/json"),
        ];
        headers.extend_from_slice(extra);
        let path = format!("/api/checkpoints/{id}/decide");
        http(
            &self.addr,
            "POST",
            &path,
            &headers,
            body.to_string().as_bytes(),
        )
        .unwrap()
    }
}

#[test]
fn a_login_link_works_once_and_its_cookie_is_strict() {
    let d = Daemon::start_with("[http]\nlisten = \"0\"\n");
    d.append_lines(
        "w1",
        r#"{"type":"lifecycle.session.created","actor":"claude-code","payload":{"cwd":"/tmp/proj"},"metadata":{"source":"claude-code"}}"#,
    );
    let addr = addr(&d);
    // The API without a login: 401, and it says how to log in.
    let r = http(&addr, "GET", "/api/sessions", &[], b"").unwrap();
    assert_eq!(r.status, 401);
    assert!(String::from_utf8_lossy(&r.body).contains("dstream open"));

    let link = open_link(&d, Some("w1"));
    assert!(
        !link.contains(
            &std::fs::read_to_string(d.data_dir().join("http.token"))
                .unwrap()
                .trim()
                .to_string()
        ),
        "the token itself is never in a link"
    );
    let r = http(&addr, "GET", path_of(&link), &[], b"").unwrap();
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/#/session/w1"));
    let set = r.header("set-cookie").unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attr), "{set}");
    }
    // Once only.
    let again = http(&addr, "GET", path_of(&link), &[], b"").unwrap();
    assert_eq!(again.status, 401);
    assert!(again.header("set-cookie").is_none());
    // A forged code, and a link that would send the browser elsewhere, get nothing.
    let forged = path_of(&link).replace("code=1", "code=2");
    assert_eq!(http(&addr, "GET", &forged, &[], b"").unwrap().status, 401);
    let elsewhere = path_of(&open_link(&d, None)).replace("next=/", "next=//evil.example/");
    let r = http(&addr, "GET", &elsewhere, &[], b"").unwrap();
    assert_eq!(
        r.header("location"),
        Some("/"),
        "only local paths are followed"
    );

    let web = Web {
        addr: addr.clone(),
        cookie: set.split(';').next().unwrap().to_string(),
    };
    let list = web.json("/api/sessions");
    let row = &list["sessions"][0];
    assert_eq!(row["id"], "w1", "{list}");
    assert_eq!(row["agent"], "claude-code");
    assert_eq!(row["project_dir"], "/tmp/proj");
    assert_eq!(row["events"], 1);
    assert!(web.json("/api/whoami")["user"].as_str().is_some());
    // The same cookie from another site or another port of this host: refused.
    for site in ["cross-site", "same-site"] {
        let cookie = web.cookie.clone();
        let r = http(
            &addr,
            "GET",
            "/api/sessions",
            &[("cookie", &cookie), ("sec-fetch-site", site)],
            b"",
        )
        .unwrap();
        assert_eq!(r.status, 403, "{site}");
    }
    let cookie = web.cookie.clone();
    let r = http(
        &addr,
        "GET",
        "/api/sessions",
        &[("cookie", &cookie), ("origin", "http://localhost:3000")],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 403, "a foreign origin");
    // The session's Durable Stream reads with the cookie too (the page follows it so).
    let r = web.get("/v1/stream/w1?offset=-1");
    assert_eq!(r.status, 200);
    // A restarted daemon keeps the login (the cookie is signed, not remembered).
    // (Listening on "0", it comes back on another port, whose cookie is named for it.)
    let mut d = d;
    d.stop();
    d.restart();
    let new_addr = self::addr(&d);
    let value = web.cookie.split_once('=').unwrap().1;
    let port = new_addr.rsplit_once(':').unwrap().1;
    let web = Web {
        cookie: format!("dstream_{port}={value}"),
        addr: new_addr,
    };
    assert_eq!(web.get("/api/sessions").status, 200);
}

#[test]
fn the_page_is_served_with_a_strict_policy() {
    let d = Daemon::start_with("[http]\nlisten = \"0\"\n");
    let addr = addr(&d);
    let r = http(&addr, "GET", "/", &[], b"").unwrap();
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    let csp = r.header("content-security-policy").unwrap();
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        http(&addr, "GET", "/assets/nothing.js", &[], b"")
            .unwrap()
            .status,
        404
    );
    // DNS rebinding: the page under another host name is refused.
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(
        &mut s,
        b"GET / HTTP/1.1\r\nhost: evil.example\r\nconnection: close\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
}

#[test]
fn a_decision_from_the_page_goes_the_same_way_and_is_recorded_as_web() {
    let d = Daemon::start_with(ASK_GIT_PUSH);
    let web = login(&d);
    // This test process plays the agent: it runs the hook, which waits for a person.
    let hook = spawn_hook(
        &d.socket(),
        &claude_pre_tool_use("web-1", "toolu_web", "git push --force"),
    );
    let id = d.client().pending_in("web-1")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let listed = web.json("/api/checkpoints?state=pending");
    assert_eq!(listed["checkpoints"][0]["id"], id.as_str(), "{listed}");

    let origin = web.origin();
    // With the cookie but no Origin, or another one: a page elsewhere cannot decide.
    let r = web.decide(&id, json!({"decision": "approve"}), &[]);
    assert_eq!(r.status, 403);
    let r = web.decide(
        &id,
        json!({"decision": "approve"}),
        &[("origin", "http://localhost:9")],
    );
    assert_eq!(r.status, 403);
    // Malformed bodies: 400, nothing decided.
    let r = web.decide(&id, json!({"decison": "approve"}), &[("origin", &origin)]);
    assert_eq!(r.status, 400);
    // From a process under the agent (its Bash tool calling the API): refused.
    let refused = post_raw(&web, &id, &json!({"decision": "approve"}), false);
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(refused.contains("cannot approve its own"), "{refused}");

    // A person's browser (not under the agent): allowed, with an edited input and a note.
    let body = json!({"decision": "approve", "note": "ok from the page", "input": {"command": "git push"}});
    let out = post_raw(&web, &id, &body, true);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let printed = hook.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(
        v["hookSpecificOutput"]["permissionDecision"], "allow",
        "{v}"
    );
    assert_eq!(
        v["hookSpecificOutput"]["updatedInput"]["command"], "git push",
        "{v}"
    );
    let decided = d.client().ok("checkpoint.list", json!({}));
    let decision = &decided["checkpoints"][0]["decision"];
    assert!(
        decision["decided_by"].as_str().unwrap().starts_with("web:"),
        "{decision}"
    );
    assert_eq!(decision["note"], "ok from the page");
    // The first decision wins: a second is refused with 409.
    let again = post_raw(&web, &id, &json!({"decision": "reject"}), true);
    assert!(again.starts_with("HTTP/1.1 409"), "{again}");
}

/// Posts a decision from another process with bash's `/dev/tcp`: `detached`, as a person's
/// browser (not this test's descendant), else as a child of this test, which the daemon
/// knows as the agent (it ran the hook). The raw answer.
fn post_raw(web: &Web, id: &str, body: &Value, detached: bool) -> String {
    let body = body.to_string();
    let (host, port) = web.addr.rsplit_once(':').unwrap();
    let request = format!(
        "POST /api/checkpoints/{id}/decide HTTP/1.1\r\nhost: {}\r\ncookie: {}\r\norigin: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        web.addr,
        web.cookie,
        web.origin(),
        body.len()
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("request");
    std::fs::write(&file, request).unwrap();
    let script = format!(
        "exec 3<>/dev/tcp/{host}/{port}; cat '{}' >&3; cat <&3",
        file.display()
    );
    let bash = std::path::Path::new("/bin/bash");
    let out = if detached {
        run_detached(bash, &["-c".as_ref(), script.as_ref()])
    } else {
        std::process::Command::new(bash)
            .args(["-c", &script])
            .output()
            .unwrap()
    };
    String::from_utf8_lossy(&out.stdout).into_owned()
}
