//! The compiled redaction configuration and its core: secret text in strings and secret keys'
//! values, anywhere in an event's fields.

use regex::Regex;
use serde_json::{Map, Value, json};

use super::keys;
use super::rules::{self, PatternError};
use crate::config::RedactConfig;

/// A compiled redaction configuration; cheap to share (`Arc`).
pub struct Redactor {
    pub(super) replacement: String,
    pub(super) keys: keys::SecretKeys,
    pub(super) rules: rules::Rules,
    /// On the raw JSON text of a field that `scan` cannot read: can anything in it be a
    /// secret? (Such a field is withheld when it can, as it always was.)
    pub(super) anchors: Regex,
    /// With user patterns, any text can hold a secret: every field is walked.
    pub(super) always: bool,
}

/// The old pre-check, kept for fields that the scan cannot read (and so neither can the walk):
/// such a field is withheld when one of these is in its text, and stored as it is otherwise,
/// as before the scan. They are matched on JSON text, where a string's characters may be
/// escaped: `\uXXXX` for printable ASCII or `\/` count as a hit.
const ANCHORS: &[&str] = &[
    r"private key",
    r"eyj",
    r"@",
    r"bearer",
    r"basic",
    r"gh[pousr]_",
    r"github_pat_",
    r"a[a-z]{2}a[0-9a-z]{16}",
    r"sk-",
    r"[sr]k_(?:live|test)_",
    r"whsec_",
    r"xox",
    r"xapp-",
    r"aiza",
    r"ya29\.",
    r"npm_",
    r"hf_",
    r"gl[a-z]{1,3}-",
    r"pypi-",
    r"_v1_",
    r"shp[a-z]{2}_",
    r"hv[sbr]\.",
    r"sg\.",
    r"lin_",
    r"dp\.",
    r"sk[0-9a-f]{32}",
    r"(?:^|[^a-z0-9])-u",
    r"--(?:proxy-)?user",
    r"mysql",
    r"mariadb",
    r"pass",
    r"secret",
    r"api[_-]?key",
    r"access[_-]?key",
    r"\\u00[2-7][0-9a-f]",
    r"\\/",
];

impl Redactor {
    pub fn new(config: &RedactConfig) -> Result<Redactor, PatternError> {
        let mut anchors: Vec<String> = ANCHORS.iter().map(|a| a.to_string()).collect();
        // Key names as they may be written: any case, `_`, `-` or `.` between letters.
        for name in &config.secret_keys {
            let chars: Vec<String> = name
                .chars()
                .filter(|c| c.is_alphanumeric())
                .map(|c| regex::escape(&c.to_string()))
                .collect();
            if !chars.is_empty() {
                anchors.push(chars.join(r"[_.\-]?"));
            }
        }
        let pattern = format!("(?i:{})|KEY", anchors.join("|"));
        let anchors = Regex::new(&pattern).map_err(|e| PatternError {
            pattern,
            error: e.to_string(),
        })?;
        Ok(Redactor {
            replacement: config.replacement.clone(),
            keys: keys::SecretKeys::new(&config.secret_keys),
            rules: rules::Rules::new(&config.extra_patterns)?,
            anchors,
            always: !config.extra_patterns.is_empty(),
        })
    }

    /// What secrets are replaced with.
    pub fn replacement(&self) -> &str {
        &self.replacement
    }

    /// Whether JSON text `json` may hold a secret (false: it certainly holds none).
    pub fn candidate(&self, json: &str) -> bool {
        match self.scan(json, 0) {
            Verdict::Clean => false,
            Verdict::Maybe => true,
            // Parsing it will fail: the field is withheld if it may hold a secret.
            Verdict::Unreadable => self.always || self.anchors.is_match(json),
        }
    }

    /// Redacts an event's `payload`, `metadata` and `raw` in place, and adds the count to
    /// `metadata.redactions`. Returns the count.
    pub fn redact_event_map(
        &self,
        event: &mut serde_json::Map<String, serde_json::Value>,
    ) -> usize {
        let mut total = 0;
        for field in ["payload", "metadata", "raw"] {
            if let Some(v) = event.get_mut(field) {
                total += self.redact_value(v);
            }
        }
        if total > 0 {
            add_count(event, total);
        }
        total
    }
}

/// Adds `n` to the event's `metadata.redactions` count.
pub(super) fn add_count(event: &mut Map<String, Value>, n: usize) {
    let meta = event
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(m) = meta {
        let before = m.get("redactions").and_then(Value::as_u64).unwrap_or(0);
        m.insert("redactions".into(), json!(before + n as u64));
    }
}

/// What the pre-check found in a JSON text.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Nothing the walk would replace.
    Clean,
    /// Something the walk may replace.
    Maybe,
    /// Not JSON that the walk can read either (a number beyond a double, a lone surrogate).
    Unreadable,
}
