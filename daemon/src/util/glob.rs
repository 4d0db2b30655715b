//! The one glob of the daemon (policy rules, grants, the relay's session filter).

/// Shell-style glob: `*` any run of characters, `?` any one character, everything else
/// literal. Iterative with one backtrack point, so no pattern can make it slow.
pub fn glob_match(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let fold = |s: &str| -> Vec<char> {
        if ignore_case {
            s.chars().flat_map(char::to_lowercase).collect()
        } else {
            s.chars().collect()
        }
    };
    let (p, t) = (fold(pattern), fold(text));
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("rm -rf *", "rm -rf /", false));
        assert!(glob_match("*", "", false));
        assert!(glob_match("a*b*c", "aXXbYYc", false));
        assert!(!glob_match("a*b*c", "aXXbYY", false));
        assert!(glob_match("B?sh", "bash", true));
        assert!(!glob_match("Bash", "bash", false));
        assert!(glob_match("*.env", "/x/.env", false));
        // Pathological patterns finish quickly.
        let long = "a".repeat(10_000);
        assert!(!glob_match("*a*a*a*a*a*a*b", &long, false));
    }
}
