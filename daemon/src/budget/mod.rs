//! Budgets that brake: `[[budgets]]` in config.toml limit what agents spend (the
//! `usage.request` events the telemetry receiver and the mapping plugins store) per lineage,
//! UTC day, ISO week or project. A crossing is recorded once per budget and period as
//! `usage.budget_exceeded` in the session that crossed it, with a desktop notification; from
//! then on an `ask` budget turns every tool call in its scope into a checkpoint that names it,
//! and a `deny` budget refuses them.
//!
//! The sums are kept by one task that reads every committed event: at start (and after it fell
//! behind the hub) it scans the logs once, then follows the hub. Nothing runs while no budget
//! is configured.

pub mod settings;
pub mod spend;

use std::sync::{Arc, Mutex};

use dstream_sdk::protocol::{BudgetStatus, Decision};
use serde_json::json;

use crate::budget::settings::{BudgetAction, BudgetConfig};
use crate::budget::spend::{Crossing, EXCEEDED, Spend};
use crate::component::Component;
use crate::config::Config;
use crate::hub::Hub;
use crate::store::{NewEventRaw, Store};
use crate::util::time::now_ms;

#[derive(Default)]
struct Tracker {
    budgets: Vec<BudgetConfig>,
    spend: Spend,
    /// The logs have been scanned: the sums are whole.
    ready: bool,
}

pub struct Budgets {
    store: Store,
    hub: Arc<Hub>,
    tracker: Arc<Mutex<Tracker>>,
    runtime: tokio::runtime::Handle,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

/// A crossed budget's word on a tool call.
pub struct Brake {
    pub decision: Decision,
    /// For the checkpoint's summary: which budget, how much of it is spent.
    pub summary: String,
}

impl Budgets {
    /// Starts keeping the sums if any budget is configured (on the current runtime).
    pub fn start(store: Store, hub: Arc<Hub>, budgets: &[BudgetConfig]) -> Arc<Budgets> {
        let this = Arc::new(Budgets {
            store,
            hub,
            tracker: Default::default(),
            runtime: tokio::runtime::Handle::current(),
            task: Mutex::new(None),
        });
        this.configure(budgets);
        this
    }

    fn configure(&self, budgets: &[BudgetConfig]) {
        self.tracker.lock().unwrap().budgets = budgets.to_vec();
        let mut task = self.task.lock().unwrap();
        if !budgets.is_empty() && task.is_none() {
            let (store, hub, tracker) =
                (self.store.clone(), self.hub.clone(), self.tracker.clone());
            *task = Some(
                self.runtime
                    .spawn(track(store, hub, tracker))
                    .abort_handle(),
            );
        }
    }

    /// What a crossed `ask` or `deny` budget says about a tool call now in `lineage` (the
    /// session, or the parent of a subagent) working in `project`; nothing if none is crossed.
    pub fn brake(&self, lineage: &str, project: Option<&str>) -> Option<Brake> {
        let t = self.tracker.lock().unwrap();
        if t.budgets.is_empty() {
            return None;
        }
        let over = t.spend.over(&t.budgets, lineage, project, now_ms())?;
        let b = &over.budget;
        let why = format!(
            "budget {:?} crossed: {} of {} spent ({} {})",
            b.name(),
            usd(over.spent_micros),
            usd(b.limit_micros()),
            b.scope.as_str(),
            over.key
        );
        let by = format!("budget:{}", b.name());
        let decision = match b.action {
            BudgetAction::Deny => Decision::deny(why.clone(), by),
            _ => Decision::ask(why.clone(), by),
        };
        Some(Brake {
            decision,
            summary: why,
        })
    }

    /// Every budget with what its current period has spent.
    pub fn status(&self) -> Vec<BudgetStatus> {
        let t = self.tracker.lock().unwrap();
        let now = now_ms();
        t.budgets
            .iter()
            .map(|b| {
                let (key, spent) = t.spend.current(b, now);
                BudgetStatus {
                    name: b.name(),
                    scope: b.scope.as_str().into(),
                    action: b.action.as_str().into(),
                    limit_usd_micros: b.limit_micros(),
                    crossed: spent >= b.limit_micros(),
                    recorded: t.spend.recorded(&b.name(), &key),
                    key,
                    spent_usd_micros: spent,
                    ready: t.ready,
                }
            })
            .collect()
    }
}

impl Component for Budgets {
    fn name(&self) -> &'static str {
        "budgets"
    }

    fn reconfigure(&self, config: &Config) {
        self.configure(&config.budgets);
    }

