//! One committed event as its JSON text: what the store reads and writes, what the hub
//! carries to readers and what the relay sends, without parsing it again. It sits below both
//! the store and the hub.
//!
//! A stored line leaves out fields it can do without (see [`CompactFields`]); every reader
//! of an [`EventJson`] gets them back, so the event a client sees is the same either way.

use std::sync::Arc;

use bytes::Bytes;

use crate::event_id::{self, ulid_ms};

const ID_KEY: &[u8] = b",\"id\":\"";
/// What a line that left its id out says instead: the millisecond of its commit.
const TS_KEY: &[u8] = b",\"ts\":";
const SESSION_KEY: &[u8] = b",\"session_id\":\"";
const STREAM_KEY: &[u8] = b",\"stream_id\":\"";
const TIMESTAMP_KEY: &[u8] = b",\"timestamp\":";
const PAYLOAD_KEY: &[u8] = b",\"payload\":";

/// The fields a stored line may leave out, each when it says nothing the line and its log do
/// not already say: `session_id` when the line is in that session's own log (the log's name
/// says it; a fork's copied prefix keeps its parent's), `stream_id` when it equals the
/// `session_id` (a session that is its own lineage root, the common case), `id` when it is the
/// one the log named the event itself ([`event_id::derived`] from the session, the LSN and
/// the millisecond: the line says `"ts":<ms>` in its place), and `timestamp` when it equals
/// that millisecond (the commit stamps both from one clock reading). A line that leaves them
/// out is still one JSON object, and still the line a reader sees once they are put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactFields {
    pub session_id: bool,
    pub stream_id: bool,
    pub id: bool,
    pub timestamp: bool,
}

impl CompactFields {
    /// Which fields event `lsn` with these values may leave out, written to the log `log`.
    pub fn for_event(
        log: &LogName,
        session_id: &str,
        stream_id: &str,
        id: &str,
        lsn: u64,
        timestamp: u64,
    ) -> Self {
        // A name that needs escaping in JSON is never left out (the refill writes it as is).
        let session_left_out = *session_id == *log.name && !needs_escape(session_id);
        // Only in the session's own log, where the reader knows the seed without the line.
        let id_left_out = session_left_out
            && timestamp <= event_id::MAX_MS
            && id.as_bytes() == event_id::encode(event_id::derived(log.seed, lsn, timestamp));
        CompactFields {
            session_id: session_left_out,
            stream_id: stream_id == session_id,
            id: id_left_out,
            timestamp: id_left_out || ulid_ms(id.as_bytes()) == Some(timestamp),
        }
    }
}

/// Whether `s` would be written differently as a JSON string's content.
fn needs_escape(s: &str) -> bool {
    s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\')
}

/// Where the left-out fields go back into a stored body, found once when it is read.
#[derive(Debug, Clone, Copy, Default)]
struct Refill {
    /// The span of `,"ts":<ms>` that `,"id":"<ulid>"` replaces, and the id.
    id: Option<(u32, u32, u128)>,
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

/// What a stored body says after its LSN: its id, or the millisecond it was named at.
enum Named {
    Id((usize, usize)),
    /// The span of `,"ts":<ms>`, and the millisecond.
    At((usize, usize), u64),
}

impl Refill {
    /// Finds the fields `body`, read from the log `log`, left out. A stored body begins
    /// `{"lsn":N,"id":"<ulid>","type":"…"` (or `"ts":<ms>` in place of the id), then
    /// `session_id` unless it was left out, then the optional string fields (`stream_id`,
    /// `causation_id`, `correlation_id`, `actor`), then `timestamp` unless it was left out, then
    /// `payload`. The walk reads just that head, field by field (it runs on every event read,
    /// so no searching); a body of any other shape needs nothing.
    fn find(body: &[u8], log: &LogName) -> Refill {
        let mut refill = Refill::default();
        if Self::walk(body, log, &mut refill).is_none() {
            refill = Refill {
                kind: refill.kind,
                ..Refill::default()
            };
        }
        refill
    }

