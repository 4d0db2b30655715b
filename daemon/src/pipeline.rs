//! The pipeline: a raw event from an agent's hook becomes stored, normalized events.
//!
//! **map** (the source's mapping plugin turns the raw event into zero or more events) →
//! **process** (every filter, in priority order, keeps, changes, splits or drops each; the
//! native redaction of [`crate::redact`] follows the last) → **decide** (for a requested tool call, plugins' `decide`
//! say allow, deny or ask; deny wins over ask over allow) → **append** (ids assigned here,
//! so that a tool result can name its request as its cause; then the store's one commit
//! path) → **observe** (plugins' `on_event` read the daemon-wide stream of committed events).
//!
//! One thread runs map → append for every ingest, in arrival order, so the events of a
//! session are stored in the order their hooks fired; plugins run on their own threads
//! (see [`crate::plugins`]), never on the async workers. The failure policy (ARCHITECTURE.md):
//! a failing `map` stores the raw event as `unmapped` plus a `plugin.error`; a failing
//! `process` passes the event on unchanged; a failing `decide` counts as "deny" (what cannot
//! be evaluated counts as its strictest outcome); nothing the
//! daemon accepted is dropped. The socket layer knows nothing of plugins and the store
//! nothing of agents: this module is the only place where the two meet.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dstream_sdk::event::MAX_NESTING_DEPTH;
use dstream_sdk::protocol::{Decision, IngestResult, IngestedEvent};
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value as Json, json};
use tokio::sync::{mpsc, watch};

use crate::checkpoint::policy::{self, Call, Policy, RuleVerdict};
use crate::checkpoint::{self as checkpoint, Checkpoints, NewRequest, Prepared};
use crate::config::{Config, PermissionRequests};
use crate::config_feed::ConfigFeed;
use crate::hub::{Hub, Lagged};
use crate::jsonscan::nesting_depth;
use crate::plugins::{Failure, Hooks, Input, Plugin, PluginSet, PluginSettings};
use crate::store::{Ack, NewEventRaw, Store, StoreError, read_range, validate_event};

/// Ingests waiting for the pipeline thread; past it, `ingest` waits (each one is also
/// charged to the clients' memory budget by the socket layer).
const QUEUE: usize = 1024;
/// Tool calls remembered per daemon to join a result to its request without reading the log.
const JOIN_MEMORY: usize = 4096;
/// How far back in a session's log a result looks for its request when it is not remembered
/// (after a restart, say).
const JOIN_LOOKBACK: u64 = 2000;

/// Why an ingest was not stored.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the pipeline has stopped")]
    Stopped,
}

pub type Done = Box<dyn FnOnce(Result<IngestResult, IngestError>) + Send>;

/// One raw event to take in.
pub struct Ingest {
    /// The connection it came on: clients are served in turn.
    pub client: u64,
    pub source: String,
    pub raw: Box<RawValue>,
    pub session_id: Option<String>,
    /// When the client stops waiting for a decision (ms since the epoch), if it said.
    pub reply_by_ms: Option<u64>,
    /// Whether the client is gone (its connection closed): nobody waits for a decision.
    pub gone: Option<Box<dyn Fn() -> bool + Send>>,
    /// Called once with the stored events, or why they were not stored.
    pub done: Done,
}

impl Ingest {
    /// Nobody waits for this event's decision any more: the hook gave up, the call ran.
    fn abandoned(&self) -> Option<&'static str> {
        if self
            .reply_by_ms
            .is_some_and(|t| crate::util::time::now_ms() > t)
        {
            Some("the hook's deadline passed before the daemon got to this tool call")
        } else if self.gone.as_ref().is_some_and(|g| g()) {
            Some("the hook disconnected before the daemon got to this tool call")
        } else {
            None
        }
    }
}

/// Ingests queued per client, and the clients with some, in turn. Bounded by what clients
/// may have in flight (each connection's permits, the daemon's memory budget).
#[derive(Default)]
struct FairQueue {
    by_client: HashMap<u64, VecDeque<Ingest>>,
    turn: VecDeque<u64>,
}

impl FairQueue {
    fn push(&mut self, i: Ingest) {
        let queue = self.by_client.entry(i.client).or_default();
        if queue.is_empty() {
            self.turn.push_back(i.client);
        }
        queue.push_back(i);
    }

    fn pop(&mut self) -> Option<Ingest> {
        let client = self.turn.pop_front()?;
        let queue = self.by_client.get_mut(&client)?;
        let next = queue.pop_front();
        if queue.is_empty() {
            self.by_client.remove(&client);
        } else {
            self.turn.push_back(client);
        }
        next
    }

    fn is_empty(&self) -> bool {
        self.turn.is_empty()
    }
}

