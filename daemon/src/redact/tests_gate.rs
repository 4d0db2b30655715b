//! Tests of the pre-checks (the field scan and the text gate): they may only ever skip what
//! the full walk would leave unchanged, so the redactor finds exactly what it would without
//! them, on the corpus and on the captured agent payloads.

use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Value, json};

use super::gate::{FOLDS_TO_ASCII, Needles};
use super::keys::SecretKeys;
use super::redactor::Verdict;
use super::rules::{Rules, builtin, spec};
use super::tests::cases;
use super::{RedactConfig, Redactor};
use crate::store::NewEventRaw;

fn redactor() -> Redactor {
    Redactor::new(&RedactConfig::default()).unwrap()
}

/// The same rules with both pre-checks off: a user pattern that matches nothing makes every
/// field walked and every string go through the regex set.
fn unfiltered() -> Redactor {
    Redactor::new(&RedactConfig {
        extra_patterns: vec![r"[^\s\S]".into()],
        ..RedactConfig::default()
    })
    .unwrap()
}

/// Every captured agent payload (tests/fixtures/<agent>/*.jsonl), one JSON text each.
fn captured() -> Vec<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures");
    let mut out = Vec::new();
    for agent in ["claude-code", "opencode", "claude-agent-sdk"] {
        let mut files: Vec<_> = std::fs::read_dir(format!("{root}/{agent}"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(f).unwrap();
            out.extend(
                text.lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(String::from),
            );
        }
    }
    assert!(out.len() > 100, "the captured payloads are loaded");
    out
}

/// Every string in `v`, keys included.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|i| strings(i, out)),
        Value::Object(m) => {
            for (k, i) in m {
                out.push(k.clone());
                strings(i, out);
            }
        }
        _ => {}
    }
}

/// Texts to check the gate on: the corpus in every position, every string of the captured
/// payloads and the payloads' own text, and near misses.
fn texts() -> Vec<String> {
    let mut out: Vec<String> = cases().into_iter().map(|(_, t)| t).collect();
    for line in captured() {
        strings(&serde_json::from_str(&line).unwrap(), &mut out);
        out.push(line);
    }
    out.extend(
        [
            "p-a-s-s-w-o-r-d=FAKEsep",
            "\\nPASSWORD=FAKEesc",
            "x.\\\"DB_PASSWORD\\\"  :\tFAKEq",
            "--paſſword FAKElongs",
            "--api-\u{212A}ey=FAKEkelvin",
            "AUTHORIZATION=Bearer FAKEbearer0123456789",
            "tool --db-Pass FAKEflag",
            "1PASSWORD=FAKEdigit",
            "--api-key=FAKEflag1",
            "-Token\tFAKEflag2",
            "x\u{a0}--password FAKEflag3",
            "--password\u{2003}FAKEflag4",
            "--my_db-SECRET-KEY FAKEflag5",
            "curl --user=me:FAKEuser https://x.test",
        ]
        .map(String::from),
    );
    out
}

#[test]
fn each_rule_s_needles_are_in_every_text_it_matches() {
    let keys = SecretKeys::new(&RedactConfig::default().secret_keys);
    let texts = texts();
    for spec in builtin() {
        let needles = spec.needles;
        let pattern = spec.pattern().to_string();
        let one = Rules::from_specs(vec![spec]).unwrap();
        for t in &texts {
            if one.redact_ungated(t, &keys, "[R]").is_some() {
                assert!(one.gate().may_match(t, &keys), "{pattern} matches {t:?}");
            }
        }
        // The needles are what the gate looks for: a rule without any would pass all.
        assert!(!matches!(needles, Needles::Any), "{pattern}");
    }
}

#[test]
fn case_insensitive_needles_know_every_non_ascii_fold() {
    // `(?i)` as the rules use it: which non-ASCII characters match an ASCII letter.
    let re = regex::Regex::new("(?i)^[a-z]$").unwrap();
    let mut buf = [0u8; 4];
    let folds: Vec<char> = (0x80..=0x10FFFF)
        .filter_map(char::from_u32)
        .filter(|c| re.is_match(c.encode_utf8(&mut buf)))
        .collect();
    let known: Vec<char> = FOLDS_TO_ASCII
        .iter()
        .map(|s| s.chars().next().unwrap())
        .collect();
    assert_eq!(folds, known);
}

