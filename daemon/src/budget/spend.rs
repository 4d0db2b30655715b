//! What agents have spent, summed as events are committed: per lineage, UTC day, ISO week and
//! project, in integer millionths of a dollar, by the same rules as `dstream usage`:
//! - a subagent's calls count in its parent's lineage (`stream_id`);
//! - a lineage with telemetry (`metadata.source = "otlp"`) counts only telemetry from then on,
//!   so calls imported from a transcript of the same session are not counted twice;
//! - an agent that reports only a session total (`usage.session`) counts by that total.
//!
//! What it keeps grows with lineages, projects and periods, not with events.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::budget::settings::{BudgetAction, BudgetConfig, Scope};
use crate::usage::{Envelope, cost_micros, day, iso_week, micros};

/// The event type that records a crossing.
pub const EXCEEDED: &str = "usage.budget_exceeded";

#[derive(Default)]
struct LineageSpend {
    project: Option<String>,
    telemetry: bool,
    /// Whether any `usage.request` was counted (then session totals are not).
    requests: bool,
    /// The largest session total reported, already counted.
    reported: u64,
}

/// Spending one event added, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct Added {
    pub session_id: String,
    pub lineage: String,
    pub project: Option<String>,
    pub timestamp: u64,
    pub micros: u64,
}

/// A budget found crossed, to record once.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossing {
    pub budget: BudgetConfig,
    /// The period or unit crossed: the lineage, `2026-11-25`, `2026-W48` or the project.
    pub key: String,
    pub spent_micros: u64,
    /// The session whose spending crossed it, which records it.
    pub session_id: String,
}

/// A crossed budget that holds or refuses tool calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Over {
    pub budget: BudgetConfig,
    pub key: String,
    pub spent_micros: u64,
}

#[derive(Default)]
pub struct Spend {
    lineages: HashMap<String, LineageSpend>,
    totals: HashMap<(Scope, String), u64>,
    /// `(budget name, key)` of crossings already recorded.
    recorded: HashSet<(String, String)>,
    /// Per session, the last LSN a scan of the logs counted: the same event arriving live
    /// afterwards is not counted again.
    scanned: HashMap<String, u64>,
}

impl Spend {
    /// One committed event: what it added, if anything. `from_scan` marks events read from
    /// the logs; live ones the scan already counted are skipped.
    pub fn visit(&mut self, json: &[u8], from_scan: bool) -> Option<Added> {
        let (e, _) = Envelope::of_interest(json)?;
        if from_scan {
            self.scanned.insert(e.session_id.clone(), e.lsn);
        } else if self.scanned.get(&e.session_id).is_some_and(|&l| e.lsn <= l) {
            return None;
        }
        let lineage_id = e.lineage();
        let lineage = self.lineages.entry(lineage_id.clone()).or_default();
        if lineage.project.is_none() {
            lineage.project = e.project().map(str::to_string);
        }
        let added = match e.event_type.as_str() {
            "usage.request" => {
                if e.is_telemetry() {
                    lineage.telemetry = true;
                } else if lineage.telemetry {
                    return None;
                }
                lineage.requests = true;
                cost_micros(&e.payload)
            }
            "usage.session" if !lineage.requests => {
                let total = e
                    .payload
                    .get("total_cost_usd")
                    .and_then(Value::as_f64)
                    .map_or(0, micros);
                let more = total.saturating_sub(lineage.reported);
                lineage.reported = lineage.reported.max(total);
                more
            }
            EXCEEDED => {
                let s = |k: &str| e.payload.get(k).and_then(Value::as_str).map(str::to_string);
                if let (Some(b), Some(k)) = (s("budget"), s("key")) {
                    self.recorded.insert((b, k));
                }
                return None;
            }
            _ => return None,
        };
        if added == 0 {
            return None;
        }
        let project = lineage.project.clone();
        for (scope, key) in [
            (Scope::Session, lineage_id.clone()),
            (Scope::Day, day(e.timestamp)),
            (Scope::Week, iso_week(e.timestamp)),
            (Scope::Project, project_key(project.as_deref())),
        ] {
            *self.totals.entry((scope, key)).or_default() += added;
        }
        Some(Added {
            session_id: e.session_id,
            lineage: lineage_id,
            project,
            timestamp: e.timestamp,
            micros: added,
        })
    }

