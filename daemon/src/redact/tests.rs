//! Unit tests of the redactor, over the fake secrets of `tests/fixtures/secrets.txt`.

use std::time::Instant;

use serde_json::{Value, json};

use super::{RedactConfig, Redactor};

const CORPUS: &str = include_str!("../../../tests/fixtures/secrets.txt");

fn redactor() -> Redactor {
    Redactor::new(&RedactConfig::default()).unwrap()
}

/// (probe that must not survive, text that holds it) for every corpus line in every place.
pub(super) fn cases() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in CORPUS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = line.split_once(' ').unwrap();
        if name == "context" {
            let (probe, text) = rest.split_once(' ').unwrap();
            let text = text.replace("\\n", "\n");
            for t in [
                text.clone(),
                format!("output:\n{text}\nmore"),
                format!("\t{text}"),
                format!("PORT=1\nTHE_VALUE={text}\n"),
                format!("config:\n  value: {text}\n"),
                format!("tool --flag {text} --other"),
                format!("https://example.test/cb?code={text}&x=1"),
            ] {
                out.push((probe.to_string(), t));
            }
            continue;
        }
        let s = rest;
        for t in [
            s.to_string(),
            format!("\n{s}"),
            format!("line one\n{s}\nline three"),
            format!("\t{s}\r\n"),
            format!("echo {s} > /tmp/x"),
            format!("X=1\nTHE_THING={s}\n"),
            format!("export GENERIC=\"{s}\""),
            format!("value: {s}"),
            format!("\"{s}\""),
            format!("'{s}'"),
            format!("({s})"),
            format!("literal escapes\\n{s}\\t"),
            format!("https://example.test/?q={s}&x=1"),
            format!("PORT=1\nTHE_VALUE={s}\n"),
            format!("config:\n  value: {s}\n"),
            format!("tool --flag {s} --other"),
        ] {
            out.push((s.to_string(), t));
        }
    }
    out
}

fn check(r: &Redactor, v: &Value, probe: &str, what: &str) {
    let mut v = v.clone();
    let n = r.redact_value(&mut v);
    let text = v.to_string();
    assert!(
        !text.contains(probe),
        "{what}: {probe:?} survived in {text}"
    );
    assert!(n > 0, "{what}: nothing counted");
    assert!(text.contains("[REDACTED]"), "{what}: {text}");
}

#[test]
fn every_secret_in_every_position_is_redacted() {
    let r = redactor();
    for (probe, text) in cases() {
        check(&r, &json!(text), &probe, "a string");
        check(
            &r,
            &json!({"tool_input": {"command": text}}),
            &probe,
            "in an object",
        );
        check(&r, &json!([1, {"out": [text]}]), &probe, "in an array");
        // JSON inside a string (an MCP result), and inside that again.
        let once =
            json!({"content": [{"type": "text", "text": json!({"result": text}).to_string()}]});
        check(&r, &once, &probe, "in JSON inside a string");
        let twice =
            json!({"text": json!({"inner": json!({"deep": text}).to_string()}).to_string()});
        check(&r, &twice, &probe, "in JSON inside JSON inside a string");
        // Text that is not JSON by itself but holds JSON-escaped text.
        let escaped = format!("log: {}", json!({"msg": text}));
        check(&r, &json!(escaped), &probe, "JSON-escaped inside text");
    }
}