pub struct Pipeline {
    queue: mpsc::Sender<Ingest>,
    plugins: watch::Sender<Arc<PluginSet>>,
    /// Where the settings come from: a reload reads the file again through it.
    feed: Arc<ConfigFeed>,
    /// The settings the current set was built with; a reload replaces them.
    settings: Mutex<PipelineSettings>,
    /// One reload at a time.
    reloading: Mutex<()>,
    pub ingested: AtomicU64,
    pub observer_lagged: AtomicU64,
    /// The redactor in force (the store's entry point uses the same one).
    redact: Arc<crate::redact::Shared>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PipelineSettings {
    pub plugins: PluginSettings,
    pub keep_raw: bool,
    /// `[checkpoints]`: the rules the decide step applies.
    pub policy: Arc<Policy>,
    /// `[redact]`.
    pub redact: crate::redact::RedactConfig,
}

impl PipelineSettings {
    pub fn from_config(config: &Config) -> PipelineSettings {
        PipelineSettings {
            plugins: PluginSettings::from_config(config),
            keep_raw: config.plugins.keep_raw,
            policy: Arc::new(Policy::new(&config.checkpoints)),
            redact: config.redact.clone(),
        }
    }
}

impl Pipeline {
    /// Loads the plugins and starts the pipeline thread and the `on_event` observer (on the
    /// current tokio runtime).
    pub fn start(
        store: Store,
        hub: Arc<Hub>,
        checkpoints: Arc<Checkpoints>,
        feed: Arc<ConfigFeed>,
        redact: Arc<crate::redact::Shared>,
    ) -> std::io::Result<Arc<Pipeline>> {
        let settings = PipelineSettings::from_config(&feed.current());
        if let Err(e) = std::fs::create_dir_all(&settings.plugins.dir) {
            tracing::warn!(dir = %settings.plugins.dir.display(), error = %e, "cannot create the plugin folder");
        }
        let set = Arc::new(PluginSet::load(&settings.plugins, None));
        for e in &set.errors {
            tracing::error!(file = %e.file, error = %e.error, "plugin not loaded");
        }
        tracing::info!(
            dir = %set.dir.display(),
            plugins = %set.plugins.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
            "plugins loaded"
        );
        let (plugins, _) = watch::channel(set);
        let (queue, rx) = mpsc::channel(QUEUE);
        let pipeline = Arc::new(Pipeline {
            queue,
            plugins,
            feed,
            settings: Mutex::new(settings.clone()),
            reloading: Mutex::new(()),
            ingested: AtomicU64::new(0),
            observer_lagged: AtomicU64::new(0),
            redact,
        });
        let worker = Worker {
            store,
            checkpoints,
            plugins: pipeline.plugins.subscribe(),
            pipeline: Arc::downgrade(&pipeline),
            joins: JoinMemory::default(),
        };
        std::thread::Builder::new()
            .name("dstream-pipeline".into())
            .spawn(move || worker.run(rx))?;
        tokio::spawn(observe(
            hub,
            pipeline.plugins.subscribe(),
            Arc::downgrade(&pipeline),
        ));
        Ok(pipeline)
    }

    /// Queues a raw event; `ingest.done` is called once it is stored (or refused).
    pub async fn ingest(&self, ingest: Ingest) {
        if let Err(mpsc::error::SendError(i)) = self.queue.send(ingest).await {
            (i.done)(Err(IngestError::Stopped));
        }
    }

    /// Runs the filters (`process`, redaction included) over an event that did not come in
    /// through `ingest`, such as an SDK caller's checkpoint request, so that what is stored is
    /// filtered the same way. Blocking. The first event the filters kept, or `None` if they
    /// dropped it; filter failures are logged and the event goes on unchanged.
    pub fn filter(&self, session: &str, source: &str, event: Json) -> Option<Json> {
        let set = self.plugins();
        let draft = Draft {
            session_id: session.to_string(),
            event: object(event),
        };
        let mut notes = Vec::new();
        let redactor = self.redact.get();
        let kept = process(
            &set,
            &redactor,
            vec![draft],
            source,
            &Json::Null,
            &mut notes,
        );
        for note in notes {
            tracing::warn!(error = %Json::Object(note.event), "a filter failed on a checkpoint request");
        }
        kept.into_iter().next().map(|d| Json::Object(d.event))
    }

    /// The redactor in force and its counters.
    pub fn redaction(&self) -> &Arc<crate::redact::Shared> {
        &self.redact
    }

    /// The plugins in force.
    pub fn plugins(&self) -> Arc<PluginSet> {
        self.plugins.borrow().clone()
    }

    /// The plugin set in force, and every set that replaces it (for components outside the
    /// pipeline that call plugins, like the relay's filters).
    pub fn watch_plugins(&self) -> watch::Receiver<Arc<PluginSet>> {
        self.plugins.subscribe()
    }

    pub fn settings(&self) -> PipelineSettings {
        self.settings.lock().unwrap().clone()
    }

    /// Reads the configuration file again (if there is one: a changed one is published to
    /// every component) and rebuilds the plugin set: changed plugins are reloaded, disabled
    /// ones get another chance, a broken file keeps its last good version. Blocking: loading
    /// runs each plugin's top level.
    pub fn reload(&self) -> Arc<PluginSet> {
        let _ = self.feed.reload();
        let _one = self.reloading.lock().unwrap();
        let settings = PipelineSettings::from_config(&self.feed.current());
        self.rebuild(settings)
    }

    /// A new configuration is in force: the plugin set, the policy and the redactor are
    /// rebuilt if what they are made from changed.
    pub fn apply(&self, config: &Config) {
        let _one = self.reloading.lock().unwrap();
        let settings = PipelineSettings::from_config(config);
        if settings != self.settings() {
            self.rebuild(settings);
        }
    }

