//! The patterns that find secrets in text, and their replacement in one string.
//!
//! Every pattern is a `regex` (finite automata, no backtracking), so matching time is linear
//! in the text whatever it holds: no deadline is needed and no input can make it slow. A rule
//! replaces its named group `s` (or `s2`, `s3`: the alternative that matched), keeping the
//! context around it (a URL's scheme and host, a header's name, a flag).

use regex::{Captures, Regex, RegexSet};

use super::gate::{Gate, Needles};
use super::keys::SecretKeys;

/// Before a token: the start of the text, a character that cannot be part of it, or a JSON
/// escape left in the text (`\n`, `\t`, `\r`, `\"`), as when JSON is logged inside a string.
const L: &str = r#"(?:^|\\[ntr"]|[^A-Za-z0-9_])"#;

/// A secret's value in an assignment: double or single quoted (spaces included), quoted with
/// JSON-escaped quotes (`\"a b\"`, in JSON logged as text), or bare. A quote that is never
/// closed (a summary cut short) runs to the end of the line.
const VALUE: &str = r#"(?:"(?P<s>[^"\n]*)"?|'(?P<s2>[^'\n]*)'?|\\"(?P<s4>(?:[^"\\\n]|\\[^"])*)(?:\\")?|(?P<s3>[^\s"',;&<>\\]+))"#;

/// What kind of check a match needs beyond the pattern.
#[derive(Clone, Copy, PartialEq)]
enum Check {
    None,
    /// Group `k` must name a secret (env lines, YAML, `key = value`).
    SecretName,
}

struct Rule {
    re: Regex,
    check: Check,
}

/// The compiled rules.
pub struct Rules {
    rules: Vec<Rule>,
    /// A value right at the start of the text.
    value_at: Regex,
    /// Which rules can match a text at all, in one pass.
    set: RegexSet,
    /// Whether any rule can match a text: most texts skip the set.
    gate: Gate,
}

/// A pattern that does not compile (only user-given `extra_patterns` can be).
#[derive(Debug, thiserror::Error)]
#[error("redact pattern {pattern:?}: {error}")]
pub struct PatternError {
    pub pattern: String,
    pub error: String,
}

/// A rule as written: its pattern, its check, and what text it can match at all.
pub(super) struct Spec {
    pattern: String,
    check: Check,
    pub(super) needles: Needles,
}

impl Spec {
    #[cfg(test)]
    pub(super) fn pattern(&self) -> &str {
        &self.pattern
    }
}

pub(super) fn spec(pattern: impl Into<String>, needles: Needles) -> Spec {
    let check = match needles {
        Needles::Assignment => Check::SecretName,
        _ => Check::None,
    };
    Spec {
        pattern: pattern.into(),
        check,
        needles,
    }
}

