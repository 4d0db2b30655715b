//! Running the service manager's command line (`systemctl`, `launchctl`) with a deadline: it
//! may hang on a bus that is not answering, and `dstream service` must not.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a query (`is-enabled`, `print`, …) may take.
pub const QUERY: Duration = Duration::from_secs(5);
/// How long a command that starts or stops the daemon may take (stopping waits for the
/// daemon's clean exit, up to its `TimeoutStopSec=30`).
pub const CHANGE: Duration = Duration::from_secs(40);

/// What a finished command said.
pub struct Ran {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Its first line of output, trimmed, for messages.
    pub fn said(&self) -> String {
        let text = if self.stderr.trim().is_empty() {
            &self.stdout
        } else {
            &self.stderr
        };
        text.lines().next().unwrap_or("").trim().to_owned()
    }
}

/// Runs `program args…` with stdin closed; `None` when it could not be started or was still
/// running at `timeout` (then it is killed).
pub fn run(program: &str, args: &[&str], timeout: Duration) -> Option<Ran> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    // Output is small; read on threads so a full pipe cannot stall the child.
    let mut out = child.stdout.take()?;
    let mut err = child.stderr.take()?;
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    Some(Ran {
        success: status.success(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}