    /// Builds the plugin set under `settings` and puts it (and them) in force; the caller
    /// holds `reloading`.
    fn rebuild(&self, settings: PipelineSettings) -> Arc<PluginSet> {
        if let Err(e) = std::fs::create_dir_all(&settings.plugins.dir) {
            tracing::warn!(dir = %settings.plugins.dir.display(), error = %e, "cannot create the plugin folder");
        }
        let old = self.plugins();
        let mut set = PluginSet::load(&settings.plugins, Some(&old));
        set.errors.extend(
            self.feed
                .last_error()
                .map(|e| dstream_sdk::protocol::PluginLoadError {
                    file: e.file.display().to_string(),
                    error: e.error,
                }),
        );
        let set = Arc::new(set);
        tracing::info!(
            plugins = %set.plugins.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
            errors = set.errors.len(),
            "plugins reloaded"
        );
        if settings.redact != self.settings().redact {
            // Checked when the file was read; a failure here keeps the one in force.
            match crate::redact::Redactor::new(&settings.redact) {
                Ok(r) => self.redact.set(r),
                Err(e) => tracing::error!(error = %e, "redaction settings not reloaded"),
            }
        }
        *self.settings.lock().unwrap() = settings;
        self.plugins.send_replace(set.clone());
        set
    }
}

/// Feeds committed events to the plugins that define `on_event`. Holds a reader of the
/// daemon-wide stream only while such a plugin is loaded.
async fn observe(
    hub: Arc<Hub>,
    mut plugins: watch::Receiver<Arc<PluginSet>>,
    pipeline: std::sync::Weak<Pipeline>,
) {
    loop {
        let set = plugins.borrow_and_update().clone();
        let sinks: Vec<Arc<Plugin>> = set.with(Hooks::ON_EVENT).cloned().collect();
        drop(set);
        if sinks.is_empty() {
            if plugins.changed().await.is_err() {
                return;
            }
            continue;
        }
        let mut reader = hub.subscribe();
        loop {
            tokio::select! {
                changed = plugins.changed() => {
                    if changed.is_err() { return; }
                    break; // a new set: start over with its sinks
                }
                next = reader.recv() => match next {
                    Ok(committed) => {
                        let mut bytes = Vec::with_capacity(committed.event.len() + 1);
                        committed.event.write_to(&mut bytes);
                        let Ok(event) = serde_json::from_slice::<Json>(&bytes) else { continue };
                        let event = Arc::new(event);
                        for sink in &sinks {
                            sink.notify(event.clone(), bytes.len());
                        }
                    }
                    Err(Lagged) => {
                        if let Some(p) = pipeline.upgrade() {
                            p.observer_lagged.fetch_add(1, Ordering::Relaxed);
                        }
                        tracing::warn!("on_event plugins fell behind the live stream; events skipped for them");
                    }
                }
            }
        }
    }
}

/// The filters, in order: each may keep, change, split or drop every event. A failing filter
/// passes the event on unchanged, with a `plugin.error` in `notes`.
fn process(
    set: &PluginSet,
    redactor: &crate::redact::Redactor,
    mut drafts: Vec<Draft>,
    source: &str,
    raw: &Json,
    notes: &mut Vec<Draft>,
) -> Vec<Draft> {
    for plugin in set.with(Hooks::PROCESS) {
        if plugin.disabled().is_some() {
            continue;
        }
        let mut next = Vec::with_capacity(drafts.len());
        for mut draft in drafts {
            if plugin.meta.process_if_contains.is_some() {
                let mut text = serde_json::to_vec(&draft.event).unwrap_or_default();
                text.make_ascii_lowercase();
                if !plugin.wants(&text) {
                    next.push(draft);
                    continue;
                }
            }
            draft
                .event
                .insert("session_id".into(), Json::String(draft.session_id.clone()));
            let passing = draft
                .event
                .get("type")
                .and_then(Json::as_str)
                .map(str::to_string);
            let event = Arc::new(Json::Object(draft.event));
            let out = plugin
                .call(Hooks::PROCESS, Input::Event(event.clone()))
                .map_err(|f| (f.error.to_string(), Some(f)))
                .and_then(|out| {
                    out.into_iter()
                        .map(|e| {
                            normalize(e, &draft.session_id, source, raw, false, passing.as_deref())
                        })
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|why| (why, None))
                });
            match out {
                Ok(out) => next.extend(out),
                Err((why, failure)) => {
                    // The event goes on as it came in.
                    let mut event = object(Arc::unwrap_or_clone(event));
                    event.remove("session_id");
                    notes.push(plugin_error(
                        plugin,
                        "process",
                        &why,
                        failure.as_ref(),
                        &draft.session_id,
                    ));
                    next.push(Draft {
                        session_id: draft.session_id,
                        event,
                    });
                }
            }
        }
        drafts = next;
    }
    // After every filter, so none can add a secret back; before decide, so rules,
    // checkpoints and `on_event` see what is stored.
    for d in &mut drafts {
        redactor.redact_event_map(&mut d.event);
    }
    drafts
}

/// Tool calls seen recently: (session, tool_use_id) → the request event's id.
#[derive(Default)]
struct JoinMemory {
    ids: HashMap<(String, String), String>,
    order: VecDeque<(String, String)>,
}

impl JoinMemory {
    fn remember(&mut self, session: &str, tool_use_id: &str, event_id: &str) {
        let key = (session.to_string(), tool_use_id.to_string());
        if self.ids.insert(key.clone(), event_id.to_string()).is_none() {
            self.order.push_back(key);
            if self.order.len() > JOIN_MEMORY
                && let Some(old) = self.order.pop_front()
            {
                self.ids.remove(&old);
            }
        }
    }

    fn get(&self, session: &str, tool_use_id: &str) -> Option<String> {
        self.ids
            .get(&(session.to_string(), tool_use_id.to_string()))
            .cloned()
    }
}

/// An event on its way through the pipeline: the session it goes to and its fields.
struct Draft {
    session_id: String,
    event: Map<String, Json>,
}

struct Worker {
    store: Store,
    checkpoints: Arc<Checkpoints>,
    plugins: watch::Receiver<Arc<PluginSet>>,
    pipeline: std::sync::Weak<Pipeline>,
    joins: JoinMemory,
}

impl Worker {
    /// Takes ingests in turn from each client that has some queued (in arrival order within
    /// a client), so one client flooding the pipeline with big events delays another client's
    /// tool call by at most one event of its own, not by its whole backlog.
    fn run(mut self, mut rx: mpsc::Receiver<Ingest>) {
        let mut fair = FairQueue::default();
        loop {
            if fair.is_empty() {
                match rx.blocking_recv() {
                    Some(i) => fair.push(i),
                    None => return,
                }
            }
            while let Ok(i) = rx.try_recv() {
                fair.push(i);
            }
            let Some(ingest) = fair.pop() else { continue };
            let Some(pipeline) = self.pipeline.upgrade() else {
                (ingest.done)(Err(IngestError::Stopped));
                return;
            };
            pipeline.ingested.fetch_add(1, Ordering::Relaxed);
            let (keep_raw, policy) = {
                let s = pipeline.settings.lock().unwrap();
                (s.keep_raw, s.policy.clone())
            };
            drop(pipeline);
            let set = self.plugins.borrow_and_update().clone();
            self.handle(&set, ingest, keep_raw, &policy);
        }
    }

