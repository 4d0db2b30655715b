//! One committed event as its JSON text: what the store reads and writes, what the hub
//! carries to readers and what the relay sends, without parsing it again. It sits below both
//! the store and the hub.
//!
//! A stored line leaves out two fields it can do without (see [`CompactFields`]); every reader
//! of an [`EventJson`] gets them back, so the event a client sees is the same either way.

use bytes::Bytes;

const SESSION_KEY: &[u8] = b",\"session_id\":\"";
const STREAM_KEY: &[u8] = b",\"stream_id\":\"";
const TIMESTAMP_KEY: &[u8] = b",\"timestamp\":";
const PAYLOAD_KEY: &[u8] = b",\"payload\":";

/// The fields a stored line may leave out, each when it says nothing the line does not
/// already say: `stream_id` when it equals the line's `session_id` (a session that is its own
/// lineage root, the common case), `timestamp` when it equals the millisecond of the line's
/// ULID `id` (the commit stamps both from one clock reading). A line that leaves them out is
/// still one JSON object, and still the line a reader sees once they are put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactFields {
    pub stream_id: bool,
    pub timestamp: bool,
}

impl CompactFields {
    /// Which fields an event with these values may leave out.
    pub fn for_event(session_id: &str, stream_id: &str, id: &str, timestamp: u64) -> Self {
        CompactFields {
            stream_id: stream_id == session_id,
            timestamp: ulid_ms(id.as_bytes()) == Some(timestamp),
        }
    }
}

/// The millisecond a ULID encodes.
fn ulid_ms(id: &[u8]) -> Option<u64> {
    let id = std::str::from_utf8(id).ok()?;
    ulid::Ulid::from_string(id).ok().map(|u| u.timestamp_ms())
}

/// Where the left-out fields go back into a stored body, found once when it is read.
#[derive(Debug, Clone, Copy, Default)]
struct Refill {
    /// Where `,"stream_id":"<session_id>"` goes, and the session id's span in the body.
    stream: Option<(u32, u32, u32)>,
    /// Where `,"timestamp":<ms>` goes, and the value.
    timestamp: Option<(u32, u64)>,
}

impl Refill {
    /// Finds the fields `body` left out. A stored body begins
    /// `{"lsn":N,"id":"<ulid>","type":"…","session_id":"…"`, then the optional string fields
    /// (`stream_id`, `causation_id`, `correlation_id`, `actor`), then `timestamp` unless it
    /// was left out, then `payload`. The walk reads just that head, field by field (it runs
    /// on every event read, so no searching); a body of any other shape needs nothing.
    fn find(body: &[u8]) -> Refill {
        Self::walk(body).unwrap_or_default()
    }

    fn walk(body: &[u8]) -> Option<Refill> {
        let mut at = b"{\"lsn\":".len();
        at += body.get(at..)?.iter().position(|&c| c == b',')?;
        let id = string_field(body, &mut at, b",\"id\":\"")?;
        string_field(body, &mut at, b",\"type\":\"")?;
        let session = string_field(body, &mut at, SESSION_KEY)?;
        let mut refill = Refill::default();
        if !body[at..].starts_with(STREAM_KEY) {
            refill.stream = Some((at as u32, session.0 as u32, session.1 as u32));
        }
        for key in [
            STREAM_KEY,
            b",\"causation_id\":\"",
            b",\"correlation_id\":\"",
            b",\"actor\":\"",
        ] {
            if body[at..].starts_with(key) {
                string_field(body, &mut at, key)?;
            }
        }
        if body[at..].starts_with(PAYLOAD_KEY) {
            let ms = ulid_ms(&body[id.0..id.1])?;
            refill.timestamp = Some((at as u32, ms));
        }
        Some(refill)
    }

    /// Writes `body` with the left-out fields back in, and its closing `}`.
    fn write(&self, body: &[u8], out: &mut Vec<u8>) {
        let mut done = 0;
        if let Some((at, from, to)) = self.stream {
            let at = at as usize;
            out.extend_from_slice(&body[..at]);
            out.extend_from_slice(STREAM_KEY);
            out.extend_from_slice(&body[from as usize..to as usize]);
            out.push(b'"');
            done = at;
        }
        if let Some((at, ms)) = self.timestamp {
            let at = at as usize;
            out.extend_from_slice(&body[done..at]);
            out.extend_from_slice(TIMESTAMP_KEY);
            out.extend_from_slice(itoa_u64(ms, &mut [0; 20]));
            done = at;
        }
        out.extend_from_slice(&body[done..]);
        out.push(b'}');
    }

    /// Bytes the refilled fields add.
    fn extra(&self) -> usize {
        let stream = self.stream.map_or(0, |(_, from, to)| {
            STREAM_KEY.len() + (to - from) as usize + 1
        });
        let timestamp = self.timestamp.map_or(0, |(_, ms)| {
            TIMESTAMP_KEY.len() + itoa_u64(ms, &mut [0; 20]).len()
        });
        stream + timestamp
    }
}

/// Reads the string field `key` (which ends in its value's opening quote) at `*at`, moves
/// `*at` past it, and returns the span of its value.
fn string_field(body: &[u8], at: &mut usize, key: &[u8]) -> Option<(usize, usize)> {
    if !body.get(*at..)?.starts_with(key) {
        return None;
    }
    let start = *at + key.len();
    let end = crate::jsonscan::string_end(body, start - 1)?;
    *at = end;
    Some((start, end - 1))
}

/// `n` in decimal, written into the end of `buf`.
fn itoa_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// One committed event as subscribers receive it: the stored JSON without its crc field and
/// without the closing `}` (see [`EventJson::write_to`]).
#[derive(Debug, Clone)]
pub struct EventJson {
    pub lsn: u64,
    body: Bytes,
    refill: Refill,
}

