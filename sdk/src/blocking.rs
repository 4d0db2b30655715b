//! A synchronous client for callers without an async runtime (scripts, the C ABI).
//!
//! It drives the async [`crate::Client`] on a private single-threaded runtime, so both share
//! one implementation of the protocol.

use std::path::Path;

use serde_json::Value;

use crate::event::NewEvent;
use crate::protocol::*;
use crate::{Error, SubscriptionItem};

pub struct Client {
    runtime: tokio::runtime::Runtime,
    inner: crate::Client,
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

impl Client {
    pub fn connect(path: impl AsRef<Path>) -> Result<Client, Error> {
        let runtime = runtime()?;
        let inner = runtime.block_on(crate::Client::connect(path))?;
        Ok(Client { runtime, inner })
    }

    /// [`crate::Client::connect_or_start`], blocking.
    pub fn connect_or_start(
        path: impl AsRef<Path>,
        dstream: Option<&Path>,
    ) -> Result<Client, Error> {
        let runtime = runtime()?;
        let inner = runtime.block_on(crate::Client::connect_or_start(path, dstream))?;
        Ok(Client { runtime, inner })
    }

    pub fn connect_default() -> Result<Client, Error> {
        Client::connect(crate::socket::default_socket_path())
    }

    pub fn call_raw(&self, method: &str, params: Value) -> Result<Value, Error> {
        self.runtime.block_on(self.inner.call_raw(method, params))
    }

    pub fn hello(&self) -> Result<HelloResult, Error> {
        self.runtime.block_on(self.inner.hello())
    }

    pub fn append(&self, session_id: &str, event: NewEvent) -> Result<AppendResult, Error> {
        self.runtime.block_on(self.inner.append(session_id, event))
    }

    pub fn read(
        &self,
        session_id: &str,
        from_lsn: u64,
        limit: Option<usize>,
    ) -> Result<ReadResult, Error> {
        self.runtime
            .block_on(self.inner.read(session_id, from_lsn, limit))
    }

    pub fn sessions(&self) -> Result<Vec<SessionInfo>, Error> {
        self.runtime.block_on(self.inner.sessions())
    }

    pub fn sessions_all(&self) -> Result<SessionsListResult, Error> {
        self.runtime.block_on(self.inner.sessions_all())
    }

    pub fn gc(&self, dry_run: bool) -> Result<GcResult, Error> {
        self.runtime.block_on(self.inner.gc(dry_run))
    }

    pub fn session(&self, session_id: &str) -> Result<SessionInfo, Error> {
        self.runtime.block_on(self.inner.session(session_id))
    }

    pub fn query(&self, params: &QueryParams) -> Result<QueryResult, Error> {
        self.runtime.block_on(self.inner.query(params))
    }

    pub fn repair(&self, session_id: &str) -> Result<RepairResult, Error> {
        self.runtime.block_on(self.inner.repair(session_id))
    }

    pub fn fork(
        &self,
        session_id: &str,
        at_lsn: u64,
        new_session_id: Option<&str>,
    ) -> Result<ForkResult, Error> {
        self.runtime
            .block_on(self.inner.fork(session_id, at_lsn, new_session_id))
    }

    pub fn stats(&self) -> Result<StatsResult, Error> {
        self.runtime.block_on(self.inner.stats())
    }

    pub fn search(&self, params: &SearchParams) -> Result<SearchResult, Error> {
        self.runtime.block_on(self.inner.search(params))
    }

    pub fn checkpoint_request(
        &self,
        params: &CheckpointRequestParams,
    ) -> Result<CheckpointInfo, Error> {
        self.runtime.block_on(self.inner.checkpoint_request(params))
    }

    pub fn checkpoint_await(
        &self,
        params: &CheckpointAwaitParams,
    ) -> Result<CheckpointInfo, Error> {
        self.runtime.block_on(self.inner.checkpoint_await(params))
    }

    pub fn checkpoint_resolve(
        &self,
        params: &CheckpointResolveParams,
    ) -> Result<CheckpointInfo, Error> {
        self.runtime.block_on(self.inner.checkpoint_resolve(params))
    }

    pub fn checkpoint_list(
        &self,
        params: &CheckpointListParams,
    ) -> Result<Vec<CheckpointInfo>, Error> {
        self.runtime.block_on(self.inner.checkpoint_list(params))
    }

    /// Subscribes; iterate the result to receive items.
    pub fn subscribe(&self, session_id: &str, from_lsn: u64) -> Result<Subscription<'_>, Error> {
        let inner = self
            .runtime
            .block_on(self.inner.subscribe(session_id, from_lsn))?;
        Ok(Subscription {
            client: self,
            inner,
        })
    }
}

/// A blocking subscription: an iterator of items that ends when the connection closes.
pub struct Subscription<'a> {
    client: &'a Client,
    inner: crate::Subscription,
}

impl Iterator for Subscription<'_> {
    type Item = Result<SubscriptionItem, Error>;
    fn next(&mut self) -> Option<Self::Item> {
        self.client.runtime.block_on(self.inner.next())
    }
}