/// The built-in rules. Each names literals one of which every match contains (see `Needles`):
/// a rule changed here must keep its needles true, or the gate skips text it would match.
pub(super) fn builtin() -> Vec<Spec> {
    let token = |body: &str, needles: &'static [&'static str]| {
        spec(format!("{L}(?P<s>{body})"), Needles::Exact(needles))
    };
    vec![
        // PEM and PGP private keys, the whole block; without an END, to the end of the text.
        spec(
            r"(?P<s>-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\z))",
            Needles::Exact(&["-----BEGIN"]),
        ),
        // JSON Web Tokens (header.payload.signature; both start `{"` in base64url).
        token(
            r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
            &["eyJ"],
        ),
        // Credentials in URLs: scheme://user:password@host keeps all but the password.
        spec(
            r#"[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s/:@"'<>\\]*:(?P<s>[^\s/@"'<>\\]+)@"#,
            Needles::Exact(&["://"]),
        ),
        // HTTP authorization headers, any scheme (the first credential token); then bearer
        // tokens anywhere. Classes stop at a backslash: in JSON-escaped text `\n` ends a line.
        spec(
            r#"(?i)(?:proxy-)?authorization\s*[:=]\s*["']?(?:(?:basic|bearer|token|digest|negotiate)\s+)?(?P<s>[^\s"',;\\]{4,})"#,
            Needles::AnyCase(&[("authorization", "riz")]),
        ),
        spec(
            r"(?i)(?-u:\b)bearer\s+(?P<s>[A-Za-z0-9._~+/-]{8,}=*)",
            Needles::AnyCase(&[("bearer", "rer")]),
        ),
        // GitHub.
        token(
            r"gh[pousr]_[A-Za-z0-9]{20,}",
            &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        ),
        token(r"github_pat_[A-Za-z0-9_]{20,}", &["github_pat_"]),
        // AWS access key ids (long-lived and temporary).
        token(
            r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[0-9A-Z]{16}",
            &[
                "AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA",
                "APKA",
            ],
        ),
        // Anthropic, OpenAI (sk-, sk-proj-, sk-ant-...), Stripe secret and restricted keys.
        token(r"sk-[A-Za-z0-9_-]{20,}", &["sk-"]),
        token(
            r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}",
            &["k_live_", "k_test_"],
        ),
        token(r"whsec_[A-Za-z0-9]{20,}", &["whsec_"]),
        // Slack.
        token(r"xox[abprse]-[A-Za-z0-9-]{10,}", &["xox"]),
        token(r"xapp-[0-9]-[A-Za-z0-9-]{10,}", &["xapp-"]),
        // Google API keys and OAuth access tokens.
        token(r"AIza[0-9A-Za-z_-]{30,}", &["AIza"]),
        token(r"ya29\.[0-9A-Za-z_-]{20,}", &["ya29."]),
        // npm, Hugging Face, GitLab, PyPI, DigitalOcean, Shopify, Vault, SendGrid, Linear,
        // Doppler, Twilio.
        token(r"npm_[A-Za-z0-9]{30,}", &["npm_"]),
        token(r"hf_[A-Za-z0-9]{30,}", &["hf_"]),
        token(
            r"gl(?:pat|ptt|rt|dt|cbt|oas)-[A-Za-z0-9_-]{20,}",
            &["glpat-", "glptt-", "glrt-", "gldt-", "glcbt-", "gloas-"],
        ),
        token(r"pypi-[A-Za-z0-9_-]{40,}", &["pypi-"]),
        token(
            r"do[por]_v1_[a-f0-9]{40,}",
            &["dop_v1_", "doo_v1_", "dor_v1_"],
        ),
        token(
            r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",
            &["shpat_", "shpca_", "shppa_", "shpss_"],
        ),
        token(r"hv[sbr]\.[A-Za-z0-9_-]{20,}", &["hvs.", "hvb.", "hvr."]),
        token(r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", &["SG."]),
        token(
            r"lin_(?:api|oauth)_[A-Za-z0-9]{30,}",
            &["lin_api_", "lin_oauth_"],
        ),
        token(
            r"dp\.(?:st|ct|sa|scim)\.[A-Za-z0-9_-]{20,}",
            &["dp.st.", "dp.ct.", "dp.sa.", "dp.scim."],
        ),
        token(r"SK[0-9a-f]{32}", &["SK"]),
        // Command-line credentials: curl -u user:pass, mysql -pX, --password X, --token=X.
        spec(
            r#"(?:^|\s)(?:-u|--user|--proxy-user)(?:\s+|=)["']?[^\s:"'\\]*:(?P<s>[^\s"'\\]+)"#,
            Needles::FlagIs(&["-u", "--user", "--proxy-user"]),
        ),
        spec(
            r#"(?:mysql|mysqldump|mysqladmin|mariadb)(?-u:\b)[^\n]*?\s-p(?P<s>[^\s"'\\-][^\s"'\\]*)"#,
            Needles::Exact(&["mysql", "mariadb"]),
        ),
        spec(
            format!(
                r"(?i)(?:^|\s)--?(?:[a-z0-9]+[-_])*(?:password|passwd|passphrase|pass|token|secret|api-?key|access-?key|secret-?key|auth|credentials?)(?:\s+|=){VALUE}"
            ),
            // The flag's last word, as the alternation spells it.
            Needles::FlagEndingWith(&[
                "password",
                "passwd",
                "passphrase",
                "pass",
                "token",
                "secret",
                "apikey",
                "api-key",
                "accesskey",
                "access-key",
                "secretkey",
                "secret-key",
                "auth",
                "credential",
                "credentials",
            ]),
        ),
        // Assignments whose name says secret: NAME=value, export NAME="a b", YAML
        // `password: x`, `"api_key": "..."` in text that is not JSON by itself. The value
        // is matched by `VALUE_AT` after a key that names a secret (see `assignments`).
        spec(
            r#"(?:^|\\[ntr]|[^A-Za-z0-9_.-])(?:\\?["'])?(?P<k>[A-Za-z_][A-Za-z0-9_.-]*)(?:\\?["'])?[ \t]*(?:=|:)[ \t]*"#,
            Needles::Assignment,
        ),
    ]
}

impl Rules {
    pub fn new(extra: &[String]) -> Result<Rules, PatternError> {
        let mut specs = builtin();
        for p in extra {
            specs.push(spec(format!("(?P<s>{p})"), Needles::Any));
        }
        Rules::from_specs(specs)
    }

