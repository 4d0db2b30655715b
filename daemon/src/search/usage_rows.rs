//! What the model calls cost, kept in the index so `dstream usage` need not read every log:
//! the `usage.request` events summed per session, lineage, UTC hour, model, agent and kind of
//! source (`usage_hours`), the totals agents reported (`usage_totals`), and each lineage's
//! project folder (`lineage_projects`). They are written in the same transactions as the
//! documents, so they are exactly as caught up as the index, and go with a deleted session.
//!
//! The answer follows [`crate::usage`] rule for rule (a lineage with telemetry counts only
//! its telemetry; a reported total that differs is a mismatch); it is used for ranges on whole
//! hours, and the daemon reads the logs for any other.

use std::collections::{BTreeMap, HashMap};

use dstream_sdk::protocol::{UsageMismatch, UsageResult, UsageRow};
use rusqlite::{Connection, Transaction, params};
use serde_json::Value;

use crate::usage::{Envelope, cost_micros, day, iso_week, micros};

pub const HOUR_MS: u64 = crate::util::time::HOUR_MS;

pub const SCHEMA: &str = "
    CREATE TABLE usage_hours(session TEXT NOT NULL, lineage TEXT NOT NULL, hour INTEGER NOT NULL,
        model TEXT NOT NULL, actor TEXT NOT NULL, telemetry INTEGER NOT NULL,
        requests INTEGER NOT NULL, input INTEGER NOT NULL, output INTEGER NOT NULL,
        cache_read INTEGER NOT NULL, cache_write INTEGER NOT NULL, cost INTEGER NOT NULL,
        PRIMARY KEY(session, lineage, hour, model, actor, telemetry)) WITHOUT ROWID;
    CREATE INDEX usage_hours_by_hour ON usage_hours(hour);
    CREATE TABLE usage_totals(session TEXT NOT NULL, lineage TEXT NOT NULL, ts INTEGER NOT NULL,
        micros INTEGER NOT NULL);
    CREATE INDEX usage_totals_by_session ON usage_totals(session);
    CREATE TABLE lineage_projects(lineage TEXT PRIMARY KEY, project TEXT NOT NULL);
";

#[derive(Hash, PartialEq, Eq)]
struct HourKey {
    session: String,
    lineage: String,
    hour: i64,
    model: String,
    actor: String,
    telemetry: bool,
}

#[derive(Default)]
struct Sums {
    requests: i64,
    input: i64,
    output: i64,
    cache_read: i64,
    cache_write: i64,
    cost: i64,
}

/// The usage of one batch of events, written with its documents.
#[derive(Default)]
pub struct UsageBatch {
    hours: HashMap<HourKey, Sums>,
    /// (session, lineage, timestamp, micros) of each reported session total.
    reported: Vec<(String, String, i64, i64)>,
    /// (lineage, project) as events name them; the first written for a lineage stays.
    projects: Vec<(String, String)>,
}

fn int(p: &Value, k: &str) -> i64 {
    p.get(k).and_then(Value::as_u64).unwrap_or(0) as i64
}

impl UsageBatch {
    pub fn is_empty(&self) -> bool {
        self.hours.is_empty() && self.reported.is_empty() && self.projects.is_empty()
    }

    /// One stored event (its JSON).
    pub fn add(&mut self, json: &[u8]) {
        let Some((e, _)) = Envelope::of_interest(json) else {
            return;
        };
        let lineage = e.lineage();
        if let Some(project) = e.project()
            && !self.projects.iter().any(|(l, _)| *l == lineage)
        {
            self.projects.push((lineage.clone(), project.to_string()));
        }
        match e.event_type.as_str() {
            "usage.request" => {
                let p = &e.payload;
                let key = HourKey {
                    session: e.session_id.clone(),
                    lineage,
                    hour: (e.timestamp / HOUR_MS) as i64,
                    model: p
                        .get("model")
                        .and_then(Value::as_str)
                        .unwrap_or("(none)")
                        .to_string(),
                    actor: e.actor.clone().unwrap_or_else(|| "(none)".into()),
                    telemetry: e.is_telemetry(),
                };
                let s = self.hours.entry(key).or_default();
                s.requests += 1;
                s.input += int(p, "input_tokens");
                s.output += int(p, "output_tokens");
                s.cache_read += int(p, "cache_read_input_tokens");
                s.cache_write += int(p, "cache_creation_input_tokens");
                s.cost += cost_micros(p) as i64;
            }
            "usage.session" => {
                if let Some(usd) = e.payload.get("total_cost_usd").and_then(Value::as_f64) {
                    self.reported.push((
                        e.session_id.clone(),
                        lineage,
                        e.timestamp as i64,
                        micros(usd) as i64,
                    ));
                }
            }
            _ => {}
        }
    }

