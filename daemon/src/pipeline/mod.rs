//! The pipeline: a raw event from an agent's hook becomes stored, normalized events.
//!
//! **map** (the source's mapping plugin turns the raw event into zero or more events) →
//! **process** (every filter, in priority order, keeps, changes, splits or drops each; the
//! native redaction of [`crate::redact`] follows the last) → **decide** (for a requested tool call, plugins' `decide`
//! say allow, deny or ask; deny wins over ask over allow) → **append** (ids assigned here,
//! so that a tool result can name its request as its cause; then the store's one commit
//! path) → **observe** (plugins' `on_event` read the daemon-wide stream of committed events).
//!
//! The sessions are split in shards, one thread each (one per two cores, at most 4;
//! `[plugins] pipeline_threads`), by `route`; a shard handles one ingest at a time, in arrival
//! order, so the events of a session are stored in the order their hooks fired. An ingest that
//! finds its shard idle is handled in place when only built-in Rust plugins are on its way;
//! otherwise its shard's thread takes it (`shard`). Lua and native plugins run on that thread
//! when their state is free, else on their own threads (see [`crate::plugins`]), never on the
//! async workers. The
//! failure policy (ARCHITECTURE.md):
//! a failing `map` stores the raw event as `unmapped` plus a `plugin.error`; a failing
//! `process` passes the event on unchanged; a failing `decide` counts as "deny" (what cannot
//! be evaluated counts as its strictest outcome); nothing the
//! daemon accepted is dropped. The socket layer knows nothing of plugins and the store
//! nothing of agents: this module is the only place where the two meet.
//!
//! The parts, one job each (none imports from this file; each imports the siblings it uses):
//! - `ingest`: what comes in (an [`Ingest`]) and how its outcome goes back;
//! - `handle`: the [`Pipeline`] the rest of the daemon holds, `route` which shard an ingest
//!   goes to, `shard` who handles it (in place, or the shard's thread); `start` starts the
//!   threads and the observer, `settings` + `reload` are what it
//!   runs under and how that is replaced;
//! - `map_stage`: one ingest at a time (queued ones from a `fair` queue), through `map`;
//! - `worker`: then each mapped ingest through `filter` → `verdict` (with `decide`) →
//!   `append` (with `joins`);
//! - `draft` + `normalize`: the events on their way, and checking what plugins emit;
//! - `observe`: the `on_event` plugins' view of the committed stream.

mod append;
mod decide;
mod draft;
mod fair;
mod filter;
mod handle;
mod ingest;
pub mod joins;
mod map;
mod map_stage;
mod normalize;
mod observe;
mod reload;
mod route;
mod settings;
mod shard;
mod start;
mod verdict;
mod worker;

pub use handle::Pipeline;
pub use ingest::{Done, Ingest, IngestError, Spooled, check_ingest};
