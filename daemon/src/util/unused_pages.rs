//! Gives back the code pages the daemon is not using: those only start-up touched, and those
//! a burst of work touched, once it is idle again.
//!
//! Starting the daemon runs code it will not run again (configuration, plugin loading, the
//! store's recovery, the HTTP listener's set-up), and the kernel maps code in 64 KiB runs
//! around each page touched: a fresh daemon held most of its 15 MB of machine code resident
//! while idle, and one that had served a load kept what the load touched. The read-only file
//! mappings that hold nothing but pages of their file are dropped from its page tables; what
//! runs afterwards maps back in from the page cache on first use, so the resident set is what
//! the daemon actually uses.
//!
//! Only a mapping that is not writable and has no anonymous (copied-on-write) pages is
//! touched: its contents are exactly the page cache's, so dropping them changes no byte the
//! process can read. Relocated data (RELRO) is anonymous and is never dropped.

use std::io::{BufRead, BufReader};

/// One mapping of `/proc/self/smaps` that may be dropped.
struct CleanFileMapping {
    start: usize,
    len: usize,
}

/// Drops the clean read-only file mappings of this process from its resident set, and
/// returns how many bytes were resident in them. Best effort: on any error nothing is done.
pub fn release() -> u64 {
    let Ok(file) = std::fs::File::open("/proc/self/smaps") else {
        return 0;
    };
    let mut released = 0;
    for (mapping, resident) in clean_file_mappings(BufReader::new(file)) {
        // SAFETY: the range is a whole mapping of this process that is not writable and
        // holds only unmodified pages of its file; MADV_DONTNEED on it unmaps those pages,
        // and the next access maps the same bytes back from the page cache.
        let rc = unsafe {
            libc::madvise(
                mapping.start as *mut libc::c_void,
                mapping.len,
                libc::MADV_DONTNEED,
            )
        };
        if rc == 0 {
            released += resident;
        }
    }
    // Freed heap memory goes back too: start-up's buffers (configuration, plugin sources,
    // recovery), or those of the burst of work just over, are garbage by now.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers and only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
    released
}

/// When to release again: after a spell without work that follows some work (once per spell,
/// and never for a daemon that stayed idle since the last release). Work is counted as a
/// running total (appends, events indexed).
pub struct IdleSpells {
    seen: u64,
    released: bool,
}

impl IdleSpells {
    /// Just released, with the work done so far.
    pub fn new(work: u64) -> IdleSpells {
        IdleSpells {
            seen: work,
            released: true,
        }
    }

    /// Called once a spell with the work done so far: whether to release now.
    pub fn release_now(&mut self, work: u64) -> bool {
        if work != self.seen {
            (self.seen, self.released) = (work, false);
            return false;
        }
        !std::mem::replace(&mut self.released, true)
    }
}

/// The mappings that qualify, each with its resident bytes, read from smaps text.
fn clean_file_mappings(smaps: impl BufRead) -> Vec<(CleanFileMapping, u64)> {
    let mut found = Vec::new();
    // The mapping being read: Some while it still qualifies.
    let mut current: Option<(CleanFileMapping, u64)> = None;
    for line in smaps.lines().map_while(Result::ok) {
        if let Some(mapping) = header(&line) {
            found.extend(current.take().filter(|(_, rss)| *rss > 0));
            current = mapping.map(|m| (m, 0));
            continue;
        }
        let Some((_, resident)) = current.as_mut() else {
            continue;
        };
        let mut fields = line.split_whitespace();
        let (Some(key), Some(kb)) = (fields.next(), fields.next()) else {
            continue;
        };
        let kb: u64 = kb.parse().unwrap_or(u64::MAX);
        match key {
            "Rss:" => *resident = kb.saturating_mul(1024),
            // Dirty is no reason to keep: a file page written and not yet flushed is
            // dirty in the page cache, and the page cache is what maps back in.
            "Anonymous:" | "Swap:" if kb != 0 => current = None,
            _ => {}
        }
    }
    found.extend(current.filter(|(_, rss)| *rss > 0));
    found
}

