//! Checkpoint scenarios (dstream only; the reference has no such thing): the round trip of one
//! checkpoint decided by a program at once, and the memory a daemon holds per pending one.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::rpc::Rpc;

/// Round trips: `checkpoint.request` (durable) → a deciding program's `checkpoint.resolve`
/// (durable) → the waiting client's `checkpoint.await` answer (then the delivery is recorded).
/// The decider runs on its own connection and thread, as `dstream approve` would, and decides
/// as soon as it hears of the id. Returns the latencies in ns.
pub fn round_trips(socket: &Path, n: usize) -> Result<Vec<u64>> {
    let (ids_tx, ids_rx) = mpsc::channel::<String>();
    let decider = {
        let socket = socket.to_path_buf();
        std::thread::spawn(move || -> Result<()> {
            let mut rpc = Rpc::connect(&socket)?;
            for id in ids_rx {
                rpc.call(
                    "checkpoint.resolve",
                    &format!("{{\"id\":\"{id}\",\"decision\":\"approve\"}}"),
                )?;
            }
            Ok(())
        })
    };
    let mut rpc = Rpc::connect(socket)?;
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let t0 = Instant::now();
        let cp = rpc.call(
            "checkpoint.request",
            &format!(
                "{{\"session_id\":\"bench-cp\",\"key\":\"k{i}\",\"tool\":\"Bash\",\
                 \"input\":{{\"command\":\"make test\"}},\"timeout_ms\":60000}}"
            ),
        )?;
        let id = cp["id"].as_str().context("no checkpoint id")?.to_string();
        ids_tx.send(id.clone())?;
        let done = rpc.call("checkpoint.await", &format!("{{\"id\":\"{id}\"}}"))?;
        if done["state"] != "approved" {
            bail!("checkpoint {id} ended {}", done["state"]);
        }
        lat.push(t0.elapsed().as_nanos() as u64);
    }
    drop(ids_tx);
    decider
        .join()
        .map_err(|_| anyhow::anyhow!("the decider panicked"))??;
    Ok(lat)
}

/// Opens `total` pending checkpoints over `conns` connections (spread over 100 sessions, an
/// hour's deadline each) and returns the time it took.
pub fn open_pending(socket: &Path, total: u64, conns: u64) -> Result<Duration> {
    let t0 = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..conns)
            .map(|c| {
                s.spawn(move || -> Result<()> {
                    let mut rpc = Rpc::connect(socket)?;
                    let mut i = c;
                    while i < total {
                        rpc.call(
                            "checkpoint.request",
                            &format!(
                                "{{\"session_id\":\"held-{}\",\"key\":\"k{i}\",\"tool\":\"Bash\",\
                                 \"input\":{{\"command\":\"echo {i}\"}},\"timeout_ms\":3600000}}",
                                i % 100
                            ),
                        )?;
                        i += conns;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("a loader panicked"))??;
        }
        Ok(())
    })?;
    Ok(t0.elapsed())
}