    fn walk(body: &[u8], log: &LogName, refill: &mut Refill) -> Option<()> {
        let lsn = crate::store::record::lsn_of(body)?;
        let mut at = b"{\"lsn\":".len();
        at += body[at..].iter().position(|&c| c == b',')?;
        let named = if body[at..].starts_with(TS_KEY) {
            let from = at;
            at += TS_KEY.len();
            let n = body[at..].iter().take_while(|c| c.is_ascii_digit()).count();
            let ms = decimal(&body[at..at + n]).filter(|&ms| ms <= event_id::MAX_MS)?;
            at += n;
            Named::At((from, at), ms)
        } else {
            Named::Id(string_field(body, &mut at, ID_KEY)?)
        };
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
        let ms = match named {
            Named::Id((from, to)) => ulid_ms(&body[from..to]),
            Named::At(_, ms) => Some(ms),
        };
        if body[at..].starts_with(PAYLOAD_KEY) {
            refill.timestamp = Some((at as u32, ms?));
        }
        if let Named::At((from, to), ms) = named {
            // Named by the log of the session the line says, or else by this one.
            let seed = match session {
                Some((from, to)) => event_id::seed_of_line(&body[from as usize..to as usize]),
                None => log.seed,
            };
            refill.id = Some((from as u32, to as u32, event_id::derived(seed, lsn, ms)));
        }
        Some(())
    }

    /// Writes `body` with the left-out fields back in, and its closing `}`; `session` is the
    /// log's session as JSON string content ([`LogName`]), for a body that left its own out.
    fn write(&self, body: &[u8], session: &str, out: &mut Vec<u8>) {
        let mut done = 0;
        if let Some((from, to, id)) = self.id {
            out.extend_from_slice(&body[..from as usize]);
            out.extend_from_slice(ID_KEY);
            out.extend_from_slice(&event_id::encode(id));
            out.push(b'"');
            done = to as usize;
        }
        if let Some(at) = self.session {
            let at = at as usize;
            out.extend_from_slice(&body[done..at]);
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
        // The id is longer than the `,"ts":<ms>` it replaces (at most 6 + 15 digits).
        let id = self.id.map_or(0, |(from, to, _)| {
            ID_KEY.len() + 26 + 1 - (to - from) as usize
        });
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
        id + own + stream + timestamp
    }
}

/// A log's session id as the content of a JSON string, made once for all the events read from
/// that log: what the refill writes where a line left its `session_id` out, and the seed of the
/// ids its lines left out. A writer never leaves out an id that needs escaping, but a log's
/// name is not the writer's to promise.
#[derive(Debug, Clone)]
pub struct LogName {
    name: Arc<str>,
    seed: u128,
}

impl LogName {
    pub fn new(session: &str) -> LogName {
        let name: Arc<str> = if needs_escape(session) {
            let quoted = serde_json::to_string(session).expect("a str serializes");
            quoted[1..quoted.len() - 1].into()
        } else {
            session.into()
        };
        LogName {
            seed: event_id::seed(name.as_bytes()),
            name,
        }
    }

