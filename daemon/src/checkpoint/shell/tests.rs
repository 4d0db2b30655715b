//! Unit tests of the shell analysis: every simple command found, quoting removed, wrappers and
//! shell strings seen through, and hostile lines refused quickly.

use std::time::{Duration, Instant};

use super::bounds::{MAX_LEN, nesting};
use super::outcome::ShellError;
use super::walk::invocations;

/// Every view of every simple command, each as one line.
fn seen(line: &str) -> Vec<String> {
    invocations(line)
        .unwrap_or_else(|e| panic!("{line:?}: {e}"))
        .iter()
        .flat_map(|inv| inv.views.iter().map(|v| v.join(" ")))
        .collect()
}

fn runs(line: &str, command: &str) {
    let all = seen(line);
    assert!(all.iter().any(|c| c == command), "{line:?} runs {all:?}");
}

#[test]
fn every_simple_command_is_found() {
    runs("/bin/rm -rf x", "rm -rf x");
    runs("true && rm -rf x", "rm -rf x");
    runs("false || rm -rf x", "rm -rf x");
    runs("echo hi; rm -rf x", "rm -rf x");
    runs("(rm -rf x)", "rm -rf x");
    runs("{ rm -rf x; }", "rm -rf x");
    runs("$(rm -rf x)", "rm -rf x");
    runs("echo \"$(rm -rf x)\"", "rm -rf x");
    runs("echo `rm -rf x`", "rm -rf x");
    runs("X=$(rm -rf x) true", "rm -rf x");
    runs("echo ${X:-$(rm -rf x)}", "rm -rf x");
    runs("echo $(( $(rm -rf x) + 1 ))", "rm -rf x");
    runs("cat <(rm -rf x)", "rm -rf x");
    runs("cat <<EOF\n$(rm -rf x)\nEOF", "rm -rf x");
    runs("if true; then rm -rf x; fi", "rm -rf x");
    runs("for f in a; do rm -rf $f; done", "rm -rf $f");
    runs("while true; do rm -rf x; done", "rm -rf x");
    runs("case a in a) rm -rf x;; esac", "rm -rf x");
    runs("f() { rm -rf x; }; f", "rm -rf x");
    runs("[[ $(rm -rf x) ]]", "rm -rf x");
    runs("cmd | rm -rf x &", "rm -rf x");
    runs("find . -name '*.o' -exec rm -rf {} +", "rm -rf {}");
}

#[test]
fn quoting_and_paths_are_removed() {
    runs("\\rm -rf x", "rm -rf x");
    runs("\"rm\" -rf x", "rm -rf x");
    runs("'r'm -rf x", "rm -rf x");
    runs("r\"m\" -rf x", "rm -rf x");
    runs("$'\\x72m' -rf x", "rm -rf x");
    runs("./bin/../rm -rf x", "rm -rf x");
    runs("rm -rf \\\n x", "rm -rf x");
    // What the shell computes stays as written.
    runs("$X -rf x", "$X -rf x");
}

#[test]
fn wrappers_are_seen_through() {
    runs("sudo rm -rf x", "rm -rf x");
    runs("sudo rm -rf x", "sudo rm -rf x");
    runs("sudo -u root -E rm -rf x", "rm -rf x");
    runs("sudo -uroot rm -rf x", "rm -rf x");
    runs("env FOO=1 rm -rf x", "rm -rf x");
    runs("env -i -u HOME FOO=1 rm -rf x", "rm -rf x");
    runs("FOO=1 rm -rf x", "rm -rf x");
    runs("nice -n 5 nohup rm -rf x", "rm -rf x");
    runs("nice -10 rm -rf x", "rm -rf x");
    runs("command rm -rf x", "rm -rf x");
    runs("exec -a name rm -rf x", "rm -rf x");
    runs("timeout 10 rm -rf x", "rm -rf x");
    runs("timeout -s KILL --kill-after=5 10s rm -rf x", "rm -rf x");
    runs("xargs rm -rf", "rm -rf");
    runs("find . | xargs -0 -n 1 -I {} rm -rf {}", "rm -rf {}");
    runs("sudo env A=1 /usr/bin/time -f %e rm -rf x", "rm -rf x");
    runs("time rm -rf x", "rm -rf x");
    runs("busybox rm -rf x", "rm -rf x");
    runs("stdbuf -oL rm -rf x", "rm -rf x");
}

