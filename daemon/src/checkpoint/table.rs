//! The in-memory table of checkpoints: every open one, the recently decided ones, their
//! deadlines and waiters, and how many are open per session.
//!
//! Memory is only a cache of the logs (they hold every request and decision), kept compact
//! because thousands of checkpoints may wait at once. Pure data: no file or log is touched
//! here, so the rules of the table can be tested alone.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use dstream_sdk::protocol::{
    Action, CheckpointDecision, CheckpointInfo, CheckpointOption, CheckpointState, OnTimeout,
};
use tokio::sync::oneshot;

/// Decided checkpoints kept in memory for late awaits and double decisions; older ones are
/// found in their session's log (see [`super::replay::LOOKBACK`]).
const DECIDED_KEPT: usize = 4096;
/// Pending checkpoints listed at most per `checkpoint.list`.
const LIST_MAX: usize = 10_000;

/// A checkpoint as memory holds it: compact (about 400 bytes with its strings), since
/// thousands may wait at once. The input stays in the log; options are shared.
pub(super) struct Held {
    pub session_id: Arc<str>,
    pub key: Box<str>,
    pub state: CheckpointState,
    pub on_timeout: OnTimeout,
    pub delivered: bool,
    pub created_ms: u64,
    pub deadline_ms: u64,
    pub lsn: u64,
    pub tool: Option<Box<str>>,
    pub summary: Box<str>,
    /// Rarely needed, so one pointer when absent.
    about: Option<Box<About>>,
    pub decision: Option<Box<CheckpointDecision>>,
}

#[derive(Default)]
struct About {
    rule: Option<String>,
    source: Option<String>,
    cwd: Option<String>,
}

impl Held {
    pub fn is_pending(&self) -> bool {
        self.state.is_pending()
    }
}

pub(super) struct Entry {
    pub info: Held,
    pub options: Arc<[CheckpointOption]>,
    pub request_event_id: Box<str>,
    pub input_glob: Option<Box<str>>,
    /// A decision being written: who makes it.
    pub deciding: Option<Box<str>>,
    pub waiters: Vec<oneshot::Sender<CheckpointInfo>>,
}

/// The action a stored word names, as a checkpoint's options and decisions hold it: `deny`,
/// or else allow.
pub(super) fn action_named(word: &str) -> Action {
    if word == Action::Deny.as_str() {
        Action::Deny
    } else {
        Action::Allow
    }
}

/// The state a decision leaves: a deadline's is `expired`, a person's follows its action.
pub(super) fn state_of(action: Action, expired: bool) -> CheckpointState {
    match (expired, action) {
        (true, _) => CheckpointState::Expired,
        (false, Action::Deny) => CheckpointState::Rejected,
        (false, _) => CheckpointState::Approved,
    }
}

impl Entry {
    pub fn new(info: CheckpointInfo, request_event_id: String, input_glob: Option<String>) -> Self {
        let about =
            (info.rule.is_some() || info.source.is_some() || info.cwd.is_some()).then(|| {
                Box::new(About {
                    rule: info.rule,
                    source: info.source,
                    cwd: info.cwd,
                })
            });
        Entry {
            info: Held {
                session_id: info.session_id.into(),
                key: info.key.into(),
                state: info.state,
                on_timeout: info.on_timeout,
                delivered: info.delivered,
                created_ms: info.created_ms,
                deadline_ms: info.deadline_ms,
                lsn: info.lsn,
                tool: info.tool.map(Into::into),
                summary: info.summary.into(),
                about,
                decision: info.decision.map(Box::new),
            },
            options: intern(info.options),
            request_event_id: request_event_id.into(),
            input_glob: input_glob.map(Into::into),
            deciding: None,
            waiters: Vec::new(),
        }
    }