    fn spent(&self, scope: Scope, key: &str) -> u64 {
        self.totals
            .get(&(scope, key.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// The budgets `added` pushed over their limit that are not recorded yet; each is then
    /// counted as recorded, so a crossing is reported once per budget and period.
    pub fn crossings(&mut self, budgets: &[BudgetConfig], added: &Added) -> Vec<Crossing> {
        let mut found = Vec::new();
        for b in budgets {
            if !b.covers(added.project.as_deref()) {
                continue;
            }
            let key = key_of(
                b.scope,
                &added.lineage,
                added.project.as_deref(),
                added.timestamp,
            );
            let spent = self.spent(b.scope, &key);
            if spent >= b.limit_micros() && self.recorded.insert((b.name(), key.clone())) {
                found.push(Crossing {
                    budget: b.clone(),
                    key,
                    spent_micros: spent,
                    session_id: added.session_id.clone(),
                });
            }
        }
        found
    }

    /// The strongest crossed budget (deny over ask) that covers a tool call now in `lineage`
    /// working in `project`; `notify` budgets never hold a call.
    pub fn over(
        &self,
        budgets: &[BudgetConfig],
        lineage: &str,
        project: Option<&str>,
        now_ms: u64,
    ) -> Option<Over> {
        let project = project.or_else(|| {
            self.lineages
                .get(lineage)
                .and_then(|l| l.project.as_deref())
        });
        let mut strongest: Option<Over> = None;
        for b in budgets {
            if b.action == BudgetAction::Notify || !b.covers(project) {
                continue;
            }
            let key = key_of(b.scope, lineage, project, now_ms);
            let spent = self.spent(b.scope, &key);
            if spent < b.limit_micros() {
                continue;
            }
            let stronger = match &strongest {
                None => true,
                Some(s) => s.budget.action == BudgetAction::Ask && b.action == BudgetAction::Deny,
            };
            if stronger {
                strongest = Some(Over {
                    budget: b.clone(),
                    key,
                    spent_micros: spent,
                });
            }
        }
        strongest
    }

    /// Spent so far in the budget's current period (for the lineage and project given, for
    /// `session` and `project` budgets).
    pub fn current(&self, budget: &BudgetConfig, now_ms: u64) -> (String, u64) {
        match budget.scope {
            Scope::Day | Scope::Week => {
                let key = key_of(budget.scope, "", None, now_ms);
                let spent = self.spent(budget.scope, &key);
                (key, spent)
            }
            // The unit that has spent most: the one nearest its limit.
            scope => self
                .totals
                .iter()
                .filter(|((s, _), _)| *s == scope)
                .max_by_key(|(_, v)| **v)
                .map(|((_, k), v)| (k.clone(), *v))
                .unwrap_or_default(),
        }
    }

    pub fn recorded(&self, budget: &str, key: &str) -> bool {
        self.recorded
            .contains(&(budget.to_string(), key.to_string()))
    }
}

fn project_key(project: Option<&str>) -> String {
    project.unwrap_or("(unknown)").to_string()
}

/// The unit of `scope` that spending at `ms` in `lineage` and `project` counts in.
fn key_of(scope: Scope, lineage: &str, project: Option<&str>, ms: u64) -> String {
    match scope {
        Scope::Session => lineage.to_string(),
        Scope::Day => day(ms),
        Scope::Week => iso_week(ms),
        Scope::Project => project_key(project),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TS: u64 = 1_795_000_000_000;

    fn budget(scope: Scope, usd: f64, action: BudgetAction) -> BudgetConfig {
        BudgetConfig {
            name: None,
            scope,
            limit_usd: usd,
            action,
            project: None,
        }
    }

    fn request(session: &str, lsn: u64, usd: f64, source: &str) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"type": "usage.request", "lsn": lsn, "timestamp": TS,
            "session_id": session, "stream_id": "p",
            "payload": {"cost_usd": usd, "cost_usd_micros": (usd * 1e6).round() as u64},
            "metadata": {"source": source}}),
        )
        .unwrap()
    }

