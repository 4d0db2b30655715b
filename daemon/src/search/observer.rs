//! The indexing thread, `dstream-search`: it follows the hub's committed events and writes
//! them to the index in batched transactions, off the append path (the commit thread never
//! waits for it; when it falls behind the hub's ring it is told it lagged and reads the logs).
//!
//! At start, after a lag, after a gap in a session's LSNs and after a rebuild, it catches up
//! every session whose committed LSN is above its indexed one by reading its log in pages. Each
//! batch records the sessions' indexed LSNs with their documents, so after a crash the index
//! resumes exactly where its last transaction ended. Sessions the store no longer has (deleted
//! by retention) leave the index at start, at a rebuild and at each sweep.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::hub::{Committed, Hub, HubReader, Lagged};
use crate::search::extract::extract;
use crate::search::index::{Doc, IndexError, MAX_LSN, Writer};
use crate::search::pace::Pace;
use crate::search::tool_uses::ToolUses;
use crate::search::usage_rows::UsageBatch;
use crate::store::{EventJson, Session, Store};

/// A batch is written once it holds this many events or bytes of text, or has waited
/// [`LINGER`]: large enough to keep up with bursts, small enough to bound memory.
const BATCH_EVENTS: usize = 4096;
const BATCH_BYTES: usize = 2 << 20;
const LINGER: Duration = Duration::from_millis(50);
/// Bytes of committed events the hub keeps for this thread while it falls behind; past them it
/// is told it lagged and catches up from the logs (as after a restart).
const HUB_HOLDS: usize = 2 << 20;
/// While a batch lingers, how often it takes what has been committed since.
const GATHER_SLICE: Duration = Duration::from_millis(10);
/// While appends are busy (see [`crate::search::pace`]), how often the rate is looked at again.
const BUSY_RECHECK: Duration = Duration::from_millis(200);
/// Log pages read per catch-up step.
const PAGE_EVENTS: usize = 1024;
const PAGE_BYTES: usize = 4 << 20;
/// How often sessions deleted by retention are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// After an error that is not damage (a full disk), wait this long before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// What the observer shares with the queries and `stats`.
#[derive(Default)]
pub struct Shared {
    /// Bumped when the index file is created anew, so queries reopen it.
    pub generation: AtomicU64,
    /// Documents in the index.
    pub indexed_events: AtomicU64,
    /// Each session's indexed LSN.
    pub indexed: Mutex<HashMap<String, u64>>,
    pub last_error: Mutex<Option<String>>,
    /// Set to stop: a long catch-up checks it between pages.
    pub stopping: AtomicBool,
    /// `[search] busy_appends_per_sec`, as last configured.
    pub busy_appends_per_sec: AtomicU64,
    /// Whether the thread is letting a burst of appends pass, and how many it has.
    pub waiting_out_burst: AtomicBool,
    pub bursts_waited_out: AtomicU64,
    /// Set once the first catch-up after start has ended, well or not; `first_pass` wakes
    /// whoever waits for that.
    pub first_pass_done: AtomicBool,
    pub first_pass: tokio::sync::Notify,
}

impl Shared {
    fn end_first_pass(&self) {
        if !self.first_pass_done.swap(true, Ordering::AcqRel) {
            self.first_pass.notify_waiters();
        }
    }
    fn error(&self, e: &dyn std::fmt::Display) {
        tracing::warn!(error = %e, "search index");
        *self.last_error.lock().unwrap() = Some(e.to_string());
    }
}

/// What `reindex` reports.
#[derive(Debug, Clone, Copy)]
pub struct Reindexed {
    pub sessions: u64,
    pub events: u64,
    pub elapsed_ms: u64,
}

pub enum Command {
    Reindex(oneshot::Sender<Result<Reindexed, String>>),
    /// A query found the file of `generation` damaged (an index opened without its full
    /// check, see `index::Check`): rebuild it from the logs, once, however many queries
    /// report it.
    Damaged {
        generation: u64,
        why: String,
    },
}