    fn handle(&mut self, set: &PluginSet, ingest: Ingest, keep_raw: bool, policy: &Policy) {
        let abandoned = ingest.abandoned();
        let Ingest {
            source,
            raw,
            session_id,
            done,
            ..
        } = ingest;
        // Well formed (the socket layer checked); what cannot be represented (a lone
        // surrogate, 1e999) is repaired rather than lost, so the call still gets its decision.
        let raw: Arc<Json> =
            Arc::new(crate::lossy_json::parse(raw.get()).map_or(Json::Null, |(v, _)| v));
        let fallback = fallback_session(&source, session_id.as_deref(), &raw);
        let mut drafts = Vec::new();
        let mut notes = Vec::new();

        // map
        match set.mapper(&source) {
            None => drafts.push(unmapped(&source, &fallback, &raw, None)),
            // Already reported when it was disabled; its events are kept as they came.
            Some(plugin) if plugin.disabled().is_some() => {
                let why = format!("plugin {} is disabled", plugin.name());
                drafts.push(unmapped(&source, &fallback, &raw, Some(&why)));
            }
            Some(plugin) => {
                let input = Input::Map {
                    raw: raw.clone(),
                    source: source.clone(),
                    session_id: session_id.clone(),
                };
                match plugin.call(Hooks::MAP, input) {
                    Ok(events) => {
                        for e in events {
                            match normalize(e, &fallback, &source, &raw, keep_raw, None) {
                                Ok(d) => drafts.push(d),
                                Err(why) => {
                                    notes.push(plugin_error(plugin, "map", &why, None, &fallback));
                                    drafts.push(unmapped(&source, &fallback, &raw, Some(&why)));
                                }
                            }
                        }
                    }
                    Err(f) => {
                        let why = f.error.to_string();
                        notes.push(plugin_error(plugin, "map", &why, Some(&f), &fallback));
                        drafts.push(unmapped(&source, &fallback, &raw, Some(&why)));
                    }
                }
            }
        }
        drafts.append(&mut notes);

        // process
        let redactor = match self.pipeline.upgrade() {
            Some(p) => p.redact.get(),
            None => return done(Err(IngestError::Stopped)),
        };
        let mut drafts = process(set, &redactor, drafts, &source, &raw, &mut notes);
        // Errors of the filters are stored as they are: running them through the filter
        // that just failed would fail again.
        drafts.append(&mut notes);

        // decide
        let mut decision = None;
        let mut decided = Vec::with_capacity(drafts.len() + 1);
        // A tool call the mapping lost (it failed, was disabled, or a filter dropped the
        // event) is still decided: on what the daemon itself can read of the raw event.
        let mut saw_request = false;
        let mut drafts: VecDeque<Draft> = drafts.into();
        let mut rescued = false;
        loop {
            let mut draft = match drafts.pop_front() {
                Some(d) => d,
                None if !saw_request && !rescued => {
                    rescued = true;
                    match crate::tool_request::from_raw(&source, &raw) {
                        Some(req) => rescued_request(&source, &fallback, req),
                        None => break,
                    }
                }
                None => break,
            };
            let Some(kind) = request_kind(&draft.event) else {
                if draft.event.get("type").and_then(Json::as_str) == Some("user.input") {
                    // A person prompted the agent again: a remote stop has done its job.
                    self.checkpoints.stops.clear(&draft.session_id);
                }
                decided.push(draft);
                continue;
            };
            saw_request = true;
            let cause = ensure_id(&mut draft.event);
            if let Some(why) = abandoned {
                // The call ran without a decision: say so, and open no checkpoint nobody
                // waits for. Never recorded as if a decision had stopped it.
                let bypassed = bypassed_event(&draft, &cause, why);
                decided.push(draft);
                decided.push(bypassed);
                continue;
            }
            let (verdict, follow_up) =
                self.verdict(set, policy, &source, &raw, &draft, kind, &cause, &mut notes);
            if let Some(d) = &verdict {
                let meta = draft
                    .event
                    .entry("metadata")
                    .or_insert_with(|| Json::Object(Map::new()));
                if let Json::Object(m) = meta {
                    let mut slim = json!({"action": d.action});
                    if let Some(r) = &d.reason {
                        slim["reason"] = json!(r);
                    }
                    if let Some(b) = &d.decided_by {
                        slim["decided_by"] = json!(b);
                    }
                    if let Some(c) = &d.checkpoint {
                        slim["checkpoint_id"] = json!(c.id);
                    }
                    m.insert("decision".into(), slim);
                }
            }
            decided.push(draft);
            decided.extend(follow_up);
            decision = strongest(decision, verdict);
        }
        let mut drafts = decided;
        drafts.append(&mut notes);
        if !keep_raw {
            // Also what a plugin set itself; an unmapped event keeps it, being nothing else.
            for d in &mut drafts {
                if d.event.get("type").and_then(Json::as_str) != Some("unmapped") {
                    d.event.remove("raw");
                }
            }
        }

        self.append(drafts, decision, done);
    }

