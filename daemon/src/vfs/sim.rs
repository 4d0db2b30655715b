//! A simulated disk for power-loss tests: every file and directory remembers what it held at
//! its last sync, and [`SimVfs::reboot`] builds the disk a power failure would leave behind.
//!
//! The model (after SQLite's test VFS and TigerBeetle's storage simulator):
//! - a file's content is durable up to its last `sync`; writes after it survive a crash wholly,
//!   not at all, torn at a page (a prefix of the pages in write order), or scattered (any subset
//!   of pages, later ones without earlier ones), and the file's size may have reached the disk
//!   without the data (the missing pages read as zeros);
//! - a directory's entries are durable up to its last `sync_dir`: files created, renamed or
//!   removed after it keep a random prefix of those changes, often none. A file whose data was
//!   synced but whose directory entry was not is gone;
//! - from the crash point on (a chosen count of mutating calls, or [`SimVfs::crash_now`]) every
//!   call fails, as on a machine that lost power, so nothing later can leak into the image.
//!
//! Randomness comes from a seeded [`SimRng`], so a failing seed replays exactly.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{LockError, Open, Vfs, VfsFile, VfsFileRef, VfsLock};

/// A small deterministic generator (SplitMix64): enough for choosing faults, no dependency.
#[derive(Debug, Clone)]
pub struct SimRng(u64);

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

type Ino = u64;
const ROOT: Ino = 1;

#[derive(Debug, Clone)]
enum Pending {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone, Default)]
struct FileNode {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Changes since the last sync, in order.
    pending: Vec<Pending>,
}

#[derive(Debug, Clone)]
enum DirOp {
    Link(OsString, Ino),
    Unlink(OsString),
    /// Within one directory: atomic, as rename(2) is.
    Rename(OsString, OsString, Ino),
}

#[derive(Debug, Clone, Default)]
struct DirNode {
    entries: BTreeMap<OsString, Ino>,
    durable: BTreeMap<OsString, Ino>,
    pending: Vec<DirOp>,
}

#[derive(Debug, Clone)]
enum Node {
    File(FileNode),
    Dir(DirNode),
}

#[derive(Debug, Default)]
struct Disk {
    nodes: HashMap<Ino, Node>,
    next_ino: Ino,
    /// Mutating calls so far.
    mutations: u64,
    /// The call that loses power (counted in mutations).
    crash_at: Option<u64>,
    crashed: bool,
    locked: Vec<PathBuf>,
    /// Temporary names handed out (see `Vfs::temp_seq`).
    temp_seq: u64,
}

/// What a crash cost, for the test's report.
#[derive(Debug, Default, Clone, Copy)]
pub struct CrashReport {
    pub files_reverted: usize,
    pub pages_dropped: usize,
    pub entries_reverted: usize,
}

/// The simulated file system. Cheap to clone: clones share one disk.
#[derive(Debug, Clone)]
pub struct SimVfs {
    disk: Arc<Mutex<Disk>>,
}

impl Default for SimVfs {
    fn default() -> Self {
        SimVfs::new()
    }
}

fn dead() -> io::Error {
    io::Error::other("simulated power failure: the machine is off")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

/// The names along an absolute or relative path, `.` and `..` resolved lexically.
fn components(path: &Path) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n.to_owned()),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

impl Disk {
    /// Counts a mutating call; fails once the power is gone.
    fn mutate(&mut self) -> io::Result<()> {
        if self.crashed {
            return Err(dead());
        }
        self.mutations += 1;
        if self.crash_at.is_some_and(|at| self.mutations >= at) {
            self.crashed = true;
            return Err(dead());
        }
        Ok(())
    }

    fn alive(&self) -> io::Result<()> {
        if self.crashed { Err(dead()) } else { Ok(()) }
    }

