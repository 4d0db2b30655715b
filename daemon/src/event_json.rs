//! One committed event as its JSON text: what the store reads and writes, what the hub
//! carries to readers and what the relay sends, without parsing it again. It sits below both
//! the store and the hub.

use bytes::Bytes;

/// One committed event as subscribers receive it: the stored JSON without its crc field and
/// without the closing `}` (see [`EventJson::write_to`]).
#[derive(Debug, Clone)]
pub struct EventJson {
    pub lsn: u64,
    body: Bytes,
}

impl EventJson {
    pub(crate) fn new(lsn: u64, body: Bytes) -> Self {
        EventJson { lsn, body }
    }
    /// Appends the event as a complete JSON object.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.body);
        out.push(b'}');
    }
    /// Size of the event's JSON in bytes.
    pub fn len(&self) -> usize {
        self.body.len() + 1
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Whether the event's own `type` is `event_type`. Stored events begin
    /// `{"lsn":N,"id":"<ulid>","type":"…"`, so the first `,"type":"` is the event's.
    pub fn is_type(&self, event_type: &str) -> bool {
        const KEY: &[u8] = b",\"type\":\"";
        let Some(at) = memchr::memmem::find(&self.body, KEY) else {
            return false;
        };
        let rest = &self.body[at + KEY.len()..];
        rest.strip_prefix(event_type.as_bytes())
            .is_some_and(|r| r.first() == Some(&b'"'))
    }
}
