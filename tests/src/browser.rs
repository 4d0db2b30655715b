//! A real browser for the web view's tests: headless Chromium driven by chromedriver through
//! W3C WebDriver (JSON over HTTP on loopback, with the harness's small blocking HTTP client).
//!
//! Each [`Browser`] has its own chromedriver on a free port, its own temporary profile, and
//! the browser's console log (`goog:loggingPrefs`) so a test can check that a page logged no
//! error. Screenshots go to `<target>/test-artifacts/web/`. chromedriver runs detached from
//! the test (see [`spawn_detached`]); dropping a [`Browser`] ends the WebDriver session
//! (Chromium quits) and kills chromedriver's process group, so nothing outlives a test. Chromium and chromedriver missing is a failure with the fix in the message (CI
//! installs the Debian packages `chromium` and `chromium-driver`), never a skip.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long a condition gets before the test fails; generous, the browser shares 2 cores.
pub const WAIT: Duration = Duration::from_secs(30);

/// WebDriver's key codes (the Unicode private-use characters of the spec).
pub mod keys {
    pub const ENTER: &str = "\u{E007}";
    pub const SHIFT: &str = "\u{E008}";
    pub const ESCAPE: &str = "\u{E00C}";
    pub const END: &str = "\u{E010}";
    pub const HOME: &str = "\u{E011}";
    pub const LEFT: &str = "\u{E012}";
    pub const UP: &str = "\u{E013}";
    pub const RIGHT: &str = "\u{E014}";
    pub const DOWN: &str = "\u{E015}";
}

/// The key WebDriver uses for an element reference in JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// An element of the current page, by its WebDriver reference.
#[derive(Debug, Clone)]
pub struct Element(pub String);