    fn dir(&self, ino: Ino) -> Option<&DirNode> {
        match self.nodes.get(&ino) {
            Some(Node::Dir(d)) => Some(d),
            _ => None,
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> Option<&mut DirNode> {
        match self.nodes.get_mut(&ino) {
            Some(Node::Dir(d)) => Some(d),
            _ => None,
        }
    }

    fn file_mut(&mut self, ino: Ino) -> io::Result<&mut FileNode> {
        match self.nodes.get_mut(&ino) {
            Some(Node::File(f)) => Ok(f),
            _ => Err(io::Error::other("not a file")),
        }
    }

    fn lookup(&self, names: &[OsString]) -> Option<Ino> {
        let mut at = ROOT;
        for name in names {
            at = *self.dir(at)?.entries.get(name)?;
        }
        Some(at)
    }

    /// The directory holding `path` and the file name in it.
    fn parent_of(&self, path: &Path) -> io::Result<(Ino, OsString)> {
        let mut names = components(path);
        let name = names.pop().ok_or_else(|| not_found(path))?;
        match self.lookup(&names) {
            Some(ino) if self.dir(ino).is_some() => Ok((ino, name)),
            _ => Err(not_found(path)),
        }
    }

    fn new_node(&mut self, node: Node) -> Ino {
        self.next_ino += 1;
        self.nodes.insert(self.next_ino, node);
        self.next_ino
    }

    fn link(&mut self, dir: Ino, name: OsString, ino: Ino) {
        let d = self.dir_mut(dir).expect("a directory");
        d.entries.insert(name.clone(), ino);
        d.pending.push(DirOp::Link(name, ino));
    }

    fn unlink(&mut self, dir: Ino, name: &OsStr) -> Option<Ino> {
        let d = self.dir_mut(dir).expect("a directory");
        let ino = d.entries.remove(name)?;
        d.pending.push(DirOp::Unlink(name.to_owned()));
        Some(ino)
    }
}

impl SimVfs {
    pub fn new() -> SimVfs {
        let mut disk = Disk {
            next_ino: ROOT,
            ..Disk::default()
        };
        disk.nodes.insert(ROOT, Node::Dir(DirNode::default()));
        SimVfs {
            disk: Arc::new(Mutex::new(disk)),
        }
    }

    /// Loses power at the `n`-th mutating call from now (1 = the next one).
    pub fn crash_after(&self, n: u64) {
        let mut disk = self.disk.lock().unwrap();
        disk.crash_at = Some(disk.mutations + n.max(1));
    }

    /// Loses power now.
    pub fn crash_now(&self) {
        self.disk.lock().unwrap().crashed = true;
    }

    pub fn crashed(&self) -> bool {
        self.disk.lock().unwrap().crashed
    }

    /// The disk a power failure leaves: every directory and file back at its last sync, plus
    /// whatever part of the later changes `rng` lets through. The old disk stays dead.
    pub fn reboot(&self, rng: &mut SimRng) -> (SimVfs, CrashReport) {
        let mut old = self.disk.lock().unwrap();
        old.crashed = true;
        let page: u64 = if rng.chance(1, 2) { 4096 } else { 512 };
        let mut report = CrashReport::default();
        let mut nodes = HashMap::new();
        // Directories first, from the root: only what a durable path reaches survives.
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            let Some(Node::Dir(d)) = old.nodes.get(&ino) else {
                continue;
            };
            let mut entries = d.durable.clone();
            let keep = if d.pending.is_empty() || rng.chance(1, 2) {
                0
            } else {
                rng.below(d.pending.len() as u64 + 1) as usize
            };
            report.entries_reverted += d.pending.len() - keep;
            for op in &d.pending[..keep] {
                match op {
                    DirOp::Link(name, to) => {
                        entries.insert(name.clone(), *to);
                    }
                    DirOp::Unlink(name) => {
                        entries.remove(name);
                    }
                    DirOp::Rename(from, to, ino) => {
                        entries.remove(from);
                        entries.insert(to.clone(), *ino);
                    }
                }
            }
            for (_, &child) in entries.iter() {
                if !nodes.contains_key(&child) {
                    stack.push(child);
                }
            }
            nodes.insert(
                ino,
                Node::Dir(DirNode {
                    durable: entries.clone(),
                    entries,
                    pending: Vec::new(),
                }),
            );
            // Files reachable from here.
            let children: Vec<Ino> = match &nodes[&ino] {
                Node::Dir(d) => d.entries.values().copied().collect(),
                Node::File(_) => Vec::new(),
            };
            for child in children {
                if let Some(Node::File(f)) = old.nodes.get(&child)
                    && !nodes.contains_key(&child)
                {
                    let data = crash_image(f, page, rng, &mut report);
                    nodes.insert(
                        child,
                        Node::File(FileNode {
                            durable: data.clone(),
                            data,
                            pending: Vec::new(),
                        }),
                    );
                }
            }
        }
        let disk = Disk {
            nodes,
            next_ino: old.next_ino,
            temp_seq: old.temp_seq,
            ..Disk::default()
        };
        (
            SimVfs {
                disk: Arc::new(Mutex::new(disk)),
            },
            report,
        )
    }

    /// Overwrites one durable byte of a file, as a failing disk would (not a crash): what
    /// `repair` is for.
    pub fn damage(&self, path: &Path, offset: u64, byte: u8) -> bool {
        let mut disk = self.disk.lock().unwrap();
        let Some(ino) = disk.lookup(&components(path)) else {
            return false;
        };
        let Ok(f) = disk.file_mut(ino) else {
            return false;
        };
        let at = offset as usize;
        if at >= f.data.len() || at >= f.durable.len() {
            return false;
        }
        f.data[at] = byte;
        f.durable[at] = byte;
        true
    }

    /// A file's current content, for checks in tests.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.disk.lock().unwrap();
        match disk.nodes.get(&disk.lookup(&components(path))?) {
            Some(Node::File(f)) => Some(f.data.clone()),
            _ => None,
        }
    }
}