#[test]
fn the_pre_checks_change_no_result() {
    let (r, all) = (redactor(), unfiltered());
    let mut checked = 0;
    let mut clean = 0;
    let wrap = |v: Value| -> Box<RawValue> { to_raw_value(&v).unwrap() };
    let mut payloads: Vec<Box<RawValue>> = captured()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (_, text) in cases() {
        payloads.push(wrap(json!({"command": text})));
        payloads.push(wrap(json!({"r": json!({"d": text}).to_string()})));
        payloads.push(wrap(json!([format!("log: {}", json!({"msg": text}))])));
    }
    for payload in payloads {
        let event = |p: &RawValue| NewEventRaw {
            event_type: "x".into(),
            payload: Some(p.to_owned()),
            raw: Some(p.to_owned()),
            ..Default::default()
        };
        let (a, b) = (r.guard(event(&payload)), all.guard(event(&payload)));
        let text = |g: &super::event::Guarded| {
            (
                g.redactions,
                g.event.payload.as_ref().map(|p| p.get().to_string()),
                g.event.raw.as_ref().map(|p| p.get().to_string()),
                g.event.metadata.as_ref().map(|p| p.get().to_string()),
                g.error.is_some(),
            )
        };
        assert_eq!(text(&a), text(&b), "{}", payload.get());
        checked += 1;
        clean += usize::from(r.scan(payload.get(), 0) == Verdict::Clean);
    }
    // Most captured payloads hold nothing that can be a secret: they skip the walk.
    assert!(checked > 500 && clean > 300, "{clean} of {checked} clean");
}

#[test]
fn escaped_and_unicode_keys_are_read_as_the_walk_reads_them() {
    let r = redactor();
    // A Kelvin sign lowercases to `k`: this key is `apikey`, escaped or not.
    for raw in [
        r#"{"api\u212Aey":"FAKEkelvin"}"#,
        "{\"api\u{212A}ey\":\"FAKEkelvin\"}",
        r#"{"pass\u0077ord":"FAKEescaped"}"#,
        r#"{"t":"{\"a\":{\"token\":\"FAKEnested\"}}"}"#,
    ] {
        let payload: Box<RawValue> = serde_json::from_str(raw).unwrap();
        let g = r.guard(NewEventRaw {
            event_type: "x".into(),
            payload: Some(payload),
            ..Default::default()
        });
        let stored = g.event.payload.unwrap().get().to_string();
        assert!(!stored.contains("FAKE"), "{raw} stored as {stored}");
        assert_eq!(g.redactions, 1, "{raw}");
    }
}

