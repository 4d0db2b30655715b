//! Hot reload: watches the plugin folder and the configuration file (notify), and after a
//! quiet moment (debounce: editors write a file in several steps) has the pipeline reload,
//! which reads the configuration again through the config feed and rebuilds the plugin set.
//! The pipeline validates the new set before swapping it in; a broken file keeps its last
//! good version running and the error is shown by `plugins.list`.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};

use crate::pipeline::Pipeline;

/// Quiet time after the last change before reloading.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// What the watch thread is told: a path that changed, or to stop.
enum Msg {
    Changed(PathBuf),
    Stop,
}

/// The running watch; [`Watcher::stop`] (or dropping it) ends it.
pub struct Watcher {
    tx: Mutex<mpsc::Sender<Msg>>,
}

impl Watcher {
    pub fn stop(&self) {
        let _ = self.tx.lock().unwrap().send(Msg::Stop);
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts watching; `None` (and a warning) when the OS refuses a watch: the daemon still
/// runs, and `plugins.reload` still works. A change to the config file or a plugin file
/// makes the pipeline reload, which reads the file again through the config feed (a changed
/// configuration then reaches every component).
pub fn start(pipeline: Arc<Pipeline>, config_file: Option<PathBuf>) -> Option<Watcher> {
    let (tx, rx) = mpsc::channel::<Msg>();
    let notify_tx = tx.clone();
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(event) = res
            && !matches!(event.kind, notify::EventKind::Access(_))
        {
            for path in event.paths {
                let _ = notify_tx.send(Msg::Changed(path));
            }
        }
    });
    let mut watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch for plugin changes; use `dstream plugins reload`");
            return None;
        }
    };
    let absolute = |d: PathBuf| std::path::absolute(&d).unwrap_or(d);
    let mut dir = absolute(pipeline.settings().plugins.dir);
    watch_dir(&mut watcher, &dir);
    let config_file = config_file.map(|f| std::path::absolute(&f).unwrap_or(f));
    if let Some(parent) = config_file.as_deref().and_then(Path::parent) {
        // The folder, not the file: editors replace a file by renaming a new one over it.
        watch_dir(&mut watcher, parent);
    }
    let weak: Weak<Pipeline> = Arc::downgrade(&pipeline);
    drop(pipeline);
    let spawned = std::thread::Builder::new()
        .name("dstream-watch".into())
        .spawn(move || {
            while let Ok(Msg::Changed(first)) = rx.recv() {
                let mut relevant = concerns(&first, &dir, config_file.as_deref());
                // Debounce: wait until the changes stop for a moment.
                loop {
                    match rx.recv_timeout(DEBOUNCE) {
                        Ok(Msg::Changed(p)) => {
                            relevant |= concerns(&p, &dir, config_file.as_deref())
                        }
                        Ok(Msg::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                        Err(mpsc::RecvTimeoutError::Timeout) => break,
                    }
                }
                if !relevant {
                    continue;
                }
                let Some(pipeline) = weak.upgrade() else {
                    return;
                };
                let set = pipeline.reload();
                if absolute(set.dir.clone()) != dir {
                    let _ = watcher.unwatch(&dir);
                    dir = absolute(set.dir.clone());
                    watch_dir(&mut watcher, &dir);
                }
            }
        });
    match spawned {
        Ok(_) => Some(Watcher { tx: Mutex::new(tx) }),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the plugin watcher");
            None
        }
    }
}

fn watch_dir(watcher: &mut RecommendedWatcher, dir: &Path) {
    if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot watch for changes; use `dstream plugins reload`");
    }
}

/// A change to a plugin file, or to the config file.
fn concerns(path: &Path, plugin_dir: &Path, config_file: Option<&Path>) -> bool {
    if config_file.is_some_and(|c| c == path) {
        return true;
    }
    let dir = std::path::absolute(plugin_dir).unwrap_or_else(|_| plugin_dir.to_path_buf());
    path.parent() == Some(dir.as_path())
        && path.file_name().is_some_and(|n| {
            let n = n.to_string_lossy();
            n.ends_with(".lua") || crate::plugins::native::is_native_file(&n)
        })
}
