//! A full-screen command (`dstream inbox`, `dstream replay`) driven in tmux: its own tmux
//! server (`-L`), killed when the test ends however it ends; the screen read back as text,
//! waited for with a deadline.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a screen gets to show what a test waits for.
const SCREEN_TIMEOUT: Duration = Duration::from_secs(15);

/// The pane the command runs in.
const TARGET: &str = "main";

pub struct Tmux {
    server: String,
}

impl Tmux {
    /// Runs `command` (a shell command line) in a new 160×40 pane.
    pub fn start(command: &str) -> Tmux {
        static N: AtomicU32 = AtomicU32::new(0);
        let server = format!(
            "dstream-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let tmux = Tmux { server };
        let status = tmux
            .cmd()
            .args([
                "new-session",
                "-d",
                "-s",
                TARGET,
                "-x",
                "160",
                "-y",
                "40",
                command,
            ])
            .status()
            .expect("tmux is needed for the terminal tests (apt-get install tmux)");
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.server]).env_remove("TMUX");
        c
    }

    /// The screen as text, a line per row.
    pub fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", TARGET])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen contains `text`; the screen then.
    pub fn wait_for(&self, text: &str) -> String {
        self.wait_until(&format!("{text:?}"), |s| s.contains(text))
    }

    /// Waits until `ready` holds for the screen (`what` names it for the failure message).
    pub fn wait_until(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + SCREEN_TIMEOUT;
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "{what} never showed on the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `tmux send-keys` with these arguments (key names, or `-l` and literal text).
    pub fn keys(&self, keys: &[&str]) {
        let status = self
            .cmd()
            .args(["send-keys", "-t", TARGET])
            .args(keys)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // The server is gone already when the command ended and closed its only pane.
        let _ = self
            .cmd()
            .arg("kill-server")
            .stderr(std::process::Stdio::null())
            .status();
    }
}