/// Starts the thread; it stops when `stopping` is set and the command sender is dropped.
pub fn spawn(
    store: Store,
    hub: &Arc<Hub>,
    dir: PathBuf,
    shared: Arc<Shared>,
    rt: tokio::runtime::Handle,
) -> std::io::Result<(std::thread::JoinHandle<()>, mpsc::UnboundedSender<Command>)> {
    let (tx, rx) = mpsc::unbounded_channel();
    // Subscribed before the first catch-up: whatever commits meanwhile arrives here. It holds
    // at most HUB_HOLDS of the hub's ring: a thread that runs only on idle CPU can fall far
    // behind under load, and the logs hold everything it skips.
    let reader = hub.subscribe_holding(HUB_HOLDS);
    let observer = Observer {
        pace: Pace::new(
            store.stats().appends.load(Ordering::Relaxed),
            Instant::now(),
        ),
        hub: hub.clone(),
        store,
        dir,
        shared,
        ix: None,
        sessions: HashMap::new(),
        docs: Vec::new(),
        usage: UsageBatch::default(),
        tools: ToolUses::default(),
        bytes: 0,
        marks: HashMap::new(),
        dirty: HashSet::new(),
        dirty_all: true,
    };
    let handle = std::thread::Builder::new()
        .name("dstream-search".into())
        .spawn(move || {
            lower_priority();
            observer.run(reader, rx, rt)
        })?;
    Ok((handle, tx))
}

/// The index must never slow appends: it runs under `SCHED_IDLE`, so it gets the CPU time the
/// commit thread, the socket workers and everything else on the machine leave, and is preempted
/// as soon as they want it back. With nice 10 instead, the p99 of a C=16 append load on 2 cores
/// was 1.0-2.8 ms against 0.6-1.3 ms, and at 16 sessions as much as a fifth slower. Under a
/// load that keeps every core busy the index falls behind (searches and index-backed `usage`
/// answers wait for it; `usage` then reads the logs), is told it lagged, and catches up from the
/// logs when the load ends. Where `SCHED_IDLE` is refused, nice 10.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: sched_setscheduler reads the param struct only during the call; gettid and
    // setpriority take no pointers. On Linux, pid 0 and a tid name this thread alone.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, 10);
        }
    }
}

struct Entry {
    sid: i64,
    /// Indexed in the file (committed transactions).
    indexed: u64,
    /// The next LSN to index, counting the batch not yet written.
    next: u64,
}

struct Observer {
    store: Store,
    hub: Arc<Hub>,
    pace: Pace,
    dir: PathBuf,
    shared: Arc<Shared>,
    ix: Option<Writer>,
    sessions: HashMap<String, Entry>,
    /// The batch being gathered, and the indexed LSN it brings each session (by number) to.
    docs: Vec<Doc>,
    /// What the batch's events cost (see `usage_rows`), written with the documents.
    usage: UsageBatch,
    /// The batch's tool requests.
    tools: ToolUses,
    bytes: usize,
    marks: HashMap<i64, u64>,
    /// Sessions to catch up from their logs; all of them.
    dirty: HashSet<String>,
    dirty_all: bool,
}

/// Whether a catch-up from the logs gives way to a burst of appends (see `pace`): the
/// following thread's does; `reindex`, which someone waits for, does not.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Yield {
    ToBursts,
    Never,
}

enum Wake {
    Events,
    Idle,
    Command(Command),
    Stop,
}

impl Observer {
    fn run(
        mut self,
        mut reader: HubReader,
        mut commands: mpsc::UnboundedReceiver<Command>,
        rt: tokio::runtime::Handle,
    ) {
        let mut items = Vec::new();
        let mut last_sweep = Instant::now();
        loop {
            if self.shared.stopping.load(Ordering::Relaxed) {
                break;
            }
            let opened = self
                .ensure_open()
                .and_then(|()| self.catch_up(Yield::ToBursts));
            self.shared.end_first_pass();
            if let Err(e) = opened {
                self.failed(e);
                if matches!(rt.block_on(idle(&mut commands, RETRY_AFTER)), Wake::Stop) {
                    break;
                }
                continue;
            }
            let burst = self.burst_batch();
            let mut wake = rt.block_on(collect(&mut reader, &mut commands, &mut items, burst));
            if matches!(wake, Wake::Events) && (self.busy() || items.len() >= burst) {
                items.clear();
                (reader, wake) = self.let_burst_pass(reader, &mut commands, &rt);
            }
            for item in items.drain(..) {
                if let Err(e) = self.take(item) {
                    self.failed(e);
                }
            }
            if let Err(e) = self.flush() {
                self.failed(e);
            }
            match wake {
                Wake::Stop => break,
                Wake::Command(Command::Reindex(reply)) => {
                    let _ = reply.send(self.reindex().map_err(|e| {
                        self.shared.error(&e);
                        e.to_string()
                    }));
                }
                Wake::Command(Command::Damaged { generation, why }) => {
                    // A file already rebuilt since the query read it is not damaged.
                    if generation == self.shared.generation.load(Ordering::Relaxed) {
                        self.failed(IndexError::Damaged(why));
                    }
                }
                Wake::Events | Wake::Idle => {}
            }
            if last_sweep.elapsed() >= SWEEP_EVERY {
                last_sweep = Instant::now();
                if let Err(e) = self.sweep() {
                    self.failed(e);
                }
            }
        }
        tracing::debug!("search indexing stopped");
    }