#[test]
fn the_scan_reads_what_the_walk_reads_and_fails_where_it_fails() {
    let r = redactor();
    assert_eq!(r.scan(r#"{"a":[1,2.5,null,true,"x"]}"#, 0), Verdict::Clean);
    assert_eq!(r.scan(r#"{"password":""}"#, 0), Verdict::Clean);
    assert_eq!(r.scan(r#"{"password":"[REDACTED]"}"#, 0), Verdict::Clean);
    assert_eq!(r.scan(r#"{"password":{"a":["x"]}}"#, 0), Verdict::Maybe);
    assert_eq!(r.scan(r#"{"n":1e400}"#, 0), Verdict::Unreadable);
    assert_eq!(r.scan(r#""\ud800""#, 0), Verdict::Unreadable);
    assert_eq!(r.scan("{\"a\":1} x", 0), Verdict::Unreadable);
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    assert_eq!(r.scan(&deep, 0), Verdict::Unreadable);
    // JSON in a string that does not parse is text to the walk, and to the scan.
    assert_eq!(
        r.scan(r#"{"t":"{ not json PASSWORD=FAKEx"}"#, 0),
        Verdict::Maybe
    );
    // An unreadable field is still withheld when it may hold a secret, and kept when not.
    assert!(r.candidate(r#"{"n":1e400,"password":"FAKE"}"#));
    assert!(!r.candidate(r#"{"n":1e400,"ok":"fine"}"#));
}

#[test]
fn any_case_words_are_found_whatever_piece_they_share() {
    let keys = SecretKeys::new(&[]);
    let shared = Rules::from_specs(vec![spec(
        "(?i)bearer|referrer",
        Needles::AnyCase(&[("bearer", "rer"), ("referrer", "rer")]),
    )])
    .unwrap();
    assert!(shared.gate().may_match("a ReFeRrEr here", &keys));
    assert!(shared.gate().may_match("BEARER", &keys));
    assert!(!shared.gate().may_match("a rer and a bear", &keys));
    // Pieces of different lengths could hide each other: such a gate lets everything by.
    let uneven = Rules::from_specs(vec![spec(
        "(?i)bearer|token",
        Needles::AnyCase(&[("bearer", "rer"), ("token", "ok")]),
    )])
    .unwrap();
    assert!(uneven.gate().may_match("nothing", &keys));
}

#[test]
fn the_gate_lets_ordinary_text_pass_by() {
    let r = redactor();
    for t in [
        "ls -la /tmp",
        "/tmp/home/.claude/projects/-tmp-project/713d29a2.jsonl",
        "Run a harmless test command",
        "hello-from-dstream\n",
        "The task is done: 3 files changed",
        "ls: cannot access '/nonexistent-dstream-dir': No such file or directory",
        "API Error: 500 mock model: internal error",
        "workflow-authoring",
        "tokens",
        "ls -la --author x",
    ] {
        assert!(!r.rules.gate().may_match(t, &r.keys), "{t}");
    }
}

#[test]
fn secret_keys_are_normalized_the_same_on_and_off_the_stack() {
    let keys = SecretKeys::new(&RedactConfig::default().secret_keys);
    let long = "x".repeat(100);
    for (k, secret) in [
        ("DB_Password2", true),
        ("apiKey", true),
        ("api-key.9", true),
        ("apiKeySource", false),
        ("max_tokens", false),
        ("input_tokens", false),
        ("ÄPI_TOKEN", true),
        ("api\u{212A}ey", true),
        (&format!("{long}_password"), true),
        (&format!("{long}_passwords"), false),
        ("", false),
    ] {
        assert_eq!(keys.is_secret_key(k), secret, "{k}");
    }
    assert!(keys.is_secret_assignment("STRIPE_KEY"));
    assert!(!keys.is_secret_assignment("stripe_key"));
    assert!(keys.is_secret_assignment("AWS_SECRET_ACCESS_KEY_ID"));
    assert!(keys.may_end_in_secret_assignment(b"nPASSWORD"));
    // Names shorter than the quick checks' two or three letters are compared in full.
    let short = SecretKeys::new(&["pw".into(), "x".into()]);
    for (k, secret) in [
        ("db_pw", true),
        ("DB-PW2", true),
        ("x", true),
        ("max", true),
    ] {
        assert_eq!(short.is_secret_key(k), secret, "{k}");
    }
    assert!(!short.is_secret_key("pwd"));
}

/// `cargo test --release -p dstream-daemon --lib -- --ignored --nocapture redaction_cost`:
/// the store's entry point on every captured agent payload (as payload and raw), 20 times.
#[test]
#[ignore]
fn redaction_cost() {
    let r = redactor();
    let events: Vec<NewEventRaw> = captured()
        .iter()
        .map(|l| {
            let p: Box<RawValue> = serde_json::from_str(l).unwrap();
            NewEventRaw {
                event_type: "x".into(),
                payload: Some(p.clone()),
                raw: Some(p),
                ..Default::default()
            }
        })
        .collect();
    let t = std::time::Instant::now();
    let mut n = 0;
    for _ in 0..20 {
        for e in &events {
            n += std::hint::black_box(r.guard(e.clone())).redactions;
        }
    }
    let calls = 20 * events.len();
    println!(
        "redaction_cost: {calls} events, {:.2} µs/event, {n} redactions",
        t.elapsed().as_secs_f64() * 1e6 / calls as f64
    );
}