    /// The checkpoint `id` as clients see it.
    pub fn view(&self, id: &str) -> CheckpointInfo {
        let h = &self.info;
        let about = h.about.as_deref();
        CheckpointInfo {
            id: id.to_string(),
            session_id: h.session_id.to_string(),
            key: h.key.to_string(),
            state: h.state,
            tool: h.tool.as_deref().map(str::to_string),
            input: None,
            summary: h.summary.to_string(),
            options: self.options.to_vec(),
            created_ms: h.created_ms,
            deadline_ms: h.deadline_ms,
            on_timeout: h.on_timeout,
            rule: about.and_then(|a| a.rule.clone()),
            source: about.and_then(|a| a.source.clone()),
            cwd: about.and_then(|a| a.cwd.clone()),
            lsn: h.lsn,
            decision: h.decision.as_deref().cloned(),
            delivered: h.delivered,
        }
    }
}

/// One shared copy of each set of options in use (agents' calls all have the same few).
fn intern(options: Vec<CheckpointOption>) -> Arc<[CheckpointOption]> {
    static SETS: Mutex<Vec<Arc<[CheckpointOption]>>> = Mutex::new(Vec::new());
    let mut sets = SETS.lock().unwrap();
    if let Some(known) = sets.iter().find(|s| s[..] == options[..]) {
        return known.clone();
    }
    let set: Arc<[CheckpointOption]> = options.into();
    if sets.len() < 32 {
        sets.push(set.clone());
    }
    set
}

#[derive(Default)]
pub(super) struct Table {
    /// Boxed: the table's slots stay small (an entry is ~600 bytes, and a hash table keeps
    /// up to half its slots empty).
    pub entries: HashMap<String, Box<Entry>>,
    pub decided: VecDeque<String>,
    pub deadlines: BTreeSet<(u64, String)>,
    /// Open (recording or pending) checkpoints per session: its marker exists while > 0.
    pub open: HashMap<String, usize>,
    /// The ids in the journal (see [`super::journal`]), as
    /// [`id_hash`](super::journal::id_hash)es: only a key whose id is here can have a
    /// checkpoint in a log that memory no longer holds, so a new key costs no log read.
    pub journaled: HashSet<u64>,
}

impl Table {
    /// Takes up the checkpoints found in `session`'s log at start; returns how many of them
    /// are open (the session's marker stays while any is).
    pub fn rebuilt(&mut self, session: &str, found: HashMap<String, Box<Entry>>) -> usize {
        let mut open = 0;
        for (id, entry) in found {
            if entry.info.is_pending() {
                open += 1;
                self.deadlines.insert((entry.info.deadline_ms, id.clone()));
            } else {
                self.decided.push_back(id.clone());
            }
            self.entries.insert(id, entry);
        }
        if open > 0 {
            self.open.insert(session.to_string(), open);
        }
        open
    }

    /// Takes up `id`, found in `session`'s log, unless memory has it already. Returns whether
    /// it is open, so that its deadline must be looked at.
    pub fn adopt(&mut self, session: &str, id: &str, entry: Box<Entry>) -> bool {
        if self.entries.contains_key(id) {
            return false;
        }
        let open = entry.info.is_pending();
        if open {
            // Requested earlier than its marker says (cannot happen unless the marker was
            // removed by hand): take it up again.
            self.deadlines
                .insert((entry.info.deadline_ms, id.to_string()));
            *self.open.entry(session.to_string()).or_default() += 1;
        } else {
            self.decided.push_back(id.to_string());
        }
        self.entries.insert(id.to_string(), entry);
        self.trim_decided();
        open
    }