    fn busy(&mut self) -> bool {
        let appends = self.store.stats().appends.load(Ordering::Relaxed);
        let per_sec = self.shared.busy_appends_per_sec.load(Ordering::Relaxed);
        self.pace.busy(appends, Instant::now(), per_sec)
    }

    /// How many events gathered within one linger make a burst by themselves (see `pace`).
    fn burst_batch(&self) -> usize {
        let per_sec = self.shared.busy_appends_per_sec.load(Ordering::Relaxed);
        Pace::burst_within(LINGER, per_sec)
    }

    /// Lets a burst of appends pass: what was gathered, and all that commits meanwhile, is
    /// read from the logs once it is over, and the hub holds nothing for this thread until
    /// then. Returns the reader to go on with and what ended the wait.
    fn let_burst_pass(
        &mut self,
        reader: HubReader,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        rt: &tokio::runtime::Handle,
    ) -> (HubReader, Wake) {
        drop(reader);
        self.dirty_all = true;
        if let Err(e) = self.flush() {
            self.failed(e);
        }
        let shared = self.shared.clone();
        shared.waiting_out_burst.store(true, Ordering::Relaxed);
        shared.bursts_waited_out.fetch_add(1, Ordering::Relaxed);
        let wake = rt.block_on(self.wait_out_burst(commands));
        shared.waiting_out_burst.store(false, Ordering::Relaxed);
        (self.hub.subscribe_holding(HUB_HOLDS), wake)
    }

    /// Waits while appends are busy, or until a command or the stop comes.
    async fn wait_out_burst(&mut self, commands: &mut mpsc::UnboundedReceiver<Command>) -> Wake {
        loop {
            tokio::select! {
                c = commands.recv() => return c.map_or(Wake::Stop, Wake::Command),
                () = tokio::time::sleep(BUSY_RECHECK) => {}
            }
            if self.shared.stopping.load(Ordering::Relaxed) {
                return Wake::Stop;
            }
            if !self.busy() {
                return Wake::Idle;
            }
        }
    }

    fn ensure_open(&mut self) -> Result<(), IndexError> {
        if self.ix.is_some() {
            return Ok(());
        }
        let (ix, rebuilt) = Writer::open(&self.dir)?;
        if let Some(why) = rebuilt {
            tracing::warn!(reason = %why, "the search index was damaged; rebuilding it from the logs");
            self.shared.error(&format!("rebuilt at start: {why}"));
        }
        self.load(ix)
    }

    /// Takes `ix` as the index and its sessions as the starting point.
    fn load(&mut self, ix: Writer) -> Result<(), IndexError> {
        self.sessions.clear();
        let mut shared = HashMap::new();
        for (sid, name, indexed) in ix.sessions()? {
            shared.insert(name.clone(), indexed);
            self.sessions.insert(
                name,
                Entry {
                    sid,
                    indexed,
                    next: indexed + 1,
                },
            );
        }
        self.shared
            .indexed_events
            .store(ix.doc_count()?, Ordering::Relaxed);
        *self.shared.indexed.lock().unwrap() = shared;
        self.shared.generation.fetch_add(1, Ordering::Relaxed);
        self.ix = Some(ix);
        self.dirty_all = true;
        self.sweep()
    }

    /// An error: a damaged file is rebuilt from the logs; anything else drops the batch and
    /// catches up from the logs at the next turn.
    fn failed(&mut self, e: IndexError) {
        self.shared.error(&e);
        self.docs.clear();
        self.marks.clear();
        self.bytes = 0;
        for entry in self.sessions.values_mut() {
            entry.next = entry.indexed + 1;
        }
        self.dirty_all = true;
        if e.is_damage() {
            self.ix = None;
            match Writer::create(&self.dir).and_then(|ix| self.load(ix)) {
                Ok(()) => {
                    tracing::warn!("the search index was damaged; rebuilding it from the logs")
                }
                Err(e) => {
                    self.ix = None;
                    self.shared.error(&e);
                }
            }
        }
    }

