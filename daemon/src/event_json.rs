//! One committed event as its JSON text: what the store reads and writes, what the hub
//! carries to readers and what the relay sends, without parsing it again. It sits below both
//! the store and the hub.
//!
//! A stored line leaves out fields it can do without (see [`CompactFields`]); every reader
//! of an [`EventJson`] gets them back, so the event a client sees is the same either way.

use std::sync::Arc;

use bytes::Bytes;

const SESSION_KEY: &[u8] = b",\"session_id\":\"";
const STREAM_KEY: &[u8] = b",\"stream_id\":\"";
const TIMESTAMP_KEY: &[u8] = b",\"timestamp\":";
const PAYLOAD_KEY: &[u8] = b",\"payload\":";

/// The fields a stored line may leave out, each when it says nothing the line and its log do
/// not already say: `session_id` when the line is in that session's own log (the log's name
/// says it; a fork's copied prefix keeps its parent's), `stream_id` when it equals the
/// `session_id` (a session that is its own lineage root, the common case), `timestamp` when it
/// equals the millisecond of the line's ULID `id` (the commit stamps both from one clock
/// reading). A line that leaves them out is still one JSON object, and still the line a
/// reader sees once they are put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactFields {
    pub session_id: bool,
    pub stream_id: bool,
    pub timestamp: bool,
}

impl CompactFields {
    /// Which fields an event with these values may leave out, written to the log of
    /// `log_session`.
    pub fn for_event(
        log_session: &str,
        session_id: &str,
        stream_id: &str,
        id: &str,
        timestamp: u64,
    ) -> Self {
        CompactFields {
            // A name that needs escaping in JSON is never left out (the refill writes it as is).
            session_id: session_id == log_session && !needs_escape(session_id),
            stream_id: stream_id == session_id,
            timestamp: ulid_ms(id.as_bytes()) == Some(timestamp),
        }
    }
}

/// Whether `s` would be written differently as a JSON string's content.
fn needs_escape(s: &str) -> bool {
    s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\')
}

/// The millisecond a ULID encodes, for exactly the ids `ulid::Ulid::from_string` takes (26
/// Crockford base-32 digits, either case): the writer and every reader must agree on which
/// lines left their timestamp out. It runs on every event read, so it decodes the 10 digits
/// of the time and only checks the other 16, where a full parse built the whole 128 bits.
fn ulid_ms(id: &[u8]) -> Option<u64> {
    let id: &[u8; 26] = id.try_into().ok()?;
    let mut ms = 0u64;
    for &c in &id[..10] {
        ms = ms << 5 | crockford(c)? as u64;
    }
    id[10..].iter().try_for_each(|&c| crockford(c).map(drop))?;
    // 10 digits hold 50 bits; a ULID's time is the low 48 of them (the top 2 overflow 128).
    Some(ms & ((1 << 48) - 1))
}

/// The value of a Crockford base-32 digit (no I, L, O or U), either case.
fn crockford(c: u8) -> Option<u8> {
    match CROCKFORD[c as usize] {
        NOT_A_DIGIT => None,
        v => Some(v),
    }
}

const NOT_A_DIGIT: u8 = 0xff;
/// Each byte's digit value, built from the alphabet at compile time.
const CROCKFORD: [u8; 256] = {
    const DIGITS: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut table = [NOT_A_DIGIT; 256];
    let mut v = 0;
    while v < 32 {
        let d = DIGITS[v];
        table[d as usize] = v as u8;
        table[d.to_ascii_lowercase() as usize] = v as u8;
        v += 1;
    }
    table
};

/// Where the left-out fields go back into a stored body, found once when it is read.
#[derive(Debug, Clone, Copy, Default)]
struct Refill {
    /// Where `,"session_id":"<the log's session>"` goes.
    session: Option<u32>,
    /// Where `,"stream_id":"<session_id>"` goes, and the session id's span in the body (`None`:
    /// the log's session, itself left out).
    stream: Option<(u32, Option<(u32, u32)>)>,
    /// Where `,"timestamp":<ms>` goes, and the value.
    timestamp: Option<(u32, u64)>,
    /// The span of the event's `type` (as stored, escapes and all), found on the way.
    kind: Option<(u32, u32)>,
}