    pub(super) fn from_specs(specs: Vec<Spec>) -> Result<Rules, PatternError> {
        let mut rules = Vec::with_capacity(specs.len());
        for s in &specs {
            let re = Regex::new(&s.pattern).map_err(|e| PatternError {
                pattern: s.pattern.clone(),
                error: e.to_string(),
            })?;
            rules.push(Rule { re, check: s.check });
        }
        let gate = Gate::new(specs.iter().map(|s| &s.needles));
        let set = RegexSet::new(specs.iter().map(|s| &s.pattern)).map_err(|e| PatternError {
            pattern: "(the set of all patterns)".into(),
            error: e.to_string(),
        })?;
        let value_at = Regex::new(&format!("^{VALUE}")).map_err(|e| PatternError {
            pattern: VALUE.into(),
            error: e.to_string(),
        })?;
        Ok(Rules {
            rules,
            value_at,
            set,
            gate,
        })
    }

    /// The gate (see [`Gate`]).
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// `text` with every secret replaced, and how many were, or `None` when it has none.
    pub fn redact(
        &self,
        text: &str,
        keys: &SecretKeys,
        replacement: &str,
    ) -> Option<(String, usize)> {
        if !self.gate.may_match(text, keys) {
            return None;
        }
        self.redact_ungated(text, keys, replacement)
    }

    /// [`Rules::redact`] without the gate.
    pub(super) fn redact_ungated(
        &self,
        text: &str,
        keys: &SecretKeys,
        replacement: &str,
    ) -> Option<(String, usize)> {
        let hits = self.set.matches(text);
        if !hits.matched_any() {
            return None;
        }
        let mut out = std::borrow::Cow::Borrowed(text);
        let mut count = 0;
        for i in hits.iter() {
            let rule = &self.rules[i];
            if rule.check == Check::SecretName {
                if let Some(r) = self.assignments(&rule.re, &out, keys, replacement, &mut count) {
                    out = std::borrow::Cow::Owned(r);
                }
                continue;
            }
            let replaced = rule.re.replace_all(&out, |c: &Captures| {
                let whole = c.get(0).map(|m| (m.start(), m.as_str())).unwrap_or((0, ""));
                let secret = c
                    .name("s")
                    .or_else(|| c.name("s2"))
                    .or_else(|| c.name("s3"))
                    .or_else(|| c.name("s4"));
                match secret {
                    Some(s) if !s.as_str().is_empty() && s.as_str() != replacement => {
                        count += 1;
                        let (start, text) = whole;
                        let (a, b) = (s.start() - start, s.end() - start);
                        format!("{}{replacement}{}", &text[..a], &text[b..])
                    }
                    _ => whole.1.to_string(),
                }
            });
            if let std::borrow::Cow::Owned(s) = replaced {
                out = std::borrow::Cow::Owned(s);
            }
        }
        (count > 0).then(|| (out.into_owned(), count))
    }
}

impl Rules {
    /// Replaces the values of assignments whose key names a secret; `None` if none does.
    /// A match consumes only the key, so the value of a key that is not secret is searched
    /// too (`"msg":"...password: x..."`).
    fn assignments(
        &self,
        key: &Regex,
        text: &str,
        keys: &SecretKeys,
        replacement: &str,
        count: &mut usize,
    ) -> Option<String> {
        let mut out = String::new();
        let mut copied = 0;
        let mut at = 0;
        while at <= text.len() {
            let Some(c) = key.captures_at(text, at) else {
                break;
            };
            let end = c.get(0).map_or(text.len(), |m| m.end());
            let secret_key = c
                .name("k")
                .is_some_and(|k| keys.is_secret_assignment(k.as_str()));
            if !secret_key {
                // Resume right after the key: its `=` or `:` may be what precedes the next
                // key (`X=DB_PASSWORD=v`, `value: TOKEN=v`).
                at = c.name("k").map_or(end, |k| k.end()).max(at + 1);
                continue;
            }
            at = end.max(at + 1);
            let Some(v) = self.value_at.captures(&text[end..]) else {
                continue;
            };
            let Some(s) = v
                .name("s")
                .or_else(|| v.name("s2"))
                .or_else(|| v.name("s3"))
                .or_else(|| v.name("s4"))
            else {
                continue;
            };
            // `Authorization: Bearer x`: the scheme is not the secret (the header rule
            // takes the token).
            if s.as_str().is_empty() || s.as_str() == replacement || is_auth_scheme(s.as_str()) {
                continue;
            }
            let (a, b) = (end + s.start(), end + s.end());
            out.push_str(&text[copied..a]);
            out.push_str(replacement);
            copied = b;
            at = b;
            *count += 1;
        }
        if copied == 0 {
            return None;
        }
        out.push_str(&text[copied..]);
        Some(out)
    }
}

fn is_auth_scheme(s: &str) -> bool {
    ["basic", "bearer", "token", "digest", "negotiate"]
        .iter()
        .any(|w| s.eq_ignore_ascii_case(w))
}