impl EventJson {
    pub(crate) fn new(lsn: u64, body: Bytes) -> Self {
        let refill = Refill::find(&body);
        EventJson { lsn, body, refill }
    }
    /// Appends the event as a complete JSON object, with every field (left out or not).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.len());
        self.refill.write(&self.body, out);
    }
    /// A stored body (a line without its crc field) as the complete JSON object a reader
    /// gets, for the store's own look at a line's fields.
    pub(crate) fn full(body: &[u8]) -> Vec<u8> {
        let refill = Refill::find(body);
        let mut out = Vec::with_capacity(body.len() + 1 + refill.extra());
        refill.write(body, &mut out);
        out
    }
    /// Size of the event's JSON in bytes, as [`EventJson::write_to`] writes it.
    pub fn len(&self) -> usize {
        self.body.len() + 1 + self.refill.extra()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn written(body: &str) -> String {
        let e = EventJson::new(1, Bytes::copy_from_slice(body.as_bytes()));
        let mut out = Vec::new();
        e.write_to(&mut out);
        assert_eq!(out.len(), e.len(), "len() is what write_to writes");
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_full_line_is_read_as_stored() {
        let full = r#"{"lsn":1,"id":"01M8F76FC4Y1ZS9NGTK0G4PNBE","type":"t","session_id":"s","stream_id":"root","timestamp":5,"payload":{"a":1}"#;
        assert_eq!(written(full), format!("{full}}}"));
    }

    #[test]
    fn left_out_fields_come_back_where_they_were() {
        let id = ulid::Ulid::from_parts(1_795_807_198_596, 42).to_string();
        let compact = format!(
            r#"{{"lsn":7,"id":"{id}","type":"t","session_id":"s-1","actor":"a","payload":{{"timestamp":1,"payload":2}}"#
        );
        assert_eq!(
            written(&compact),
            format!(
                r#"{{"lsn":7,"id":"{id}","type":"t","session_id":"s-1","stream_id":"s-1","actor":"a","timestamp":1795807198596,"payload":{{"timestamp":1,"payload":2}}}}"#
            )
        );
        // Each field is left out on its own.
        let own_stream = format!(
            r#"{{"lsn":7,"id":"{id}","type":"t","session_id":"s","stream_id":"p","payload":{{}}"#
        );
        assert!(
            written(&own_stream).contains(r#""stream_id":"p","timestamp":1795807198596,"payload""#)
        );
        let own_ts = format!(
            r#"{{"lsn":7,"id":"{id}","type":"t","session_id":"s","timestamp":3,"payload":{{}}"#
        );
        assert!(written(&own_ts).contains(r#""session_id":"s","stream_id":"s","timestamp":3,"#));
        // Escaped quotes and backslashes in the string fields before the payload.
        let escaped = format!(
            r#"{{"lsn":7,"id":"{id}","type":"t\"","session_id":"s","causation_id":"c\\","actor":"a\",\"payload\":1","payload":{{}}"#
        );
        assert_eq!(
            written(&escaped),
            format!(
                r#"{{"lsn":7,"id":"{id}","type":"t\"","session_id":"s","stream_id":"s","causation_id":"c\\","actor":"a\",\"payload\":1","timestamp":1795807198596,"payload":{{}}}}"#
            )
        );
        // A body of another shape is left as it is.
        assert_eq!(written(r#"{"lsn":1,"x":"a""#), r#"{"lsn":1,"x":"a"}"#);
    }

    #[test]
    fn which_fields_an_event_may_leave_out() {
        let id = ulid::Ulid::from_parts(1_000, 7).to_string();
        let both = CompactFields::for_event("s", "s", &id, 1_000);
        assert!(both.stream_id && both.timestamp);
        let neither = CompactFields::for_event("s", "p", &id, 1_001);
        assert!(!neither.stream_id && !neither.timestamp);
        assert!(!CompactFields::for_event("s", "s", "not-a-ulid", 0).timestamp);
        assert_eq!(ulid_ms(id.to_lowercase().as_bytes()), Some(1_000));
    }
}

#[cfg(test)]
mod cost {
    use super::*;

    /// Not a test: `cargo test --release -p dstream-daemon --lib event_json::cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn refill_cost() {
        let id = ulid::Ulid::from_parts(1_795_807_198_596, 42).to_string();
        let pad = "x".repeat(200);
        let compact = format!(
            r#"{{"lsn":100000,"id":"{id}","type":"bench.event","session_id":"bench-7","payload":{{"pad":"{pad}","seq":1}}"#
        );
        let full = format!(
            r#"{{"lsn":100000,"id":"{id}","type":"bench.event","session_id":"bench-7","stream_id":"bench-7","timestamp":1795807198596,"payload":{{"pad":"{pad}","seq":1}}"#
        );
        for (name, body) in [("compact", compact), ("full", full)] {
            let body = Bytes::from(body);
            let mut out = Vec::with_capacity(1 << 20);
            let n = 2_000_000;
            let t = std::time::Instant::now();
            for _ in 0..n {
                let e = EventJson::new(1, std::hint::black_box(body.clone()));
                out.clear();
                e.write_to(&mut out);
                std::hint::black_box(&out);
            }
            let per = t.elapsed().as_nanos() as f64 / n as f64;
            let t = std::time::Instant::now();
            for _ in 0..n {
                let e = EventJson::new(1, std::hint::black_box(body.clone()));
                std::hint::black_box(&e);
            }
            let new_only = t.elapsed().as_nanos() as f64 / n as f64;
            println!("{name}: new+write_to {per:.1} ns, new {new_only:.1} ns");
        }
    }
}
