//! The redactor in force, shared by the store's entry point and the pipeline, replaced when
//! the configuration changes; and its counters, for `dstream plugins list`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use dstream_sdk::protocol::RedactionStatus;

use super::event::Guarded;
use super::redactor::Redactor;
use crate::store::NewEventRaw;

pub struct Shared {
    current: RwLock<Arc<Redactor>>,
    events: AtomicU64,
    redacted: AtomicU64,
    failures: AtomicU64,
    /// Nanoseconds spent in `guard`.
    nanos: AtomicU64,
    last_failure: Mutex<Option<String>>,
}

impl Shared {
    pub fn new(redactor: Redactor) -> Arc<Shared> {
        Arc::new(Shared {
            current: RwLock::new(Arc::new(redactor)),
            events: AtomicU64::new(0),
            redacted: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            last_failure: Mutex::new(None),
        })
    }

    pub fn get(&self) -> Arc<Redactor> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set(&self, redactor: Redactor) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(redactor);
    }

    /// The store's entry point: `event` redacted (or withheld), and counted.
    pub fn guard(&self, event: NewEventRaw) -> Guarded {
        let started = std::time::Instant::now();
        let g = self.get().guard(event);
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        self.events.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = &g.error {
            self.failures.fetch_add(1, Ordering::Relaxed);
            let why = e.payload.as_ref().map(|p| p.get().to_string());
            *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = why;
        } else if g.redactions > 0 {
            self.redacted.fetch_add(1, Ordering::Relaxed);
        }
        g
    }

    pub fn stats(&self) -> RedactionStatus {
        RedactionStatus {
            events: self.events.load(Ordering::Relaxed),
            redacted: self.redacted.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            micros: self.nanos.load(Ordering::Relaxed) / 1000,
            last_failure: self
                .last_failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
}
