//! `usage`: the model calls recorded (`usage.request` events) summed by day, week, month,
//! session, model, project or agent, in integer millionths of a dollar. One pass over the
//! stored events, off the async workers; what it keeps grows with the groups and lineages,
//! not with the events.
//!
//! Rules a user would otherwise trip over:
//! - a subagent's calls count in its parent's lineage (`stream_id`), once;
//! - a lineage with telemetry records (`metadata.source = "otlp"`, Claude Code's own figures)
//!   counts only those: the same calls imported from a transcript are not counted twice;
//! - where an agent reported a session total (`usage.session` with `total_cost_usd`), a sum
//!   that differs is listed as a mismatch, never hidden.

use std::collections::{BTreeMap, HashMap};

use dstream_sdk::protocol::{UsageMismatch, UsageResult, UsageRow};
use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// The ways to group.
pub const GROUPINGS: &[&str] = &[
    "day", "week", "month", "session", "model", "project", "agent",
];

/// The fields of a stored event that spending is summed from (here, by the budgets and by the
/// search index's usage tables).
pub(crate) struct Envelope {
    pub event_type: String,
    pub lsn: u64,
    pub timestamp: u64,
    pub session_id: String,
    pub stream_id: Option<String>,
    pub actor: Option<String>,
    /// Parsed for `usage.*` events only (`Null` otherwise): no other event is summed.
    pub payload: Value,
    /// Parsed for `usage.*` events only, like `payload`.
    pub metadata: Value,
    /// The project folder it names (`cwd` or `directory`, in `raw` first, then `payload`).
    project: Option<String>,
}

/// A stored event as first read: the bulky parts (payload, metadata, the agent's raw event)
/// left as text, since most events need none of them parsed whole.
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(rename = "type", borrow)]
    event_type: Cow<'a, str>,
    #[serde(default)]
    lsn: u64,
    #[serde(default)]
    timestamp: u64,
    #[serde(default, borrow)]
    session_id: Cow<'a, str>,
    #[serde(default, borrow)]
    stream_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    actor: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    payload: Option<&'a RawValue>,
    #[serde(default, borrow)]
    metadata: Option<&'a RawValue>,
    #[serde(default, borrow)]
    raw: Option<&'a RawValue>,
}

/// Of an object, only what names a project; the rest is skipped unparsed.
#[derive(Deserialize, Default)]
struct Place {
    cwd: Option<Value>,
    directory: Option<Value>,
}

impl Place {
    fn of(json: Option<&RawValue>) -> Place {
        json.and_then(|j| serde_json::from_str(j.get()).ok())
            .unwrap_or_default()
    }
}

impl Envelope {
    /// The stored event, if `json` may be spending or name a project (most events are
    /// neither, and are skipped unparsed); whether it is a `usage.*` event.
    pub fn of_interest(json: &[u8]) -> Option<(Envelope, bool)> {
        // Built once: a searcher per call cost the index thread more than the scan itself.
        use memchr::memmem::Finder;
        use std::sync::LazyLock;
        static USAGE: LazyLock<Finder<'static>> =
            LazyLock::new(|| Finder::new(b"\"type\":\"usage."));
        static CWD: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"cwd\""));
        static DIRECTORY: LazyLock<Finder<'static>> =
            LazyLock::new(|| Finder::new(b"\"directory\""));
        let has = |f: &Finder| f.find(json).is_some();
        let usage = has(&USAGE);
        if !usage && !has(&CWD) && !has(&DIRECTORY) {
            return None;
        }
        let f: Fields = serde_json::from_slice(json).ok()?;
        let usage = f.event_type.starts_with("usage.");
        let parse = |j: Option<&RawValue>| match j {
            Some(j) if usage => serde_json::from_str(j.get()).ok(),
            _ => Some(Value::Null),
        };
        let (payload, metadata) = (parse(f.payload)?, parse(f.metadata)?);
        // `cwd` before `directory`, each from `raw` before `payload`, and only a string
        // counts (a field of another type does not fall through to the next place; null is
        // no field).
        let (raw_place, payload_place) = (Place::of(f.raw), Place::of(f.payload));
        let project = [
            (raw_place.cwd, payload_place.cwd),
            (raw_place.directory, payload_place.directory),
        ]
        .into_iter()
        .find_map(|(first, second)| match first.or(second) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        });
        let owned = |c: Cow<str>| c.into_owned();
        Some((
            Envelope {
                event_type: owned(f.event_type),
                lsn: f.lsn,
                timestamp: f.timestamp,
                session_id: owned(f.session_id),
                stream_id: f.stream_id.map(owned),
                actor: f.actor.map(owned),
                payload,
                metadata,
                project,
            },
            usage,
        ))
    }

    /// The lineage it counts in: its root session (a subagent's parent).
    pub fn lineage(&self) -> String {
        self.stream_id
            .clone()
            .unwrap_or_else(|| self.session_id.clone())
    }

    /// The project folder it names, if any.
    pub fn project(&self) -> Option<&str> {
        self.project.as_deref()
    }

    /// Whether it is the agent's own telemetry (Claude Code's figures).
    pub fn is_telemetry(&self) -> bool {
        is_telemetry(&self.metadata)
    }
}