impl Refill {
    /// Finds the fields `body` left out. A stored body begins
    /// `{"lsn":N,"id":"<ulid>","type":"…"`, then `session_id` unless it was left out, then the
    /// optional string fields (`stream_id`, `causation_id`, `correlation_id`, `actor`), then
    /// `timestamp` unless it was left out, then `payload`. The walk reads just that head, field
    /// by field (it runs on every event read, so no searching); a body of any other shape
    /// needs nothing.
    fn find(body: &[u8]) -> Refill {
        let mut refill = Refill::default();
        if Self::walk(body, &mut refill).is_none() {
            refill = Refill {
                kind: refill.kind,
                ..Refill::default()
            };
        }
        refill
    }

    fn walk(body: &[u8], refill: &mut Refill) -> Option<()> {
        let mut at = b"{\"lsn\":".len();
        at += body.get(at..)?.iter().position(|&c| c == b',')?;
        let id = string_field(body, &mut at, b",\"id\":\"")?;
        let (from, to) = string_field(body, &mut at, b",\"type\":\"")?;
        refill.kind = Some((from as u32, to as u32));
        let session = if body[at..].starts_with(SESSION_KEY) {
            let (from, to) = string_field(body, &mut at, SESSION_KEY)?;
            Some((from as u32, to as u32))
        } else {
            refill.session = Some(at as u32);
            None
        };
        if !body[at..].starts_with(STREAM_KEY) {
            refill.stream = Some((at as u32, session));
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
        Some(())
    }

    /// Writes `body` with the left-out fields back in, and its closing `}`; `session` is the
    /// log's session as JSON string content ([`LogName`]), for a body that left its own out.
    fn write(&self, body: &[u8], session: &str, out: &mut Vec<u8>) {
        let mut done = 0;
        if let Some(at) = self.session {
            let at = at as usize;
            out.extend_from_slice(&body[..at]);
            out.extend_from_slice(SESSION_KEY);
            out.extend_from_slice(session.as_bytes());
            out.push(b'"');
            done = at;
        }
        if let Some((at, span)) = self.stream {
            let at = at as usize;
            out.extend_from_slice(&body[done..at]);
            out.extend_from_slice(STREAM_KEY);
            match span {
                Some((from, to)) => out.extend_from_slice(&body[from as usize..to as usize]),
                None => out.extend_from_slice(session.as_bytes()),
            }
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

    /// Bytes the refilled fields add, `session` being the log's session ([`LogName`]).
    fn extra(&self, session: &str) -> usize {
        let own = self
            .session
            .map_or(0, |_| SESSION_KEY.len() + session.len() + 1);
        let stream = self.stream.map_or(0, |(_, span)| {
            let len = span.map_or(session.len(), |(from, to)| (to - from) as usize);
            STREAM_KEY.len() + len + 1
        });
        let timestamp = self
            .timestamp
            .map_or(0, |(_, ms)| TIMESTAMP_KEY.len() + digits(ms));
        own + stream + timestamp
    }
}

/// A log's session id as the content of a JSON string, made once for all the events read from
/// that log: what the refill writes where a line left its `session_id` out. A writer never
/// leaves out an id that needs escaping, but a log's name is not the writer's to promise.
#[derive(Debug, Clone)]
pub struct LogName(Arc<str>);

impl LogName {
    pub fn new(session: &str) -> LogName {
        if needs_escape(session) {
            let quoted = serde_json::to_string(session).expect("a str serializes");
            LogName(quoted[1..quoted.len() - 1].into())
        } else {
            LogName(session.into())
        }
    }

    /// [`LogName::new`] of a name already shared: the same allocation when it needs no
    /// escaping (the commit path publishes both).
    pub fn shared(session: &Arc<str>) -> LogName {
        if needs_escape(session) {
            LogName::new(session)
        } else {
            LogName(session.clone())
        }
    }
}

/// Decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
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
/// without the closing `}` (see [`EventJson::write_to`]), and the session whose log holds it.
#[derive(Debug, Clone)]
pub struct EventJson {
    pub lsn: u64,
    body: Bytes,
    refill: Refill,
    /// Bytes the refill adds (every reader asks for the length, some more than once).
    extra: u32,
    /// The log's session, which a body may have left out (see [`CompactFields`]).
    session: LogName,
}

impl EventJson {
    /// The stored `body` of record `lsn`, read from the log of `session`.
    pub(crate) fn new(lsn: u64, body: Bytes, session: &LogName) -> Self {
        let refill = Refill::find(&body);
        EventJson {
            lsn,
            extra: refill.extra(&session.0) as u32,
            body,
            refill,
            session: session.clone(),
        }
    }
    /// Appends the event as a complete JSON object, with every field (left out or not).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.len());
        self.refill.write(&self.body, &self.session.0, out);
    }
    /// Appends the event as a stored line's object that says its own session (for a copy into
    /// another session's log, a fork's prefix): the stored body with `session_id` put back
    /// where it was left out, the other left-out fields still left out.
    pub fn write_with_session(&self, out: &mut Vec<u8>) {
        let own = Refill {
            session: self.refill.session,
            ..Refill::default()
        };
        own.write(&self.body, &self.session.0, out);
    }
    /// A stored body (a line without its crc field) from the log of `session`, as the complete
    /// JSON object a reader gets, for the store's own look at a line's fields.
    pub(crate) fn full(body: &[u8], session: &str) -> Vec<u8> {
        let refill = Refill::find(body);
        let session = LogName::new(session);
        let mut out = Vec::with_capacity(body.len() + 1 + refill.extra(&session.0));
        refill.write(body, &session.0, &mut out);
        out
    }
    /// Size of the event's JSON in bytes, as [`EventJson::write_to`] writes it.
    pub fn len(&self) -> usize {
        self.body.len() + 1 + self.extra as usize
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Whether the event's own `type` is `event_type`. Stored events begin
    /// `{"lsn":N,"id":"<ulid>","type":"…"`: the refill's walk found it, else the first
    /// `,"type":"` is the event's.
    pub fn is_type(&self, event_type: &str) -> bool {
        if let Some((from, to)) = self.refill.kind {
            return &self.body[from as usize..to as usize] == event_type.as_bytes();
        }
        const KEY: &[u8] = b",\"type\":\"";
        static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(KEY));
        let Some(at) = FINDER.find(&self.body) else {
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
        written_in("log-session", body)
    }

    /// `body` read from the log of `session`, as a reader gets it.
    fn written_in(session: &str, body: &str) -> String {
        let e = EventJson::new(
            1,
            Bytes::copy_from_slice(body.as_bytes()),
            &LogName::new(session),
        );
        let mut out = Vec::new();
        e.write_to(&mut out);
        assert_eq!(out.len(), e.len(), "len() is what write_to writes");
        assert_eq!(out, EventJson::full(body.as_bytes(), session));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_line_that_left_its_session_out_gets_its_logs() {
        let id = ulid::Ulid::from_parts(1_795_807_198_596, 42).to_string();
        let compact = format!(r#"{{"lsn":7,"id":"{id}","type":"t","actor":"a","payload":{{}}"#);
        assert_eq!(
            written_in("s-1", &compact),
            format!(
                r#"{{"lsn":7,"id":"{id}","type":"t","session_id":"s-1","stream_id":"s-1","actor":"a","timestamp":1795807198596,"payload":{{}}}}"#
            )
        );
        // Its own stream is kept.
        let own_stream =
            format!(r#"{{"lsn":7,"id":"{id}","type":"t","stream_id":"root","payload":{{}}"#);
        assert!(
            written_in("s-1", &own_stream)
                .contains(r#""type":"t","session_id":"s-1","stream_id":"root","timestamp""#)
        );
        // A log whose name needs escaping still reads as JSON.
        let odd: serde_json::Value = serde_json::from_str(&written_in("a\"b", &compact)).unwrap();
        assert_eq!(odd["session_id"], "a\"b");
        assert_eq!(odd["stream_id"], "a\"b");
        // A copy for another log says its session and leaves the rest out.
        let e = EventJson::new(7, Bytes::from(compact.clone()), &LogName::new("s-1"));
        let mut copy = Vec::new();
        e.write_with_session(&mut copy);
        let copy = String::from_utf8(copy).unwrap();
        assert_eq!(
            copy,
            format!(
                r#"{{"lsn":7,"id":"{id}","type":"t","session_id":"s-1","actor":"a","payload":{{}}}}"#
            )
        );
        // ... and reads the same from any log.
        assert_eq!(
            written_in("child", &copy[..copy.len() - 1]),
            written_in("s-1", &compact)
        );
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
    fn an_events_type_is_its_own_not_a_payloads() {
        let is = |body: &str, t: &str| {
            EventJson::new(
                1,
                Bytes::copy_from_slice(body.as_bytes()),
                &LogName::new("s"),
            )
            .is_type(t)
        };
        let id = ulid::Ulid::from_parts(1_000, 7).to_string();
        let line = format!(r#"{{"lsn":1,"id":"{id}","type":"a.b","payload":{{"type":"c"}}"#);
        assert!(is(&line, "a.b"));
        assert!(!is(&line, "a") && !is(&line, "c") && !is(&line, "a.b.c"));
        // Another shape is searched.
        assert!(is(r#"{"lsn":1,"x":1,"type":"a.b","payload":{}"#, "a.b"));
        assert!(!is(r#"{"lsn":1,"x":1,"type":"a.bc"}"#, "a.b"));
    }

    #[test]
    fn which_fields_an_event_may_leave_out() {
        let id = ulid::Ulid::from_parts(1_000, 7).to_string();
        let all = CompactFields::for_event("s", "s", "s", &id, 1_000);
        assert!(all.session_id && all.stream_id && all.timestamp);
        let none = CompactFields::for_event("log", "s", "p", &id, 1_001);
        assert!(!none.session_id && !none.stream_id && !none.timestamp);
        assert!(!CompactFields::for_event("s", "s", "s", "not-a-ulid", 0).timestamp);
        assert!(!CompactFields::for_event("a\"b", "a\"b", "s", &id, 1_000).session_id);
        assert_eq!(ulid_ms(id.to_lowercase().as_bytes()), Some(1_000));
    }

    #[test]
    fn the_millisecond_of_an_id_is_the_ulid_crates_for_every_id_it_takes() {
        let theirs = |id: &str| ulid::Ulid::from_string(id).ok().map(|u| u.timestamp_ms());
        let mut ids: Vec<String> = (0..2000)
            .map(|i| {
                ulid::Ulid::from_parts(i * 7_919_993_611 % (1 << 48), i as u128 * 31).to_string()
            })
            .collect();
        ids.extend(ids.clone().iter().map(|i| i.to_lowercase()));
        ids.extend([
            "7ZZZZZZZZZZZZZZZZZZZZZZZZZ".into(),
            "ZZZZZZZZZZZZZZZZZZZZZZZZZZ".into(), // past 128 bits: the crate keeps the low bits
            "01M8FTM32VMAMSGQCNTB4JM7XI".into(), // I, L, O, U are not digits
            "01M8FTM32VMAMSGQCNTB4JM7XL".into(),
            "O1M8FTM32VMAMSGQCNTB4JM7XZ".into(),
            "01M8FTM32VMAMSGQCNTB4JM7XU".into(),
            "01M8FTM32VMAMSGQCNTB4JM7X".into(),
            "01M8FTM32VMAMSGQCNTB4JM7XZZ".into(),
            "01M8FTM32VMAMSGQCNTB4JM7X!".into(),
            "01m8ftm32vmamsgqcntb4jm7xz".into(),
            String::new(),
        ]);
        for id in &ids {
            assert_eq!(ulid_ms(id.as_bytes()), theirs(id), "{id}");
        }
        // Every byte in every place.
        let base = *b"01M8FTM32VMAMSGQCNTB4JM7XZ";
        for at in [0, 9, 10, 25] {
            for b in 0..=255u8 {
                let mut id = base;
                id[at] = b;
                let text = String::from_utf8_lossy(&id).into_owned();
                let want = std::str::from_utf8(&id).ok().and_then(theirs);
                assert_eq!(ulid_ms(&id), want, "{text:?}");
            }
        }
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
            r#"{{"lsn":100000,"id":"{id}","type":"bench.event","payload":{{"pad":"{pad}","seq":1}}"#
        );
        let full = format!(
            r#"{{"lsn":100000,"id":"{id}","type":"bench.event","session_id":"bench-7","stream_id":"bench-7","timestamp":1795807198596,"payload":{{"pad":"{pad}","seq":1}}"#
        );
        let session = LogName::new("bench-7");
        for (name, body) in [("compact", compact), ("full", full)] {
            let body = Bytes::from(body);
            let mut out = Vec::with_capacity(1 << 20);
            let n = 2_000_000;
            let t = std::time::Instant::now();
            for _ in 0..n {
                let e = EventJson::new(1, std::hint::black_box(body.clone()), &session);
                out.clear();
                e.write_to(&mut out);
                std::hint::black_box(&out);
            }
            let per = t.elapsed().as_nanos() as f64 / n as f64;
            let t = std::time::Instant::now();
            for _ in 0..n {
                let e = EventJson::new(1, std::hint::black_box(body.clone()), &session);
                std::hint::black_box(&e);
            }
            let new_only = t.elapsed().as_nanos() as f64 / n as f64;
            println!("{name}: new+write_to {per:.1} ns, new {new_only:.1} ns");
        }
    }
}