    /// What policy, plugins and grants say about one tool call, and the event that records it:
    /// a `checkpoint.requested` for a call that must wait for a person, or an automatic
    /// `checkpoint.approved` / `checkpoint.rejected` naming the rule (or grant) that decided.
    #[allow(clippy::too_many_arguments)]
    fn verdict(
        &mut self,
        set: &PluginSet,
        policy: &Policy,
        source: &str,
        raw: &Json,
        draft: &Draft,
        kind: RequestKind,
        cause: &str,
        notes: &mut Vec<Draft>,
    ) -> (Option<Decision>, Option<Draft>) {
        let payload = draft.event.get("payload");
        let tool = payload
            .and_then(|p| p.get("tool"))
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_string();
        let input = payload.and_then(|p| p.get("input")).cloned();
        let tool_use_id = payload
            .and_then(|p| p.get("tool_use_id"))
            .and_then(Json::as_str)
            .map(str::to_string);
        let call_key = call_key(&tool, input.as_ref());
        if let (RequestKind::ToolUse, Some(t)) = (kind, &tool_use_id) {
            // A permission prompt for this call comes without its id: find it by tool + input.
            self.joins.remember(&draft.session_id, &call_key, t);
        }
        let rule = policy.evaluate(&Call {
            source,
            tool: &tool,
            input: input.as_ref(),
        });
        let from_rule = rule.as_ref().map(|r| Decision {
            action: r.action.as_str().into(),
            reason: Some(match &r.note {
                Some(note) => format!("{}: {}; {note}", r.rule, r.description),
                None => format!("{}: {}", r.rule, r.description),
            }),
            decided_by: Some(format!("rule:{}", r.rule)),
            updated_input: None,
            checkpoint: None,
            stop: false,
        });
        let mut decision = strongest(from_rule, self.decide(set, draft, notes));
        // Stopped remotely: every call is denied until a person prompts the agent again.
        let stopped = self
            .checkpoints
            .stops
            .get(&draft.session_id)
            .map(|s| Decision {
                action: "deny".into(),
                reason: Some(format!("stopped remotely: {}", s.reason)),
                decided_by: Some(s.decided_by),
                updated_input: None,
                checkpoint: None,
                stop: true,
            });
        decision = strongest(stopped, decision);
        if decision.is_none()
            && kind == RequestKind::Permission
            && policy.permission_requests() == PermissionRequests::Ask
        {
            decision = Some(Decision {
                action: "ask".into(),
                reason: Some("the agent asks for permission".into()),
                decided_by: Some("checkpoints.permission_requests".into()),
                updated_input: None,
                checkpoint: None,
                stop: false,
            });
        }
        let Some(mut decision) = decision else {
            return (None, None);
        };
        let cwd = raw
            .get("cwd")
            .or_else(|| raw.get("directory"))
            .and_then(Json::as_str)
            .map(str::to_string);
        let auto = |d: &Decision, grant: Option<&str>| {
            let mut p = json!({
                "auto": true,
                "action": d.action,
                "tool": tool,
                "decided_by": d.decided_by,
                "reason": d.reason,
            });
            if let Some(t) = &tool_use_id {
                p["tool_use_id"] = json!(t);
            }
            if let Some(g) = grant {
                p["grant"] = json!(g);
            } else if let Some(r) = &rule {
                p["rule"] = json!(r.rule);
            }
            let kind = if d.action == "deny" {
                "checkpoint.rejected"
            } else {
                "checkpoint.approved"
            };
            Draft {
                session_id: draft.session_id.clone(),
                event: object(json!({
                    "type": kind,
                    "actor": "dstream",
                    "causation_id": cause,
                    "payload": p,
                    "metadata": {"source": source},
                })),
            }
        };
        if decision.action != "ask" {
            let event = auto(&decision, None);
            return (Some(decision), Some(event));
        }
        if let Some(g) =
            self.checkpoints
                .grant_for(&draft.session_id, cwd.as_deref(), &tool, input.as_ref())
        {
            decision = Decision {
                action: "allow".into(),
                reason: Some(format!(
                    "allowed for this {} by checkpoint {}",
                    g.scope, g.checkpoint_id
                )),
                decided_by: Some(format!("grant:{}", g.checkpoint_id)),
                updated_input: None,
                checkpoint: None,
                stop: false,
            };
            let event = auto(&decision, Some(&g.checkpoint_id));
            return (Some(decision), Some(event));
        }
        let key = match (&tool_use_id, kind) {
            (Some(t), _) => t.clone(),
            (None, RequestKind::Permission) => self
                .joins
                .get(&draft.session_id, &call_key)
                .unwrap_or(call_key),
            (None, RequestKind::ToolUse) => format!("event:{cause}"),
        };
        let (timeout_ms, on_timeout) = match &rule {
            Some(RuleVerdict {
                timeout_ms,
                on_timeout,
                ..
            }) if rule.as_ref().is_some_and(|r| r.action.as_str() == "ask") => {
                (*timeout_ms, *on_timeout)
            }
            _ => (policy.default_timeout_ms(), policy.default_on_timeout()),
        };
        let asking_rule = rule.as_ref().filter(|r| r.action.as_str() == "ask");
        let request = NewRequest {
            session_id: draft.session_id.clone(),
            key,
            summary: policy::summary(Some(&tool), input.as_ref()),
            options: checkpoint::default_options(cwd.is_some()),
            timeout_ms,
            on_timeout: Some(on_timeout),
            rule: asking_rule.map(|r| r.rule.clone()),
            input_glob: asking_rule.and_then(|r| r.input_glob.clone()),
            source: Some(source.to_string()),
            cwd,
            causation_id: Some(cause.to_string()),
            tool: Some(tool.clone()),
            input,
        };
        match self.checkpoints.prepare(request) {
            Ok(Prepared::Existing(info)) => {
                if let Some(d) = &info.decision {
                    decision.action = d.action.clone();
                    decision.reason = d
                        .note
                        .clone()
                        .or(Some(format!("{} ({})", info.state, d.decision)));
                    decision.decided_by = Some(d.decided_by.clone());
                    decision.updated_input = d.input.clone();
                }
                decision.checkpoint = Some(info);
                (Some(decision), None)
            }
            Ok(Prepared::New {
                info,
                event_id,
                event,
            }) => {
                let mut map = object(serde_json::to_value(&event).unwrap_or(Json::Null));
                map.insert("id".into(), json!(event_id));
                decision.checkpoint = Some(info);
                let follow = Draft {
                    session_id: draft.session_id.clone(),
                    event: map,
                };
                (Some(decision), Some(follow))
            }
            Err(e) => {
                // No one could be asked: refuse the call rather than let it through unseen.
                tracing::error!(error = %e, "cannot open a checkpoint; the call is denied");
                decision.action = "deny".into();
                decision.reason = Some(format!("dstream could not open a checkpoint: {e}"));
                decision.decided_by = Some("dstream".into());
                let event = auto(&decision, None);
                (Some(decision), Some(event))
            }
        }
    }