    /// One open checkpoint of `session` is decided (or dropped). Returns true when it was the
    /// session's last: its marker goes.
    pub fn close_one(&mut self, session: &str) -> bool {
        let left = match self.open.get_mut(session) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n
            }
            None => return false,
        };
        if left == 0 {
            self.open.remove(session);
        }
        left == 0
    }

    /// Forgets the oldest decided checkpoints past [`DECIDED_KEPT`] (not one still awaited).
    pub fn trim_decided(&mut self) {
        while self.decided.len() > DECIDED_KEPT {
            if let Some(old) = self.decided.pop_front()
                && self
                    .entries
                    .get(&old)
                    .is_some_and(|e| e.info.decision.is_some() && e.waiters.is_empty())
            {
                self.entries.remove(&old);
            }
        }
    }

    /// The checkpoints held that match, in no order, without their inputs; not those whose
    /// request is still being synced unless `state` asks for them. See [`page`].
    pub fn matching(
        &self,
        state: Option<CheckpointState>,
        session: Option<&str>,
        tool: Option<&str>,
    ) -> Vec<CheckpointInfo> {
        self.entries
            .iter()
            // A request still being synced is nobody's business yet.
            .filter(|(_, e)| match state {
                Some(s) => e.info.state == s,
                None => e.info.state != CheckpointState::Recording,
            })
            .filter(|(_, e)| session.is_none_or(|s| &*e.info.session_id == s))
            .filter(|(_, e)| {
                tool.is_none_or(|t| {
                    e.info
                        .tool
                        .as_deref()
                        .is_some_and(|x| x.eq_ignore_ascii_case(t))
                })
            })
            .map(|(id, e)| e.view(id))
            .collect()
    }

    /// Pending (and recording) checkpoints of one session.
    pub fn pending_in(&self, session: &str) -> usize {
        self.entries
            .values()
            .filter(|e| e.info.is_pending() && &*e.info.session_id == session)
            .count()
    }

    /// Pending (and recording) checkpoints.
    pub fn pending_count(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.info.is_pending())
            .count()
    }
}

