//! Check 8: events the hooks wrote to `<data_dir>/spool/` while the daemon could not take
//! them, read from disk (so it works with the daemon down): files waiting to be drained
//! (`*.jsonl`, and `.*.part` being written), lost events (lines of `overflow.jsonl`), and
//! damaged files set aside (`damaged/`).

use std::io::BufRead;
use std::path::Path;

use super::report::{Check, Context, sh};

const OVERFLOW: &str = "overflow.jsonl";

pub fn check(cx: &Context) -> Vec<Check> {
    let dir = cx.data_dir.join("spool");
    let entries = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return vec![Check::ok("spool.backlog", "nothing spooled")];
        }
        Err(e) => {
            return vec![Check::warn(
                "spool.backlog",
                format!("cannot list {}: {e}", dir.display()),
                format!("ls -la {}", sh(&dir)),
            )];
        }
    };
    let (mut files, mut bytes) = (0u64, 0u64);
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let pending = (name.ends_with(".jsonl") && name != OVERFLOW && !name.starts_with('.'))
            || (name.starts_with('.') && name.ends_with(".part"));
        if pending
            && let Ok(m) = e.metadata()
            && m.is_file()
        {
            files += 1;
            bytes += m.len();
        }
    }
    let mut out = Vec::new();
    out.push(if files == 0 {
        Check::ok("spool.backlog", "no events waiting")
    } else {
        let detail = format!(
            "{files} file{} ({bytes} bytes) of events waiting in {}",
            if files == 1 { "" } else { "s" },
            dir.display()
        );
        if cx.daemon.is_some() {
            Check::warn(
                "spool.backlog",
                format!("{detail}; the running daemon drains them"),
                "wait a moment and check again (or restart the daemon: dstream daemon)",
            )
        } else {
            Check::fail(
                "spool.backlog",
                format!("{detail}, and the daemon is not running to take them"),
                "dstream daemon",
            )
        }
    });
    out.push(overflow(&dir.join(OVERFLOW)));
    out.push(damaged(&dir.join("damaged")));
    out
}

/// Lost events: one JSON line each.
fn overflow(path: &Path) -> Check {
    const NAME: &str = "spool.overflow";
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check::ok(NAME, "no events lost");
        }
        Err(e) => {
            return Check::warn(
                NAME,
                format!("cannot read {}: {e}", path.display()),
                format!("ls -l {}", sh(path)),
            );
        }
    };
    let (mut lost, mut first, mut last) = (0u64, None::<u64>, None::<u64>);
    for line in std::io::BufReader::new(file)
        .split(b'\n')
        .map_while(Result::ok)
    {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        lost += 1;
        let at = serde_json::from_slice::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v["at_ms"].as_u64());
        if let Some(at) = at {
            first = Some(first.map_or(at, |f| f.min(at)));
            last = Some(last.map_or(at, |l| l.max(at)));
        }
    }
    if lost == 0 {
        return Check::ok(NAME, "no events lost");
    }
    let when = match (first, last) {
        (Some(f), Some(l)) => format!(" between {} and {}", rfc3339(f), rfc3339(l)),
        _ => String::new(),
    };
    Check::fail(
        NAME,
        format!(
            "{lost} event{} lost{when}: the spool was full while the daemon was down; they are \
             listed in {} (keep the daemon running: dstream service install)",
            if lost == 1 { " was" } else { "s were" },
            path.display()
        ),
        format!(
            "rm {}   (once read: the lost events cannot be recovered)",
            sh(path)
        ),
    )
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// Files the daemon could not read, set aside.
fn damaged(dir: &Path) -> Check {
    const NAME: &str = "spool.damaged";
    let n = std::fs::read_dir(dir).map_or(0, |rd| rd.flatten().count());
    if n == 0 {
        return Check::ok(NAME, "no damaged spool files");
    }
    Check::warn(
        NAME,
        format!(
            "{n} spool file{} the daemon could not read {} set aside in {}",
            if n == 1 { "" } else { "s" },
            if n == 1 { "was" } else { "were" },
            dir.display()
        ),
        format!("look at them, then: rm -r {}", sh(dir)),
    )
}
