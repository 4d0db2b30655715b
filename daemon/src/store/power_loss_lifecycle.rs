//! Power-loss simulation of fork, deletion and compression (see `power_loss` for the disk):
//! the power fails at every call one of them makes, in turn; after the restart the fork is
//! either whole (its parent's events 1..=k, its origin recorded) or absent with its id free,
//! the deleted session either whole or gone with its tombstone, the compressed session reads
//! the same events (and an append acknowledged after it is there); nothing is quarantined.

use std::path::Path;
use std::sync::Arc;

use super::Store;
use super::error::StoreError;
use super::power_loss::{DATA, new_disk, runtime};
use crate::config::FsyncPolicy;
use crate::hub::Hub;
use crate::vfs::sim::{SimRng, SimVfs};

fn settings() -> super::StoreSettings {
    super::StoreSettings {
        fsync: FsyncPolicy::Always,
        fsync_interval_ms: 3_600_000,
        index_interval_bytes: 512,
        verify_on_start: true,
        max_open_files: 4,
        wal_bytes: 64 << 10,
        pipeline_syncs_over: super::PIPELINE_SYNCS_OVER,
    }
}

async fn open(vfs: &SimVfs) -> Result<Store, StoreError> {
    Store::open_on(
        Arc::new(vfs.clone()),
        Path::new(DATA),
        settings(),
        Hub::new(1 << 20),
    )
    .await
    .map(|(s, _)| s)
}

async fn events(store: &Store, session: &str) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
    let page = store.read(session, 1, 10_000).await?;
    Ok(page
        .events
        .iter()
        .map(|e| {
            let mut json = Vec::new();
            e.write_to(&mut json);
            (e.lsn, json)
        })
        .collect())
}

fn event(n: u64) -> super::NewEventRaw {
    serde_json::from_value(
        serde_json::json!({"type": "t", "payload": {"n": n, "pad": "p".repeat(90)}}),
    )
    .unwrap()
}

/// A disk with sessions `p` (40 events) and `q` (10), cleanly shut down.
async fn prepared() -> SimVfs {
    let vfs = new_disk();
    let store = open(&vfs).await.unwrap();
    for n in 0..40 {
        store.append_wait("p", event(n), false).await.unwrap();
    }
    for n in 0..10 {
        store.append_wait("q", event(n), false).await.unwrap();
    }
    store.shutdown().await;
    vfs
}

/// Cuts the power now, reboots (what survives of unsynced writes drawn from `seed`) and opens
/// the store again.
async fn restart_after_power_loss(
    vfs: SimVfs,
    store: Store,
    after: u64,
    seed: u64,
) -> (SimVfs, Store) {
    vfs.crash_now();
    drop(store);
    let (vfs, _) = vfs.reboot(&mut SimRng::new(seed));
    let store = open(&vfs)
        .await
        .unwrap_or_else(|e| panic!("crash after {after} calls: restart failed: {e}"));
    (vfs, store)
}

/// Compresses `session` off the async workers, as the daemon does.
async fn compress(store: &Store, session: &'static str) -> Result<(), StoreError> {
    let s = store.clone();
    tokio::task::spawn_blocking(move || s.compress_blocking(session))
        .await
        .unwrap()
        .map(|_| ())
}

/// Runs `scenario(after, seed)` with the power cut after 1, 2, 3, … calls, a few reboots each
/// (what a power failure keeps of unsynced writes varies), until it finishes uncut; `what` it
/// does must make more than 5 calls.
fn cut_at_each_call<F>(what: &str, seed_base: u64, scenario: impl Fn(u64, u64) -> F)
where
    F: std::future::Future<Output = bool>,
{
    let rt = runtime();
    for after in 1.. {
        let finished = (0..4).fold(false, |_, seed| {
            rt.block_on(scenario(after, after * seed_base + seed))
        });
        if finished {
            assert!(after > 5, "{what} made only {after} calls");
            eprintln!("cut at each of the {} calls {what} make", after - 1);
            break;
        }
    }
}

