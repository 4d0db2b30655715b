//! Checkpoints: a tool call (or anything an SDK caller asks about) held until a person
//! decides, with a deadline and a default, recorded in the session's log.
//!
//! The state machine: `recording` (the `checkpoint.requested` event is being synced; nobody
//! has been told yet) → `pending` (durable; waiters wait, the deadline runs) → `approved`,
//! `rejected` or `expired` (the decision event is durable; waiters are answered). The first
//! valid decision wins: a checkpoint being decided refuses every other decision.
//!
//! Nothing lives only in memory. The log holds every request and decision; a small marker
//! file per session with open checkpoints (`<data>/checkpoints/open/<session>`, holding the
//! LSN to scan from) says which logs to read at start, so a restart rebuilds the pending set
//! without reading every session ever written, and a deadline that passed while the daemon
//! was down is applied as soon as it is back. The marker is written before the request is
//! appended and removed only after the session's last open checkpoint is decided, so a crash
//! between the two leaves an extra marker (a scan that finds nothing), never a lost request.
//! "Always allow" grants live in `grants.json` (written atomically) as well as in the events.

pub mod policy;
#[cfg(test)]
mod power_loss;
mod shell;
mod shell_rule;
pub mod stop;

use crate::util::time::now_ms;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dstream_sdk::protocol::{CheckpointDecision, CheckpointInfo, CheckpointOption};
use serde::{Deserialize, Serialize};
use serde_json::value::to_raw_value;
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, oneshot};

use crate::config::OnTimeout;
use crate::store::{AppendAck, NewEventRaw, Store, StoreError, read_range};
use crate::vfs::Vfs;

/// Decided checkpoints kept in memory for late awaits and double decisions; older ones are
/// found in their session's log (see [`LOOKBACK`]).
const DECIDED_KEPT: usize = 4096;
/// How far back in a session's log a checkpoint no longer in memory is looked for.
const LOOKBACK: u64 = 2000;
/// Pending checkpoints listed at most per `checkpoint.list`.
const LIST_MAX: usize = 10_000;
/// The journal of checkpoint ids and their sessions is cut back to its newest half past this.
const JOURNAL_MAX_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("no checkpoint {0}")]
    NotFound(String),
    #[error("checkpoint {id} was already decided: {first}")]
    AlreadyDecided { id: String, first: String },
    #[error("checkpoint {0} is still being recorded; try again shortly")]
    NotReady(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("checkpoint state {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A checkpoint to open.
#[derive(Debug, Clone, Default)]
pub struct NewRequest {
    pub session_id: String,
    pub key: String,
    pub tool: Option<String>,
    pub input: Option<Json>,
    pub summary: String,
    pub options: Vec<CheckpointOption>,
    pub timeout_ms: u64,
    pub on_timeout: Option<OnTimeout>,
    pub rule: Option<String>,
    /// The asking rule's input glob: what an "always allow" on this checkpoint covers.
    pub input_glob: Option<String>,
    pub source: Option<String>,
    pub cwd: Option<String>,
    /// The event that asked (the tool call).
    pub causation_id: Option<String>,
}

/// What `prepare` found or made.
pub enum Prepared {
    /// The key already has a checkpoint (a retried hook): no new request.
    Existing(CheckpointInfo),
    /// A new checkpoint, `recording` until the event is durable: append `event` with the id
    /// `event_id`, then report the outcome with [`Checkpoints::recorded`].
    New {
        info: CheckpointInfo,
        event_id: String,
        event: NewEventRaw,
    },
}

/// Who or what decides, and how.
#[derive(Debug, Clone)]
pub struct Resolution {
    pub decision: String,
    pub note: Option<String>,
    pub input: Option<Json>,
    /// `user:<name>`: from the OS credentials of the client, never from its request.
    pub decided_by: String,
    pub uid: Option<u32>,
}

/// An "always allow": calls like the approved one run without asking, in the session (or the
/// project directory) until it expires. Never stronger than a deny.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    pub checkpoint_id: String,
    /// `session` or `project`.
    pub scope: String,
    pub session_id: String,
    #[serde(default)]
    pub cwd: Option<String>,
    pub tool: String,
    #[serde(default)]
    pub input_glob: Option<String>,
    pub expires_ms: u64,
}

/// A checkpoint as memory holds it: compact (about 400 bytes with its strings), since
/// thousands may wait at once. The input stays in the log; options are shared.
struct Held {
    session_id: Arc<str>,
    key: Box<str>,
    /// `recording`, `pending`, `approved`, `rejected` or `expired`.
    state: &'static str,
    /// `allow` or `deny`.
    on_timeout: &'static str,
    delivered: bool,
    created_ms: u64,
    deadline_ms: u64,
    lsn: u64,
    tool: Option<Box<str>>,
    summary: Box<str>,
    /// Rarely needed, so one pointer when absent.
    about: Option<Box<About>>,
    decision: Option<Box<CheckpointDecision>>,
}

#[derive(Default)]
struct About {
    rule: Option<String>,
    source: Option<String>,
    cwd: Option<String>,
}

impl Held {
    fn is_pending(&self) -> bool {
        matches!(self.state, "pending" | "recording")
    }
}

struct Entry {
    info: Held,
    options: Arc<[CheckpointOption]>,
    request_event_id: Box<str>,
    input_glob: Option<Box<str>>,
    /// A decision being written: who makes it.
    deciding: Option<Box<str>>,
    waiters: Vec<oneshot::Sender<CheckpointInfo>>,
}

fn static_state(state: &str) -> &'static str {
    match state {
        "recording" => "recording",
        "pending" => "pending",
        "approved" => "approved",
        "rejected" => "rejected",
        _ => "expired",
    }
}

