//! Signed control messages: how a web or phone client proves that a decision (or a stop) on
//! the control stream comes from someone holding the approval key, which the daemon has and
//! the relay server never sees.
//!
//! A message is a JSON object:
//!
//! ```json
//! {"type": "decision", "session_id": "s1", "checkpoint_id": "ck_…", "decision": "approve",
//!  "reason": "looks fine", "key_id": "phone", "ts": 1795500000000, "nonce": "k3j4h5",
//!  "sig": "<64 lowercase hex digits>"}
//! {"type": "abort", "session_id": "s1", "reason": "stop now", "key_id": "phone",
//!  "ts": 1795500000000, "nonce": "a8b7c6", "sig": "…"}
//! ```
//!
//! `sig` is HMAC-SHA256, keyed with the approval key's bytes, over these eight lines joined by
//! `\n` (no trailing newline), absent fields as empty lines:
//!
//! ```text
//! dstream-control-v1
//! <type>
//! <session_id>
//! <checkpoint_id>
//! <decision>
//! <reason>
//! <ts, decimal milliseconds since the Unix epoch>
//! <nonce>
//! ```
//!
//! No field may contain a newline. `scripts/sign-decision.mjs` produces such messages.

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

pub const SCHEME: &str = "dstream-control-v1";

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlMessage {
    #[serde(rename = "type")]
    pub kind: String,
    pub session_id: String,
    #[serde(default)]
    pub checkpoint_id: String,
    #[serde(default)]
    pub decision: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub key_id: String,
    #[serde(default)]
    pub ts: u64,
    #[serde(default)]
    pub nonce: String,
    #[serde(default)]
    pub sig: String,
}

impl ControlMessage {
    /// The signed text (see the module docs); `None` when a field holds a newline.
    pub fn canonical(&self) -> Option<String> {
        let fields = [
            self.kind.as_str(),
            &self.session_id,
            &self.checkpoint_id,
            &self.decision,
            &self.reason,
            &self.nonce,
        ];
        if fields.iter().any(|f| f.contains('\n')) {
            return None;
        }
        Some(format!(
            "{SCHEME}\n{}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.kind,
            self.session_id,
            self.checkpoint_id,
            self.decision,
            self.reason,
            self.ts,
            self.nonce
        ))
    }

    /// The signature this message should carry under `key` (clients sign with
    /// `scripts/sign-decision.mjs`; the daemon only verifies, and its tests sign).
    #[cfg(test)]
    pub fn sign(&self, key: &[u8]) -> Option<String> {
        let text = self.canonical()?;
        let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
        mac.update(text.as_bytes());
        Some(hex(&mac.finalize().into_bytes()))
    }

    /// Whether `sig` is the message's signature under `key` (compared in constant time).
    pub fn verify(&self, key: &[u8]) -> bool {
        let (Some(text), Some(sig)) = (self.canonical(), unhex(&self.sig)) else {
            return false;
        };
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
            return false;
        };
        mac.update(text.as_bytes());
        mac.verify_slice(&sig).is_ok()
    }
}

#[cfg(test)]
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() != 64 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg() -> ControlMessage {
        ControlMessage {
            kind: "decision".into(),
            session_id: "s1".into(),
            checkpoint_id: "ck_0123".into(),
            decision: "approve".into(),
            reason: "fine".into(),
            key_id: "phone".into(),
            ts: 1_795_500_000_000,
            nonce: "n1".into(),
            sig: String::new(),
        }
    }

    #[test]
    fn a_signature_binds_every_field() {
        let key = b"secret key";
        let mut m = msg();
        m.sig = m.sign(key).unwrap();
        assert!(m.verify(key));
        assert!(!m.verify(b"another key"));
        for tamper in [
            |m: &mut ControlMessage| m.decision = "reject".into(),
            |m: &mut ControlMessage| m.checkpoint_id = "ck_9999".into(),
            |m: &mut ControlMessage| m.session_id = "s2".into(),
            |m: &mut ControlMessage| m.ts += 1,
            |m: &mut ControlMessage| m.nonce = "n2".into(),
            |m: &mut ControlMessage| m.reason = "other".into(),
            |m: &mut ControlMessage| m.kind = "abort".into(),
        ] {
            let mut t = m.clone();
            tamper(&mut t);
            assert!(!t.verify(key), "{t:?}");
        }
    }

    #[test]
    fn the_canonical_text_is_the_documented_one() {
        let m = msg();
        assert_eq!(
            m.canonical().unwrap(),
            "dstream-control-v1\ndecision\ns1\nck_0123\napprove\nfine\n1795500000000\nn1"
        );
        // Computed independently with Node's crypto.createHmac: the format web clients follow.
        assert_eq!(
            m.sign(b"k").unwrap(),
            "1470a6eb4729206e659519a79b37ec4166c845c682e60436af6f0fe47588077f"
        );
        let mut nl = msg();
        nl.reason = "two\nlines".into();
        assert!(nl.canonical().is_none() && !nl.verify(b"k"));
    }
}
