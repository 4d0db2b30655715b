//! Which names are names of secrets: object keys, environment variables, YAML keys, flags.

/// The configured secret key names, normalized.
pub struct SecretKeys {
    names: Vec<String>,
    /// Each name's last three bytes, packed: most keys end otherwise and skip comparing.
    tails: Vec<u32>,
    /// Some name is shorter than three bytes: compare every name.
    short: bool,
    /// The last two bytes of every name, to turn most ASCII keys away before normalizing
    /// them; `None` when a name is shorter.
    pairs: Option<Vec<[u8; 2]>>,
}

/// The last two bytes that `normalize` leaves of an ASCII name, found from its end without
/// copying: separators go, then trailing digits (skipping both from the end is the same).
fn last_two(name: &[u8]) -> Option<[u8; 2]> {
    let mut rev = name
        .iter()
        .rev()
        .filter(|b| !matches!(b, b'_' | b'-' | b'.'));
    let last = rev.by_ref().find(|b| !b.is_ascii_digit())?;
    let before = rev.next()?;
    Some([before.to_ascii_lowercase(), last.to_ascii_lowercase()])
}

/// The last three bytes of `n`, packed; `None` when it is shorter.
fn tail(n: &[u8]) -> Option<u32> {
    match n {
        [.., a, b, c] => Some(u32::from_le_bytes([*a, *b, *c, 0])),
        _ => None,
    }
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

/// Names up to this long are normalized on the stack: every object key of every event is
/// checked, and most are short ASCII.
const STACK_NAME: usize = 64;

/// `f` of the bytes of `normalize(name)`, without allocating for short ASCII names.
fn with_normalized<T>(name: &[u8], f: impl FnOnce(&[u8]) -> T) -> T {
    if !name.is_ascii() || name.len() > STACK_NAME {
        return f(normalize(&String::from_utf8_lossy(name)).as_bytes());
    }
    let mut buf = [0u8; STACK_NAME];
    let mut len = 0;
    for &b in name.iter().filter(|b| !matches!(b, b'_' | b'-' | b'.')) {
        buf[len] = b.to_ascii_lowercase();
        len += 1;
    }
    while len > 0 && buf[len - 1].is_ascii_digit() {
        len -= 1;
    }
    f(&buf[..len])
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

impl SecretKeys {
    pub fn new(names: &[String]) -> SecretKeys {
        let names: Vec<String> = names
            .iter()
            .map(|n| normalize(n))
            .filter(|n| !n.is_empty())
            .collect();
        let tails: Vec<u32> = names.iter().filter_map(|n| tail(n.as_bytes())).collect();
        let short = tails.len() < names.len();
        let pairs = names
            .iter()
            .map(|n| match n.as_bytes() {
                [.., a, b] => Some([*a, *b]),
                _ => None,
            })
            .collect();
        SecretKeys {
            names,
            tails,
            short,
            pairs,
        }
    }

    /// A key whose value is a secret: it ends with a secret name (`apiKey`, `db_password`,
    /// `password2`, `client_secret`; not `apiKeySource`, `max_tokens`).
    pub fn is_secret_key(&self, key: &str) -> bool {
        if let Some(pairs) = &self.pairs
            && key.is_ascii()
        {
            let Some(two) = last_two(key.as_bytes()) else {
                return false;
            };
            if !pairs.contains(&two) {
                return false;
            }
        }
        with_normalized(key.as_bytes(), |k| self.ends_with_name(k))
    }

    fn ends_with_name(&self, normalized: &[u8]) -> bool {
        let ends_with = |n: &String| normalized.ends_with(n.as_bytes());
        if self.short {
            return self.names.iter().any(ends_with);
        }
        // Every name has a tail here, in the same order.
        tail(normalized).is_some_and(|t| {
            self.tails
                .iter()
                .zip(&self.names)
                .any(|(&nt, n)| nt == t && ends_with(n))
        })
    }

    /// The name of an assignment in text (`NAME=value`, `name: value`): a secret key, or
    /// an environment-style name in capitals that ends in KEY or contains SECRET or PASSW
    /// (`STRIPE_KEY`, `AWS_SECRET_ACCESS_KEY_ID`).
    pub fn is_secret_assignment(&self, name: &str) -> bool {
        let upper = !name.chars().any(|c| c.is_ascii_lowercase());
        with_normalized(name.as_bytes(), |n| {
            self.ends_with_name(n) || (upper && upper_secret(n))
        })
    }

    /// Whether some suffix of the ASCII name `run` that starts with a letter or `_` may pass
    /// [`SecretKeys::is_secret_assignment`]: the normalized suffix of a name is a suffix of
    /// the normalized name, so the checks on `run` itself, case aside, cover them all.
    pub fn may_end_in_secret_assignment(&self, run: &[u8]) -> bool {
        with_normalized(run, |n| self.ends_with_name(n) || upper_secret(n))
    }
}

/// What makes a name in capitals secret, on the normalized name.
fn upper_secret(n: &[u8]) -> bool {
    n.ends_with(b"key") || contains(n, b"secret") || contains(n, b"passw")
}