fn static_on_timeout(on_timeout: &str) -> &'static str {
    if on_timeout == "allow" {
        "allow"
    } else {
        "deny"
    }
}

impl Entry {
    fn new(info: CheckpointInfo, request_event_id: String, input_glob: Option<String>) -> Self {
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
                state: static_state(&info.state),
                on_timeout: static_on_timeout(&info.on_timeout),
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
    fn view(&self, id: &str) -> CheckpointInfo {
        let h = &self.info;
        let about = h.about.as_deref();
        CheckpointInfo {
            id: id.to_string(),
            session_id: h.session_id.to_string(),
            key: h.key.to_string(),
            state: h.state.to_string(),
            tool: h.tool.as_deref().map(str::to_string),
            input: None,
            summary: h.summary.to_string(),
            options: self.options.to_vec(),
            created_ms: h.created_ms,
            deadline_ms: h.deadline_ms,
            on_timeout: h.on_timeout.to_string(),
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
struct Table {
    /// Boxed: the table's slots stay small (an entry is ~600 bytes, and a hash table keeps
    /// up to half its slots empty).
    entries: HashMap<String, Box<Entry>>,
    decided: VecDeque<String>,
    deadlines: BTreeSet<(u64, String)>,
    /// Open (recording or pending) checkpoints per session: its marker exists while > 0.
    open: HashMap<String, usize>,
    /// The ids in the journal (see [`Checkpoints::journal`]), as [`id_hash`]es: only a key
    /// whose id is here can have a checkpoint in a log that memory no longer holds, so a
    /// new key costs no log read.
    journaled: HashSet<u64>,
    grants: Vec<Grant>,
}

pub struct Checkpoints {
    store: Store,
    /// Markers, journal and grants go through the store's file layer, so the power-loss
    /// simulation covers them with the logs.
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    table: Mutex<Table>,
    /// Wakes the deadline task when an earlier deadline arrives (or this is dropped).
    wake: Arc<Notify>,
    grant_ttl_ms: Mutex<u64>,
    /// Sessions stopped remotely: their tool calls are denied until a new prompt.
    pub stops: stop::Stops,
}

/// The checkpoint id of `key` in `session`: the same key always names the same checkpoint.
pub fn checkpoint_id(session: &str, key: &str) -> String {
    let mut h = Sha256::new();
    h.update(session.as_bytes());
    h.update([0]);
    h.update(key.as_bytes());
    let digest = h.finalize();
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("ck_{hex}")
}

/// A checkpoint id folded to 64 bits (ids are hashes already).
fn id_hash(id: &str) -> u64 {
    id.get(3..19)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or_else(|| {
            let d = Sha256::digest(id.as_bytes());
            u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
        })
}

/// The choices of an agent's tool call.
pub fn default_options(with_project: bool) -> Vec<CheckpointOption> {
    let opt = |id: &str, label: &str, action: &str, scope: Option<&str>| CheckpointOption {
        id: id.into(),
        label: Some(label.into()),
        action: action.into(),
        scope: scope.map(str::to_string),
    };
    let mut v = vec![
        opt("approve", "Approve", "allow", None),
        opt("reject", "Reject", "deny", None),
        opt(
            "approve_session",
            "Approve, and allow such calls for the rest of this session",
            "allow",
            Some("session"),
        ),
    ];
    if with_project {
        v.push(opt(
            "approve_project",
            "Approve, and allow such calls in this project",
            "allow",
            Some("project"),
        ));
    }
    v
}

fn state_of(action: &str, expired: bool) -> &'static str {
    match (expired, action) {
        (true, _) => "expired",
        (false, "deny") => "rejected",
        (false, _) => "approved",
    }
}

/// One `wait` in progress. Ending it unanswered (its timeout passed, or its connection went
/// away and the task was dropped) removes every abandoned waiter of the checkpoint, so that
/// short awaits on a long-pending checkpoint do not pile up.
struct Waiter<'a> {
    checkpoints: &'a Checkpoints,
    id: &'a str,
    rx: Option<oneshot::Receiver<CheckpointInfo>>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        drop(self.rx.take()); // closes this waiter's own sender first
        if let Some(e) = self
            .checkpoints
            .table
            .lock()
            .unwrap()
            .entries
            .get_mut(self.id)
        {
            e.waiters.retain(|w| !w.is_closed());
        }
    }
}

impl Checkpoints {
    /// Opens the checkpoint state under `data_dir`, rebuilds the open checkpoints from the
    /// logs the markers name, and starts the deadline task (on the current runtime).
    /// Deadlines that passed while the daemon was down are applied at once.
    pub fn start(store: Store, data_dir: &Path, grant_ttl_ms: u64) -> std::io::Result<Arc<Self>> {
        let dir = data_dir.join("checkpoints");
        let vfs = store.vfs();
        for d in [&dir, &dir.join("open")] {
            if !vfs.exists(d) {
                vfs.create_dir_all(d)?;
                vfs.sync_dir(crate::vfs::parent(d))?;
            }
        }
        let this = Arc::new(Checkpoints {
            stops: stop::Stops::open(vfs.clone(), dir.join("stopped"))?,
            store,
            vfs,
            table: Mutex::new(Table::default()),
            wake: Arc::new(Notify::new()),
            grant_ttl_ms: Mutex::new(grant_ttl_ms),
            dir,
        });
        this.rebuild()?;
        tokio::spawn(deadlines(Arc::downgrade(&this)));
        Ok(this)
    }

