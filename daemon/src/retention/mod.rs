//! Retention: sessions whose last event is older than `[retention] delete_after` are deleted
//! (the store leaves a tombstone, see `store::tombstone`), by `gc` on demand and by a task
//! that runs at start and every `retention.every`, off the append path. Age is the timestamp
//! of a session's last event as stored in its log, never a file's modification time.
//!
//! Never deleted: a session with a pending checkpoint (a person still has to decide), or one
//! the relay has not finished sending (the relay on, the session relayed, its remote stream
//! behind the local log). Nothing remote is ever deleted.

use std::sync::{Arc, Mutex};

use dstream_sdk::protocol::{GcResult, GcSession};
use tokio::sync::Notify;

use crate::checkpoint::Checkpoints;
use crate::config::RetentionConfig;
use crate::relay::Relay;
use crate::store::{Session, Store, StoreError};

pub struct Retention {
    store: Store,
    checkpoints: Arc<Checkpoints>,
    relay: Arc<Relay>,
    config: Mutex<RetentionConfig>,
    /// Told when the configuration changes: the task looks again.
    changed: Notify,
    /// One run at a time.
    running: tokio::sync::Mutex<()>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

/// Why `session` must be kept whatever its age, if it must.
fn kept_because(s: &Session, checkpoints: &Checkpoints, relay: &Relay) -> Option<String> {
    if s.quarantine().is_some() {
        return Some("quarantined: `dstream repair` it first".into());
    }
    let pending = checkpoints.pending_in(&s.id);
    if pending > 0 {
        return Some(format!("{pending} pending checkpoint(s)"));
    }
    if s.durable_lsn() < s.committed_lsn() {
        return Some("its last events are not synced yet".into());
    }
    if let Some((acked, local)) = relay.unrelayed(s) {
        return Some(format!(
            "not relayed yet: the remote stream holds lsn {acked} of {local}"
        ));
    }
    None
}

impl Retention {
    /// Starts the periodic task (it does nothing while `delete_after` is "off").
    pub fn start(
        store: Store,
        checkpoints: Arc<Checkpoints>,
        relay: Arc<Relay>,
        config: &RetentionConfig,
    ) -> Arc<Retention> {
        let this = Arc::new(Retention {
            store,
            checkpoints,
            relay,
            config: Mutex::new(config.clone()),
            changed: Notify::new(),
            running: tokio::sync::Mutex::new(()),
            task: Mutex::new(None),
        });
        // Holds the component until `stop` aborts it.
        let this2 = this.clone();
        let task = tokio::spawn(async move {
            let this = this2;
            loop {
                let config = this.config.lock().unwrap().clone();
                if config.delete_after().is_some() {
                    match this.run(false).await {
                        Ok(r) if !r.deleted.is_empty() => tracing::info!(
                            deleted = r.deleted.len(),
                            bytes = r.total_bytes,
                            kept = r.kept.len(),
                            "retention deleted sessions past delete_after"
                        ),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "retention run failed"),
                    }
                }
                let changed = this.changed.notified();
                tokio::select! {
                    () = tokio::time::sleep(config.every()) => {}
                    () = changed => {}
                }
            }
        });
        *this.task.lock().unwrap() = Some(task.abort_handle());
        this
    }

    pub fn config(&self) -> RetentionConfig {
        self.config.lock().unwrap().clone()
    }

    pub fn reconfigure(&self, config: &RetentionConfig) {
        *self.config.lock().unwrap() = config.clone();
        self.changed.notify_one();
    }

    pub fn stop(&self) {
        if let Some(t) = self.task.lock().unwrap().take() {
            t.abort();
        }
    }

    /// Deletes every session past `delete_after` that nothing keeps (or, `dry_run`, says
    /// which would go). Sessions are deleted one at a time, so appends wait at most for one.
    pub async fn run(&self, dry_run: bool) -> Result<GcResult, String> {
        let config = self.config();
        let Some(age) = config.delete_after() else {
            return Err(
                "retention.delete_after is \"off\"; set it (e.g. \"30d\") to delete old sessions"
                    .into(),
            );
        };
        let _one_at_a_time = self.running.lock().await;
        let cutoff_ms = crate::util::time::now_ms().saturating_sub(age.as_millis() as u64);
        let (store, checkpoints, relay) = (
            self.store.clone(),
            self.checkpoints.clone(),
            self.relay.clone(),
        );
        // Ledger reads block: the plan is made off the async workers.
        let plan = tokio::task::spawn_blocking(move || {
            let mut plan = Vec::new();
            for s in store.sessions() {
                let meta = s.meta();
                if meta.last_ts >= cutoff_ms {
                    continue;
                }
                let entry = GcSession {
                    session_id: s.id.clone(),
                    last_ts: meta.last_ts,
                    last_lsn: s.committed_lsn(),
                    bytes: meta.bytes,
                    kept_because: kept_because(&s, &checkpoints, &relay),
                };
                plan.push(entry);
            }
            plan
        })
        .await
        .map_err(|e| e.to_string())?;
        let (mut deleted, mut kept): (Vec<_>, Vec<_>) =
            plan.into_iter().partition(|s| s.kept_because.is_none());
        if !dry_run {
            let mut done = Vec::with_capacity(deleted.len());
            for s in deleted {
                let reason = format!(
                    "retention: its last event ({}) was older than delete_after = {:?}",
                    crate::util::time::rfc3339(s.last_ts),
                    config.delete_after
                );
                match self.store.delete(&s.session_id, s.last_lsn, reason).await {
                    Ok(_) => done.push(s),
                    Err(StoreError::ShuttingDown) => return Err("shutting down".into()),
                    Err(e) => kept.push(GcSession {
                        kept_because: Some(e.to_string()),
                        ..s
                    }),
                }
            }
            deleted = done;
        }
        let total_bytes = deleted.iter().map(|s| s.bytes).sum();
        Ok(GcResult {
            dry_run,
            delete_after: config.delete_after,
            cutoff_ms,
            deleted,
            kept,
            total_bytes,
        })
    }
}