/// Sums per group, for one lineage and one kind of source.
type Groups = BTreeMap<String, UsageRow>;

#[derive(Default)]
struct Lineage {
    telemetry: Groups,
    other: Groups,
    /// The agent's own total for the lineage, if it reported one.
    reported_micros: Option<u64>,
    /// The project folder, from the first event that names one.
    project: Option<String>,
}

/// Sums events as they are visited.
pub struct Usage {
    by: String,
    session: Option<String>,
    since_ms: u64,
    until_ms: Option<u64>,
    lineages: HashMap<String, Lineage>,
}

impl Usage {
    pub fn new(by: &str, session: Option<String>, since_ms: u64, until_ms: Option<u64>) -> Usage {
        Usage {
            by: by.to_string(),
            session,
            since_ms,
            until_ms,
            lineages: HashMap::new(),
        }
    }

    /// One stored event (its JSON).
    pub fn visit(&mut self, json: &[u8]) {
        let Some((e, usage)) = Envelope::of_interest(json) else {
            return;
        };
        let lineage_id = e.lineage();
        let lineage = self.lineages.entry(lineage_id.clone()).or_default();
        // The lineage's project, from whichever of its sessions names it first (a subagent
        // asked for alone is still in its parent's project).
        if lineage.project.is_none() {
            lineage.project = e.project().map(str::to_string);
        }
        if let Some(s) = &self.session
            && *s != lineage_id
            && *s != e.session_id
        {
            return;
        }
        if !usage || e.timestamp < self.since_ms || self.until_ms.is_some_and(|u| e.timestamp >= u)
        {
            return;
        }
        match e.event_type.as_str() {
            "usage.session" => {
                if let Some(m) = reported_micros(&e.payload) {
                    lineage.reported_micros = Some(m);
                }
            }
            "usage.request" => {
                let key = match self.by.as_str() {
                    "day" => day(e.timestamp),
                    "week" => iso_week(e.timestamp),
                    "month" => day(e.timestamp)[..7].to_string(),
                    "session" => lineage_id,
                    "model" => str_of(&e.payload, "model"),
                    "agent" => e.actor.clone().unwrap_or_else(|| "(none)".into()),
                    // Filled in at the end, once every lineage's project is known.
                    _ => String::new(),
                };
                let groups = if e.is_telemetry() {
                    &mut lineage.telemetry
                } else {
                    &mut lineage.other
                };
                let row = groups.entry(key.clone()).or_insert_with(|| UsageRow {
                    key,
                    ..UsageRow::default()
                });
                add(row, &e.payload);
            }
            _ => {}
        }
    }

