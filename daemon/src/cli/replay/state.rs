//! The state of a session at any point of its log, folded from its events: files touched,
//! running cost, tool calls, checkpoints pending and decided.
//!
//! A session can hold 100k+ events, so the fold keeps no payloads: per event a small
//! [`Step`] (its LSN, time, what kind of mark it is, running totals after it), and per file
//! and per checkpoint one row saying at which step it was first touched / asked / decided.
//! The state at step `i` is then those totals plus the rows whose steps are `<= i`: moving
//! the cursor backwards costs nothing, and nothing is recomputed. Pure, no I/O.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use dstream_sdk::Event;
use serde_json::Value as Json;

/// What an event is for moving between marks (`]`, `c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Plain,
    /// The first event of a tool call (OpenCode writes several `execution.tool_use` per call).
    Call,
    /// A checkpoint asked or decided.
    Checkpoint,
}

/// Running totals, as they stand after a step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Distinct tool calls so far.
    pub calls: u32,
    /// `usage.request` events so far: the agent's own telemetry, and the others.
    pub telemetry_requests: u32,
    pub other_requests: u32,
    /// Cost of the telemetry records and of the others, in millionths of a dollar.
    pub telemetry_micros: u64,
    pub other_micros: u64,
    /// The latest total the agent reported itself (`usage.session`), if any.
    pub reported_micros: Option<u64>,
}

impl Totals {
    /// The running cost by `dstream usage`'s rule: once the agent's own telemetry is there,
    /// only it counts (the same calls imported from a transcript would count twice).
    pub fn cost_micros(&self) -> u64 {
        if self.telemetry_requests > 0 {
            self.telemetry_micros
        } else {
            self.other_micros
        }
    }

    /// The model calls that cost counts, by the same rule.
    pub fn model_calls(&self) -> u32 {
        if self.telemetry_requests > 0 {
            self.telemetry_requests
        } else {
            self.other_requests
        }
    }
}

/// One event of the log, as the fold keeps it.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    pub lsn: u64,
    pub timestamp: u64,
    pub mark: Mark,
    /// Totals after this event.
    pub totals: Totals,
}

/// A file and the steps at which it was first read and first changed.
#[derive(Debug, Clone)]
pub struct FileRow {
    pub path: Box<str>,
    pub first_read: Option<usize>,
    pub first_edit: Option<usize>,
}

impl FileRow {
    fn first(&self) -> usize {
        match (self.first_read, self.first_edit) {
            (Some(r), Some(e)) => r.min(e),
            (r, e) => r.or(e).unwrap_or(usize::MAX),
        }
    }
}

/// How a checkpoint ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Approved,
    Rejected,
    Expired,
    /// The call ran without a decision (`checkpoint.bypassed`).
    Bypassed,
}

/// A checkpoint: when it was asked, and when and how it was decided.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointRow {
    pub id: Box<str>,
    pub summary: Box<str>,
    pub asked: usize,
    pub decided: Option<(usize, Outcome)>,
}