    fn stop(&self) -> crate::component::Stopping<'_> {
        if let Some(t) = self.task.lock().unwrap().take() {
            t.abort();
        }
        Box::pin(async {})
    }
}

/// `$1.234567` trimmed to cents where that is exact.
fn usd(micros: u64) -> String {
    let s = format!("${}.{:06}", micros / 1_000_000, micros % 1_000_000);
    let trimmed = s.trim_end_matches('0');
    match trimmed.len() - trimmed.find('.').unwrap_or(0) {
        n if n < 3 => format!("${}.{:02}", micros / 1_000_000, micros % 1_000_000 / 10_000),
        _ => trimmed.to_string(),
    }
}

/// Keeps the sums: scans the logs, then follows the hub; scans again if it fell behind.
async fn track(store: Store, hub: Arc<Hub>, tracker: Arc<Mutex<Tracker>>) {
    loop {
        // Subscribed before the scan: what is committed meanwhile arrives here, and the scan's
        // marks keep it from counting twice.
        let mut reader = hub.subscribe();
        let scanning = store.clone();
        let scanned = tokio::task::spawn_blocking(move || {
            let mut spend = Spend::default();
            let r = scanning.scan_since(0, &mut |json| {
                spend.visit(json, true);
            });
            r.map(|()| spend)
        })
        .await;
        match scanned {
            Ok(Ok(spend)) => {
                let mut t = tracker.lock().unwrap();
                t.spend = spend;
                t.ready = true;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "budgets: cannot read every log; sums may be short")
            }
            Err(e) => {
                tracing::error!(error = %e, "budgets: the scan failed");
                return;
            }
        }
        let mut json = Vec::new();
        loop {
            let Ok(c) = reader.recv().await else {
                tracing::info!(
                    "budgets fell behind the committed stream; summing from the logs again"
                );
                break;
            };
            json.clear();
            c.event.write_to(&mut json);
            let crossings = {
                let mut t = tracker.lock().unwrap();
                let Tracker { budgets, spend, .. } = &mut *t;
                match spend.visit(&json, false) {
                    Some(added) => spend.crossings(budgets, &added),
                    None => continue,
                }
            };
            for crossing in crossings {
                record(&store, crossing).await;
            }
        }
    }
}

/// Records a crossing in the session that crossed it, and tells the person.
async fn record(store: &Store, c: Crossing) {
    let b = &c.budget;
    let payload = json!({
        "budget": b.name(),
        "scope": b.scope.as_str(),
        "key": c.key,
        "action": b.action.as_str(),
        "limit_usd_micros": b.limit_micros(),
        "spent_usd_micros": c.spent_micros,
        "limit_usd": b.limit_usd,
        "spent_usd": c.spent_micros as f64 / 1e6,
    });
    let event = NewEventRaw {
        event_type: EXCEEDED.into(),
        actor: Some("dstream".into()),
        payload: serde_json::value::to_raw_value(&payload).ok(),
        ..Default::default()
    };
    if let Err(e) = store.append_wait(&c.session_id, event, true).await {
        tracing::warn!(session = %c.session_id, error = %e, "cannot record a budget crossing");
    }
    let what = match b.action {
        BudgetAction::Notify => "",
        BudgetAction::Ask => "; tool calls now wait for your approval",
        BudgetAction::Deny => "; tool calls are now refused",
    };
    tracing::warn!(budget = %b.name(), key = %c.key, spent_usd_micros = c.spent_micros, "budget crossed");
    notify(
        &format!("dstream: budget {} crossed", b.name()),
        &format!(
            "{} of {} spent ({} {}){what}",
            usd(c.spent_micros),
            usd(b.limit_micros()),
            b.scope.as_str(),
            c.key
        ),
    );
}

/// A desktop notification where `notify-send` exists; nothing otherwise.
fn notify(title: &str, body: &str) {
    let spawned = std::process::Command::new("notify-send")
        .args(["--app-name=dstream", title, body])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Ok(mut child) = spawned {
        // Reaped off the async workers: the wait blocks.
        tokio::task::spawn_blocking(move || child.wait());
    }
}

#[cfg(test)]
mod tests {
    use super::usd;

    #[test]
    fn dollars_read_as_people_write_them() {
        assert_eq!(usd(5_000_000), "$5.00");
        assert_eq!(usd(1_230_000), "$1.23");
        assert_eq!(usd(12_345), "$0.012345");
        assert_eq!(usd(0), "$0.00");
    }
}