/// What one file holds after the crash.
fn crash_image(f: &FileNode, page: u64, rng: &mut SimRng, report: &mut CrashReport) -> Vec<u8> {
    let mut out = f.durable.clone();
    if f.pending.is_empty() {
        return out;
    }
    report.files_reverted += 1;
    // Each pending write split at page boundaries of the file.
    let mut pieces: Vec<Pending> = Vec::new();
    for p in &f.pending {
        match p {
            Pending::SetLen(n) => pieces.push(Pending::SetLen(*n)),
            Pending::Write { offset, bytes } => {
                let mut at = 0usize;
                while at < bytes.len() {
                    let off = offset + at as u64;
                    let room = (page - off % page) as usize;
                    let n = room.min(bytes.len() - at);
                    pieces.push(Pending::Write {
                        offset: off,
                        bytes: bytes[at..at + n].to_vec(),
                    });
                    at += n;
                }
            }
        }
    }
    let keep: Vec<bool> = match rng.below(4) {
        // Nothing after the sync reached the disk.
        0 => vec![false; pieces.len()],
        // Everything did.
        1 => vec![true; pieces.len()],
        // Torn: the writes in order, up to a page.
        2 => {
            let k = rng.below(pieces.len() as u64 + 1) as usize;
            (0..pieces.len()).map(|i| i < k).collect()
        }
        // Scattered: any subset of pages (a size change always lands in order).
        _ => pieces
            .iter()
            .map(|p| matches!(p, Pending::SetLen(_)) || rng.chance(1, 2))
            .collect(),
    };
    for (piece, kept) in pieces.iter().zip(&keep) {
        if !kept {
            report.pages_dropped += matches!(piece, Pending::Write { .. }) as usize;
            continue;
        }
        apply(&mut out, piece);
    }
    // The size reached the disk, some of the data did not: the rest reads as zeros.
    if keep.iter().any(|k| !k) && rng.chance(1, 5) && out.len() < f.data.len() {
        out.resize(f.data.len(), 0);
    }
    out
}

fn apply(data: &mut Vec<u8>, change: &Pending) {
    match change {
        Pending::SetLen(n) => data.resize(*n as usize, 0),
        Pending::Write { offset, bytes } => {
            let off = *offset as usize;
            if data.len() < off + bytes.len() {
                data.resize(off + bytes.len(), 0);
            }
            data[off..off + bytes.len()].copy_from_slice(bytes);
        }
    }
}

struct SimFile {
    disk: Arc<Mutex<Disk>>,
    ino: Ino,
}

impl SimFile {
    fn change(&self, change: Pending) -> io::Result<()> {
        let mut disk = self.disk.lock().unwrap();
        disk.mutate()?;
        let f = disk.file_mut(self.ino)?;
        apply(&mut f.data, &change);
        f.pending.push(change);
        Ok(())
    }
}

