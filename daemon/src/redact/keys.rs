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
        let k = normalize(key);
        self.names.iter().any(|n| k.ends_with(n.as_str()))
    }

    /// The name of an assignment in text (`NAME=value`, `name: value`): a secret key, or
    /// an environment-style name in capitals that ends in KEY or contains SECRET or PASSW
    /// (`STRIPE_KEY`, `AWS_SECRET_ACCESS_KEY_ID`).
    pub fn is_secret_assignment(&self, name: &str) -> bool {
        if self.is_secret_key(name) {
            return true;
        }
        let upper = !name.chars().any(|c| c.is_ascii_lowercase());
        let n = normalize(name);
        upper && (n.ends_with("key") || n.contains("secret") || n.contains("passw"))
    }
}