/// What `(read, edit)` a tool does to the file in its input, by Claude Code's and OpenCode's
/// tool names.
fn file_tool(tool: &str) -> Option<Touch> {
    match tool.to_ascii_lowercase().as_str() {
        "read" | "notebookread" => Some(Touch::Read),
        "edit" | "write" | "multiedit" | "notebookedit" => Some(Touch::Edit),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touch {
    Read,
    Edit,
}

/// The whole session folded, step by step.
#[derive(Default)]
pub struct History {
    steps: Vec<Step>,
    files: Vec<FileRow>,
    file_of: HashMap<Box<str>, usize>,
    checkpoints: Vec<CheckpointRow>,
    checkpoint_of: HashMap<Box<str>, usize>,
    /// Hashes of the tool call ids seen: 8 bytes a call, to count each call once.
    calls_seen: HashSet<u64>,
    totals: Totals,
}

/// The state at one step, for the side pane and `--print`.
#[derive(Debug, Clone, PartialEq)]
pub struct StateAt<'a> {
    /// 0-based position among the events, and how many there are.
    pub index: usize,
    pub count: usize,
    pub lsn: u64,
    pub last_lsn: u64,
    pub timestamp: u64,
    pub totals: Totals,
    /// Files in the order first touched, and whether changed (else only read) so far.
    pub files: Vec<(&'a str, bool)>,
    pub pending: Vec<&'a CheckpointRow>,
    pub decided: Vec<(&'a CheckpointRow, Outcome)>,
}

impl History {
    /// Folds the next event of the session in (events come in LSN order).
    pub fn push(&mut self, e: &Event) -> Mark {
        let index = self.steps.len();
        let p = &e.payload;
        let mut mark = Mark::Plain;
        match e.event_type.as_str() {
            "execution.tool_use" => {
                let id = str_of(p, "tool_use_id").unwrap_or(&e.id);
                if self.new_call(id) {
                    mark = Mark::Call;
                }
                self.touch_from_input(index, str_of(p, "tool"), p.get("input"));
            }
            // The Agent SDK's stream names a call as it forms.
            "message.chunk" if str_of(p, "type") == Some("tool-call") => {
                let id = str_of(p, "toolCallId").unwrap_or(&e.id);
                if self.new_call(id) {
                    mark = Mark::Call;
                }
                self.touch_from_input(index, str_of(p, "toolName"), p.get("args"));
            }
            "files.diff" | "files.patched" => {
                for f in p
                    .get("files")
                    .and_then(Json::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(path) = f.as_str().or_else(|| str_of(f, "file")) {
                        self.touch(index, path, Touch::Edit);
                    }
                }
            }
            // OpenCode's watcher reports anyone's changes in the project, not the agent's.
            "files.changed" if p.get("watcher").and_then(Json::as_bool) != Some(true) => {
                if let Some(path) = str_of(p, "file") {
                    self.touch(index, path, Touch::Edit);
                }
            }
            "usage.request" => {
                let cost = dstream_daemon::usage::cost_micros(p);
                let t = &mut self.totals;
                let telemetry = e
                    .metadata
                    .as_ref()
                    .is_some_and(dstream_daemon::usage::is_telemetry);
                if telemetry {
                    t.telemetry_requests += 1;
                    t.telemetry_micros += cost;
                } else {
                    t.other_requests += 1;
                    t.other_micros += cost;
                }
            }
            "usage.session" => {
                if let Some(m) = dstream_daemon::usage::reported_micros(p) {
                    self.totals.reported_micros = Some(m);
                }
            }
            "checkpoint.requested" => {
                mark = Mark::Checkpoint;
                if let Some(id) = str_of(p, "checkpoint_id") {
                    let summary = str_of(p, "summary").unwrap_or("");
                    self.checkpoint_of.insert(id.into(), self.checkpoints.len());
                    self.checkpoints.push(CheckpointRow {
                        id: id.into(),
                        summary: summary.into(),
                        asked: index,
                        decided: None,
                    });
                }
            }
            t @ ("checkpoint.approved"
            | "checkpoint.rejected"
            | "checkpoint.expired"
            | "checkpoint.bypassed") => {
                mark = Mark::Checkpoint;
                let outcome = match t {
                    "checkpoint.approved" => Outcome::Approved,
                    "checkpoint.rejected" => Outcome::Rejected,
                    "checkpoint.expired" => Outcome::Expired,
                    _ => Outcome::Bypassed,
                };
                let row = str_of(p, "checkpoint_id").and_then(|id| self.checkpoint_of.get(id));
                if let Some(row) = row.map(|r| &mut self.checkpoints[*r])
                    && row.decided.is_none()
                {
                    row.decided = Some((index, outcome));
                }
            }
            _ => {}
        }
        self.steps.push(Step {
            lsn: e.lsn,
            timestamp: e.timestamp,
            mark,
            totals: self.totals,
        });
        mark
    }

    /// Whether `id` names a call not seen before (and remembers it).
    fn new_call(&mut self, id: &str) -> bool {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut h);
        let new = self.calls_seen.insert(h.finish());
        if new {
            self.totals.calls += 1;
        }
        new
    }

    fn touch_from_input(&mut self, index: usize, tool: Option<&str>, input: Option<&Json>) {
        let (Some(tool), Some(input)) = (tool, input) else {
            return;
        };
        if let Some(how) = file_tool(tool) {
            let path = ["file_path", "filePath", "notebook_path"]
                .iter()
                .find_map(|k| str_of(input, k));
            if let Some(path) = path {
                self.touch(index, path, how);
            }
            return;
        }
        // OpenCode's (and Codex-style) patch tools name their files inside the patch text.
        if matches!(tool, "patch" | "apply_patch") {
            let text = ["patchText", "patch", "input"]
                .iter()
                .find_map(|k| str_of(input, k))
                .or_else(|| input.as_str())
                .unwrap_or("");
            for line in text.lines() {
                let named = ["*** Add File: ", "*** Update File: ", "*** Delete File: "]
                    .iter()
                    .find_map(|h| line.strip_prefix(h));
                if let Some(path) = named.map(str::trim).filter(|p| !p.is_empty()) {
                    self.touch(index, path, Touch::Edit);
                }
            }
        }
    }

    fn touch(&mut self, index: usize, path: &str, how: Touch) {
        let row = match self.file_of.get(path) {
            Some(r) => *r,
            None => {
                self.file_of.insert(path.into(), self.files.len());
                self.files.push(FileRow {
                    path: path.into(),
                    first_read: None,
                    first_edit: None,
                });
                self.files.len() - 1
            }
        };
        let row = &mut self.files[row];
        let slot = match how {
            Touch::Read => &mut row.first_read,
            Touch::Edit => &mut row.first_edit,
        };
        slot.get_or_insert(index);
    }

    pub fn step(&self, index: usize) -> Option<&Step> {
        self.steps.get(index)
    }

    /// The step of the first event at or after `lsn` (the last when none is).
    pub fn index_of_lsn(&self, lsn: u64) -> usize {
        self.steps
            .partition_point(|s| s.lsn < lsn)
            .min(self.steps.len().saturating_sub(1))
    }

    /// How many events come after LSN `lsn`: what is new since it was seen.
    pub fn count_after(&self, lsn: u64) -> usize {
        self.steps.len() - self.steps.partition_point(|s| s.lsn <= lsn)
    }

    /// The next step after `from` (or the previous before it, `forward = false`) that is
    /// marked `mark`.
    pub fn next_mark(&self, from: usize, mark: Mark, forward: bool) -> Option<usize> {
        if forward {
            (from + 1..self.steps.len()).find(|i| self.steps[*i].mark == mark)
        } else {
            (0..from.min(self.steps.len()))
                .rev()
                .find(|i| self.steps[*i].mark == mark)
        }
    }

    /// The state just after step `index` (clamped to the last step).
    pub fn at(&self, index: usize) -> StateAt<'_> {
        let index = index.min(self.steps.len().saturating_sub(1));
        let step = self.steps.get(index).copied().unwrap_or(Step {
            lsn: 0,
            timestamp: 0,
            mark: Mark::Plain,
            totals: Totals::default(),
        });
        let files = self
            .files
            .iter()
            .filter(|f| f.first() <= index)
            .map(|f| (&*f.path, f.first_edit.is_some_and(|e| e <= index)))
            .collect();
        let asked = || self.checkpoints.iter().filter(|c| c.asked <= index);
        StateAt {
            index,
            count: self.steps.len(),
            lsn: step.lsn,
            last_lsn: self.steps.last().map_or(0, |s| s.lsn),
            timestamp: step.timestamp,
            totals: step.totals,
            files,
            pending: asked()
                .filter(|c| c.decided.is_none_or(|(d, _)| d > index))
                .collect(),
            decided: asked()
                .filter_map(|c| match c.decided {
                    Some((d, o)) if d <= index => Some((c, o)),
                    _ => None,
                })
                .collect(),
        }
    }
}

/// A non-empty string field.
fn str_of<'a>(v: &'a Json, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Json::as_str).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(lsn: u64, t: &str, payload: Json, metadata: Option<Json>) -> Event {
        Event {
            lsn,
            id: format!("e{lsn}"),
            event_type: t.into(),
            session_id: "s".into(),
            stream_id: "s".into(),
            causation_id: None,
            correlation_id: None,
            actor: None,
            timestamp: 1_000 * lsn,
            payload,
            metadata,
            raw: None,
        }
    }

    fn call(lsn: u64, id: &str, tool: &str, input: Json) -> Event {
        ev(
            lsn,
            "execution.tool_use",
            json!({"tool": tool, "tool_use_id": id, "input": input}),
            None,
        )
    }

    fn fold(events: &[Event]) -> History {
        let mut h = History::default();
        for e in events {
            h.push(e);
        }
        h
    }

    #[test]
    fn files_calls_and_cost_are_what_came_before_the_cursor() {
        let h = fold(&[
            ev(1, "user.input", json!({"text": "fix it"}), None),
            call(2, "t1", "Read", json!({"file_path": "/p/a.rs"})),
            ev(3, "usage.request", json!({"cost_usd": 0.25}), None),
            call(4, "t2", "Edit", json!({"file_path": "/p/a.rs"})),
            call(5, "t3", "Write", json!({"file_path": "/p/b.rs"})),
            ev(
                6,
                "usage.request",
                json!({"cost_usd_micros": 500_000}),
                None,
            ),
            call(7, "t4", "Bash", json!({"command": "cargo test"})),
        ]);
        let s = h.at(0);
        assert_eq!((s.lsn, s.totals.calls, s.totals.cost_micros()), (1, 0, 0));
        assert!(s.files.is_empty());
        let s = h.at(1);
        assert_eq!(s.files, vec![("/p/a.rs", false)]);
        assert_eq!(s.totals.calls, 1);
        let s = h.at(3);
        assert_eq!(s.files, vec![("/p/a.rs", true)], "read, then edited");
        assert_eq!(s.totals.cost_micros(), 250_000);
        let s = h.at(6);
        assert_eq!(s.files, vec![("/p/a.rs", true), ("/p/b.rs", true)]);
        assert_eq!((s.totals.calls, s.totals.model_calls()), (4, 2));
        assert_eq!(s.totals.cost_micros(), 750_000);
        assert_eq!((s.lsn, s.last_lsn, s.count), (7, 7, 7));
        // Going back is only a lookup.
        assert_eq!(h.at(2).totals.cost_micros(), 250_000);
        assert_eq!(h.at(99).lsn, 7, "clamped to the last step");
    }

    #[test]
    fn one_call_reported_in_several_phases_counts_once() {
        // OpenCode: pending, requested, running for one callID.
        let h = fold(&[
            ev(
                1,
                "execution.tool_use",
                json!({"tool": "edit", "tool_use_id": "c1", "phase": "pending"}),
                None,
            ),
            call(2, "c1", "edit", json!({"filePath": "/p/x.ts"})),
            call(3, "c1", "edit", json!({"filePath": "/p/x.ts"})),
            call(4, "c2", "read", json!({"filePath": "/p/y.ts"})),
        ]);
        assert_eq!(h.at(3).totals.calls, 2);
        assert_eq!(h.step(0).unwrap().mark, Mark::Call);
        assert_eq!(h.step(1).unwrap().mark, Mark::Plain);
        assert_eq!(h.next_mark(0, Mark::Call, true), Some(3));
        assert_eq!(h.next_mark(3, Mark::Call, false), Some(0));
        assert_eq!(h.next_mark(3, Mark::Call, true), None);
        assert_eq!(h.at(3).files, vec![("/p/x.ts", true), ("/p/y.ts", false)]);
    }

    #[test]
    fn opencode_diffs_patches_and_edits_touch_files_the_watcher_does_not() {
        let patch = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-x\n+y\n*** Add File: src/new.rs\n+z\n*** End Patch";
        let h = fold(&[
            call(1, "p1", "apply_patch", json!({"patchText": patch})),
            ev(
                2,
                "files.diff",
                json!({"files": [{"file": "src/c.rs", "additions": 1}]}),
                None,
            ),
            ev(
                3,
                "files.changed",
                json!({"file": "src/d.rs", "change": "edited"}),
                None,
            ),
            ev(
                4,
                "files.changed",
                json!({"file": "target/x", "watcher": true}),
                None,
            ),
            ev(5, "files.patched", json!({"files": ["src/e.rs"]}), None),
        ]);
        let files: Vec<&str> = h.at(4).files.iter().map(|f| f.0).collect();
        assert_eq!(
            files,
            ["src/a.rs", "src/new.rs", "src/c.rs", "src/d.rs", "src/e.rs"]
        );
    }

    #[test]
    fn telemetry_replaces_the_other_figures_once_it_appears() {
        let otlp = Some(json!({"source": "otlp"}));
        let h = fold(&[
            ev(1, "usage.request", json!({"cost_usd": 1.0}), None),
            ev(2, "usage.request", json!({"cost_usd": 0.5}), otlp.clone()),
            ev(3, "usage.request", json!({"cost_usd": 0.25}), otlp),
            ev(4, "usage.session", json!({"total_cost_usd": 0.75}), None),
        ]);
        assert_eq!(h.at(0).totals.cost_micros(), 1_000_000);
        assert_eq!(h.at(1).totals.cost_micros(), 500_000);
        assert_eq!(
            h.at(1).totals.model_calls(),
            1,
            "the other call is not counted"
        );
        assert_eq!(h.at(2).totals.cost_micros(), 750_000);
        assert_eq!(h.at(2).totals.reported_micros, None);
        assert_eq!(h.at(3).totals.reported_micros, Some(750_000));
    }

    #[test]
    fn a_checkpoint_is_pending_until_its_decision_and_decided_after() {
        let cp = |lsn, t: &str, id: &str| {
            ev(
                lsn,
                t,
                json!({"checkpoint_id": id, "summary": format!("Bash: {id}")}),
                None,
            )
        };
        let h = fold(&[
            cp(1, "checkpoint.requested", "a"),
            cp(2, "checkpoint.requested", "b"),
            cp(3, "checkpoint.approved", "a"),
            cp(4, "checkpoint.delivered", "a"),
            cp(5, "checkpoint.rejected", "b"),
        ]);
        let ids = |v: Vec<&CheckpointRow>| v.iter().map(|c| c.id.to_string()).collect::<Vec<_>>();
        assert_eq!(ids(h.at(1).pending), ["a", "b"]);
        let s = h.at(2);
        assert_eq!(ids(s.pending), ["b"]);
        assert_eq!(s.decided.len(), 1);
        assert_eq!(s.decided[0].1, Outcome::Approved);
        let s = h.at(4);
        assert!(s.pending.is_empty());
        let outcomes: Vec<Outcome> = s.decided.iter().map(|d| d.1).collect();
        assert_eq!(outcomes, [Outcome::Approved, Outcome::Rejected]);
        assert_eq!(
            h.step(3).unwrap().mark,
            Mark::Plain,
            "delivery is no decision"
        );
        assert_eq!(h.next_mark(0, Mark::Checkpoint, true), Some(1));
    }

    #[test]
    fn an_lsn_finds_its_step_even_across_a_gap() {
        let h = fold(&[
            ev(1, "a", json!({}), None),
            ev(2, "a", json!({}), None),
            ev(7, "a", json!({}), None),
        ]);
        assert_eq!(h.index_of_lsn(2), 1);
        assert_eq!(h.index_of_lsn(3), 2, "the next event after a repaired gap");
        assert_eq!(h.index_of_lsn(100), 2);
        assert_eq!(h.index_of_lsn(0), 0);
        assert_eq!(
            (h.count_after(0), h.count_after(2), h.count_after(7)),
            (3, 1, 0)
        );
    }
}
