//! Which names are names of secrets: object keys, environment variables, YAML keys, flags.

/// The configured secret key names, normalized.
pub struct SecretKeys {
    names: Vec<String>,
}

/// Lowercase, without `_`, `-`, `.` and without trailing digits: `DB_Password2` → `dbpassword`.
fn normalize(name: &str) -> String {
    let mut n: String = name
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | '.'))
        .flat_map(char::to_lowercase)
        .collect();
    while n.ends_with(|c: char| c.is_ascii_digit()) {
        n.pop();
    }
    n
}

/// Names up to this long are normalized on the stack: every object key of every walked event
/// is checked, and most are short ASCII.
const STACK_NAME: usize = 64;

/// `f` of `normalize(name)`, without allocating for short ASCII names.
fn with_normalized<T>(name: &str, f: impl FnOnce(&str) -> T) -> T {
    if !name.is_ascii() || name.len() > STACK_NAME {
        return f(&normalize(name));
    }
    let mut buf = [0u8; STACK_NAME];
    let mut len = 0;
    for b in name.bytes().filter(|b| !matches!(b, b'_' | b'-' | b'.')) {
        buf[len] = b.to_ascii_lowercase();
        len += 1;
    }
    while len > 0 && buf[len - 1].is_ascii_digit() {
        len -= 1;
    }
    // ASCII in, ASCII out: always UTF-8.
    f(std::str::from_utf8(&buf[..len]).unwrap_or_default())
}

impl SecretKeys {
    pub fn new(names: &[String]) -> SecretKeys {
        SecretKeys {
            names: names
                .iter()
                .map(|n| normalize(n))
                .filter(|n| !n.is_empty())
                .collect(),
        }
    }

    /// A key whose value is a secret: it ends with a secret name (`apiKey`, `db_password`,
    /// `password2`, `client_secret`; not `apiKeySource`, `max_tokens`).
    pub fn is_secret_key(&self, key: &str) -> bool {
        with_normalized(key, |k| self.ends_with_name(k))
    }

    fn ends_with_name(&self, normalized: &str) -> bool {
        self.names.iter().any(|n| normalized.ends_with(n.as_str()))
    }

    /// The name of an assignment in text (`NAME=value`, `name: value`): a secret key, or
    /// an environment-style name in capitals that ends in KEY or contains SECRET or PASSW
    /// (`STRIPE_KEY`, `AWS_SECRET_ACCESS_KEY_ID`).
    pub fn is_secret_assignment(&self, name: &str) -> bool {
        let upper = !name.chars().any(|c| c.is_ascii_lowercase());
        with_normalized(name, |n| {
            self.ends_with_name(n)
                || (upper && (n.ends_with("key") || n.contains("secret") || n.contains("passw")))
        })
    }

    /// Whether some suffix of the ASCII name `run` that starts with a letter or `_` may pass
    /// [`SecretKeys::is_secret_assignment`]: the normalized suffix of a name is a suffix of
    /// the normalized name, so the checks on `run` itself, case aside, cover them all.
    pub fn may_end_in_secret_assignment(&self, run: &str) -> bool {
        with_normalized(run, |n| {
            self.ends_with_name(n)
                || n.ends_with("key")
                || n.contains("secret")
                || n.contains("passw")
        })
    }
}
