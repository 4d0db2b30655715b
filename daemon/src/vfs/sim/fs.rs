//! The simulated disk seen through [`Vfs`]: [`SimVfs`], its open files and its locks. Every
//! mutating call counts towards the crash point and fails once the power is gone; reads fail
//! too. Apart from the disk itself (`disk`) and the crash model (`crash`).

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::crash::{CrashReport, after_power_loss};
use super::disk::{
    DirNode, DirOp, Disk, FileNode, Ino, Node, Pending, ROOT, apply, components, not_found,
};
use super::rng::SimRng;
use crate::vfs::{LockError, Open, Vfs, VfsFile, VfsFileRef, VfsLock};

/// The simulated file system. Cheap to clone: clones share one disk.
#[derive(Debug, Clone)]
pub struct SimVfs {
    disk: Arc<Mutex<Disk>>,
    /// Let the store spread work over threads (its pipelined WAL sync): then a seed no longer
    /// replays exactly, but that code path is what runs on a real disk.
    threads: bool,
}

impl Default for SimVfs {
    fn default() -> Self {
        SimVfs::new()
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
            threads: false,
        }
    }

    /// The same disk, taking calls from several threads of the store (see `threads`).
    pub fn with_threads(mut self) -> SimVfs {
        self.threads = true;
        self
    }

    /// Loses power at the `n`-th mutating call from now (1 = the next one).
    pub fn crash_after(&self, n: u64) {
        let mut disk = self.disk.lock().unwrap();
        disk.crash_at = Some(disk.mutations + n.max(1));
    }

    /// Limits what the files may hold in all (`None`: no limit); see `Disk::capacity`.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.disk.lock().unwrap().capacity = bytes;
    }

    /// Bytes all files hold now.
    pub fn used(&self) -> u64 {
        self.disk.lock().unwrap().used()
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
        let (disk, report) = after_power_loss(&old, rng);
        (
            SimVfs {
                disk: Arc::new(Mutex::new(disk)),
                threads: self.threads,
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

struct SimFile {
    disk: Arc<Mutex<Disk>>,
    ino: Ino,
}

impl SimFile {
    fn change(&self, change: Pending) -> io::Result<()> {
        let mut disk = self.disk.lock().unwrap();
        disk.mutate()?;
        let len = disk.file_mut(self.ino)?.data.len() as u64;
        let new_len = match &change {
            Pending::Write { offset, bytes } => len.max(offset + bytes.len() as u64),
            Pending::SetLen(l) => *l,
        };
        disk.room_for(len, new_len)?;
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

    /// As zeros written over the range (a hole reads as zeros; like a write, it is lost or
    /// torn by a power failure before the next sync).
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<bool> {
        let end = self.len()?.min(offset.saturating_add(len));
        if end > offset {
            self.write_at(&vec![0; (end - offset) as usize], offset)?;
        }
        Ok(true)
    }
}

impl Vfs for SimVfs {
    fn concurrent(&self) -> bool {
        self.threads
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
