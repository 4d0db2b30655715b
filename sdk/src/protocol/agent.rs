//! Agents' side: the words of decisions, `ingest`, checkpoints and plugins.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A word that names none of an enum's variants (see [`Action`], [`OnTimeout`],
/// [`CheckpointState`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {word:?}")]
pub struct UnknownWord {
    /// What the word was to name, e.g. `action`.
    pub kind: &'static str,
    pub word: String,
}

words! {
    /// What is done with a tool call.
    Action = "action" {
        /// Run it.
        Allow = "allow",
        /// Refuse it.
        Deny = "deny",
        /// Let the agent ask its user as it normally would (or hold it at a checkpoint).
        Ask = "ask",
    }
}

impl Action {
    /// How strict the action is: of several verdicts on one call the strictest wins,
    /// deny over ask over allow.
    pub const fn strictness(self) -> u8 {
        match self {
            Action::Allow => 1,
            Action::Ask => 2,
            Action::Deny => 3,
        }
    }
}

words! {
    /// What a checkpoint's deadline decides when nobody did.
    OnTimeout = "on_timeout" {
        Allow = "allow",
        Deny = "deny",
    }
}

impl OnTimeout {
    /// The action the deadline's decision takes.
    pub const fn action(self) -> Action {
        match self {
            OnTimeout::Allow => Action::Allow,
            OnTimeout::Deny => Action::Deny,
        }
    }
}

words! {
    /// Where a checkpoint stands.
    CheckpointState = "checkpoint state" {
        /// Its request is being written to the log; a client sees it as pending.
        Recording = "recording",
        /// Waiting for a person.
        Pending = "pending",
        Approved = "approved",
        Rejected = "rejected",
        /// Its deadline passed and decided it (see [`OnTimeout`]).
        Expired = "expired",
    }
}

impl CheckpointState {
    /// Not decided yet.
    pub const fn is_pending(self) -> bool {
        matches!(self, CheckpointState::Pending | CheckpointState::Recording)
    }
}

// ---- ingest ----

/// A raw event from an agent's hook, for the pipeline to map, filter and store.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestParams<J = Value> {
    /// Who sent it: `claude-code`, `opencode`, `claude-agent-sdk`, or any name a plugin claims.
    pub source: String,
    /// The source event exactly as the agent produced it.
    pub event: J,
    /// The session to store it in when the mapping does not name one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// When the client stops waiting for the decision (ms since the epoch). A tool call the
    /// daemon gets to only later has run already (the hook gave up and the agent went on): it
    /// is recorded as `checkpoint.bypassed`, never as if a decision had stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_by_ms: Option<u64>,
}

/// One event that an ingest stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestedEvent {
    pub lsn: u64,
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub session_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IngestResult {
    /// The stored events, in the order they were appended (none when plugins dropped them all).
    pub events: Vec<IngestedEvent>,
    /// For a tool call: what policy and plugins decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// The verdict on a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// `allow`, `deny` or `ask` (let the agent ask its user as it normally would).
    pub action: Action,
    /// Why, for the agent and the person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who decided: a plugin's name, a rule, or a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// The tool input to use instead of the original, when the decider edited it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// For `ask`: the checkpoint that holds the call until a person decides (await it with
    /// `checkpoint.await`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointInfo>,
    /// Set when the agent should also end its turn, where it can (a remote stop): Claude
    /// Code gets `"continue": false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop: bool,
}

impl Decision {
    /// `action`, decided by `decided_by`, with no reason given.
    pub fn new(action: Action, decided_by: impl Into<String>) -> Decision {
        Decision {
            action,
            reason: None,
            decided_by: Some(decided_by.into()),
            updated_input: None,
            checkpoint: None,
            stop: false,
        }
    }

    /// Allow, because `reason`, decided by `decided_by`.
    pub fn allow(reason: impl Into<String>, decided_by: impl Into<String>) -> Decision {
        Decision::new(Action::Allow, decided_by).because(reason)
    }

    /// Deny, because `reason`, decided by `decided_by`.
    pub fn deny(reason: impl Into<String>, decided_by: impl Into<String>) -> Decision {
        Decision::new(Action::Deny, decided_by).because(reason)
    }

    /// Ask, because `reason`, decided by `decided_by`.
    pub fn ask(reason: impl Into<String>, decided_by: impl Into<String>) -> Decision {
        Decision::new(Action::Ask, decided_by).because(reason)
    }

    /// The same decision, saying why.
    pub fn because(mut self, reason: impl Into<String>) -> Decision {
        self.reason = Some(reason.into());
        self
    }
}

// ---- checkpoints ----

/// One choice a person may pick for a checkpoint. On the wire either a plain string (its id;
/// `reject` denies, anything else allows) or an object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "OptionWire")]
pub struct CheckpointOption {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// `allow` or `deny`: what picking it does to the call.
    pub action: String,
    /// `session` or `project`: picking it also allows matching calls for the rest of the
    /// session (or in the project directory) until the grant expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OptionWire {
    Id(String),
    Full {
        id: String,
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        action: Option<String>,
        #[serde(default)]
        scope: Option<String>,
    },
}