/// Reads a mapping's header line: `None` if the line is not one, `Some(None)` for a mapping
/// that can never qualify (writable, anonymous, or special), `Some(Some(_))` for a candidate.
fn header(line: &str) -> Option<Option<CleanFileMapping>> {
    let mut fields = line.split_whitespace();
    let range = fields.next()?;
    let (start, end) = range.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = fields.next()?;
    if perms.len() != 4 {
        return None;
    }
    let (_offset, _dev, inode) = (fields.next()?, fields.next()?, fields.next()?);
    let path = fields.next().unwrap_or("");
    let candidate = perms.as_bytes()[1] != b'w'
        && perms.as_bytes()[3] == b'p'
        && inode != "0"
        && path.starts_with('/')
        && end > start;
    Some(candidate.then_some(CleanFileMapping {
        start,
        len: end - start,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_go_back_once_after_each_spell_without_appends_that_follows_work() {
        let mut spells = IdleSpells::new(10);
        // Idle since start-up: released already.
        assert!(!spells.release_now(10));
        // Work during a spell: not now; the next quiet spell releases, once.
        assert!(!spells.release_now(500));
        assert!(spells.release_now(500));
        assert!(!spells.release_now(500));
        assert!(!spells.release_now(500));
        // Work that goes on spell after spell never is.
        assert!(!spells.release_now(600));
        assert!(!spells.release_now(700));
        assert!(spells.release_now(700));
    }

    const SMAPS: &str = "\
5597304a8000-559731309000 r-xp 004a6000 fe:00 10519213                   /usr/bin/dstream
Size:              14724 kB
Rss:               11364 kB
Private_Dirty:     11364 kB
Anonymous:             0 kB
Swap:                  0 kB
559731309000-559731391000 r--p 01306000 fe:00 10519213                   /usr/bin/dstream
Rss:                 544 kB
Private_Dirty:       544 kB
Anonymous:           544 kB
559731391000-559731399000 rw-p 0138d000 fe:00 10519213                   /usr/bin/dstream
Rss:                  32 kB
Anonymous:             0 kB
55973e3d7000-55973e5d3000 rw-p 00000000 00:00 0                          [heap]
Rss:                1964 kB
Anonymous:          1964 kB
7f5b73b26000-7f5b73c7c000 r-xp 00026000 fe:00 326279                     /usr/lib/libc.so.6
Rss:                1176 kB
Anonymous:             0 kB
7f5b73c7c000-7f5b73c7d000 r--p 00000000 00:00 0                          [vvar]
Rss:                   4 kB
7f5b73d00000-7f5b73d10000 r--p 00000000 fe:00 326280                     /usr/lib/unused.so
Rss:                   0 kB
";

    #[test]
    fn only_clean_read_only_file_mappings_with_resident_pages_qualify() {
        let found = clean_file_mappings(SMAPS.as_bytes());
        let got: Vec<(usize, usize, u64)> = found
            .iter()
            .map(|(m, rss)| (m.start, m.len, *rss))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    0x5597304a8000,
                    0x559731309000 - 0x5597304a8000,
                    11364 * 1024
                ),
                (0x7f5b73b26000, 0x7f5b73c7c000 - 0x7f5b73b26000, 1176 * 1024),
            ],
            "RELRO (anonymous), writable data, the heap, [vvar] and empty mappings stay"
        );
    }

    #[test]
    fn the_process_keeps_running_its_code_and_reading_its_data_after_release() {
        let before = std::hint::black_box(fibonacci(20));
        // Vtables and string constants live in RELRO and .rodata: a wrong release would
        // lose the relocated pointers or the text, and this would crash or differ.
        let shown: Box<dyn Fn(u64) -> String> = Box::new(|n| format!("fib {n}"));
        let released = release();
        assert!(released > 0, "a test binary has code pages resident");
        assert_eq!(std::hint::black_box(fibonacci(20)), before);
        assert_eq!(shown(before), "fib 6765");
    }

    fn fibonacci(n: u64) -> u64 {
        if n < 2 {
            n
        } else {
            fibonacci(n - 1) + fibonacci(n - 2)
        }
    }
}