    /// Asks every `decide` plugin about one tool call: deny beats ask beats allow. A plugin
    /// that fails (an error, a timeout, an answer that is none of the four) counts as deny:
    /// what cannot be evaluated counts as its strictest outcome, so a plugin made to fail
    /// never lets a call through, nor leaves it to a person who may not be there.
    fn decide(&self, set: &PluginSet, draft: &Draft, notes: &mut Vec<Draft>) -> Option<Decision> {
        let mut decision = None;
        let request = Arc::new(Json::Object(draft.event.clone()));
        for plugin in set.with(Hooks::DECIDE) {
            if plugin.disabled().is_some() {
                continue;
            }
            let verdict = match plugin.call(Hooks::DECIDE, Input::Event(request.clone())) {
                Ok(mut out) => match out.pop() {
                    Some(Json::Null) | None => continue,
                    Some(Json::String(action)) => verdict(plugin, &action, None),
                    Some(Json::Object(m)) => {
                        let action = m.get("action").and_then(Json::as_str).unwrap_or("");
                        let reason = m.get("reason").and_then(Json::as_str).map(str::to_string);
                        verdict(plugin, action, reason)
                    }
                    Some(_) => Err("decide returned neither a string nor a table".to_string()),
                },
                Err(f) => {
                    let why = f.error.to_string();
                    notes.push(plugin_error(
                        plugin,
                        "decide",
                        &why,
                        Some(&f),
                        &draft.session_id,
                    ));
                    Ok(failed_to_decide(plugin, &why))
                }
            };
            match verdict {
                Ok(v) => decision = strongest(decision, Some(v)),
                Err(why) => {
                    notes.push(plugin_error(
                        plugin,
                        "decide",
                        &why,
                        None,
                        &draft.session_id,
                    ));
                    decision = strongest(decision, Some(failed_to_decide(plugin, &why)));
                }
            }
        }
        decision
    }

    /// Assigns ids, joins tool results to their requests, and hands the events to the store;
    /// `done` is called when the last one is durable.
    fn append(&mut self, drafts: Vec<Draft>, decision: Option<Decision>, done: Done) {
        if drafts.is_empty() {
            return done(Ok(IngestResult {
                events: Vec::new(),
                decision,
            }));
        }
        let total = drafts.len();
        let collector = Arc::new(Mutex::new(Collector {
            events: vec![None; total],
            remaining: total,
            error: None,
            decision,
            done: Some(done),
        }));
        for (i, mut draft) in drafts.into_iter().enumerate() {
            let id = match draft.event.get("id").and_then(Json::as_str) {
                Some(id) if id.parse::<ulid::Ulid>().is_ok() => id.to_string(),
                _ => ulid::Ulid::new().to_string(),
            };
            self.join(&mut draft, &id);
            let event_type = draft
                .event
                .get("type")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_string();
            let session = draft.session_id.clone();
            let c = collector.clone();
            let requested = (event_type == "checkpoint.requested")
                .then(|| {
                    draft
                        .event
                        .get("payload")
                        .and_then(|p| p.get("checkpoint_id"))
                        .and_then(Json::as_str)
                        .map(|id| (self.checkpoints.clone(), id.to_string()))
                })
                .flatten();
            let ack = Ack::new(move |r| {
                if let Some((checkpoints, id)) = &requested {
                    checkpoints.recorded(id, r.as_ref());
                }
                let mut c = c.lock().unwrap();
                match r {
                    Ok(a) => {
                        c.events[i] = Some(IngestedEvent {
                            lsn: a.lsn,
                            id: a.id,
                            event_type,
                            session_id: session,
                        })
                    }
                    Err(e) => {
                        c.error.get_or_insert(e);
                    }
                }
                c.remaining -= 1;
                if c.remaining == 0 {
                    c.finish();
                }
            });
            match to_new_event(&draft.event) {
                Ok(event) => {
                    let must_sync = event.event_type.starts_with("checkpoint.");
                    self.store
                        .append_with_id(&draft.session_id, Some(id), event, must_sync, ack);
                }
                Err(why) => {
                    // Cannot happen for a normalized draft; stored as an error rather than lost.
                    tracing::error!(%why, "pipeline produced an event the store refuses");
                    let event = to_new_event(&object(json!({
                        "type": "plugin.error",
                        "payload": {"error": why, "hook": "append"},
                    })))
                    .expect("a fixed valid event");
                    self.store
                        .append_with_id(&draft.session_id, Some(id), event, false, ack);
                }
            }
        }
    }

    /// A tool result without a cause gets its request's id, found by `tool_use_id`; a tool
    /// request is remembered for its result.
    fn join(&mut self, draft: &mut Draft, id: &str) {
        let event_type = draft.event.get("type").and_then(Json::as_str).unwrap_or("");
        let tool_use_id = draft
            .event
            .get("payload")
            .and_then(|p| p.get("tool_use_id"))
            .and_then(Json::as_str)
            .map(str::to_string);
        let Some(tool_use_id) = tool_use_id else {
            return;
        };
        match event_type {
            "execution.tool_use" => {
                self.joins.remember(&draft.session_id, &tool_use_id, id);
            }
            "execution.tool_result" if !draft.event.contains_key("causation_id") => {
                let cause = self
                    .joins
                    .get(&draft.session_id, &tool_use_id)
                    .or_else(|| self.find_request(&draft.session_id, &tool_use_id));
                if let Some(cause) = cause {
                    draft
                        .event
                        .insert("causation_id".into(), Json::String(cause));
                }
            }
            _ => {}
        }
    }