#[test]
fn the_pre_check_sees_every_secret_in_json_text() {
    let r = redactor();
    for (probe, text) in cases() {
        for v in [json!(text), json!({"a": json!({"b": text}).to_string()})] {
            assert!(
                r.candidate(&v.to_string()),
                "pre-check missed {probe:?} in {v}"
            );
        }
    }
    // An escape cannot hide a token from it.
    assert!(r.candidate(r#""\u0067hp_FAKE0123456789abcdefghijklmnopqrstuv""#));
    assert!(!r.candidate(r#"{"tool":"Bash","input":{"command":"ls -la /tmp"},"cwd":"/w"}"#));
}

#[test]
fn values_of_secret_keys_are_redacted_whatever_they_hold() {
    let r = redactor();
    let mut v = json!({
        "password": "hunter 2 with spaces",
        "password2": "x1",
        "db_password": "x2",
        "apiKey": "x3",
        "API_KEY": "x4",
        "client-secret": "x5",
        "Authorization": "Basic abc",
        "credentials": {"user": "u", "pass": "x6"},
        "apiKeySource": "env",
        "max_tokens": 100,
        "input_tokens": "12",
        "password_hint": "a pet",
        "empty_token": "",
        "backslash_password": "a\\",
    });
    let n = r.redact_value(&mut v);
    assert_eq!(v["password"], "[REDACTED]");
    for k in [
        "password2",
        "db_password",
        "apiKey",
        "API_KEY",
        "client-secret",
        "Authorization",
        "backslash_password",
    ] {
        assert_eq!(v[k], "[REDACTED]", "{k}");
    }
    assert_eq!(
        v["credentials"],
        json!({"user": "[REDACTED]", "pass": "[REDACTED]"})
    );
    assert_eq!(v["apiKeySource"], "env");
    assert_eq!(v["max_tokens"], 100);
    assert_eq!(v["input_tokens"], "12");
    assert_eq!(v["password_hint"], "a pet");
    assert_eq!(v["empty_token"], "");
    assert_eq!(n, 10);
    // Redacting again changes nothing.
    assert_eq!(r.redact_value(&mut v), 0);
}

#[test]
fn ordinary_content_is_left_alone() {
    let r = redactor();
    let texts = [
        "max_tokens=100 temperature=0.5",
        "fn main() { let key = map.get(&id); }",
        "see https://docs.example.test/a/b?x=1 and mail me@example.test",
        "task-0123456789abcdefghijklmnop done",
        "commit 0123456789abcdef0123456789abcdef01234567",
        "toolu_01ABCDEFGHIJKLMNOPQRSTUV and 550e8400-e29b-41d4-a716-446655440000",
        "ssh -p 2222 host; mkdir -p /tmp/x; docker run -p8080:80 img",
        "The author: Jane, status: passed, bypass: none",
        "Authorization is required",
    ];
    for t in texts {
        let mut v = json!(t);
        assert_eq!(r.redact_value(&mut v), 0, "{t} became {v}");
    }
}

#[test]
fn keys_and_headers_keep_their_context() {
    let r = redactor();
    let mut v = json!([
        "postgres://app:FAKEpw@db.example.test:5432/app",
        "Authorization: Bearer FAKEbearer0123456789abcdef",
        "curl -u admin:FAKEpw https://x.test",
        "PASSWORD=FAKEpw\nPORT=1",
        "X=DB_PASSWORD=FAKEpw\nvalue: TOKEN=FAKEpw",
        "export API_SECRET=\"FAKE pw cut sho…",
        r#"log: {"msg":"Authorization: Bearer FAKEbearer0123\nexport API_SECRET=\"FAKE a b\"\n"}"#,
    ]);
    r.redact_value(&mut v);
    assert_eq!(v[0], "postgres://app:[REDACTED]@db.example.test:5432/app");
    assert_eq!(v[1], "Authorization: Bearer [REDACTED]");
    assert_eq!(v[2], "curl -u admin:[REDACTED] https://x.test");
    assert_eq!(v[3], "PASSWORD=[REDACTED]\nPORT=1");
    assert_eq!(v[4], "X=DB_PASSWORD=[REDACTED]\nvalue: TOKEN=[REDACTED]");
    assert_eq!(v[5], "export API_SECRET=\"[REDACTED]");
    // In JSON-escaped text a header's token ends at the `\n`; the next line is its own.
    assert_eq!(
        v[6],
        r#"log: {"msg":"Authorization: Bearer [REDACTED]\nexport API_SECRET=\"[REDACTED]\"\n"}"#
    );
}

#[test]
fn hostile_inputs_take_linear_time_and_are_redacted() {
    let r = redactor();
    // 54 KB of BEGIN without END: everything from the first BEGIN on is withheld.
    let begins = "-----BEGIN PRIVATE KEY-----".repeat(2000);
    let mut v = json!({"input": format!("head {begins}")});
    let t = Instant::now();
    assert!(r.redact_value(&mut v) > 0);
    assert_eq!(v["input"], "head [REDACTED]");
    assert!(t.elapsed().as_millis() < 2000, "{:?}", t.elapsed());

    // 2 MB of output with secrets spread through it.
    let mut big = String::new();
    let mut lines = 0;
    while big.len() < 2 << 20 {
        big.push_str("line of ordinary output — ünïcode ✓, status: ok x=1\n");
        lines += 1;
        if lines % 500 == 0 {
            big.push_str("GITHUB_TOKEN=ghp_FAKE0123456789abcdefghijklmnopqrstuv\n");
        }
    }
    big.push_str("tail ghp_FAKE0123456789abcdefghijklmnopqrstuv\n");
    let mut v = json!({"output": big});
    let t = Instant::now();
    assert!(r.redact_value(&mut v) > 0);
    assert!(!v.to_string().contains("ghp_FAKE"));
    assert!(t.elapsed().as_secs() < 10, "{:?}", t.elapsed());
}

#[test]
fn user_patterns_and_replacement_apply() {
    let config = RedactConfig {
        replacement: "***".into(),
        extra_patterns: vec![r"ACME-[0-9]{6}".into()],
        ..RedactConfig::default()
    };
    let r = Redactor::new(&config).unwrap();
    let mut v = json!({"a": "id ACME-123456 ok", "token": "x"});
    assert_eq!(r.redact_value(&mut v), 2);
    assert_eq!(v, json!({"a": "id *** ok", "token": "***"}));
    let bad = RedactConfig {
        extra_patterns: vec!["(".into()],
        ..RedactConfig::default()
    };
    assert!(Redactor::new(&bad).is_err());
}

#[test]
fn the_store_entry_point_redacts_and_counts_or_withholds() {
    use serde_json::value::to_raw_value;
    let r = redactor();
    let event = crate::store::NewEventRaw {
        event_type: "x".into(),
        payload: Some(
            to_raw_value(&json!({"text": "\nghp_FAKE0123456789abcdefghijklmnopqrstuv"})).unwrap(),
        ),
        raw: Some(to_raw_value(&json!({"password": "p"})).unwrap()),
        metadata: Some(to_raw_value(&json!({"k": 1, "redactions": 1})).unwrap()),
        ..Default::default()
    };
    let g = r.guard(event);
    assert!(g.error.is_none());
    let meta: Value = serde_json::from_str(g.event.metadata.unwrap().get()).unwrap();
    assert_eq!(meta, json!({"k": 1, "redactions": 3}));
    assert!(g.event.payload.unwrap().get().contains("[REDACTED]"));

    // A number serde_json cannot hold as a value: the raw text was accepted, the redactor
    // cannot read it, so the content is withheld, never stored in clear.
    let payload: Box<serde_json::value::RawValue> =
        serde_json::from_str(r#"{"n": 1e400, "password": "FAKEclear"}"#).unwrap();
    let g = r.guard(crate::store::NewEventRaw {
        event_type: "x".into(),
        payload: Some(payload),
        ..Default::default()
    });
    let stored = g.event.payload.unwrap().get().to_string();
    assert!(!stored.contains("FAKEclear"), "{stored}");
    assert!(stored.contains(super::event::REDACTION_FAILED));
    let error = g.error.expect("a plugin.error beside it");
    assert_eq!(error.event_type, "plugin.error");
}

#[test]
fn every_secret_is_redacted_when_all_share_one_text() {
    let r = redactor();
    let (probes, texts): (Vec<String>, Vec<String>) = cases().into_iter().unzip();
    let all = texts.join("\n");
    let mut v = json!({
        "command": all,
        "note": texts.join(" "),
        "mcp": json!({"result": {"data": all}}).to_string(),
        "logged": format!("log: {}", json!({"msg": all})),
    });
    r.redact_value(&mut v);
    for (k, v) in v.as_object().unwrap() {
        let text = v.to_string();
        for p in &probes {
            assert!(!text.contains(p.as_str()), "{k}: {p:?} survived in {text}");
        }
    }
}