    #[test]
    fn a_crossing_is_found_once_and_holds_calls_of_its_scope() {
        let mut s = Spend::default();
        s.visit(
            br#"{"type":"lifecycle.session.started","lsn":1,"session_id":"p","raw":{"cwd":"/w"}}"#,
            false,
        );
        let day = budget(Scope::Day, 1.0, BudgetAction::Ask);
        let session = budget(Scope::Session, 1.5, BudgetAction::Deny);
        let budgets = [day.clone(), session.clone()];
        let a = s.visit(&request("p", 2, 0.6, "otlp"), false).unwrap();
        assert_eq!(a.micros, 600_000);
        assert!(s.crossings(&budgets, &a).is_empty());
        assert_eq!(s.over(&budgets, "p", None, TS), None);
        // A subagent's call counts in its parent's lineage and crosses the day budget.
        let b = s
            .visit(&request("p.agent-1", 1, 0.6, "otlp"), false)
            .unwrap();
        let crossed = s.crossings(&budgets, &b);
        assert_eq!(crossed.len(), 1);
        assert_eq!(crossed[0].budget, day);
        assert_eq!(crossed[0].spent_micros, 1_200_000);
        assert_eq!(crossed[0].session_id, "p.agent-1");
        let over = s.over(&budgets, "p", None, TS).unwrap();
        assert_eq!(over.budget.action, BudgetAction::Ask);
        // The same call imported from a transcript is not counted again.
        assert_eq!(s.visit(&request("p", 3, 0.6, "transcript"), false), None);
        // Crossed again in the same period: not reported twice; the deny budget wins.
        let c = s.visit(&request("p", 4, 0.6, "otlp"), false).unwrap();
        let crossed = s.crossings(&budgets, &c);
        assert_eq!(crossed.len(), 1);
        assert_eq!(crossed[0].budget, session);
        assert_eq!(
            s.over(&budgets, "p", None, TS).unwrap().budget.action,
            BudgetAction::Deny
        );
        // The next day starts afresh; another lineage is not held by a session budget.
        assert_eq!(s.over(&[day], "p", None, TS + 86_400_000), None);
        assert_eq!(s.over(&[session], "q", None, TS), None);
    }

    #[test]
    fn the_scan_and_the_live_stream_count_an_event_once() {
        let mut s = Spend::default();
        s.visit(&request("p", 5, 0.5, "otlp"), true);
        assert_eq!(s.visit(&request("p", 5, 0.5, "otlp"), false), None);
        assert!(s.visit(&request("p", 6, 0.5, "otlp"), false).is_some());
        assert_eq!(
            s.current(&budget(Scope::Session, 1.0, BudgetAction::Ask), TS)
                .1,
            1_000_000
        );
    }

    #[test]
    fn recorded_crossings_are_not_recorded_again_after_a_restart() {
        let mut s = Spend::default();
        let b = budget(Scope::Day, 0.1, BudgetAction::Notify);
        let a = s.visit(&request("p", 1, 0.5, "otlp"), true).unwrap();
        let exceeded = json!({"type": EXCEEDED, "lsn": 2, "session_id": "p",
            "payload": {"budget": b.name(), "key": day(TS)}});
        s.visit(&serde_json::to_vec(&exceeded).unwrap(), true);
        assert!(s.crossings(std::slice::from_ref(&b), &a).is_empty());
        assert!(s.recorded(&b.name(), &day(TS)));
        // Notify budgets report, but never hold a call.
        assert_eq!(s.over(&[b], "p", None, TS), None);
    }

    #[test]
    fn a_session_total_counts_only_where_no_request_was_counted() {
        let mut s = Spend::default();
        let total = |lsn: u64, usd: f64| {
            serde_json::to_vec(
                &json!({"type": "usage.session", "lsn": lsn, "timestamp": TS,
                "session_id": "sdk", "payload": {"total_cost_usd": usd}}),
            )
            .unwrap()
        };
        assert_eq!(s.visit(&total(1, 0.25), false).unwrap().micros, 250_000);
        assert_eq!(s.visit(&total(2, 0.75), false).unwrap().micros, 500_000);
        let b = budget(Scope::Session, 0.7, BudgetAction::Deny);
        assert_eq!(s.over(&[b], "sdk", None, TS).unwrap().spent_micros, 750_000);
    }

    #[test]
    fn project_budgets_cover_only_their_folders() {
        let mut s = Spend::default();
        let mut b = budget(Scope::Project, 0.1, BudgetAction::Ask);
        b.project = Some("/work/*".into());
        s.visit(
            br#"{"type":"x","lsn":1,"session_id":"p","stream_id":"p","raw":{"cwd":"/work/a"}}"#,
            false,
        );
        s.visit(&request("p", 2, 0.5, "otlp"), false);
        assert!(s.over(std::slice::from_ref(&b), "p", None, TS).is_some());
        assert!(
            s.over(std::slice::from_ref(&b), "p", Some("/home/x"), TS)
                .is_none()
        );
        assert!(
            s.over(std::slice::from_ref(&b), "q", Some("/work/b"), TS)
                .is_none()
        );
    }
}