    pub fn finish(self) -> UsageResult {
        let mut rows: BTreeMap<String, UsageRow> = BTreeMap::new();
        let mut total = UsageRow {
            key: "total".into(),
            ..UsageRow::default()
        };
        let mut mismatches = Vec::new();
        let mut lineages: Vec<(String, Lineage)> = self.lineages.into_iter().collect();
        lineages.sort_by(|a, b| a.0.cmp(&b.0));
        for (id, l) in lineages {
            let groups = if l.telemetry.is_empty() {
                l.other
            } else {
                l.telemetry
            };
            let mut counted = 0;
            for (_, mut row) in groups {
                if self.by == "project" {
                    row.key = l.project.clone().unwrap_or_else(|| "(unknown)".into());
                }
                counted += row.cost_usd_micros;
                merge(&mut total, &row);
                match rows.get_mut(&row.key) {
                    Some(r) => merge(r, &row),
                    None => {
                        rows.insert(row.key.clone(), row);
                    }
                }
            }
            if let Some(reported) = l.reported_micros
                && reported != counted
            {
                mismatches.push(UsageMismatch {
                    session_id: id,
                    reported_usd_micros: reported,
                    counted_usd_micros: counted,
                });
            }
        }
        UsageResult {
            by: self.by,
            rows: rows.into_values().collect(),
            total,
            mismatches,
            budgets: Vec::new(),
            source: String::new(),
        }
    }
}

fn str_of(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or("(none)")
        .to_string()
}

pub(crate) fn micros(usd: f64) -> u64 {
    if usd.is_finite() && usd > 0.0 {
        (usd * 1e6).round() as u64
    } else {
        0
    }
}

fn add(row: &mut UsageRow, p: &Value) {
    let n = |k: &str| p.get(k).and_then(Value::as_u64).unwrap_or(0);
    row.requests += 1;
    row.input_tokens += n("input_tokens");
    row.output_tokens += n("output_tokens");
    row.cache_read_tokens += n("cache_read_input_tokens");
    row.cache_write_tokens += n("cache_creation_input_tokens");
    row.cost_usd_micros += cost_micros(p);
}

/// Whether an event's `metadata` marks it as the agent's own telemetry (`source = "otlp"`):
/// where a lineage has any, only those count (the same calls imported from a transcript
/// would count twice).
pub fn is_telemetry(metadata: &Value) -> bool {
    metadata.get("source").and_then(Value::as_str) == Some("otlp")
}

/// The total an agent reported for its run (`usage.session`'s `total_cost_usd`).
pub fn reported_micros(p: &Value) -> Option<u64> {
    p.get("total_cost_usd").and_then(Value::as_f64).map(micros)
}

/// What one `usage.request` cost: the integer `cost_usd_micros` where the source gave one.
pub fn cost_micros(p: &Value) -> u64 {
    match p.get("cost_usd_micros").and_then(Value::as_u64) {
        Some(m) => m,
        None => p.get("cost_usd").and_then(Value::as_f64).map_or(0, micros),
    }
}

fn merge(into: &mut UsageRow, from: &UsageRow) {
    into.requests += from.requests;
    into.input_tokens += from.input_tokens;
    into.output_tokens += from.output_tokens;
    into.cache_read_tokens += from.cache_read_tokens;
    into.cache_write_tokens += from.cache_write_tokens;
    into.cost_usd_micros += from.cost_usd_micros;
}

const DAY_MS: u64 = 86_400_000;

/// `YYYY-MM-DD` (UTC) of `ms` since the epoch.
pub(crate) fn day(ms: u64) -> String {
    crate::util::time::rfc3339(ms)[..10].to_string()
}