    /// Looks for a tool request in the last events of a session's log.
    fn find_request(&self, session: &str, tool_use_id: &str) -> Option<String> {
        let s = self.store.get(session)?;
        let upto = s.committed_lsn();
        let from = upto.saturating_sub(JOIN_LOOKBACK) + 1;
        let events = read_range(&s, from, upto, JOIN_LOOKBACK as usize, 16 << 20).ok()?;
        let mut buf = Vec::new();
        events.iter().rev().find_map(|e| {
            buf.clear();
            e.write_to(&mut buf);
            let v: Json = serde_json::from_slice(&buf).ok()?;
            let matches = v.get("type").and_then(Json::as_str) == Some("execution.tool_use")
                && v.pointer("/payload/tool_use_id").and_then(Json::as_str) == Some(tool_use_id);
            matches.then(|| v.get("id").and_then(Json::as_str).map(str::to_string))?
        })
    }
}

struct Collector {
    events: Vec<Option<IngestedEvent>>,
    remaining: usize,
    error: Option<StoreError>,
    decision: Option<Decision>,
    done: Option<Done>,
}

impl Collector {
    fn finish(&mut self) {
        let Some(done) = self.done.take() else { return };
        match self.error.take() {
            Some(e) => done(Err(IngestError::Store(e))),
            None => {
                let events: Vec<IngestedEvent> = self.events.drain(..).flatten().collect();
                let mut decision = self.decision.take();
                // The reply goes out once the request is durable: the checkpoint is pending.
                if let Some(c) = decision.as_mut().and_then(|d| d.checkpoint.as_mut())
                    && c.state == "recording"
                    && let Some(e) = events
                        .iter()
                        .find(|e| e.event_type == "checkpoint.requested")
                {
                    c.state = "pending".into();
                    c.lsn = e.lsn;
                }
                done(Ok(IngestResult { events, decision }))
            }
        }
    }
}

fn verdict(plugin: &Plugin, action: &str, reason: Option<String>) -> Result<Decision, String> {
    match action {
        "allow" | "deny" | "ask" => Ok(Decision {
            action: action.to_string(),
            reason,
            decided_by: Some(format!("plugin:{}", plugin.name())),
            updated_input: None,
            checkpoint: None,
            stop: false,
        }),
        other => Err(format!(
            "decide returned {other:?}; expected \"allow\", \"deny\", \"ask\" or nil"
        )),
    }
}

/// The decision of a `decide` plugin that failed: deny, saying why.
fn failed_to_decide(plugin: &Plugin, why: &str) -> Decision {
    Decision {
        action: "deny".into(),
        reason: Some(format!(
            "plugin {} failed to decide: {why}; denied because a failing plugin counts as deny",
            plugin.name()
        )),
        decided_by: Some(format!("plugin:{}", plugin.name())),
        updated_input: None,
        checkpoint: None,
        stop: false,
    }
}

