//! How a rule's input glob meets one simple command of a shell line (see `shell`).
//!
//! Two ways, either one matching:
//! - **As text:** the glob against the command's words joined by single spaces, quoting
//!   removed and the program's directory cut (`"/bin/rm" -rf  x` is `rm -rf x`).
//! - **By shape:** the glob split at spaces into program, short flags and the rest; the
//!   command likewise. Programs glob-match, the rest (joined by spaces) glob-matches, and the
//!   short flags are compared as sets of letters: `rm -rf *` meets `rm -fr x`, `rm -r -f x` and
//!   `rm x -f -r` alike. A short-flag word is `-` then only letters or digits (so never a
//!   glob), before any `--`.
//!
//! For deny and ask the command needs at least the rule's flags (`rm -rfv x` is still
//! `rm -rf *`); for allow and grants exactly them (`allow rm -i *` never lets `rm -if x` by).

use std::collections::BTreeSet;

use crate::util::glob::glob_match;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flags {
    /// deny, ask: the command has every flag of the rule, perhaps more.
    AtLeast,
    /// allow, grants: the command has the rule's flags and no other.
    Exactly,
}

/// Whether `pattern` matches the simple command `words` (program first).
pub fn matches(pattern: &str, words: &[String], flags: Flags) -> bool {
    if glob_match(pattern, &words.join(" "), false) {
        return true;
    }
    let rule: Vec<&str> = pattern.split_whitespace().collect();
    let command: Vec<&str> = words.iter().map(String::as_str).collect();
    let (Some(rule), Some(command)) = (Shape::of(&rule), Shape::of(&command)) else {
        return false;
    };
    let flags_fit = match flags {
        Flags::AtLeast => rule.flags.is_subset(&command.flags),
        Flags::Exactly => rule.flags == command.flags,
    };
    flags_fit
        && glob_match(rule.program, command.program, false)
        && glob_match(&rule.rest.join(" "), &command.rest.join(" "), false)
}

/// A command (or a glob for one) as program, set of short-flag letters, other words.
struct Shape<'a> {
    program: &'a str,
    flags: BTreeSet<char>,
    rest: Vec<&'a str>,
}

impl<'a> Shape<'a> {
    fn of(words: &[&'a str]) -> Option<Shape<'a>> {
        let (program, args) = words.split_first()?;
        let mut shape = Shape {
            program,
            flags: BTreeSet::new(),
            rest: Vec::new(),
        };
        let mut options = true;
        for &word in args {
            if word == "--" {
                options = false;
            }
            match word.strip_prefix('-') {
                Some(letters) if options && is_flag_cluster(letters) => {
                    shape.flags.extend(letters.chars())
                }
                _ => shape.rest.push(word),
            }
        }
        Some(shape)
    }
}

fn is_flag_cluster(letters: &str) -> bool {
    !letters.is_empty() && letters.chars().all(|c| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn short_flags_are_a_set() {
        for cmd in [
            "rm -rf x",
            "rm -fr x",
            "rm -r -f x",
            "rm -f -r x",
            "rm x -f -r",
            "rm -rfv x",
            "rm -rf",
        ] {
            assert!(matches("rm -rf *", &words(cmd), Flags::AtLeast), "{cmd}");
        }
        assert!(!matches("rm -rf *", &words("rm -r x"), Flags::AtLeast));
        assert!(!matches("rm -rf *", &words("rm -- -rf"), Flags::AtLeast));
        assert!(!matches("rm -rf *", &words("rmdir -rf x"), Flags::AtLeast));
    }

    #[test]
    fn allow_needs_exactly_the_rules_flags() {
        assert!(matches("rm -i *", &words("rm -i x"), Flags::Exactly));
        assert!(!matches("rm -i *", &words("rm -if x"), Flags::Exactly));
        // A `*` still matches anything, flags too: `rm -i *` as text meets `rm -i -f x`.
        assert!(matches("rm -i *", &words("rm -i -f x"), Flags::Exactly));
        assert!(matches(
            "git status*",
            &words("git status -s"),
            Flags::Exactly
        ));
        assert!(matches("ls -la", &words("ls -al"), Flags::Exactly));
    }

    #[test]
    fn the_text_still_matches_the_old_way() {
        assert!(matches("*rm -rf*", &words("rm -rf /"), Flags::AtLeast));
        assert!(matches(
            "git push*",
            &words("git push --force"),
            Flags::AtLeast
        ));
        assert!(!matches("git push*", &words("git pull"), Flags::AtLeast));
    }
}