impl VfsFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut disk = self.disk.lock().unwrap();
        disk.alive()?;
        let f = disk.file_mut(self.ino)?;
        let start = (offset as usize).min(f.data.len());
        let n = buf.len().min(f.data.len() - start);
        buf[..n].copy_from_slice(&f.data[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.change(Pending::Write {
            offset,
            bytes: buf.to_vec(),
        })
    }

    fn append(&self, buf: &[u8]) -> io::Result<()> {
        let offset = self.len()?;
        self.write_at(buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        let mut disk = self.disk.lock().unwrap();
        disk.alive()?;
        Ok(disk.file_mut(self.ino)?.data.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.change(Pending::SetLen(len))
    }

    fn sync(&self) -> io::Result<()> {
        let mut disk = self.disk.lock().unwrap();
        disk.mutate()?;
        let f = disk.file_mut(self.ino)?;
        f.durable = f.data.clone();
        f.pending.clear();
        Ok(())
    }
}

impl Vfs for SimVfs {
    fn concurrent(&self) -> bool {
        false
    }

    /// Per simulated disk, so a seed replays with the same names in any process.
    fn temp_seq(&self) -> u64 {
        let mut disk = self.disk.lock().unwrap();
        disk.temp_seq += 1;
        disk.temp_seq
    }

    fn open(&self, path: &Path, how: Open) -> io::Result<VfsFileRef> {
        let mut disk = self.disk.lock().unwrap();
        disk.alive()?;
        let (dir, name) = disk.parent_of(path)?;
        let existing = disk.dir(dir).and_then(|d| d.entries.get(&name)).copied();
        let ino = match (existing, how) {
            (Some(_), Open::CreateNew) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists", path.display()),
                ));
            }
            (Some(ino), Open::Truncate) => {
                disk.mutate()?;
                let f = disk.file_mut(ino)?;
                f.data.clear();
                f.pending.push(Pending::SetLen(0));
                ino
            }
            (Some(ino), _) => {
                disk.file_mut(ino)?;
                ino
            }
            (None, Open::Existing) => return Err(not_found(path)),
            (None, _) => {
                disk.mutate()?;
                let ino = disk.new_node(Node::File(FileNode::default()));
                disk.link(dir, name, ino);
                ino
            }
        };
        Ok(Arc::new(SimFile {
            disk: self.disk.clone(),
            ino,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock().unwrap();
        disk.mutate()?;
        let (from_dir, from_name) = disk.parent_of(from)?;
        let (to_dir, to_name) = disk.parent_of(to)?;
        let ino = disk
            .dir(from_dir)
            .and_then(|d| d.entries.get(&from_name))
            .copied()
            .ok_or_else(|| not_found(from))?;
        if from_dir == to_dir {
            // One directory: the rename reaches the disk whole or not at all.
            let d = disk.dir_mut(from_dir).expect("a directory");
            d.entries.remove(&from_name);
            d.entries.insert(to_name.clone(), ino);
            d.pending.push(DirOp::Rename(from_name, to_name, ino));
        } else {
            disk.link(to_dir, to_name, ino);
            disk.unlink(from_dir, &from_name);
        }
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock().unwrap();
        disk.mutate()?;
        let (dir, name) = disk.parent_of(path)?;
        disk.unlink(dir, &name)
            .map(drop)
            .ok_or_else(|| not_found(path))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock().unwrap();
        disk.alive()?;
        let mut at = ROOT;
        for name in components(dir) {
            let next = disk.dir(at).and_then(|d| d.entries.get(&name)).copied();
            at = match next {
                Some(ino) if disk.dir(ino).is_some() => ino,
                Some(_) => return Err(io::Error::other("a file is in the way")),
                None => {
                    disk.mutate()?;
                    let ino = disk.new_node(Node::Dir(DirNode::default()));
                    disk.link(at, name, ino);
                    ino
                }
            };
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock().unwrap();
        disk.mutate()?;
        let ino = disk
            .lookup(&components(dir))
            .ok_or_else(|| not_found(dir))?;
        let d = disk.dir_mut(ino).ok_or_else(|| not_found(dir))?;
        d.durable = d.entries.clone();
        d.pending.clear();
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let disk = self.disk.lock().unwrap();
        disk.alive()?;
        let ino = disk
            .lookup(&components(dir))
            .ok_or_else(|| not_found(dir))?;
        let d = disk.dir(ino).ok_or_else(|| not_found(dir))?;
        Ok(d.entries.keys().cloned().collect())
    }

    fn exists(&self, path: &Path) -> bool {
        let disk = self.disk.lock().unwrap();
        disk.lookup(&components(path)).is_some()
    }

    fn lock(&self, dir: &Path) -> Result<VfsLock, LockError> {
        let mut disk = self.disk.lock().unwrap();
        disk.alive().map_err(LockError::Io)?;
        let dir = dir.to_path_buf();
        if disk.locked.contains(&dir) {
            return Err(LockError::Held(None));
        }
        disk.locked.push(dir.clone());
        Ok(Box::new(SimLock {
            disk: self.disk.clone(),
            dir,
        }))
    }
}

struct SimLock {
    disk: Arc<Mutex<Disk>>,
    dir: PathBuf,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        if let Ok(mut disk) = self.disk.lock() {
            disk.locked.retain(|d| *d != self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_data_survives_and_unsynced_renames_do_not() {
        let vfs = SimVfs::new();
        vfs.create_dir_all(Path::new("/d")).unwrap();
        vfs.sync_dir(Path::new("/")).unwrap();
        vfs.write_atomic(Path::new("/d/a"), b"one").unwrap();
        // Written and synced, but its directory entry never was.
        let f = vfs.open(Path::new("/d/b"), Open::CreateNew).unwrap();
        f.write_at(b"two", 0).unwrap();
        f.sync().unwrap();
        let tmp = vfs.open(Path::new("/d/a.new"), Open::CreateNew).unwrap();
        tmp.write_at(b"three", 0).unwrap();
        tmp.sync().unwrap();
        vfs.rename(Path::new("/d/a.new"), Path::new("/d/a"))
            .unwrap();
        for seed in 0..50 {
            let (after, _) = vfs.reboot(&mut SimRng::new(seed));
            let a = after.contents(Path::new("/d/a")).unwrap();
            assert!(a == b"one" || a == b"three", "{a:?}");
            // The rename is atomic: the new name never appears beside the old one.
            if a == b"three" {
                assert!(!after.exists(Path::new("/d/a.new")), "seed {seed}");
            }
        }
        let mut lost_b = false;
        for seed in 0..50 {
            lost_b |= !vfs
                .reboot(&mut SimRng::new(seed))
                .0
                .exists(Path::new("/d/b"));
        }
        assert!(lost_b, "an entry never synced is lost in some crash");
    }

    #[test]
    fn unsynced_writes_are_lost_torn_or_scattered() {
        let vfs = SimVfs::new();
        vfs.create_dir_all(Path::new("/d")).unwrap();
        let f = vfs.open(Path::new("/d/log"), Open::Create).unwrap();
        vfs.sync_dir(Path::new("/d")).unwrap();
        vfs.sync_dir(Path::new("/")).unwrap();
        f.append(&[1u8; 5000]).unwrap();
        f.sync().unwrap();
        f.append(&[2u8; 20000]).unwrap();
        let mut seen_hole = false;
        let mut seen_short = false;
        for seed in 0..200 {
            let (after, _) = vfs.reboot(&mut SimRng::new(seed));
            let data = after.contents(Path::new("/d/log")).unwrap();
            assert!(data.len() >= 5000 && data[..5000].iter().all(|&b| b == 1));
            assert!(data[5000..].iter().all(|&b| b == 2 || b == 0));
            seen_short |= data.len() < 25000;
            seen_hole |= data[5000..].windows(2).any(|w| w[0] == 0 && w[1] == 2);
        }
        assert!(seen_hole && seen_short);
        // After the crash the old disk is dead.
        assert!(f.append(b"x").is_err());
    }

    #[test]
    fn the_crash_point_stops_every_later_call() {
        let vfs = SimVfs::new();
        let f = vfs.open(Path::new("/log"), Open::Create).unwrap();
        vfs.crash_after(2);
        f.append(b"a").unwrap();
        assert!(f.sync().is_err());
        assert!(f.append(b"b").is_err());
        assert!(vfs.crashed());
    }
}