    /// Adds the batch to the index's tables, in the caller's transaction.
    pub fn write(&self, tx: &Transaction) -> rusqlite::Result<()> {
        let mut hours = tx.prepare_cached(
            "INSERT INTO usage_hours VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
             ON CONFLICT DO UPDATE SET requests = requests + excluded.requests,
                input = input + excluded.input, output = output + excluded.output,
                cache_read = cache_read + excluded.cache_read,
                cache_write = cache_write + excluded.cache_write, cost = cost + excluded.cost",
        )?;
        for (k, s) in &self.hours {
            hours.execute(params![
                k.session,
                k.lineage,
                k.hour,
                k.model,
                k.actor,
                k.telemetry,
                s.requests,
                s.input,
                s.output,
                s.cache_read,
                s.cache_write,
                s.cost
            ])?;
        }
        let mut totals = tx.prepare_cached("INSERT INTO usage_totals VALUES (?1, ?2, ?3, ?4)")?;
        for (session, lineage, ts, m) in &self.reported {
            totals.execute(params![session, lineage, ts, m])?;
        }
        let mut projects =
            tx.prepare_cached("INSERT OR IGNORE INTO lineage_projects VALUES (?1, ?2)")?;
        for (lineage, project) in &self.projects {
            projects.execute(params![lineage, project])?;
        }
        Ok(())
    }
}

/// Forgets what session `name` spent (it was deleted, or is read again from its start).
pub fn delete_session(tx: &Transaction, name: &str) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM usage_hours WHERE session = ?1", [name])?;
    tx.execute("DELETE FROM usage_totals WHERE session = ?1", [name])?;
    Ok(())
}

/// `usage` from the tables, for `[since_ms, until_ms)` on whole hours.
pub fn query(
    conn: &Connection,
    by: &str,
    session: Option<&str>,
    since_ms: u64,
    until_ms: Option<u64>,
) -> rusqlite::Result<UsageResult> {
    let from_hour = (since_ms / HOUR_MS) as i64;
    let to_hour = until_ms.map_or(i64::MAX, |u| (u / HOUR_MS) as i64);
    // A lineage with telemetry in the range counts only its telemetry.
    let mut rows = conn.prepare_cached(
        "WITH r AS (SELECT * FROM usage_hours WHERE hour >= ?1 AND hour < ?2
                    AND (?3 IS NULL OR lineage = ?3 OR session = ?3)),
              tele AS (SELECT DISTINCT lineage FROM r WHERE telemetry = 1)
         SELECT lineage, hour, model, actor, SUM(requests), SUM(input), SUM(output),
                SUM(cache_read), SUM(cache_write), SUM(cost)
         FROM r WHERE telemetry = 1 OR lineage NOT IN tele
         GROUP BY lineage, hour, model, actor",
    )?;
    let mut projects: HashMap<String, String> = HashMap::new();
    if by == "project" {
        let mut p = conn.prepare_cached("SELECT lineage, project FROM lineage_projects")?;
        for r in p.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))? {
            let (l, pr): (String, String) = r?;
            projects.insert(l, pr);
        }
    }
    let mut groups: BTreeMap<String, UsageRow> = BTreeMap::new();
    let mut total = UsageRow {
        key: "total".into(),
        ..UsageRow::default()
    };
    let mut counted: HashMap<String, u64> = HashMap::new();
    let found = rows.query_map(params![from_hour, to_hour, session], |r| {
        let n = |i: usize| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            [n(4)?, n(5)?, n(6)?, n(7)?, n(8)?, n(9)?],
        ))
    })?;
    for row in found {
        let (lineage, hour, model, actor, [req, input, output, cr, cw, cost]) = row?;
        let ms = hour.max(0) as u64 * HOUR_MS;
        let key = match by {
            "day" => day(ms),
            "week" => iso_week(ms),
            "month" => day(ms)[..7].to_string(),
            "session" => lineage.clone(),
            "model" => model,
            "agent" => actor,
            _ => projects
                .get(&lineage)
                .cloned()
                .unwrap_or_else(|| "(unknown)".into()),
        };
        *counted.entry(lineage).or_default() += cost;
        for r in [
            groups.entry(key.clone()).or_insert_with(|| UsageRow {
                key,
                ..UsageRow::default()
            }),
            &mut total,
        ] {
            r.requests += req;
            r.input_tokens += input;
            r.output_tokens += output;
            r.cache_read_tokens += cr;
            r.cache_write_tokens += cw;
            r.cost_usd_micros += cost;
        }
    }
    // The latest total each lineage reported in the range, against what its calls add up to.
    let mut reported = conn.prepare_cached(
        "SELECT lineage, micros FROM usage_totals
         WHERE ts >= ?1 AND ts < ?2 AND (?3 IS NULL OR lineage = ?3 OR session = ?3)
         ORDER BY lineage, ts, rowid",
    )?;
    let until = until_ms.map_or(i64::MAX, |u| u as i64);
    let mut latest: BTreeMap<String, u64> = BTreeMap::new();
    for r in reported.query_map(params![since_ms as i64, until, session], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
    })? {
        let (l, m) = r?;
        latest.insert(l, m.max(0) as u64);
    }
    let mismatches = latest
        .into_iter()
        .filter_map(|(l, reported)| {
            let c = counted.get(&l).copied().unwrap_or(0);
            (c != reported).then_some(UsageMismatch {
                session_id: l,
                reported_usd_micros: reported,
                counted_usd_micros: c,
            })
        })
        .collect();
    Ok(UsageResult {
        by: by.to_string(),
        rows: groups.into_values().collect(),
        total,
        mismatches,
        budgets: Vec::new(),
        source: String::new(),
    })
}
