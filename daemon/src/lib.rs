//! The dstream daemon as a library: durable per-session event logs behind a local socket.
//!
//! Components, one job each, top-down in the order a request flows through them:
//! - [`server`]: the local socket, the accept loop and a clean stop ([`server::start`],
//!   [`server::run`], so tests can run a daemon in-process);
//! - `connection` + `frame` + `outbound`: one client's framing, its byte-bounded outbound
//!   queue, its memory charge;
//! - `rpc`: method dispatch over the shared wire types of `dstream-sdk`; `ingest` hands raw
//!   events to the pipeline;
//! - [`store`]: the logs: one commit thread and a shared write-ahead log for all sessions,
//!   checksummed records, the sparse index, recovery, quarantine and repair, reads and queries;
//! - [`hub`]: the daemon-wide stream of committed events, bounded in bytes;
//! - `follower` + `subscription`: catch up from the logs, then live from the hub, gap-free;
//! - [`pipeline`]: raw agent events → map → process → decide → append → observe, through
//!   [`plugins`] (sandboxed Lua, each on its own thread);
//! - [`checkpoint`]: tool calls held until a person decides: policy, the state machine,
//!   deadlines, rebuilt from the logs at start;
//! - [`relay`]: every session mirrored exactly once to a remote Durable Streams server,
//!   caught up from the logs, with remote approvals from a signed control stream;
//! - [`watch`]: hot reload of the plugin folder and the config file;
//! - [`spool`]: events hooks wrote while no daemon ran, drained once each at start and
//!   whenever one appears; [`autostart`]: how a hook starts a daemon that is not running;
//! - [`hook`]: the hook agents run per event (`dstream hook`, and the lean `dstream-hook`
//!   binary, which links only it);
//! - `search`: full-text search over every session, an SQLite FTS5 index derived from the
//!   logs, filled by its own thread;
//! - [`state`]: what all of them share (config, store, hub, counters, memory budget);
//! - [`budget`]: `[[budgets]]`, sums of what agents spent, and the brake on tool calls;
//! - [`config`]: the configuration and its embedded, documented defaults.
//!
//! The `dstream` binary (CLI) and `dstream-hook` are built on this crate and on `dstream-sdk`.

mod agent_procs;
pub mod autostart;
pub mod budget;
pub(crate) mod checkpoint;
pub mod claude_reply;
mod compaction;
pub(crate) mod component;
pub mod config;
pub(crate) mod config_feed;
mod connection;
pub(crate) mod event_id;
pub(crate) mod event_json;
pub(crate) mod event_types;
mod follower;
mod frame;
pub mod hook;
pub mod http;
pub(crate) mod hub;
mod jsonscan;
pub mod lossy_json;
mod outbound;
pub(crate) mod pipeline;
pub(crate) mod plugins;
pub(crate) mod redact;
pub(crate) mod relay;
pub(crate) mod retention;
mod rpc;
pub mod search;
pub mod server;
mod slots;
pub mod spool;
pub mod state;
pub mod store;
mod subscription;
mod tool_request;
pub mod usage;
pub mod util;
pub mod vfs;
pub(crate) mod watch;

pub use checkpoint::default_options;
pub use config::Config;
pub use plugins::isolated::host_main as plugin_host_main;
pub use plugins::{PluginSet, PluginSettings};
