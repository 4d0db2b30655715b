//! Walks a JSON value and redacts every string in it, in place.

use serde_json::Value;

use super::redactor::Redactor;

/// How many JSON documents inside strings inside strings are opened (an MCP result holding
/// JSON text holding JSON text); deeper ones are redacted as plain text.
pub(super) const MAX_NESTED: u8 = 3;

impl Redactor {
    /// Redacts every string in `v`; returns how many secrets were replaced.
    pub fn redact_value(&self, v: &mut Value) -> usize {
        self.walk(v, false, 0)
    }

    fn walk(&self, v: &mut Value, secret: bool, nested: u8) -> usize {
        match v {
            Value::String(s) => {
                if secret {
                    if s.is_empty() || *s == self.replacement {
                        return 0;
                    }
                    *s = self.replacement.clone();
                    return 1;
                }
                match self.redact_string(s, nested) {
                    Some((r, n)) => {
                        *s = r;
                        n
                    }
                    None => 0,
                }
            }
            Value::Array(items) => items.iter_mut().map(|i| self.walk(i, secret, nested)).sum(),
            Value::Object(map) => map
                .iter_mut()
                .map(|(k, i)| self.walk(i, secret || self.keys.is_secret_key(k), nested))
                .sum(),
            _ => 0,
        }
    }

    /// One string: JSON inside it is parsed and walked (so a key there counts as a key),
    /// everything else goes through the text rules.
    pub(crate) fn redact_string(&self, s: &str, nested: u8) -> Option<(String, usize)> {
        let t = s.trim_start();
        if nested < MAX_NESTED
            && (t.starts_with('{') || t.starts_with('['))
            && let Ok(mut inner) = serde_json::from_str::<Value>(t)
        {
            let n = self.walk(&mut inner, false, nested + 1);
            if n == 0 {
                return None;
            }
            // Re-encoded compactly: the layout may change, the data does not.
            if let Ok(r) = serde_json::to_string(&inner) {
                return Some((r, n));
            }
        }
        self.rules.redact(s, &self.keys, &self.replacement)
    }
}
