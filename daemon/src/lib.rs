//! The dstream daemon as a library: durable per-session event logs behind a local socket.
//!
//! Components, one job each:
//! - [`config`]: the configuration and its embedded, documented defaults;
//! - [`store`]: the logs: group-committed appends, checksummed records, the sparse index,
//!   recovery and quarantine, reads and queries;
//! - [`server`]: the local socket, the accept loop and a clean stop;
//! - `connection`, `frame`, `rpc`, `subscription`: one client's framing, method dispatch and
//!   live feeds.
//!
//! The `dstream` binary (CLI) is built on this crate and on `dstream-sdk`.

pub mod config;
mod connection;
mod follower;
mod frame;
pub mod hub;
mod rpc;
pub mod server;
pub mod store;
mod subscription;

pub use config::Config;
pub use server::run;
