//! Appends from C through the library's `ds_append` (threads sharing one client), next to the
//! Rust SDK doing the same (tasks sharing one async client): what the C ABI costs.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Builds ffi/examples/c/bench_append.c and runs it: appends/s at `threads` threads.
pub fn c_appends(
    repo: &Path,
    lib_dir: &Path,
    socket: &Path,
    threads: usize,
    secs: f64,
) -> Result<f64> {
    let out = repo.join(".bench-cache/bench_append");
    let status = Command::new("cc")
        .args(["-O2", "-I"])
        .arg(repo.join("ffi/include"))
        .arg(repo.join("ffi/examples/c/bench_append.c"))
        .arg("-L")
        .arg(lib_dir)
        .args(["-ldstream_ffi", "-lpthread", "-o"])
        .arg(&out)
        .status()
        .context("running cc")?;
    if !status.success() {
        bail!("cc failed to build bench_append.c");
    }
    let run = Command::new(&out)
        .arg(socket)
        .arg(threads.to_string())
        .arg(secs.to_string())
        .env("LD_LIBRARY_PATH", lib_dir)
        .output()?;
    if !run.status.success() {
        bail!(
            "bench_append failed: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let text = String::from_utf8_lossy(&run.stdout);
    text.trim()
        .strip_prefix("appends/s ")
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("bench_append printed {text:?}"))
}

/// The Rust SDK: `tasks` tasks on one async client, each appending to its own session.
pub fn sdk_appends(socket: &Path, tasks: usize, secs: f64) -> Result<f64> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = dstream_sdk::Client::connect(socket).await?;
        let done = Arc::new(AtomicU64::new(0));
        let end = Instant::now() + Duration::from_secs_f64(secs);
        let started = Instant::now();
        let mut handles = Vec::new();
        for k in 0..tasks {
            let (client, done) = (client.clone(), done.clone());
            handles.push(tokio::spawn(async move {
                let session = format!("sdk-bench-{k}");
                let pad = "x".repeat(199);
                while Instant::now() < end {
                    let e = dstream_sdk::NewEvent::new("bench.event")
                        .payload(serde_json::json!({ "pad": pad }));
                    client.append(&session, e).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<_, dstream_sdk::Error>(())
            }));
        }
        for h in handles {
            h.await??;
        }
        Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
    })
}