async fn crash_during(after: u64, seed: u64) -> bool {
    let vfs = prepared().await;
    let store = open(&vfs).await.unwrap();
    let p = events(&store, "p").await.unwrap();
    let q = events(&store, "q").await.unwrap();
    vfs.crash_after(after);
    let forked = store.fork("p", 25, "f").await;
    let deleted = store.delete("q", 10, "test".into()).await;
    let finished = !vfs.crashed();
    let (vfs, store) = restart_after_power_loss(vfs, store, after, seed).await;
    for s in store.sessions() {
        assert!(
            s.quarantine().is_none(),
            "crash after {after}: {} quarantined",
            s.id
        );
    }
    assert_eq!(
        events(&store, "p").await.unwrap(),
        p,
        "crash after {after}: parent"
    );
    match events(&store, "f").await {
        Ok(f) => {
            assert_eq!(f[..], p[..25], "crash after {after}: the fork is whole");
            let origin = store.get("f").and_then(|s| s.fork().cloned());
            assert_eq!(
                origin.map(|o| (o.forked_from, o.fork_lsn)),
                Some(("p".into(), 25))
            );
        }
        Err(StoreError::NotFound(_)) => {
            assert!(
                forked.is_err(),
                "crash after {after}: an acknowledged fork is lost"
            );
            // The id is free: the fork can be made now.
            store.fork("p", 25, "f").await.unwrap();
        }
        Err(e) => panic!("crash after {after}: reading the fork: {e}"),
    }
    match events(&store, "q").await {
        Ok(got) => {
            assert!(
                deleted.is_err(),
                "crash after {after}: an acknowledged deletion undone"
            );
            assert_eq!(got, q, "crash after {after}: q is whole");
        }
        Err(StoreError::Gone { .. }) => {
            assert!(
                vfs.contents(&Path::new(DATA).join("sessions/q.jsonl"))
                    .is_none()
            );
        }
        Err(e) => panic!("crash after {after}: reading q: {e}"),
    }
    store.shutdown().await;
    finished
}

#[test]
fn a_fork_or_a_deletion_cut_by_a_power_failure_is_all_or_nothing() {
    cut_at_each_call("a fork and a deletion", 7919, crash_during);
}

/// Compresses `p`, then appends to it, with the power failing after `after` calls.
async fn crash_compressing(after: u64, seed: u64) -> bool {
    let vfs = prepared().await;
    let store = open(&vfs).await.unwrap();
    let p = events(&store, "p").await.unwrap();
    vfs.crash_after(after);
    let compressed = compress(&store, "p").await;
    let appended = compressed.is_ok() && store.append_wait("p", event(40), false).await.is_ok();
    let finished = !vfs.crashed();
    let (_, store) = restart_after_power_loss(vfs, store, after, seed).await;
    let quarantined = store.get("p").and_then(|s| s.quarantine().cloned());
    assert!(
        quarantined.is_none(),
        "crash after {after}: {quarantined:?}"
    );
    let got = events(&store, "p").await.unwrap();
    assert_eq!(
        got[..40],
        p[..],
        "crash after {after}: the compressed events"
    );
    match got.len() {
        40 => assert!(
            !appended,
            "crash after {after}: an acknowledged append is lost"
        ),
        41 => assert_eq!(got[40].0, 41, "crash after {after}"),
        n => panic!("crash after {after}: {n} events"),
    }
    // Whatever form it was left in, it compresses (again) and still reads the same.
    compress(&store, "p")
        .await
        .unwrap_or_else(|e| panic!("crash after {after}: compressing again: {e}"));
    assert_eq!(
        events(&store, "p").await.unwrap(),
        got,
        "crash after {after}"
    );
    store.shutdown().await;
    finished
}

#[test]
fn a_compression_cut_by_a_power_failure_leaves_one_whole_form() {
    cut_at_each_call("a compression and an append", 6271, crash_compressing);
}

/// A disk that fills up while a session is compressed: the compression fails with the error,
/// the old form stays (reads, appends once there is room), nothing is left behind, and it
/// compresses once space is freed.
#[test]
fn a_full_disk_during_compression_keeps_the_old_form() {
    runtime().block_on(async {
        let vfs = prepared().await;
        let store = open(&vfs).await.unwrap();
        let p = events(&store, "p").await.unwrap();
        let sessions = Path::new(DATA).join("sessions");
        let before = vfs.used();
        vfs.set_capacity(Some(before + 64));
        let err = compress(&store, "p")
            .await
            .expect_err("compressing on a full disk");
        assert!(err.to_string().contains("no space"), "{err}");
        assert_eq!(vfs.used(), before, "nothing left behind");
        assert!(vfs.contents(&sessions.join("p.zst")).is_none());
        assert_eq!(events(&store, "p").await.unwrap(), p, "the old form reads");
        assert!(store.get("p").unwrap().quarantine().is_none());

        vfs.set_capacity(None);
        store.append_wait("p", event(40), false).await.unwrap();
        compress(&store, "p").await.unwrap();
        let got = events(&store, "p").await.unwrap();
        assert_eq!((got.len(), &got[..40]), (41, &p[..]));
        store.shutdown().await;
    });
}