#[test]
fn shell_strings_are_parsed_in_turn() {
    runs("bash -c 'rm -rf x'", "rm -rf x");
    runs("sh -c \"echo a; rm -rf x\"", "rm -rf x");
    runs("bash -lc 'rm -rf x'", "rm -rf x");
    runs("bash -o pipefail -c 'rm -rf x'", "rm -rf x");
    runs("sudo bash -c 'rm -rf x'", "rm -rf x");
    runs("find . | xargs sh -c 'rm -rf \"$@\"' _", "rm -rf $@");
    runs("bash -c \"bash -c 'rm -rf x'\"", "rm -rf x");
    runs("eval 'rm -rf x'", "rm -rf x");
    runs("eval rm -rf x", "rm -rf x");
    // A script file is not read; a plain shell is just a command.
    runs("bash script.sh", "bash script.sh");
    runs("bash", "bash");
}

#[test]
fn a_shell_reading_its_program_from_input_is_hidden() {
    for line in [
        "curl x | sh",
        "curl x | sudo bash",
        "curl x | bash -s -- --flag",
        "sh < script",
        "bash <<< 'rm -rf x'",
        "bash <<EOF\nrm -rf x\nEOF",
    ] {
        assert!(
            matches!(invocations(line), Err(ShellError::Hidden(_))),
            "{line:?}: {:?}",
            invocations(line)
        );
    }
}

#[test]
fn nesting_follows_quotes() {
    assert_eq!(nesting("echo '((((((((((((((((((('"), 0);
    assert_eq!(nesting("echo \"((((((((((((((\""), 0);
    assert_eq!(nesting("echo \\(\\(\\("), 0);
    assert_eq!(nesting("echo \"$(a $(b))\""), 2);
    assert_eq!(nesting("(a) (b) (c)"), 1);
    assert_eq!(nesting("if a; then if b; then c; fi; fi"), 2);
}

#[test]
fn hostile_lines_are_refused_quickly_and_never_panic() {
    let deep_subst = format!("{}rm -rf x{}", "$(".repeat(5000), ")".repeat(5000));
    let deep_backquote = format!("{}rm{}", "\\`".repeat(300), "\\`".repeat(300));
    let cases: Vec<(String, Option<ShellError>)> = vec![
        ("x ".repeat(MAX_LEN), Some(ShellError::TooLong)),
        (deep_subst, Some(ShellError::TooDeep)),
        ("(".repeat(5000), Some(ShellError::TooDeep)),
        ("( ".repeat(13), Some(ShellError::TooDeep)),
        ("{ ".repeat(400), Some(ShellError::TooDeep)),
        ("if true; then ".repeat(200), Some(ShellError::TooDeep)),
        ("echo 'unterminated".into(), None),
        ("echo \"unterminated".into(), None),
        ("echo $(unterminated".into(), None),
        ("echo `unterminated".into(), None),
        ("a\0b; rm\0 -rf x".into(), None),
        ("cat <<EOF\nnever ends".into(), None),
        (deep_backquote, None),
        (")))}}}fi done esac ;;".into(), None),
        (format!("[[ {}a ]]", "a && ".repeat(3000)), None),
        ("a; ".repeat(MAX_LEN / 3 - 1), None),
        ("a | ".repeat(MAX_LEN / 4 - 1) + "a", None),
        (format!("{}a", "bash -c ".repeat(2000)), None),
        (
            format!("{}rm{}", "bash -c \"".repeat(20), "\"".repeat(20)),
            None,
        ),
        ("\u{feff}\u{202e}rm -rf x\u{200b}".into(), None),
    ];
    for (line, want) in cases {
        let start = Instant::now();
        let got = std::panic::catch_unwind(|| invocations(&line));
        let took = start.elapsed();
        let short: String = line.chars().take(40).collect();
        let got = got.unwrap_or_else(|_| panic!("{short:?} panicked"));
        assert!(took < Duration::from_secs(2), "{short:?} took {took:?}");
        if let Some(want) = want {
            assert_eq!(got.as_ref().err(), Some(&want), "{short:?}");
        }
    }
}

#[test]
fn unparseable_lines_are_errors() {
    for line in ["echo 'x", "(((", "a &&", "if true; then"] {
        assert!(
            matches!(invocations(line), Err(ShellError::Syntax(_))),
            "{line:?}: {:?}",
            invocations(line)
        );
    }
}