pub struct Browser {
    /// chromedriver's pid, which is also its process group's id.
    driver: i32,
    addr: String,
    session: String,
    _profile: tempfile::TempDir,
    artifacts: PathBuf,
}

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in names {
        for dir in std::env::split_paths(&path).chain([PathBuf::from("/usr/bin")]) {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// A loopback port free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Where the screenshots go: `<target>/test-artifacts/web/`, beside the profile directory
/// holding the `dstream` binary.
pub fn artifacts_dir() -> PathBuf {
    let bin = crate::daemon_bin();
    let target = bin
        .parent()
        .and_then(Path::parent)
        .expect("the dstream binary is in <target>/<profile>/");
    let dir = target.join("test-artifacts").join("web");
    std::fs::create_dir_all(&dir).expect("create test-artifacts/web");
    dir
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    pub fn start() -> Browser {
        let missing = "headless Chromium is needed by the web view's tests: install the Debian \
                       packages `chromium` and `chromium-driver` (`.ci/run` does, as root)";
        let chromium = find_program(&["chromium", "chromium-browser", "google-chrome"])
            .unwrap_or_else(|| panic!("no chromium on PATH; {missing}"));
        let driver_bin = find_program(&["chromedriver"])
            .unwrap_or_else(|| panic!("no chromedriver on PATH; {missing}"));
        let profile = tempfile::Builder::new()
            .prefix("dstream-chromium-")
            .tempdir()
            .expect("profile dir");
        let log = profile.path().join("chromedriver.log");
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let driver = spawn_detached(&driver_bin, port, &log);
            let deadline = Instant::now() + WAIT;
            let ready = loop {
                if let Ok((200, _)) = http(&addr, "GET", "/status", &[], b"") {
                    break true;
                }
                if !alive(driver) || Instant::now() > deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(25));
            };
            if !ready {
                kill_group(driver);
                last = std::fs::read_to_string(&log).unwrap_or_default();
                continue;
            }
            let caps = json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "unhandledPromptBehavior": "ignore",
                "goog:loggingPrefs": {"browser": "ALL"},
                "goog:chromeOptions": {
                    "binary": chromium_binary(&chromium),
                    "args": [
                        "--headless=new", "--no-sandbox", "--disable-gpu",
                        "--disable-dev-shm-usage", "--no-first-run",
                        "--no-default-browser-check", "--disable-extensions",
                        "--window-size=1280,900",
                        format!("--user-data-dir={}", profile.path().join("profile").display()),
                    ],
                },
            }}});
            let r = request(&addr, "POST", "/session", &caps);
            let Some(session) = r["value"]["sessionId"].as_str() else {
                kill_group(driver);
                panic!("chromedriver did not start Chromium: {r}");
            };
            return Browser {
                driver,
                addr,
                session: session.to_string(),
                _profile: profile,
                artifacts: artifacts_dir(),
            };
        }
        panic!("chromedriver did not answer on any port; its log:\n{last}");
    }

    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let r = request(
            &self.addr,
            method,
            &format!("/session/{}{path}", self.session),
            &body,
        );
        if let Some(err) = r["value"]["error"].as_str() {
            panic!(
                "WebDriver {method} {path}: {err}: {}",
                r["value"]["message"].as_str().unwrap_or("")
            );
        }
        r["value"].clone()
    }

    /// The same call, its error as an `Err` (for what may legitimately fail: no alert).
    fn try_call(&self, method: &str, path: &str, body: Value) -> Result<Value, String> {
        let r = request(
            &self.addr,
            method,
            &format!("/session/{}{path}", self.session),
            &body,
        );
        match r["value"]["error"].as_str() {
            Some(e) => Err(format!(
                "{e}: {}",
                r["value"]["message"].as_str().unwrap_or("")
            )),
            None => Ok(r["value"].clone()),
        }
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url }));
    }

    pub fn url(&self) -> String {
        self.call("GET", "/url", json!(null))
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    pub fn title(&self) -> String {
        self.call("GET", "/title", json!(null))
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    pub fn exec(&self, script: &str, args: Value) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            json!({ "script": script, "args": args }),
        )
    }

    /// A Chrome DevTools Protocol command (through chromedriver), e.g.
    /// `Browser.grantPermissions`.
    pub fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.call(
            "POST",
            "/goog/cdp/execute",
            json!({ "cmd": cmd, "params": params }),
        )
    }

    pub fn find_all(&self, css: &str) -> Vec<Element> {
        self.call(
            "POST",
            "/elements",
            json!({"using": "css selector", "value": css}),
        )
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e[ELEMENT].as_str())
                .map(|s| Element(s.to_string()))
                .collect()
        })
        .unwrap_or_default()
    }

    pub fn find(&self, css: &str) -> Option<Element> {
        self.find_all(css).into_iter().next()
    }

    /// The first element matching `css`, once there is one.
    pub fn wait_for(&self, css: &str) -> Element {
        let mut found = None;
        self.wait_until(&format!("an element matches {css:?}"), |b| {
            found = b.find(css);
            found.is_some()
        });
        found.unwrap()
    }

    /// Polls `cond` until it holds; fails the test (with a screenshot) if it does not within
    /// [`WAIT`].
    pub fn wait_until(&self, what: &str, mut cond: impl FnMut(&Browser) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !cond(self) {
            if Instant::now() > deadline {
                let shot = self.screenshot("timed-out");
                panic!(
                    "timed out after {WAIT:?} waiting until {what} (screenshot: {}); the page's \
                     text:\n{}\nconsole:\n{}",
                    shot.display(),
                    self.page_text(),
                    self.console().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The rendered text of an element (what a person sees).
    pub fn text(&self, e: &Element) -> String {
        self.call("GET", &format!("/element/{}/text", e.0), json!(null))
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// The page's visible text.
    pub fn page_text(&self) -> String {
        self.exec(
            "return document.body ? document.body.innerText : ''",
            json!([]),
        )
        .as_str()
        .unwrap_or("")
        .to_string()
    }

    pub fn click(&self, e: &Element) {
        self.call("POST", &format!("/element/{}/click", e.0), json!({}));
    }

    /// Types `text` into an element (after focusing it).
    pub fn type_into(&self, e: &Element, text: &str) {
        self.call(
            "POST",
            &format!("/element/{}/value", e.0),
            json!({ "text": text }),
        );
    }

    pub fn clear(&self, e: &Element) {
        self.call("POST", &format!("/element/{}/clear", e.0), json!({}));
    }

    /// Presses keys on whatever has the focus, as a person would: each key down then up,
    /// `SHIFT` held for the key after it.
    pub fn press(&self, keys_: &[&str]) {
        let mut actions = Vec::new();
        let mut shift = false;
        for k in keys_ {
            if *k == keys::SHIFT {
                shift = true;
                actions.push(json!({"type": "keyDown", "value": k}));
                continue;
            }
            actions.push(json!({"type": "keyDown", "value": k}));
            actions.push(json!({"type": "keyUp", "value": k}));
            if shift {
                actions.push(json!({"type": "keyUp", "value": keys::SHIFT}));
                shift = false;
            }
        }
        self.call(
            "POST",
            "/actions",
            json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]}),
        );
        self.call("DELETE", "/actions", json!(null));
    }

    /// What the focused element is, as `tag.class[data-…]` and its text's start.
    pub fn focused(&self) -> String {
        self.exec(
            "const e = document.activeElement; if (!e) return ''; \
             return e.tagName + '.' + e.className + ' ' + (e.innerText || '').slice(0, 80);",
            json!([]),
        )
        .as_str()
        .unwrap_or("")
        .to_string()
    }

    /// The text of an open alert/confirm/prompt dialog, if one is open.
    pub fn alert(&self) -> Option<String> {
        self.try_call("GET", "/alert/text", json!(null))
            .ok()
            .map(|v| v.as_str().unwrap_or("").to_string())
    }

    /// Every console message so far (each read once: the log endpoint hands each out once),
    /// as `LEVEL message`.
    pub fn console(&self) -> Vec<String> {
        let v = self
            .try_call("POST", "/se/log", json!({"type": "browser"}))
            .unwrap_or_default();
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|m| {
                        format!(
                            "{} {}",
                            m["level"].as_str().unwrap_or("?"),
                            m["message"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Fails the test if the page logged an error (or a warning about its security policy)
    /// since the last look.
    pub fn assert_no_console_errors(&self, page: &str) {
        let bad: Vec<String> = self
            .console()
            .into_iter()
            .filter(|m| m.starts_with("SEVERE") || m.contains("Content Security Policy"))
            .collect();
        assert!(
            bad.is_empty(),
            "the console of {page} has errors:\n{}",
            bad.join("\n")
        );
    }

    /// Saves a screenshot of the page as `<artifacts>/<name>.png` and returns its path.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let path = self.artifacts.join(format!("{name}.png"));
        if let Ok(Value::String(b64)) = self.try_call("GET", "/screenshot", json!(null)) {
            let _ = std::fs::write(&path, base64_decode(&b64));
        }
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.screenshot("failed");
        }
        // Chromium quits with its session; the group kill covers a driver that hangs.
        let _ = http(
            &self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            &[],
            b"",
        );
        kill_group(self.driver);
    }
}

/// Starts chromedriver as a person would from another terminal: not as a descendant of this
/// test, which the daemon knows as an agent once it ran a hook (and an agent's children may
/// not decide checkpoints, over HTTP either). A shell that exits at once leaves it to init;
/// `setsid` makes it the leader of its own process group, so the browser it starts can be
/// ended with it.
fn spawn_detached(driver: &Path, port: u16, log: &Path) -> i32 {
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"setsid "$0" "$@" </dev/null >/dev/null 2>&1 & echo $!"#)
        .arg(driver)
        .arg(format!("--port={port}"))
        .arg(format!("--log-path={}", log.display()))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run sh to start chromedriver");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the pid of chromedriver")
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

fn kill_group(pid: i32) {
    // SAFETY: kill(2) on the process group chromedriver leads (setsid made its pgid its pid),
    // then on chromedriver itself in case setsid could not.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Debian's `/usr/bin/chromium` is a shell script that adds flags and execs the real binary;
/// chromedriver needs the real one.
fn chromium_binary(found: &Path) -> String {
    for real in [
        "/usr/lib/chromium/chromium",
        "/usr/lib/chromium-browser/chromium-browser",
    ] {
        if found.starts_with("/usr/bin") && Path::new(real).is_file() {
            return real.to_string();
        }
    }
    found.display().to_string()
}

fn request(addr: &str, method: &str, path: &str, body: &Value) -> Value {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let headers: &[(&str, &str)] = if body.is_null() {
        &[]
    } else {
        &[("content-type", "application/json; charset=utf-8")]
    };
    let r = http(addr, method, path, headers, &bytes)
        .unwrap_or_else(|e| panic!("chromedriver at {addr}: {method} {path}: {e}"));
    serde_json::from_slice(&r.1).unwrap_or_else(|e| {
        panic!(
            "chromedriver answered {method} {path} with {} and no JSON ({e}): {}",
            r.0,
            String::from_utf8_lossy(&r.1)
        )
    })
}

/// One request to chromedriver, its answer's status and body. chromedriver keeps a
/// connection open whatever the request says, so the body is read by its Content-Length.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    crate::relay::write_request(&mut s, addr, method, path, headers, body)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 64 << 10];
    let (head_end, length) = loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::other("chromedriver closed the connection"));
        }
        raw.extend_from_slice(&buf[..n]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, length);
        }
    };
    while raw.len() < head_end + length {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let status = String::from_utf8_lossy(&raw[..head_end])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((
        status,
        raw[head_end..(head_end + length).min(raw.len())].to_vec(),
    ))
}

/// Standard base64 (the screenshots), without a crate for twenty lines.
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for v in s.bytes().filter_map(value) {
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_decodes() {
        assert_eq!(super::base64_decode("aGVsbG8="), b"hello");
        assert_eq!(super::base64_decode("aGk="), b"hi");
    }
}