/// deny > ask > allow.
fn strongest(a: Option<Decision>, b: Option<Decision>) -> Option<Decision> {
    let rank = |d: &Decision| match d.action.as_str() {
        "deny" => 3,
        "ask" => 2,
        _ => 1,
    };
    match (a, b) {
        (Some(a), Some(b)) => Some(if rank(&b) > rank(&a) { b } else { a }),
        (a, b) => a.or(b),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RequestKind {
    /// A tool call not yet run.
    ToolUse,
    /// The agent's own permission prompt, which waits for an answer (`payload.awaited`).
    Permission,
}

/// Whether `decide` is asked about this event, and as what.
fn request_kind(event: &Map<String, Json>) -> Option<RequestKind> {
    let payload = event.get("payload");
    match event.get("type").and_then(Json::as_str)? {
        "execution.tool_use" => match payload.and_then(|p| p.get("phase")) {
            None | Some(Json::Null) => Some(RequestKind::ToolUse),
            Some(p) if p.as_str() == Some("requested") => Some(RequestKind::ToolUse),
            _ => None,
        },
        "execution.permission_requested"
            if payload.and_then(|p| p.get("awaited")) == Some(&Json::Bool(true)) =>
        {
            Some(RequestKind::Permission)
        }
        _ => None,
    }
}

/// The event's id, given one now if it has none (a ULID), so later events can name it.
fn ensure_id(event: &mut Map<String, Json>) -> String {
    match event.get("id").and_then(Json::as_str) {
        Some(id) if id.parse::<ulid::Ulid>().is_ok() => id.to_string(),
        _ => {
            let id = ulid::Ulid::new().to_string();
            event.insert("id".into(), json!(id));
            id
        }
    }
}

/// A tool call named by its tool and input (for the prompts that come without the call's id).
fn call_key(tool: &str, input: Option<&Json>) -> String {
    let text = input.map(Json::to_string).unwrap_or_default();
    let id = checkpoint::checkpoint_id(tool, &text);
    format!("call:{}", &id[3..])
}

fn object(v: Json) -> Map<String, Json> {
    match v {
        Json::Object(m) => m,
        _ => Map::new(),
    }
}

/// The session an event goes to when its mapping names none: the one the caller gave, else
/// the raw event's own `session_id`, else one per source.
fn fallback_session(source: &str, given: Option<&str>, raw: &Json) -> String {
    let valid = |s: &str| dstream_sdk::validate_session_id(s).is_ok();
    if let Some(s) = given.filter(|s| valid(s)) {
        return s.to_string();
    }
    if let Some(s) = raw
        .get("session_id")
        .and_then(Json::as_str)
        .filter(|s| valid(s))
    {
        return s.to_string();
    }
    format!("{source}-unassigned")
}

/// `checkpoint.bypassed`: a tool call that ran before the daemon could decide it.
fn bypassed_event(request: &Draft, cause: &str, why: &str) -> Draft {
    let payload = request.event.get("payload");
    Draft {
        session_id: request.session_id.clone(),
        event: object(json!({
            "type": "checkpoint.bypassed",
            "actor": "dstream",
            "causation_id": cause,
            "payload": {
                "reason": why,
                "tool": payload.and_then(|p| p.get("tool")),
                "tool_use_id": payload.and_then(|p| p.get("tool_use_id")),
            },
        })),
    }
}

/// A tool call read from the raw event by the daemon itself, for the decision the mapping
/// did not ask for.
fn rescued_request(source: &str, fallback: &str, req: crate::tool_request::ToolRequest) -> Draft {
    let mut payload = json!({
        "phase": "requested",
        "tool": req.tool,
        "input": req.input,
        "rescued": "the mapping produced no request for this tool call; read by the daemon",
    });
    if let Some(id) = req.tool_use_id {
        payload["tool_use_id"] = json!(id);
    }
    Draft {
        session_id: req.session_id.unwrap_or_else(|| fallback.to_string()),
        event: object(json!({
            "type": "execution.tool_use",
            "actor": source,
            "payload": payload,
            "metadata": {"source": source},
        })),
    }
}

fn unmapped(source: &str, session: &str, raw: &Json, error: Option<&str>) -> Draft {
    let mut payload = Map::new();
    payload.insert("source".into(), json!(source));
    if let Some(e) = error {
        payload.insert("error".into(), json!(e));
    }
    let event = object(json!({
        "type": "unmapped",
        "actor": source,
        "payload": payload,
        "metadata": {"source": source},
        "raw": raw,
    }));
    Draft {
        session_id: session.to_string(),
        event,
    }
}

fn plugin_error(
    plugin: &Plugin,
    hook: &str,
    error: &str,
    failure: Option<&Failure>,
    session: &str,
) -> Draft {
    let mut payload = json!({"plugin": plugin.name(), "hook": hook, "error": error});
    if let Some(reason) = failure.and_then(|f| f.disabled_now.as_ref()) {
        payload["disabled"] = json!(reason);
    }
    Draft {
        session_id: session.to_string(),
        event: object(json!({
            "type": "plugin.error",
            "actor": "dstream",
            "payload": payload,
            "metadata": {"plugin": plugin.name()},
        })),
    }
}

const FIELDS: &[&str] = &[
    "type",
    "id",
    "session_id",
    "stream_id",
    "causation_id",
    "correlation_id",
    "actor",
    "payload",
    "metadata",
    "raw",
];

/// Checks an event a plugin emitted and fills what the pipeline owes it: the session, the
/// source in `metadata`, and (for a mapping) the raw event, unless the plugin set `raw`.
/// `passing`: the type of the event a filter was given, which it may pass on even when only
/// the daemon may write that type (a filter sees the daemon's own checkpoint requests).
fn normalize(
    emitted: Json,
    session: &str,
    source: &str,
    raw: &Json,
    attach_raw: bool,
    passing: Option<&str>,
) -> Result<Draft, String> {
    let Json::Object(mut event) = emitted else {
        return Err("emitted a value that is not an event table".into());
    };
    if let Some(k) = event.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "emitted an event with unknown field {k:?} (fields: {})",
            FIELDS.join(", ")
        ));
    }
    match event.get("type") {
        Some(Json::String(t)) if crate::event_types::daemon_only(t) && passing != Some(t) => {
            return Err(crate::event_types::refusal(t));
        }
        Some(Json::String(t)) if !t.is_empty() => {}
        _ => return Err("emitted an event without a string `type`".into()),
    }
    for key in ["stream_id", "causation_id", "correlation_id", "actor", "id"] {
        match event.get(key) {
            None | Some(Json::String(_)) => {}
            Some(Json::Null) => {
                event.remove(key);
            }
            Some(_) => return Err(format!("`{key}` must be a string")),
        }
    }
    let session = match event.remove("session_id") {
        Some(Json::String(s)) => {
            dstream_sdk::validate_session_id(&s).map_err(|e| format!("session_id {s:?}: {e}"))?;
            s
        }
        None | Some(Json::Null) => session.to_string(),
        Some(_) => return Err("`session_id` must be a string".into()),
    };
    if let Some(Json::String(s)) = event.get("stream_id") {
        dstream_sdk::validate_session_id(s).map_err(|e| format!("stream_id {s:?}: {e}"))?;
    }
    match event
        .entry("metadata")
        .or_insert_with(|| Json::Object(Map::new()))
    {
        Json::Object(m) => {
            m.entry("source").or_insert_with(|| json!(source));
        }
        Json::Null => {
            event.insert("metadata".into(), json!({ "source": source }));
        }
        _ => return Err("`metadata` must be a table".into()),
    }
    if attach_raw && !event.contains_key("raw") {
        event.insert("raw".into(), raw.clone());
    }
    Ok(Draft {
        session_id: session,
        event,
    })
}

/// The store's form of a normalized event.
fn to_new_event(event: &Map<String, Json>) -> Result<NewEventRaw, String> {
    let text = |k: &str| event.get(k).and_then(Json::as_str).map(str::to_string);
    let json = |k: &str| -> Result<Option<Box<RawValue>>, String> {
        match event.get(k) {
            None | Some(Json::Null) => Ok(None),
            Some(v) => {
                let raw = to_raw_value(v).map_err(|e| e.to_string())?;
                let depth = nesting_depth(raw.get().as_bytes());
                if depth > MAX_NESTING_DEPTH {
                    return Err(format!(
                        "{k} nests {depth} levels; the limit is {MAX_NESTING_DEPTH}"
                    ));
                }
                Ok(Some(raw))
            }
        }
    };
    let new = NewEventRaw {
        event_type: text("type").unwrap_or_default(),
        actor: text("actor"),
        payload: json("payload")?,
        stream_id: text("stream_id"),
        causation_id: text("causation_id"),
        correlation_id: text("correlation_id"),
        metadata: json("metadata")?,
        raw: json("raw")?,
        ignored_lsn: None,
        ignored_id: None,
        ignored_timestamp: None,
        ignored_session_id: None,
    };
    validate_event(&new)?;
    Ok(new)
}