    pub fn set_grant_ttl_ms(&self, ms: u64) {
        *self.grant_ttl_ms.lock().unwrap() = ms;
    }

    fn marker(&self, session: &str) -> PathBuf {
        self.dir.join("open").join(session)
    }

    fn grants_path(&self) -> PathBuf {
        self.dir.join("grants.json")
    }

    /// `ids`: one `<checkpoint id> <session>` line per checkpoint opened, newest last, so that
    /// a decision or an await for an id no longer in memory (decided before a restart) finds
    /// its session's log. A hint, not a record: the logs are the record.
    fn journal_path(&self) -> PathBuf {
        self.dir.join("ids")
    }

    /// Notes `id` in the journal; called with the table locked.
    fn journal(&self, table: &mut Table, id: &str, session: &str) {
        table.journaled.insert(id_hash(id));
        let path = self.journal_path();
        let appended = self
            .vfs
            .open(&path, crate::vfs::Open::Create)
            .and_then(|f| f.append(format!("{id} {session}\n").as_bytes()).map(|()| f))
            .and_then(|f| f.len());
        match appended {
            Ok(len) if len > JOURNAL_MAX_BYTES => {
                let keep = self.vfs.read(&path).ok().map(|bytes| {
                    let half = bytes.len() / 2;
                    let start =
                        memchr::memchr(b'\n', &bytes[half..]).map_or(half, |i| half + i + 1);
                    bytes[start..].to_vec()
                });
                if let Some(keep) = keep {
                    let _ = self.vfs.write_atomic(&path, &keep);
                    table.journaled = journaled_ids(&keep);
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot note a checkpoint id in checkpoints/ids"),
        }
    }

    /// The session of a checkpoint no longer in memory, from the journal.
    fn session_of(&self, id: &str) -> Option<String> {
        let bytes = self.vfs.read(&self.journal_path()).ok()?;
        let text = String::from_utf8_lossy(&bytes);
        text.lines().rev().find_map(|line| {
            let (i, session) = line.split_once(' ')?;
            (i == id).then(|| session.to_string())
        })
    }

    /// A checkpoint from memory, else from its session's log (found through the journal
    /// when `session` is not given).
    fn find(&self, id: &str, session: Option<&str>) -> Result<(), CheckpointError> {
        if self.table.lock().unwrap().entries.contains_key(id) {
            return Ok(());
        }
        let session = match session {
            Some(s) => s.to_string(),
            None => self
                .session_of(id)
                .ok_or_else(|| CheckpointError::NotFound(id.to_string()))?,
        };
        match self.lookup(&session, id)? {
            Some(_) => Ok(()),
            None => Err(CheckpointError::NotFound(id.to_string())),
        }
    }

    fn rebuild(&self) -> std::io::Result<()> {
        let mut table = self.table.lock().unwrap();
        for name in self.vfs.list_dir(&self.dir.join("open"))? {
            let path = self.dir.join("open").join(&name);
            let Some(session) = name.to_str().map(str::to_string) else {
                continue;
            };
            // Not a session (a leftover `.x.tmp` of an interrupted write, say): gone.
            if dstream_sdk::validate_session_id(&session).is_err() {
                let _ = self.vfs.remove(&path);
                continue;
            }
            let from = self
                .vfs
                .read(&path)
                .ok()
                .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<u64>().ok())
                .unwrap_or(1);
            let found = match self.scan(&session, from) {
                Ok(found) => found,
                Err(e) => {
                    // Keep the marker: the log may be repaired, and the next start reads it.
                    tracing::error!(%session, error = %e, "cannot rebuild checkpoints from this session's log");
                    continue;
                }
            };
            let mut open = 0;
            for (id, entry) in found {
                if entry.info.is_pending() {
                    open += 1;
                    table.deadlines.insert((entry.info.deadline_ms, id.clone()));
                } else {
                    table.decided.push_back(id.clone());
                }
                table.entries.insert(id, entry);
            }
            if open == 0 {
                let _ = self.vfs.remove(&path);
            } else {
                table.open.insert(session, open);
            }
        }
        match self.vfs.read(&self.grants_path()) {
            Ok(bytes) => {
                let now = now_ms();
                let grants: Vec<Grant> = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                    tracing::error!(error = %e, "checkpoints/grants.json is unreadable; no grants in force");
                    Vec::new()
                });
                table.grants = grants.into_iter().filter(|g| g.expires_ms > now).collect();
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        table.journaled = journaled_ids(&self.vfs.read(&self.journal_path()).unwrap_or_default());
        trim_decided(&mut table);
        let pending = table.deadlines.len();
        drop(table);
        if pending > 0 {
            tracing::info!(pending, "pending checkpoints rebuilt from the logs");
        }
        Ok(())
    }

    /// The checkpoints recorded in `session`'s log from `from` on, with their decisions.
    fn scan(&self, session: &str, from: u64) -> Result<HashMap<String, Box<Entry>>, StoreError> {
        let mut found: HashMap<String, Box<Entry>> = HashMap::new();
        let Some(s) = self.store.get(session) else {
            return Ok(found);
        };
        let upto = s.committed_lsn();
        let mut next = from.max(1);
        let mut buf = Vec::new();
        while next <= upto {
            let page = read_range(&s, next, upto, 1024, 4 << 20)?;
            let Some(last) = page.last() else { break };
            next = last.lsn + 1;
            for e in &page {
                buf.clear();
                e.write_to(&mut buf);
                if memchr::memmem::find(&buf, b"\"type\":\"checkpoint.").is_none() {
                    continue;
                }
                let Ok(v) = serde_json::from_slice::<Json>(&buf) else {
                    continue;
                };
                apply_logged(&mut found, session, e.lsn, &v);
            }
        }
        Ok(found)
    }

    /// Finds `id` in the last events of `session`'s log and keeps it in memory.
    fn lookup(&self, session: &str, id: &str) -> Result<Option<CheckpointInfo>, StoreError> {
        let Some(s) = self.store.get(session) else {
            return Ok(None);
        };
        let from = s.committed_lsn().saturating_sub(LOOKBACK) + 1;
        let mut found = self.scan(session, from)?;
        let Some(entry) = found.remove(id) else {
            return Ok(None);
        };
        let info = entry.view(id);
        let mut table = self.table.lock().unwrap();
        if !table.entries.contains_key(id) {
            if entry.info.is_pending() {
                // Requested earlier than its marker says (cannot happen unless the marker
                // was removed by hand): take it up again.
                table
                    .deadlines
                    .insert((entry.info.deadline_ms, id.to_string()));
                *table.open.entry(session.to_string()).or_default() += 1;
                self.wake.notify_one();
            } else {
                table.decided.push_back(id.to_string());
            }
            table.entries.insert(id.to_string(), entry);
            trim_decided(&mut table);
        }
        Ok(Some(info))
    }

    /// Opens a checkpoint for `req`, or finds the one its key already has. Blocking: it may
    /// write the session's marker and read its log.
    pub fn prepare(&self, req: NewRequest) -> Result<Prepared, CheckpointError> {
        dstream_sdk::validate_session_id(&req.session_id)
            .map_err(|e| CheckpointError::Invalid(format!("session_id: {e}")))?;
        if req.key.is_empty() || req.key.len() > 256 {
            return Err(CheckpointError::Invalid(
                "key must be 1 to 256 bytes".to_string(),
            ));
        }
        let id = checkpoint_id(&req.session_id, &req.key);
        if let Some(info) = self.get(&id) {
            return Ok(Prepared::Existing(info));
        }
        let journaled = self.table.lock().unwrap().journaled.contains(&id_hash(&id));
        if journaled && let Some(info) = self.lookup(&req.session_id, &id)? {
            return Ok(Prepared::Existing(info));
        }
        let created_ms = now_ms();
        let on_timeout = req.on_timeout.unwrap_or(OnTimeout::Deny);
        let info = CheckpointInfo {
            id: id.clone(),
            session_id: req.session_id.clone(),
            key: req.key.clone(),
            state: "recording".into(),
            tool: req.tool.clone(),
            input: None,
            summary: req.summary.clone(),
            options: req.options.clone(),
            created_ms,
            deadline_ms: created_ms.saturating_add(req.timeout_ms),
            on_timeout: on_timeout.as_str().into(),
            rule: req.rule.clone(),
            source: req.source.clone(),
            cwd: req.cwd.clone(),
            lsn: 0,
            decision: None,
            delivered: false,
        };
        let event_id = ulid::Ulid::new().to_string();
        let mut payload = serde_json::to_value(&info).unwrap_or_else(|_| json!({}));
        if let Json::Object(p) = &mut payload {
            for k in ["id", "state", "lsn", "decision", "delivered", "session_id"] {
                p.remove(k);
            }
            p.insert("checkpoint_id".into(), json!(id));
            p.insert("timeout_ms".into(), json!(req.timeout_ms));
            if let Some(input) = &req.input {
                p.insert("input".into(), input.clone());
            }
            if let Some(g) = &req.input_glob {
                p.insert("input_glob".into(), json!(g));
            }
        }
        let event = checkpoint_event("checkpoint.requested", payload, req.causation_id.clone())?;
        {
            let mut table = self.table.lock().unwrap();
            // Two requests with one key at the same moment: the first one made it.
            if let Some(e) = table.entries.get(&id) {
                return Ok(Prepared::Existing(e.view(&id)));
            }
            self.journal(&mut table, &id, &req.session_id);
            let open = table.open.get(&req.session_id).copied().unwrap_or(0);
            if open == 0 {
                // Before the request is in the log, so a restart finds it.
                let from = self
                    .store
                    .get(&req.session_id)
                    .map_or(1, |s| s.committed_lsn() + 1);
                let path = self.marker(&req.session_id);
                self.vfs
                    .write_atomic(&path, from.to_string().as_bytes())
                    .map_err(|source| CheckpointError::Io { path, source })?;
            }
            table.open.insert(req.session_id.clone(), open + 1);
            table.entries.insert(
                id.clone(),
                Box::new(Entry::new(
                    info.clone(),
                    event_id.clone(),
                    req.input_glob.clone(),
                )),
            );
        }
        Ok(Prepared::New {
            info,
            event_id,
            event,
        })
    }

    /// The outcome of appending a prepared request: durable (it is pending from now on, its
    /// deadline runs) or refused (the checkpoint is dropped; its waiters hear so).
    pub fn recorded(&self, id: &str, result: Result<&AppendAck, &StoreError>) {
        let mut table = self.table.lock().unwrap();
        match result {
            Ok(ack) => {
                let Some(e) = table.entries.get_mut(id) else {
                    return;
                };
                e.info.state = "pending";
                e.info.lsn = ack.lsn;
                let deadline = e.info.deadline_ms;
                table.deadlines.insert((deadline, id.to_string()));
                drop(table);
                self.wake.notify_one();
            }
            Err(_) => {
                if let Some(e) = table.entries.remove(id) {
                    close_one(&mut table, &*self.vfs, &self.dir, &e.info.session_id);
                }
            }
        }
    }

    /// Appends a prepared request and waits until it is pending (for `checkpoint.request`).
    pub async fn record(
        &self,
        info: CheckpointInfo,
        event_id: String,
        event: NewEventRaw,
    ) -> Result<CheckpointInfo, CheckpointError> {
        let (tx, rx) = oneshot::channel();
        self.store.append_with_id(
            &info.session_id,
            Some(event_id),
            event,
            true,
            crate::store::Ack::new(move |r| drop(tx.send(r))),
        );
        let result = rx.await.unwrap_or(Err(StoreError::ShuttingDown));
        self.recorded(&info.id, result.as_ref());
        result?;
        self.get(&info.id)
            .ok_or_else(|| CheckpointError::NotFound(info.id.clone()))
    }

    /// A checkpoint held in memory.
    pub fn get(&self, id: &str) -> Option<CheckpointInfo> {
        self.table
            .lock()
            .unwrap()
            .entries
            .get(id)
            .map(|e| e.view(id))
    }

    /// Stops a session's agent from afar: the stop is durable first, then every checkpoint
    /// pending in the session is rejected ("stopped remotely"), and `agent.aborted` records it.
    /// Returns the checkpoints it rejected.
    pub async fn abort(
        &self,
        session: &str,
        reason: &str,
        decided_by: &str,
    ) -> Result<Vec<String>, CheckpointError> {
        let stop = stop::Stop {
            reason: reason.to_string(),
            decided_by: decided_by.to_string(),
            at_ms: now_ms(),
        };
        self.stops
            .stop(session, stop)
            .map_err(|source| CheckpointError::Io {
                path: self.dir.join("stopped").join(session),
                source,
            })?;
        let mut rejected = Vec::new();
        for c in self
            .list(Some("pending"), Some(session), None, false, None)
            .0
        {
            let r = Resolution {
                decision: "reject".into(),
                note: Some("stopped remotely".into()),
                input: None,
                decided_by: decided_by.to_string(),
                uid: None,
            };
            match self.resolve(&c.id, r).await {
                Ok(_) => rejected.push(c.id),
                Err(CheckpointError::AlreadyDecided { .. } | CheckpointError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let raw = |v: &Json| to_raw_value(v).map_err(|e| CheckpointError::Invalid(e.to_string()));
        let event = NewEventRaw {
            event_type: "agent.aborted".into(),
            actor: Some("dstream".into()),
            payload: Some(raw(&json!({
                "reason": reason,
                "decided_by": decided_by,
                "rejected_checkpoints": rejected,
            }))?),
            ..Default::default()
        };
        self.store.append_wait(session, event, true).await?;
        Ok(rejected)
    }

    /// Decides a checkpoint: the first valid decision wins, and is durable before anyone
    /// hears of it.
    pub async fn resolve(
        &self,
        id: &str,
        r: Resolution,
    ) -> Result<CheckpointInfo, CheckpointError> {
        self.find(id, None)?;
        self.decide(id, r, false).await
    }

    async fn decide(
        &self,
        id: &str,
        r: Resolution,
        expired: bool,
    ) -> Result<CheckpointInfo, CheckpointError> {
        let (event, session, option) = {
            let mut table = self.table.lock().unwrap();
            let Some(e) = table.entries.get_mut(id) else {
                return Err(CheckpointError::NotFound(id.to_string()));
            };
            if let Some(d) = &e.info.decision {
                return Err(CheckpointError::AlreadyDecided {
                    id: id.to_string(),
                    first: describe_decision(d, e.info.state),
                });
            }
            if let Some(by) = &e.deciding {
                return Err(CheckpointError::AlreadyDecided {
                    id: id.to_string(),
                    first: format!("a decision by {by} is being recorded"),
                });
            }
            if e.info.state == "recording" {
                return Err(CheckpointError::NotReady(id.to_string()));
            }
            let option = match r.decision.as_str() {
                "approve" | "allow" => CheckpointOption {
                    id: "approve".into(),
                    label: None,
                    action: "allow".into(),
                    scope: None,
                },
                "reject" | "deny" => CheckpointOption {
                    id: "reject".into(),
                    label: None,
                    action: "deny".into(),
                    scope: None,
                },
                other => e
                    .options
                    .iter()
                    .find(|o| o.id == other)
                    .cloned()
                    .ok_or_else(|| {
                        CheckpointError::Invalid(format!(
                            "{other:?} is not a decision for checkpoint {id}; choose approve, \
                             reject{}",
                            e.options
                                .iter()
                                .filter(|o| o.id != "approve" && o.id != "reject")
                                .map(|o| format!(", {}", o.id))
                                .collect::<String>()
                        ))
                    })?,
            };
            let decided_ms = now_ms();
            let mut payload = json!({
                "checkpoint_id": id,
                "decision": if expired { e.info.on_timeout } else { r.decision.as_str() },
                "action": option.action,
                "decided_by": r.decided_by,
                "decided_ms": decided_ms,
                "summary": e.info.summary,
            });
            if let Some(n) = &r.note {
                payload["note"] = json!(n);
            }
            if let Some(i) = &r.input {
                payload["input"] = i.clone();
            }
            if let Some(uid) = r.uid {
                payload["uid"] = json!(uid);
            }
            if let Some(scope) = &option.scope {
                payload["scope"] = json!(scope);
                payload["grant_expires_ms"] =
                    json!(decided_ms.saturating_add(*self.grant_ttl_ms.lock().unwrap()));
            }
            let kind = if expired {
                "checkpoint.expired"
            } else if option.action == "deny" {
                "checkpoint.rejected"
            } else {
                "checkpoint.approved"
            };
            let event = checkpoint_event(kind, payload, Some(e.request_event_id.to_string()))?;
            e.deciding = Some(r.decided_by.as_str().into());
            (event, e.info.session_id.clone(), option)
        };
        let result = self.store.append_wait(&session, event, true).await;
        let mut table = self.table.lock().unwrap();
        let Some(e) = table.entries.get_mut(id) else {
            return Err(CheckpointError::NotFound(id.to_string()));
        };
        e.deciding = None;
        let ack = result?;
        let decision = CheckpointDecision {
            decision: if expired {
                e.info.on_timeout.to_string()
            } else {
                r.decision.clone()
            },
            action: option.action.clone(),
            note: r.note.clone(),
            input: r.input.clone(),
            decided_by: r.decided_by.clone(),
            decided_ms: now_ms(),
            event_id: Some(ack.id.clone()),
        };
        e.info.state = state_of(&option.action, expired);
        e.info.decision = Some(Box::new(decision));
        let info = e.view(id);
        let waiters = std::mem::take(&mut e.waiters);
        let grant = option.scope.as_ref().map(|scope| Grant {
            checkpoint_id: id.to_string(),
            scope: scope.clone(),
            session_id: info.session_id.clone(),
            cwd: info.cwd.clone(),
            tool: info.tool.clone().unwrap_or_default(),
            input_glob: e.input_glob.as_deref().map(str::to_string),
            expires_ms: now_ms().saturating_add(*self.grant_ttl_ms.lock().unwrap()),
        });
        table.deadlines.remove(&(info.deadline_ms, id.to_string()));
        table.decided.push_back(id.to_string());
        close_one(&mut table, &*self.vfs, &self.dir, &info.session_id);
        let grants = grant.map(|g| {
            let now = now_ms();
            table.grants.retain(|x| x.expires_ms > now);
            table.grants.push(g);
            table.grants.clone()
        });
        trim_decided(&mut table);
        drop(table);
        if let Some(grants) = grants {
            let path = self.grants_path();
            let bytes = serde_json::to_vec_pretty(&grants).unwrap_or_default();
            if let Err(e) = self.vfs.write_atomic(&path, &bytes) {
                // The grant is in the log too; it only would not survive a restart.
                tracing::error!(error = %e, path = %path.display(), "cannot save the grants");
            }
        }
        for w in waiters {
            let _ = w.send(info.clone());
        }
        Ok(info)
    }

    /// Waits until `id` is decided, or `timeout` passes (then returns it still pending).
    /// `session` lets a checkpoint no longer held in memory be found in its log.
    pub async fn wait(
        &self,
        id: &str,
        session: Option<&str>,
        timeout: Option<Duration>,
    ) -> Result<CheckpointInfo, CheckpointError> {
        let rx = {
            let mut table = self.table.lock().unwrap();
            match table.entries.get_mut(id) {
                Some(e) if e.info.decision.is_some() => return Ok(e.view(id)),
                Some(e) => {
                    let (tx, rx) = oneshot::channel();
                    e.waiters.push(tx);
                    Some(rx)
                }
                None => None,
            }
        };
        let Some(rx) = rx else {
            self.find(id, session)?;
            return Box::pin(self.wait(id, None, timeout)).await;
        };
        let mut waiter = Waiter {
            checkpoints: self,
            id,
            rx: Some(rx),
        };
        let rx = waiter.rx.as_mut().expect("just set");
        let decided = match timeout {
            Some(t) => match tokio::time::timeout(t, rx).await {
                Ok(r) => r,
                Err(_) => {
                    drop(waiter);
                    return self
                        .get(id)
                        .ok_or_else(|| CheckpointError::NotFound(id.to_string()));
                }
            },
            None => rx.await,
        };
        decided
            .map_err(|_| CheckpointError::Invalid(format!("checkpoint {id} could not be recorded")))
    }

    /// Records once that a waiting client was handed the decision of `id`.
    pub async fn delivered(&self, id: &str, to: &str) {
        let (session, cause, decision) = {
            let mut table = self.table.lock().unwrap();
            let Some(e) = table.entries.get_mut(id) else {
                return;
            };
            let Some(d) = &e.info.decision else { return };
            if e.info.delivered {
                return;
            }
            e.info.delivered = true;
            (
                e.info.session_id.clone(),
                d.event_id.clone(),
                d.decision.clone(),
            )
        };
        let payload = json!({"checkpoint_id": id, "decision": decision, "delivered_to": to});
        let Ok(event) = checkpoint_event("checkpoint.delivered", payload, cause) else {
            return;
        };
        if let Err(e) = self.store.append_wait(&session, event, true).await {
            tracing::warn!(checkpoint = id, error = %e, "cannot record a checkpoint's delivery");
        }
    }

    /// Checkpoints held in memory (every open one, and recently decided ones), oldest first,
    /// with their inputs read from the logs; not those whose request is still being synced.
    /// Blocking.
    /// Also returns how many matched before the limit cut the list.
    pub fn list(
        &self,
        state: Option<&str>,
        session: Option<&str>,
        tool: Option<&str>,
        newest_first: bool,
        limit: Option<usize>,
    ) -> (Vec<CheckpointInfo>, usize) {
        let mut out: Vec<CheckpointInfo> = {
            let table = self.table.lock().unwrap();
            table
                .entries
                .iter()
                // A request still being synced is nobody's business yet.
                .filter(|(_, e)| match state {
                    Some(s) => e.info.state == s,
                    None => e.info.state != "recording",
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
        };
        let total = out.len();
        out.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        if newest_first {
            out.reverse();
        }
        out.truncate(limit.unwrap_or(LIST_MAX).min(LIST_MAX));
        for info in &mut out {
            info.input = self.input_of(info);
        }
        (out, total)
    }

    /// A checkpoint's input, from its request in the log.
    fn input_of(&self, info: &CheckpointInfo) -> Option<Json> {
        let s = self.store.get(&info.session_id)?;
        if info.lsn == 0 {
            return None;
        }
        let page = read_range(&s, info.lsn, info.lsn, 1, 16 << 20).ok()?;
        let mut buf = Vec::new();
        page.first()?.write_to(&mut buf);
        let v: Json = serde_json::from_slice(&buf).ok()?;
        v.pointer("/payload/input").cloned()
    }

    /// Pending (and recording) checkpoints.
    pub fn pending_count(&self) -> usize {
        self.table
            .lock()
            .unwrap()
            .entries
            .values()
            .filter(|e| e.info.is_pending())
            .count()
    }

    /// The grant in force that allows this call, if any.
    pub fn grant_for(
        &self,
        session: &str,
        cwd: Option<&str>,
        tool: &str,
        input: Option<&Json>,
    ) -> Option<Grant> {
        let now = now_ms();
        let candidates: Vec<Grant> = self
            .table
            .lock()
            .unwrap()
            .grants
            .iter()
            .filter(|g| {
                g.expires_ms > now
                    && g.tool.eq_ignore_ascii_case(tool)
                    && match g.scope.as_str() {
                        "session" => g.session_id == session,
                        "project" => g.cwd.is_some() && g.cwd.as_deref() == cwd,
                        _ => false,
                    }
            })
            .cloned()
            .collect();
        // Outside the lock: a shell command is parsed to be matched.
        candidates.into_iter().find(|g| {
            g.input_glob
                .as_ref()
                .is_none_or(|glob| policy::grant_covers(glob, input))
        })
    }

    /// The next deadline, and whether it has passed.
    fn next_deadline(&self) -> Option<(u64, String)> {
        self.table.lock().unwrap().deadlines.first().cloned()
    }

    async fn expire(&self, deadline: u64, id: &str) {
        let on_timeout = {
            let mut table = self.table.lock().unwrap();
            table.deadlines.remove(&(deadline, id.to_string()));
            match table.entries.get(id) {
                Some(e) if e.info.decision.is_none() && e.deciding.is_none() => e.info.on_timeout,
                _ => return,
            }
        };
        let r = Resolution {
            decision: if on_timeout == "allow" {
                "approve".into()
            } else {
                "reject".into()
            },
            note: None,
            input: None,
            decided_by: "timeout".into(),
            uid: None,
        };
        match self.decide(id, r, true).await {
            Ok(_) | Err(CheckpointError::AlreadyDecided { .. } | CheckpointError::NotFound(_)) => {}
            Err(e) => {
                tracing::error!(checkpoint = id, error = %e, "cannot record an expiry; retrying in 1 s");
                let mut table = self.table.lock().unwrap();
                table.deadlines.insert((now_ms() + 1000, id.to_string()));
            }
        }
    }
}

/// Applies the deadlines, one at a time, as they come. Holds the checkpoints only while it
/// works, so dropping the daemon's state ends it.
async fn deadlines(this: std::sync::Weak<Checkpoints>) {
    let Some(wake) = this.upgrade().map(|cp| cp.wake.clone()) else {
        return;
    };
    loop {
        let next = {
            let Some(cp) = this.upgrade() else { return };
            match cp.next_deadline() {
                Some((deadline, id)) if deadline <= now_ms() => {
                    cp.expire(deadline, &id).await;
                    continue;
                }
                next => next.map(|(d, _)| Duration::from_millis(d - now_ms())),
            }
        };
        let woken = wake.notified();
        let _ = tokio::time::timeout(next.unwrap_or(Duration::from_secs(3600)), woken).await;
    }
}

impl Drop for Checkpoints {
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}

/// One open checkpoint of `session` is decided (or dropped): its marker goes with the last.
fn close_one(table: &mut Table, vfs: &dyn Vfs, dir: &Path, session: &str) {
    let left = match table.open.get_mut(session) {
        Some(n) => {
            *n = n.saturating_sub(1);
            *n
        }
        None => return,
    };
    if left == 0 {
        table.open.remove(session);
        // Not synced: a marker that comes back after a crash is dropped at the next start,
        // once its session's log shows nothing open.
        let _ = vfs.remove(&dir.join("open").join(session));
    }
}

fn journaled_ids(journal: &[u8]) -> HashSet<u64> {
    String::from_utf8_lossy(journal)
        .lines()
        .filter_map(|l| l.split(' ').next())
        .filter(|id| id.starts_with("ck_"))
        .map(id_hash)
        .collect()
}

fn trim_decided(table: &mut Table) {
    while table.decided.len() > DECIDED_KEPT {
        if let Some(old) = table.decided.pop_front()
            && table
                .entries
                .get(&old)
                .is_some_and(|e| e.info.decision.is_some() && e.waiters.is_empty())
        {
            table.entries.remove(&old);
        }
    }
}

fn describe_decision(d: &CheckpointDecision, state: &str) -> String {
    let mut s = format!("{state} ({}) by {}", d.decision, d.decided_by);
    if let Some(n) = &d.note {
        s.push_str(&format!(", note {n:?}"));
    }
    s
}

fn checkpoint_event(
    kind: &str,
    payload: Json,
    causation_id: Option<String>,
) -> Result<NewEventRaw, CheckpointError> {
    let raw = |v: &Json| to_raw_value(v).map_err(|e| CheckpointError::Invalid(e.to_string()));
    let checkpoint_id = payload.get("checkpoint_id").cloned().unwrap_or(Json::Null);
    let event = NewEventRaw {
        event_type: kind.into(),
        actor: Some("dstream".into()),
        payload: Some(raw(&payload)?),
        causation_id,
        metadata: Some(raw(&json!({ "checkpoint_id": checkpoint_id }))?),
        ..Default::default()
    };
    crate::store::validate_event(&event).map_err(CheckpointError::Invalid)?;
    Ok(event)
}

/// Folds one logged checkpoint event into `found`.
fn apply_logged(found: &mut HashMap<String, Box<Entry>>, session: &str, lsn: u64, v: &Json) {
    let kind = v.get("type").and_then(Json::as_str).unwrap_or("");
    let Some(p) = v.get("payload") else { return };
    let Some(id) = p.get("checkpoint_id").and_then(Json::as_str) else {
        return;
    };
    let text = |k: &str| p.get(k).and_then(Json::as_str).map(str::to_string);
    let num = |k: &str| p.get(k).and_then(Json::as_u64).unwrap_or(0);
    match kind {
        "checkpoint.requested" => {
            let options = p
                .get("options")
                .cloned()
                .and_then(|o| serde_json::from_value(o).ok())
                .unwrap_or_else(|| default_options(false));
            let info = CheckpointInfo {
                id: id.to_string(),
                session_id: session.to_string(),
                key: text("key").unwrap_or_default(),
                state: "pending".into(),
                tool: text("tool"),
                input: None,
                summary: text("summary").unwrap_or_default(),
                options,
                created_ms: num("created_ms"),
                deadline_ms: num("deadline_ms"),
                on_timeout: text("on_timeout").unwrap_or_else(|| "deny".into()),
                rule: text("rule"),
                source: text("source"),
                cwd: text("cwd"),
                lsn,
                decision: None,
                delivered: false,
            };
            found.insert(
                id.to_string(),
                Box::new(Entry::new(
                    info,
                    v.get("id")
                        .and_then(Json::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    text("input_glob"),
                )),
            );
        }
        "checkpoint.approved" | "checkpoint.rejected" | "checkpoint.expired" => {
            let Some(e) = found.get_mut(id) else { return };
            if e.info.decision.is_some() {
                return;
            }
            let action = text("action").unwrap_or_else(|| {
                if kind == "checkpoint.rejected" {
                    "deny".into()
                } else {
                    "allow".into()
                }
            });
            e.info.state = state_of(&action, kind == "checkpoint.expired");
            e.info.decision = Some(Box::new(CheckpointDecision {
                decision: text("decision").unwrap_or_default(),
                action,
                note: text("note"),
                input: p.get("input").cloned(),
                decided_by: text("decided_by").unwrap_or_default(),
                decided_ms: num("decided_ms"),
                event_id: v.get("id").and_then(Json::as_str).map(str::to_string),
            }));
        }
        "checkpoint.delivered" => {
            if let Some(e) = found.get_mut(id) {
                e.info.delivered = true;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_per_session_and_key() {
        assert_eq!(checkpoint_id("s", "k"), checkpoint_id("s", "k"));
        assert_ne!(checkpoint_id("s", "k"), checkpoint_id("s", "k2"));
        assert_ne!(checkpoint_id("s1", "k"), checkpoint_id("s", "1k"));
        assert_eq!(checkpoint_id("s", "k").len(), 27);
    }
}