    /// The seed of the ids this log names ([`event_id::seed`]).
    pub fn seed(&self) -> u128 {
        self.seed
    }
}

/// The value of 1 to 19 decimal digits (below `u64::MAX` whatever they are).
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0u64, |n, d| n * 10 + u64::from(d - b'0')),
    )
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
        let refill = Refill::find(&body, session);
        EventJson {
            lsn,
            extra: refill.extra(&session.name) as u32,
            body,
            refill,
            session: session.clone(),
        }
    }
    /// Appends the event as a complete JSON object, with every field (left out or not).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.len());
        self.refill.write(&self.body, &self.session.name, out);
    }
    /// Appends the event as a stored line's object that says its own session (for a copy into
    /// another session's log, a fork's prefix): the stored body with `session_id` put back
    /// where it was left out, the other left-out fields still left out.
    pub fn write_with_session(&self, out: &mut Vec<u8>) {
        let own = Refill {
            session: self.refill.session,
            ..Refill::default()
        };
        own.write(&self.body, &self.session.name, out);
    }
    /// A stored body (a line without its crc field) from the log of `session`, as the complete
    /// JSON object a reader gets, for the store's own look at a line's fields.
    pub(crate) fn full(body: &[u8], session: &str) -> Vec<u8> {
        let session = LogName::new(session);
        let refill = Refill::find(body, &session);
        let mut out = Vec::with_capacity(body.len() + 1 + refill.extra(&session.name));
        refill.write(body, &session.name, &mut out);
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
    /// `{"lsn":N,"id":"<ulid>","type":"…"` (or `"ts":<ms>` for the id): the refill's walk found it, else the first
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

    /// `body` from the log of `session`, as a copy for another log writes it.
    fn copied_from(session: &str, body: &str) -> String {
        let e = EventJson::new(
            7,
            Bytes::copy_from_slice(body.as_bytes()),
            &LogName::new(session),
        );
        let mut copy = Vec::new();
        e.write_with_session(&mut copy);
        String::from_utf8(copy).unwrap()
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
        let copy = copied_from("s-1", &compact);
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
        let s = LogName::new("s");
        let id = ulid::Ulid::from_parts(1_000, 7).to_string();
        let all = CompactFields::for_event(&s, "s", "s", &id, 3, 1_000);
        assert!(all.session_id && all.stream_id && all.timestamp && !all.id);
        let none = CompactFields::for_event(&LogName::new("log"), "s", "p", &id, 3, 1_001);
        assert!(!none.session_id && !none.stream_id && !none.timestamp && !none.id);
        assert!(!CompactFields::for_event(&s, "s", "s", "not-a-ulid", 3, 0).timestamp);
        let odd = LogName::new("a\"b");
        assert!(!CompactFields::for_event(&odd, "a\"b", "s", &id, 3, 1_000).session_id);
        assert_eq!(ulid_ms(id.to_lowercase().as_bytes()), Some(1_000));
        // The id the log names itself, and only that one, at that LSN and millisecond.
        let own = event_id::text(event_id::derived(s.seed(), 3, 1_000));
        let named = CompactFields::for_event(&s, "s", "s", &own, 3, 1_000);
        assert!(named.id && named.timestamp && named.session_id);
        assert!(!CompactFields::for_event(&s, "s", "s", &own, 4, 1_000).id);
        assert!(!CompactFields::for_event(&s, "s", "s", &own, 3, 1_001).id);
        // Only in its own log: elsewhere the reader could not know the seed from the log.
        assert!(!CompactFields::for_event(&LogName::new("log"), "s", "s", &own, 3, 1_000).id);
        assert!(!CompactFields::for_event(&s, "s", "s", &own.to_lowercase(), 3, 1_000).id);
    }

    #[test]
    fn a_line_that_left_its_id_out_gets_the_one_its_log_named() {
        let ms = 1_795_807_198_596u64;
        let id = event_id::text(event_id::derived(LogName::new("s-1").seed(), 7, ms));
        let compact = format!(r#"{{"lsn":7,"ts":{ms},"type":"t","actor":"a","payload":{{}}"#);
        assert_eq!(
            written_in("s-1", &compact),
            format!(
                r#"{{"lsn":7,"id":"{id}","type":"t","session_id":"s-1","stream_id":"s-1","actor":"a","timestamp":{ms},"payload":{{}}}}"#
            )
        );
        // Another log names other ids.
        assert!(!written_in("s-2", &compact).contains(&id));
        // A copy for another log (a fork's prefix) says its session, so it keeps its id.
        let copy = copied_from("s-1", &compact);
        assert_eq!(
            copy,
            format!(
                r#"{{"lsn":7,"ts":{ms},"type":"t","session_id":"s-1","actor":"a","payload":{{}}}}"#
            )
        );
        assert_eq!(
            written_in("child", &copy[..copy.len() - 1]),
            written_in("s-1", &compact)
        );
        // A line that says its own timestamp keeps it.
        let own_ts = format!(r#"{{"lsn":7,"ts":{ms},"type":"t","timestamp":3,"payload":{{}}"#);
        assert!(written_in("s-1", &own_ts).contains(&format!(r#""id":"{id}""#)));
        assert!(written_in("s-1", &own_ts).contains(r#""timestamp":3,"payload""#));
        // A millisecond past a ULID's, or not a number, is read as stored.
        for odd in [
            r#"{"lsn":7,"ts":281474976710656,"type":"t","payload":{}"#,
            r#"{"lsn":7,"ts":99999999999999999999,"type":"t","payload":{}"#,
            r#"{"lsn":7,"ts":"1","type":"t","payload":{}"#,
            r#"{"lsn":7,"ts":,"type":"t","payload":{}"#,
            r#"{"lsn":x,"ts":1,"type":"t","payload":{}"#,
        ] {
            assert_eq!(written(odd), format!("{odd}}}"));
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
        let named = format!(
            r#"{{"lsn":100000,"ts":1795807198596,"type":"bench.event","payload":{{"pad":"{pad}","seq":1}}"#
        );
        for (name, body) in [("named", named), ("compact", compact), ("full", full)] {
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
