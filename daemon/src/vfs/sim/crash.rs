//! The crash model: what a power failure leaves of the disk. Directories keep a random prefix
//! of their changes since `sync_dir`, only what a durable path reaches survives, and each file
//! keeps its synced data plus none, all, a torn prefix or a scattered subset of the later
//! pages (see the model in `sim`). Apart because it is the part a reviewer of a power-loss
//! finding reads first.

use std::collections::HashMap;

use super::disk::{DirNode, DirOp, Disk, FileNode, Ino, Node, Pending, ROOT, apply};
use super::rng::SimRng;

/// What a crash cost, for the test's report.
#[derive(Debug, Default, Clone, Copy)]
pub struct CrashReport {
    pub files_reverted: usize,
    pub pages_dropped: usize,
    pub entries_reverted: usize,
}

/// The disk a power failure leaves of `old`: every directory and file back at its last sync,
/// plus whatever part of the later changes `rng` lets through.
pub(super) fn after_power_loss(old: &Disk, rng: &mut SimRng) -> (Disk, CrashReport) {
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
    (disk, report)
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
