//! The index never syncs (`synchronous = OFF`), so its writes never queue behind or ahead of
//! the logs' syncs on the disk. That survives the daemon's crash (the OS holds the writes) but
//! not the machine's: a marker file names the boot the index is open in, and an index found
//! open in another boot (a power loss, an OS crash) is rebuilt from the logs. A clean close
//! syncs the index and removes the marker. Where the boot cannot be told (not Linux), the
//! index syncs as SQLite's `NORMAL` does instead.

use std::io::Write;
use std::path::{Path, PathBuf};

const MARKER: &str = "open.boot";

/// This boot's id, where the OS says it.
pub fn boot_id() -> Option<String> {
    #[cfg(target_os = "linux")]
    {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        Some(id.trim().to_string()).filter(|s| !s.is_empty())
    }
    #[cfg(not(target_os = "linux"))]
    None
}

fn marker(dir: &Path) -> PathBuf {
    dir.join(MARKER)
}

/// Why the index must be rebuilt: it was open when the machine went down.
pub fn lost_with_machine(dir: &Path) -> Option<String> {
    let open_in = std::fs::read_to_string(marker(dir)).ok()?;
    match boot_id() {
        Some(now) if now == open_in.trim() => None,
        _ => Some("the machine restarted while the index was open (unsynced writes)".into()),
    }
}

/// Whether the index was closed cleanly (synced, the marker removed) the last time it was
/// open, or never opened: its file then needs no check of every page at the next open.
pub fn closed_cleanly(dir: &Path) -> bool {
    !marker(dir).exists()
}

/// Records, durably, that the index is open in this boot.
pub fn mark_open(dir: &Path) -> std::io::Result<()> {
    let Some(id) = boot_id() else { return Ok(()) };
    let tmp = dir.join(format!("{MARKER}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(id.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, marker(dir))?;
    std::fs::File::open(dir)?.sync_all()
}

/// After a clean close (the index synced): no rebuild at the next start.
pub fn mark_closed(dir: &Path) {
    let _ = std::fs::remove_file(marker(dir));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_open_in_another_boot_is_lost_one_open_in_this_boot_is_not() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(lost_with_machine(dir.path()), None, "never opened");
        mark_open(dir.path()).unwrap();
        assert_eq!(
            lost_with_machine(dir.path()),
            None,
            "a crash of the daemon only"
        );
        if boot_id().is_some() {
            std::fs::write(marker(dir.path()), "another-boot").unwrap();
            assert!(lost_with_machine(dir.path()).is_some());
        }
        mark_closed(dir.path());
        assert_eq!(lost_with_machine(dir.path()), None);
    }
}
