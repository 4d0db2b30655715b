//! Client-side building blocks for dstream, the local event-log daemon for coding agents.
//!
//! - [`event`]: the stored event envelope ([`Event`]) and what a client sends to append one
//!   ([`NewEvent`]), plus the session-id rules shared with the daemon.
//! - [`protocol`]: the JSON-RPC 2.0 wire types, method names, parameters and results, and error
//!   codes.
//! - [`Client`]: an async (tokio) client over the daemon's local socket.
//! - [`blocking::Client`]: the same API for synchronous callers.
//! - [`socket`]: where the daemon's socket lives by default.
//! - [`autostart`]: starting a daemon when none answers, for callers that ask for it.
//!
//! The repository's README describes the daemon, its configuration and the protocol.
//!
//! ```no_run
//! # async fn demo() -> Result<(), dstream_sdk::Error> {
//! use dstream_sdk::{Client, NewEvent};
//! let client = Client::connect_default().await?;
//! let ack = client.append("my-session", NewEvent::new("user.input")).await?;
//! let page = client.read("my-session", 1, None).await?;
//! assert_eq!(page.events.last().map(|e| e.lsn), Some(ack.lsn));
//! # Ok(()) }
//! ```

pub mod autostart;
pub mod blocking;
mod client;
pub mod event;
pub mod protocol;
pub mod socket;

pub use client::{Client, Error, Subscription, SubscriptionItem};
pub use event::{Event, NewEvent, SessionIdError, validate_session_id};
pub use protocol::RpcError;