/// `YYYY-Www`, the ISO 8601 week (Monday first; week 1 holds the year's first Thursday): the
/// week's Thursday names the year, and counts the weeks from that year's first day.
pub(crate) fn iso_week(ms: u64) -> String {
    let days = ms / DAY_MS;
    let weekday = (days + 3) % 7; // 0 = Monday (1970-01-01 was a Thursday)
    let thursday = (days + 3).saturating_sub(weekday);
    let year = &crate::util::time::rfc3339(thursday * DAY_MS)[..4];
    let jan1 = humantime::parse_rfc3339(&format!("{year}-01-01T00:00:00Z"))
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64 / DAY_MS);
    format!("{year}-W{:02}", (thursday - jan1) / 7 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_envelope_names_its_project_and_parses_only_usage_payloads() {
        let of = |v: Value| Envelope::of_interest(v.to_string().as_bytes());
        // A hook event: the project from raw's cwd before the payload's; nothing else parsed.
        let (e, usage) = of(
            json!({"lsn": 3, "type": "execution.tool_use", "session_id": "s",
            "stream_id": "root", "raw": {"cwd": "/w/a", "big": [1, 2, {"x": "y"}]},
            "payload": {"cwd": "/w/b", "tool": "Bash"}, "metadata": {"source": "otlp"}}),
        )
        .unwrap();
        assert!(!usage);
        assert_eq!((e.project(), e.lineage().as_str()), (Some("/w/a"), "root"));
        assert_eq!((e.payload.clone(), e.is_telemetry()), (Value::Null, false));
        // No cwd that is a string: `directory` (OpenCode's), from the payload.
        let (e, _) = of(json!({"type": "x", "session_id": "s", "raw": {"cwd": 7},
            "payload": {"directory": "/w/c"}}))
        .unwrap();
        assert_eq!(e.project(), Some("/w/c"));
        // A usage event: its payload and metadata whole.
        let (e, usage) = of(
            json!({"type": "usage.request", "session_id": "s", "timestamp": 9,
            "payload": {"model": "m", "cost_usd": 0.5}, "metadata": {"source": "otlp"}}),
        )
        .unwrap();
        assert!(usage && e.is_telemetry());
        assert_eq!(
            (e.payload["model"].as_str(), e.project()),
            (Some("m"), None)
        );
        // Neither spending nor a place: skipped unparsed.
        assert!(of(json!({"type": "user.input", "payload": {"text": "hi"}})).is_none());
    }

    #[test]
    fn dates_and_iso_weeks() {
        let ms = |date: &str| {
            humantime::parse_rfc3339(&format!("{date}T00:00:00Z"))
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
        };
        assert_eq!(day(ms("2026-11-25") + 3_600_000), "2026-11-25");
        assert_eq!(day(0), "1970-01-01");
        assert_eq!(iso_week(ms("2026-11-25")), "2026-W48");
        assert_eq!(
            iso_week(ms("2021-01-03")),
            "2020-W53",
            "a Sunday in the last year's week"
        );
        assert_eq!(
            iso_week(ms("2024-12-30")),
            "2025-W01",
            "a Monday in the next year's week"
        );
    }

    fn event(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn telemetry_wins_over_transcripts_and_subagents_count_in_their_lineage() {
        let mut u = Usage::new("session", None, 0, None);
        let ts = 1_795_000_000_000u64;
        // Lineage p: telemetry for the parent and its subagent, and the same calls imported.
        for (sid, cost) in [("p", 0.25), ("p.agent-1", 0.5)] {
            u.visit(&event(json!({"type": "usage.request", "timestamp": ts, "session_id": sid, "stream_id": "p",
                "payload": {"cost_usd": cost, "cost_usd_micros": (cost * 1e6) as u64, "output_tokens": 10},
                "metadata": {"source": "otlp"}})));
            u.visit(&event(json!({"type": "usage.request", "timestamp": ts, "session_id": sid, "stream_id": "p",
                "payload": {"output_tokens": 10}, "metadata": {"source": "claude-code-transcript"}})));
        }
        // Lineage q: only a transcript, with a reported total that differs.
        u.visit(&event(
            json!({"type": "usage.request", "timestamp": ts, "session_id": "q",
            "payload": {"cost_usd": 0.1, "input_tokens": 5}, "metadata": {}}),
        ));
        u.visit(&event(
            json!({"type": "usage.session", "timestamp": ts, "session_id": "q",
            "payload": {"total_cost_usd": 0.2}}),
        ));
        let r = u.finish();
        let keys: Vec<_> = r
            .rows
            .iter()
            .map(|r| (r.key.as_str(), r.requests, r.cost_usd_micros))
            .collect();
        assert_eq!(keys, [("p", 2, 750_000), ("q", 1, 100_000)]);
        assert_eq!(r.total.cost_usd_micros, 850_000);
        assert_eq!(r.total.output_tokens, 20);
        assert_eq!(r.mismatches.len(), 1);
        assert_eq!(r.mismatches[0].reported_usd_micros, 200_000);
    }
}
