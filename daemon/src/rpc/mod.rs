//! The JSON-RPC methods, one area a file: [`wire`] checks frames and encodes replies,
//! [`dispatch`] hands each request to its handler: [`sessions`] (read, query, subscribe,
//! `sessions.*`), [`append`] (`append`, `ingest`), [`checkpoints`] (`checkpoint.*`) and
//! [`admin`] (`hello`, `stats`, `repair`, `relay.*`, `plugins.*`), [`lifecycle`] (`fork`), [`retention`] (`gc`), [`search`] (`search`, `reindex`), [`web`] (the web view's API). [`caller`] is what they
//! know of the client; [`storable`] refuses JSON that readers could not parse.

mod admin;
mod append;
mod caller;
mod checkpoints;
mod dispatch;
mod lifecycle;
mod retention;
mod search;
mod sessions;
mod storable;
mod usage;
pub mod web;
mod web_sessions;
mod wire;

pub use caller::Caller;
pub use dispatch::dispatch;
pub use sessions::subscribed;
pub use wire::{Reply, error_frame, parse_request, reply_frame, salvage_id};