    fn reindex(&mut self) -> Result<Reindexed, IndexError> {
        let started = Instant::now();
        self.ix = None;
        self.docs.clear();
        self.marks.clear();
        self.bytes = 0;
        let ix = Writer::create(&self.dir)?;
        self.load(ix)?;
        self.catch_up(Yield::Never)?;
        Ok(Reindexed {
            sessions: self.sessions.len() as u64,
            events: self.shared.indexed_events.load(Ordering::Relaxed),
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    fn ix(&mut self) -> Result<&mut Writer, IndexError> {
        self.ix
            .as_mut()
            .ok_or_else(|| IndexError::Io(std::io::Error::other("the index is not open")))
    }

    /// The session's entry, numbering it in the index when new.
    fn entry(&mut self, name: &str) -> Result<&mut Entry, IndexError> {
        if !self.sessions.contains_key(name) {
            let sid = self.ix()?.add_session(name)?;
            self.sessions.insert(
                name.to_string(),
                Entry {
                    sid,
                    indexed: 0,
                    next: 1,
                },
            );
        }
        Ok(self.sessions.get_mut(name).expect("just inserted"))
    }

    /// One event from the hub: indexed when it is the session's next, else its session is
    /// caught up from the log at the next turn.
    fn take(&mut self, item: Result<Arc<Committed>, Lagged>) -> Result<(), IndexError> {
        let c = match item {
            Ok(c) => c,
            Err(Lagged) => {
                self.dirty_all = true;
                return Ok(());
            }
        };
        if self.dirty_all || self.dirty.contains(&*c.session) {
            return Ok(());
        }
        let entry = self.entry(&c.session)?;
        let (sid, next) = (entry.sid, entry.next);
        if c.event.lsn < next {
            return Ok(());
        }
        if c.event.lsn > next {
            self.dirty.insert(c.session.to_string());
            return Ok(());
        }
        self.add(sid, &c.event);
        self.entry(&c.session)?.next = c.event.lsn + 1;
        if self.docs.len() >= BATCH_EVENTS || self.bytes >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Adds one event to the batch (a document when it has text).
    fn add(&mut self, sid: i64, event: &EventJson) {
        let mut json = Vec::with_capacity(event.len());
        event.write_to(&mut json);
        self.marks.insert(sid, event.lsn);
        self.usage.add(&json);
        self.tools.add(&json);
        let Some(e) = extract(&json) else { return };
        if e.text.is_empty() || e.lsn > MAX_LSN {
            return;
        }
        self.bytes += e.text.len();
        self.docs.push(Doc {
            sid,
            lsn: e.lsn,
            timestamp: e.timestamp,
            event_type: e.event_type,
            text: e.text,
        });
    }

    /// Writes the batch in one transaction.
    fn flush(&mut self) -> Result<(), IndexError> {
        if self.marks.is_empty() {
            return Ok(());
        }
        let marks: Vec<(i64, u64)> = self.marks.iter().map(|(&s, &l)| (s, l)).collect();
        let docs = std::mem::take(&mut self.docs);
        let usage = std::mem::take(&mut self.usage);
        let tools = std::mem::take(&mut self.tools);
        let result = self.ix()?.write(&docs, &usage, &tools, &marks);
        self.marks.clear();
        self.bytes = 0;
        result?;
        self.shared
            .indexed_events
            .fetch_add(docs.len() as u64, Ordering::Relaxed);
        let by_sid: HashMap<i64, u64> = marks.into_iter().collect();
        let mut shared = self.shared.indexed.lock().unwrap();
        for (name, entry) in &mut self.sessions {
            if let Some(&lsn) = by_sid.get(&entry.sid) {
                entry.indexed = lsn;
                shared.insert(name.clone(), lsn);
            }
        }
        Ok(())
    }

    /// Indexes what the logs hold beyond each dirty session's indexed LSN. Yielding, it stops
    /// when appends turn busy and leaves the rest for later (every session stays dirty).
    fn catch_up(&mut self, yielding: Yield) -> Result<(), IndexError> {
        if !self.dirty_all && self.dirty.is_empty() {
            return Ok(());
        }
        self.flush()?;
        let sessions: Vec<Arc<Session>> = if self.dirty_all {
            self.sweep()?;
            self.store.sessions()
        } else {
            self.dirty
                .iter()
                .filter_map(|n| self.store.get(n))
                .collect()
        };
        self.dirty_all = false;
        self.dirty.clear();
        for session in sessions {
            if self.shared.stopping.load(Ordering::Relaxed) {
                return Ok(());
            }
            if let Err(e) = self.catch_up_one(&session, yielding) {
                // A session that cannot be read (quarantined) is left; the others go on.
                self.shared.error(&format!("session {}: {e}", session.id));
            }
            if self.dirty_all {
                break;
            }
        }
        self.flush()
    }

    fn catch_up_one(&mut self, session: &Session, yielding: Yield) -> Result<(), IndexError> {
        let committed = session.committed_lsn();
        let entry = self.entry(&session.id)?;
        let sid = entry.sid;
        while self.entry(&session.id)?.next <= committed {
            if self.shared.stopping.load(Ordering::Relaxed) {
                return Ok(());
            }
            if yielding == Yield::ToBursts && self.busy() {
                self.dirty_all = true;
                return Ok(());
            }
            let from = self.entry(&session.id)?.next;
            let page = crate::store::read_range(session, from, committed, PAGE_EVENTS, PAGE_BYTES)
                .map_err(|e| IndexError::Io(std::io::Error::other(e.to_string())))?;
            let Some(last) = page.last().map(|e| e.lsn) else {
                // LSNs a repair skipped up to the end: nothing more to read.
                self.marks.insert(sid, committed);
                self.entry(&session.id)?.next = committed + 1;
                break;
            };
            for event in &page {
                self.add(sid, event);
            }
            self.entry(&session.id)?.next = last + 1;
            if self.docs.len() >= BATCH_EVENTS || self.bytes >= BATCH_BYTES {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Sessions the store no longer has leave the index; a session indexed beyond what its log
    /// holds (its tail lost to a power failure) loses the documents beyond it.
    fn sweep(&mut self) -> Result<(), IndexError> {
        self.flush()?;
        let mut gone = Vec::new();
        let mut ahead = Vec::new();
        for (name, entry) in &self.sessions {
            match self.store.get(name) {
                None => gone.push((name.clone(), entry.sid)),
                Some(s) if s.committed_lsn() < entry.indexed && s.quarantine().is_none() => {
                    ahead.push((name.clone(), entry.sid, s.committed_lsn()))
                }
                Some(_) => {}
            }
        }
        for (name, sid) in gone {
            let n = self.ix()?.remove(sid, 0, true)?;
            self.sessions.remove(&name);
            self.shared.indexed.lock().unwrap().remove(&name);
            self.shared.indexed_events.fetch_sub(n, Ordering::Relaxed);
        }
        // Usage is kept in sums that cannot be cut at an LSN: such a session is read again
        // from its start (it happens only after a power failure took a log's tail).
        for (name, sid, _) in ahead {
            let n = self.ix()?.remove(sid, 0, false)?;
            self.shared.indexed_events.fetch_sub(n, Ordering::Relaxed);
            if let Some(entry) = self.sessions.get_mut(&name) {
                (entry.indexed, entry.next) = (0, 1);
            }
            self.shared.indexed.lock().unwrap().insert(name.clone(), 0);
            self.dirty.insert(name);
        }
        Ok(())
    }
}

/// Waits for the hub's next events (gathering more for up to [`LINGER`]), a command, or an
/// idle stretch. Gathering stops at `burst` events: so many within one linger are a burst to
/// let pass, and the hub need not hold more of it for this thread.
async fn collect(
    reader: &mut HubReader,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    items: &mut Vec<Result<Arc<Committed>, Lagged>>,
    burst: usize,
) -> Wake {
    tokio::select! {
        r = reader.recv() => items.push(r),
        c = commands.recv() => return c.map_or(Wake::Stop, Wake::Command),
        () = tokio::time::sleep(SWEEP_EVERY) => return Wake::Idle,
    }
    // The rest of the batch is gathered in slices rather than at every commit: waking this
    // thread once per append cost the appenders a context switch each on a small machine.
    let deadline = tokio::time::Instant::now() + LINGER;
    let mut bytes = 0;
    let most = BATCH_EVENTS.min(burst);
    loop {
        while items.len() < most && bytes < BATCH_BYTES {
            let Some(r) = reader.try_recv() else { break };
            if let Ok(c) = &r {
                bytes += c.event.len();
            }
            items.push(r);
        }
        let now = tokio::time::Instant::now();
        if items.len() >= most || bytes >= BATCH_BYTES || now >= deadline {
            return Wake::Events;
        }
        tokio::time::sleep_until(deadline.min(now + GATHER_SLICE)).await;
    }
}

/// Waits `pause`, or until told to stop.
async fn idle(commands: &mut mpsc::UnboundedReceiver<Command>, pause: Duration) -> Wake {
    tokio::select! {
        c = commands.recv() => match c {
            None => Wake::Stop,
            Some(Command::Reindex(reply)) => {
                let _ = reply.send(Err("the search index cannot be opened; see `dstream stats`".into()));
                Wake::Idle
            }
            // Not open: the next attempt opens (or recreates) it anyway.
            Some(Command::Damaged { .. }) => Wake::Idle,
        },
        () = tokio::time::sleep(pause) => Wake::Idle,
    }
}