impl From<OptionWire> for CheckpointOption {
    fn from(w: OptionWire) -> Self {
        let default_action = |id: &str| if id == "reject" { "deny" } else { "allow" }.to_string();
        match w {
            OptionWire::Id(id) => CheckpointOption {
                action: default_action(&id),
                id,
                label: None,
                scope: None,
            },
            OptionWire::Full {
                id,
                label,
                action,
                scope,
            } => CheckpointOption {
                action: action.unwrap_or_else(|| default_action(&id)),
                id,
                label,
                scope,
            },
        }
    }
}

/// `checkpoint.request`: hold something until a person decides. For SDK and FFI callers; an
/// agent's tool calls get theirs through `ingest` and the policy.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRequestParams {
    pub session_id: String,
    /// Stable per thing asked about (a tool call id, say): the same key gets the same
    /// checkpoint, never a second one.
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// One line for the person deciding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The choices (default: approve, reject).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<CheckpointOption>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// `allow` or `deny` (the decision applied at the deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<String>,
}

/// `checkpoint.await`: wait until the checkpoint is decided or expired.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointAwaitParams {
    pub id: String,
    /// The checkpoint's session: lets the daemon find a checkpoint it no longer holds in
    /// memory in that session's log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Give up waiting after this long and return the checkpoint as it stands (pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `checkpoint.resolve`: decide. The first valid decision wins.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointResolveParams {
    pub id: String,
    /// `approve`, `reject`, or the id of one of the checkpoint's options.
    pub decision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The input to run instead (an edited command, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

/// `checkpoint.list`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointListParams {
    /// `pending`, `approved`, `rejected` or `expired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Only calls of this tool (any letter case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Newest first (default: oldest first).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub newest_first: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckpointListResult {
    /// Oldest first (or newest first when asked).
    pub checkpoints: Vec<CheckpointInfo>,
    /// How many matched in all: more than `checkpoints` holds when the limit cut the list.
    #[serde(default)]
    pub total: usize,
}

/// How a checkpoint was decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointDecision {
    /// `approve`, `reject`, an option's id, or the default applied at the deadline.
    pub decision: String,
    /// `allow` or `deny`.
    pub action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The edited input, when the person changed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// `user:<name>` (from the OS credentials of the deciding client), `rule:<n>`, or `timeout`.
    pub decided_by: String,
    pub decided_ms: u64,
    /// The id of the event that recorded the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
}

/// A checkpoint as clients see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    pub id: String,
    pub session_id: String,
    pub key: String,
    /// `recording` (being written), `pending`, `approved`, `rejected` or `expired`.
    pub state: CheckpointState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The tool's input (in lists and awaits that ask for detail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    pub summary: String,
    pub options: Vec<CheckpointOption>,
    pub created_ms: u64,
    pub deadline_ms: u64,
    /// `allow` or `deny`, applied at the deadline.
    pub on_timeout: OnTimeout,
    /// The rule that asked, if a rule did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// LSN of the `checkpoint.requested` event in the session's log.
    #[serde(default)]
    pub lsn: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<CheckpointDecision>,
    /// Whether a waiting client has been handed the decision.
    #[serde(default)]
    pub delivered: bool,
}

impl CheckpointInfo {
    pub fn is_pending(&self) -> bool {
        self.state.is_pending()
    }
}

// ---- plugins ----

/// One plugin as the daemon runs it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginInfo {
    pub name: String,
    /// `lua` or `native`.
    pub kind: String,
    /// `builtin`, or the file it was loaded from.
    pub origin: String,
    /// Sources it maps (empty for a filter or a sink).
    #[serde(default)]
    pub sources: Vec<String>,
    /// Which of `map`, `process`, `decide`, `on_event` it defines.
    #[serde(default)]
    pub hooks: Vec<String>,
    /// `active`, or `disabled` after repeated failures (until it is reloaded).
    pub state: String,
    /// Why it is disabled, or the last error of a newer version of its file that failed to
    /// load (the last good version keeps running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub calls: u64,
    pub errors: u64,
    /// Time spent in the plugin, in microseconds.
    pub micros: u64,
}

/// A plugin file that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginLoadError {
    pub file: String,
    pub error: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PluginsListResult {
    /// The plugin folder in use.
    pub dir: String,
    pub plugins: Vec<PluginInfo>,
    /// Files in the folder that failed to load; earlier good versions stay in `plugins`.
    #[serde(default)]
    pub errors: Vec<PluginLoadError>,
    /// The built-in redaction (not a plugin: it cannot be disabled), since the daemon started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redaction: Option<RedactionStatus>,
}

/// What redaction did since the daemon started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedactionStatus {
    /// Events that went through it (every stored event).
    pub events: u64,
    /// Events in which something was redacted.
    pub redacted: u64,
    /// Events whose content was withheld because redaction failed (each with a
    /// `plugin.error` in its session).
    pub failures: u64,
    /// Time spent redacting, in microseconds (all events).
    #[serde(default)]
    pub micros: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
}
