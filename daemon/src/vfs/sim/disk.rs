//! The simulated disk in memory: files and directories by inode, each with what it holds now,
//! what it held at its last sync (durable) and the changes since (pending), plus the power
//! switch every mutating call goes through. Apart from the crash model (`crash`) and the
//! `Vfs` calls (`fs`), which both work on it.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};

pub(super) type Ino = u64;
pub(super) const ROOT: Ino = 1;

#[derive(Debug, Clone)]
pub(super) enum Pending {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone, Default)]
pub(super) struct FileNode {
    pub(super) data: Vec<u8>,
    pub(super) durable: Vec<u8>,
    /// Changes since the last sync, in order.
    pub(super) pending: Vec<Pending>,
}

#[derive(Debug, Clone)]
pub(super) enum DirOp {
    Link(OsString, Ino),
    Unlink(OsString),
    /// Within one directory: atomic, as rename(2) is.
    Rename(OsString, OsString, Ino),
}

#[derive(Debug, Clone, Default)]
pub(super) struct DirNode {
    pub(super) entries: BTreeMap<OsString, Ino>,
    pub(super) durable: BTreeMap<OsString, Ino>,
    pub(super) pending: Vec<DirOp>,
}

#[derive(Debug, Clone)]
pub(super) enum Node {
    File(FileNode),
    Dir(DirNode),
}

#[derive(Debug, Default)]
pub(super) struct Disk {
    pub(super) nodes: HashMap<Ino, Node>,
    pub(super) next_ino: Ino,
    /// Mutating calls so far.
    pub(super) mutations: u64,
    /// The call that loses power (counted in mutations).
    pub(super) crash_at: Option<u64>,
    pub(super) crashed: bool,
    pub(super) locked: Vec<PathBuf>,
    /// Temporary names handed out (see `Vfs::temp_seq`).
    pub(super) temp_seq: u64,
    /// Bytes the files may hold in all: a write that would grow them past it fails with
    /// `StorageFull` and changes nothing, as a full disk does.
    pub(super) capacity: Option<u64>,
}

pub(super) fn dead() -> io::Error {
    io::Error::other("simulated power failure: the machine is off")
}

pub(super) fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

/// The names along an absolute or relative path, `.` and `..` resolved lexically.
pub(super) fn components(path: &Path) -> Vec<OsString> {
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
    pub(super) fn mutate(&mut self) -> io::Result<()> {
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

    /// Bytes all files hold now.
    pub(super) fn used(&self) -> u64 {
        self.nodes
            .values()
            .map(|n| match n {
                Node::File(f) => f.data.len() as u64,
                Node::Dir(_) => 0,
            })
            .sum()
    }

    /// Fails with `StorageFull` when growing a file from `from` to `to` bytes would pass the
    /// capacity.
    pub(super) fn room_for(&self, from: u64, to: u64) -> io::Result<()> {
        match self.capacity {
            Some(cap) if to > from && self.used() + (to - from) > cap => Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "simulated disk: no space left on device",
            )),
            _ => Ok(()),
        }
    }

    pub(super) fn alive(&self) -> io::Result<()> {
        if self.crashed { Err(dead()) } else { Ok(()) }
    }

    pub(super) fn dir(&self, ino: Ino) -> Option<&DirNode> {
        match self.nodes.get(&ino) {
            Some(Node::Dir(d)) => Some(d),
            _ => None,
        }
    }

    pub(super) fn dir_mut(&mut self, ino: Ino) -> Option<&mut DirNode> {
        match self.nodes.get_mut(&ino) {
            Some(Node::Dir(d)) => Some(d),
            _ => None,
        }
    }

    pub(super) fn file_mut(&mut self, ino: Ino) -> io::Result<&mut FileNode> {
        match self.nodes.get_mut(&ino) {
            Some(Node::File(f)) => Ok(f),
            _ => Err(io::Error::other("not a file")),
        }
    }

    pub(super) fn lookup(&self, names: &[OsString]) -> Option<Ino> {
        let mut at = ROOT;
        for name in names {
            at = *self.dir(at)?.entries.get(name)?;
        }
        Some(at)
    }

    /// The directory holding `path` and the file name in it.
    pub(super) fn parent_of(&self, path: &Path) -> io::Result<(Ino, OsString)> {
        let mut names = components(path);
        let name = names.pop().ok_or_else(|| not_found(path))?;
        match self.lookup(&names) {
            Some(ino) if self.dir(ino).is_some() => Ok((ino, name)),
            _ => Err(not_found(path)),
        }
    }

    pub(super) fn new_node(&mut self, node: Node) -> Ino {
        self.next_ino += 1;
        self.nodes.insert(self.next_ino, node);
        self.next_ino
    }

    pub(super) fn link(&mut self, dir: Ino, name: OsString, ino: Ino) {
        let d = self.dir_mut(dir).expect("a directory");
        d.entries.insert(name.clone(), ino);
        d.pending.push(DirOp::Link(name, ino));
    }

    pub(super) fn unlink(&mut self, dir: Ino, name: &OsStr) -> Option<Ino> {
        let d = self.dir_mut(dir).expect("a directory");
        let ino = d.entries.remove(name)?;
        d.pending.push(DirOp::Unlink(name.to_owned()));
        Some(ino)
    }
}

pub(super) fn apply(data: &mut Vec<u8>, change: &Pending) {
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
