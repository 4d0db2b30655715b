//! Unit tests of the simulated disk: what survives a crash, and that nothing runs after it.

use std::path::Path;

use super::fs::SimVfs;
use super::rng::SimRng;
use crate::vfs::{Open, Vfs};

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
