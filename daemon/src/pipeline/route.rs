//! Which pipeline thread takes an ingest: the one its session hashes to, so each session's
//! ingests are handled one at a time in arrival order (their events stored in the order their
//! hooks fired, a result joined on the thread that saw its request) while different sessions
//! are mapped, filtered and decided side by side.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::draft::fallback_session_with;

/// The most pipeline threads chosen from the cores: each keeps its own join memory and
/// allocator arena, and past a few the commit thread, not the pipeline, sets the pace.
const MAX_AUTO_THREADS: usize = 4;
/// The most pipeline threads a configuration may ask for.
const MAX_THREADS: usize = 64;

/// How many pipeline threads to run: `configured` (`[plugins] pipeline_threads`), or for 0
/// one per two cores, at most [`MAX_AUTO_THREADS`]. On 2 cores that is one: a second measured
/// no faster there (C=16 ingest over 16 sessions, three alternated pairs: 36.3/33.7/35.5k
/// events/s with one, 33.4/34.9/34.1k with two), and its stack and arena cost idle memory.
pub(super) fn thread_count(configured: usize) -> usize {
    match configured {
        0 => (std::thread::available_parallelism().map_or(1, |n| n.get()) / 2)
            .clamp(1, MAX_AUTO_THREADS),
        n => n.min(MAX_THREADS),
    }
}

/// The thread (of `threads`) for an ingest. The key is the session its events fall back to
/// (`draft::fallback_session`: the hint the client gave if valid, else the raw event's own
/// `session_id` if valid, else one per source), so a session's ingests meet on one thread
/// whether or not their client named it.
pub(super) fn shard(threads: usize, source: &str, hint: Option<&str>, raw: &RawValue) -> usize {
    if threads <= 1 {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    fallback_session_with(source, hint, || own_session(raw)).hash(&mut h);
    (h.finish() % threads as u64) as usize
}

/// The raw event's top-level `session_id`, if it is a string (read without building the event).
fn own_session(raw: &RawValue) -> Option<Cow<'_, str>> {
    #[derive(Deserialize)]
    struct Top<'a> {
        #[serde(borrow, default)]
        session_id: Option<Cow<'a, str>>,
    }
    serde_json::from_str::<Top>(raw.get()).ok()?.session_id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_string()).unwrap()
    }

    #[test]
    fn a_session_meets_on_one_thread_whether_or_not_its_client_named_it() {
        for n in 0..64 {
            let id = format!("session-{n}");
            let event = raw(&format!(r#"{{"hook":"x","session_id":"{id}","n":[1,2]}}"#));
            let named = shard(4, "claude-code", Some(&id), &raw("{}"));
            assert_eq!(shard(4, "claude-code", None, &event), named, "{id}");
            // A hint that is not a valid session id is ignored, as the mapping ignores it.
            assert_eq!(shard(4, "claude-code", Some("bad id!"), &event), named);
        }
    }

    #[test]
    fn sessions_spread_over_the_threads_and_one_thread_takes_everything() {
        let mut seen = [0usize; 4];
        for n in 0..400 {
            seen[shard(4, "s", Some(&format!("session-{n}")), &raw("{}"))] += 1;
        }
        assert!(seen.iter().all(|&c| c > 50), "{seen:?}");
        assert_eq!(shard(1, "s", Some("session-1"), &raw("{}")), 0);
    }

    #[test]
    fn the_configured_count_wins_and_0_follows_the_cores() {
        assert_eq!(thread_count(3), 3);
        assert_eq!(thread_count(1000), MAX_THREADS);
        let auto = thread_count(0);
        assert!((1..=MAX_AUTO_THREADS).contains(&auto), "{auto}");
    }

    #[test]
    fn events_without_a_session_go_where_their_source_falls_back_to() {
        let a = shard(4, "otlp", None, &raw(r#"{"resource":{}}"#));
        for other in [
            r#"[1,2]"#,
            r#"{"session_id":7}"#,
            r#"{"session_id":"bad id!"}"#,
            "\"x\"",
        ] {
            assert_eq!(shard(4, "otlp", None, &raw(other)), a, "{other}");
        }
    }
}