/// `list` as a page: oldest first (or newest first), at most `limit` (and never more than
/// [`LIST_MAX`]); also returns how many there were before the limit cut the list.
pub(super) fn page(
    mut list: Vec<CheckpointInfo>,
    newest_first: bool,
    limit: Option<usize>,
) -> (Vec<CheckpointInfo>, usize) {
    let total = list.len();
    list.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
    if newest_first {
        list.reverse();
    }
    list.truncate(limit.unwrap_or(LIST_MAX).min(LIST_MAX));
    (list, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    use CheckpointState::*;

    fn info(id: &str, session: &str, state: CheckpointState, created_ms: u64) -> CheckpointInfo {
        CheckpointInfo {
            id: id.into(),
            session_id: session.into(),
            key: format!("key-{id}"),
            state,
            tool: Some("Bash".into()),
            input: None,
            summary: "run it".into(),
            options: crate::checkpoint::types::default_options(false),
            created_ms,
            deadline_ms: created_ms + 1000,
            on_timeout: OnTimeout::Deny,
            rule: None,
            source: Some("test".into()),
            cwd: None,
            lsn: 7,
            decision: None,
            delivered: false,
        }
    }

    fn entry(id: &str, session: &str, state: CheckpointState, created_ms: u64) -> Box<Entry> {
        Box::new(Entry::new(
            info(id, session, state, created_ms),
            "ev".into(),
            None,
        ))
    }

    fn decided(id: &str, session: &str) -> Box<Entry> {
        let mut e = entry(id, session, Approved, 1);
        e.info.decision = Some(Box::new(CheckpointDecision {
            decision: "approve".into(),
            action: Action::Allow,
            note: None,
            input: None,
            decided_by: "user:x".into(),
            decided_ms: 2,
            event_id: None,
        }));
        e
    }

    #[test]
    fn an_entry_shows_what_it_was_given() {
        let i = info("ck_1", "s", Pending, 5);
        let e = Entry::new(i.clone(), "ev".into(), Some("rm *".into()));
        assert_eq!(e.view("ck_1"), i);
        assert_eq!(e.input_glob.as_deref(), Some("rm *"));
    }

    #[test]
    fn options_in_use_are_shared() {
        let a = entry("a", "s", Pending, 1);
        let b = entry("b", "s", Pending, 1);
        assert!(Arc::ptr_eq(&a.options, &b.options));
    }

    #[test]
    fn states_follow_the_decision() {
        assert_eq!(state_of(Action::Allow, false), Approved);
        assert_eq!(state_of(Action::Deny, false), Rejected);
        assert_eq!(state_of(Action::Allow, true), Expired);
        assert_eq!(state_of(Action::Deny, true), Expired);
        // A stored word other than deny allows, as it always did.
        assert_eq!(action_named("deny"), Action::Deny);
        assert_eq!(action_named("allow"), Action::Allow);
        assert_eq!(action_named("anything"), Action::Allow);
    }

    #[test]
    fn the_marker_goes_with_the_last_open_checkpoint() {
        let mut t = Table::default();
        let found: HashMap<_, _> = [
            ("a".to_string(), entry("a", "s", Pending, 1)),
            ("b".to_string(), entry("b", "s", Pending, 2)),
            ("c".to_string(), decided("c", "s")),
        ]
        .into();
        assert_eq!(t.rebuilt("s", found), 2);
        assert_eq!(t.deadlines.len(), 2);
        assert_eq!(t.decided, ["c"]);
        assert!(!t.close_one("s"));
        assert!(t.close_one("s"));
        assert!(!t.open.contains_key("s"));
        // A session with nothing open has no marker to remove.
        assert!(!t.close_one("s"));
        assert!(!t.close_one("other"));
    }

    #[test]
    fn a_session_with_nothing_open_is_not_counted_open() {
        let mut t = Table::default();
        let found: HashMap<_, _> = [("c".to_string(), decided("c", "s"))].into();
        assert_eq!(t.rebuilt("s", found), 0);
        assert!(t.open.is_empty());
    }

    #[test]
    fn adopting_keeps_what_memory_holds() {
        let mut t = Table::default();
        assert!(t.adopt("s", "a", entry("a", "s", Pending, 1)));
        assert_eq!(t.open["s"], 1);
        assert_eq!(t.deadlines.len(), 1);
        // Already held: memory wins over an older read of the log.
        assert!(!t.adopt("s", "a", decided("a", "s")));
        assert!(t.entries["a"].info.decision.is_none());
        assert!(!t.adopt("s", "c", decided("c", "s")));
        assert_eq!(t.decided, ["c"]);
        assert_eq!(t.open["s"], 1);
    }

    #[test]
    fn only_decided_checkpoints_nobody_awaits_are_forgotten() {
        let mut t = Table::default();
        for i in 0..DECIDED_KEPT + 2 {
            let id = format!("d{i}");
            t.entries.insert(id.clone(), decided(&id, "s"));
            t.decided.push_back(id);
        }
        let (tx, _rx) = oneshot::channel();
        t.entries.get_mut("d1").unwrap().waiters.push(tx);
        t.trim_decided();
        assert_eq!(t.decided.len(), DECIDED_KEPT);
        assert!(!t.entries.contains_key("d0"));
        // Awaited: stays in memory although no longer in the decided queue.
        assert!(t.entries.contains_key("d1"));
        assert!(t.entries.contains_key("d2"));
    }

    #[test]
    fn lists_filter_sort_and_count() {
        let mut t = Table::default();
        t.entries.insert("a".into(), entry("a", "s1", Pending, 3));
        t.entries.insert("b".into(), entry("b", "s1", Pending, 1));
        t.entries.insert("c".into(), entry("c", "s2", Pending, 2));
        t.entries.insert("r".into(), entry("r", "s1", Recording, 0));
        let mut other = entry("o", "s1", Pending, 4);
        other.info.tool = Some("Edit".into());
        t.entries.insert("o".into(), other);
        let ids = |(v, n): (Vec<CheckpointInfo>, usize)| {
            (v.into_iter().map(|c| c.id).collect::<Vec<_>>(), n)
        };
        let list = |state, session, tool, newest_first, limit| {
            page(t.matching(state, session, tool), newest_first, limit)
        };
        assert_eq!(
            ids(list(None, None, None, false, None)),
            (vec!["b".into(), "c".into(), "a".into(), "o".into()], 4)
        );
        assert_eq!(
            ids(list(Some(Pending), Some("s1"), Some("bash"), true, None)),
            (vec!["a".into(), "b".into()], 2)
        );
        assert_eq!(
            ids(list(None, None, None, false, Some(1))),
            (vec!["b".into()], 4)
        );
        assert_eq!(
            ids(list(Some(Recording), None, None, false, None)),
            (vec!["r".into()], 1)
        );
        assert_eq!(t.pending_count(), 5);
    }
}
