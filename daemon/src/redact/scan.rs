//! The pre-check of a field: one pass over its JSON text that reads every key and string as
//! the walk would (JSON inside strings included, secret keys' values included) and asks the
//! gate about each, building nothing. A field in which nothing may be a secret is left as it
//! is; only the rest is parsed, walked and re-encoded.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use super::keys::SecretKeys;
use super::redactor::{Redactor, Verdict};
use super::walk::MAX_NESTED;

impl Redactor {
    /// The verdict on JSON text `json`, read as the walk reads JSON at depth `nested`.
    pub(super) fn scan(&self, json: &str, nested: u8) -> Verdict {
        // One literal search for the whole text instead of one per string.
        let literals = self.rules.gate().may_hold_literals(json);
        self.scan_with(json, nested, literals)
    }

    /// [`Redactor::scan`]; `literals` false when no string in `json` holds a needle.
    fn scan_with(&self, json: &str, nested: u8, literals: bool) -> Verdict {
        let found = Cell::new(false);
        let seed = Scan {
            redactor: self,
            secret: false,
            nested,
            literals,
            found: &found,
        };
        // The same reader and end check as `serde_json::from_str::<Value>`, so the same
        // texts fail.
        let mut de = serde_json::Deserializer::from_str(json);
        let read = seed.deserialize(&mut de).and_then(|()| de.end());
        match (found.get(), read) {
            (true, _) => Verdict::Maybe,
            (false, Ok(())) => Verdict::Clean,
            (false, Err(_)) => Verdict::Unreadable,
        }
    }

    /// Whether the walk may replace something in string `s` (see `walk::walk` and
    /// `redact_string`, which this follows branch for branch).
    fn string_may_hold_secret(&self, s: &str, secret: bool, nested: u8, literals: bool) -> bool {
        if secret {
            return !s.is_empty() && s != self.replacement;
        }
        let t = s.trim_start();
        if nested < MAX_NESTED && (t.starts_with('{') || t.starts_with('[')) {
            // Its strings are inside the outer text: the outer literal search covers them.
            match self.scan_with(t, nested + 1, literals) {
                Verdict::Clean => return false,
                Verdict::Maybe => return true,
                // The walk redacts it as plain text.
                Verdict::Unreadable => {}
            }
        }
        self.rules.gate().may_match_with(s, &self.keys, literals)
    }
}

/// One JSON value, read for the pre-check. Stops the read at the first string that may hold
/// a secret (an error that `found` tells apart from a real one).
#[derive(Clone, Copy)]
struct Scan<'a> {
    redactor: &'a Redactor,
    /// Under a secret key: every non-empty string is replaced.
    secret: bool,
    nested: u8,
    /// Whether strings here may hold a needle of the gate.
    literals: bool,
    found: &'a Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        if self
            .redactor
            .string_may_hold_secret(s, self.secret, self.nested, self.literals)
        {
            self.found.set(true);
            return Err(E::custom("may hold a secret"));
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(secret) = map.next_key_seed(Key(&self.redactor.keys))? {
            map.next_value_seed(Scan {
                secret: self.secret || secret,
                ..self
            })?;
        }
        Ok(())
    }
}

/// An object key, read without copying: is it a secret key?
struct Key<'a>(&'a SecretKeys);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E>(self, k: &str) -> Result<bool, E> {
        Ok(self.0.is_secret_key(k))
    }
}
