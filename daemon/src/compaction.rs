//! Compressing finished sessions in the background: every so often, each session whose last
//! event is `lifecycle.session.ended` and that has had no event for `retention.compress_after`
//! is compressed (see `store::compress`), one at a time, off the append path. A resumed
//! session takes appends as before and is compressed again, further, once it is idle again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::component::{Component, Stopping};
use crate::config::Config;
use crate::store::{NewEventRaw, Session, Store};

/// The event that says a session was archived and names the stream it continues in.
pub(crate) const ARCHIVED: &str = "lifecycle.session.archived";
use crate::util::time::now_ms;

/// The longest wait between two passes, and the shortest.
const MAX_PASS_EVERY: Duration = Duration::from_secs(60);
const MIN_PASS_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct Compaction {
    after: watch::Sender<Option<Duration>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Compaction {
    pub(crate) fn start(store: Store, config: &Config) -> Arc<Compaction> {
        let (after, mut rx) = watch::channel(config.retention.compress_after());
        let task = tokio::spawn(async move {
            loop {
                let after = *rx.borrow_and_update();
                if let Some(after) = after {
                    pass(&store, after).await;
                }
                let every = after.map_or(MAX_PASS_EVERY, |a| {
                    (a / 2).clamp(MIN_PASS_EVERY, MAX_PASS_EVERY)
                });
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    changed = rx.changed() => if changed.is_err() { return },
                }
            }
        });
        Arc::new(Compaction {
            after,
            task: Mutex::new(Some(task)),
        })
    }
}

/// Compresses, one after the other, the sessions that are due.
async fn pass(store: &Store, after: Duration) {
    let due: Vec<Arc<Session>> = store
        .sessions()
        .into_iter()
        .filter(|s| is_due(s, after))
        .collect();
    for session in due {
        // Readers and the relay learn that the session is archived, and where a resumed one
        // continues remotely: its stream closes, the next one is `<session>~<generation>`.
        let generation = store.archive_generation(&session.id) + 1;
        let announced = serde_json::json!({
            "reason": "idle after it ended; compressed",
            "continues_in": format!("{}~{generation}", session.id),
        });
        let event = NewEventRaw {
            event_type: ARCHIVED.into(),
            actor: Some("dstream".into()),
            payload: serde_json::value::to_raw_value(&announced).ok(),
            ..Default::default()
        };
        if let Err(e) = store.append_wait(&session.id, event, true).await {
            tracing::warn!(session = %session.id, error = %e, "cannot announce the archive; not compressed");
            continue;
        }
        let (store, id) = (store.clone(), session.id.clone());
        let done =
            tokio::task::spawn_blocking(move || store.compress_as(&id, Some(generation))).await;
        match done {
            Ok(Ok(Some(c))) => tracing::info!(
                session = %session.id, upto_lsn = c.upto_lsn, log_bytes = c.log_bytes,
                archive_bytes = c.archive_bytes, freed = c.freed, "compressed a finished session"
            ),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => {
                tracing::warn!(session = %session.id, error = %e, "cannot compress a session; it stays as it is")
            }
            Err(e) => {
                tracing::warn!(session = %session.id, error = %e, "the compression task failed")
            }
        }
    }
}

/// Ended, idle long enough, not damaged, and with synced events the archive lacks.
fn is_due(session: &Session, after: Duration) -> bool {
    if session.quarantine().is_some() {
        return false;
    }
    let durable = session.durable_lsn();
    let archived = session
        .archive
        .read()
        .unwrap()
        .as_ref()
        .map_or(0, |a| a.footer.upto_lsn);
    if durable <= archived {
        return false;
    }
    if session
        .meta()
        .last_ts
        .saturating_add(after.as_millis() as u64)
        > now_ms()
    {
        return false;
    }
    let committed = session.committed_lsn();
    crate::store::read_range(session, committed, committed, 1, 1 << 20)
        .ok()
        .and_then(|last| last.into_iter().next())
        .is_some_and(|e| e.is_type("lifecycle.session.ended"))
}

impl Component for Compaction {
    fn name(&self) -> &'static str {
        "compaction"
    }

    fn reconfigure(&self, config: &Config) {
        self.after.send_replace(config.retention.compress_after());
    }

    fn stop(&self) -> Stopping<'_> {
        Box::pin(async move {
            let task = self.task.lock().unwrap().take();
            if let Some(t) = task {
                t.abort();
                let _ = t.await;
            }
        })
    }
}
