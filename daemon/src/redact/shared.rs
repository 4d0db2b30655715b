//! The redactor in force, shared by the store's entry point and the pipeline, replaced when
//! the configuration changes; and its counters, for `dstream plugins list`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::{Guarded, Redactor};
use crate::store::NewEventRaw;

pub struct Shared {
    current: RwLock<Arc<Redactor>>,
    events: AtomicU64,
    redacted: AtomicU64,
    failures: AtomicU64,
    last_failure: Mutex<Option<String>>,
}

/// What `plugins.list` reports of redaction.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RedactStats {
    /// Events that went through the store's entry point.
    pub events: u64,
    /// Of those, events in which something was redacted.
    pub redacted: u64,
    /// Events whose content was withheld because redaction failed.
    pub failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
}

impl Shared {
    pub fn new(redactor: Redactor) -> Arc<Shared> {
        Arc::new(Shared {
            current: RwLock::new(Arc::new(redactor)),
            events: AtomicU64::new(0),
            redacted: AtomicU64::new(0),
            failures: AtomicU64::new(0),
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
        let g = self.get().guard(event);
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

    pub fn stats(&self) -> RedactStats {
        RedactStats {
            events: self.events.load(Ordering::Relaxed),
            redacted: self.redacted.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            last_failure: self
                .last_failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
}
