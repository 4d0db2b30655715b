//! What the hook is told: its arguments (read by hand, without clap: building a parser is a
//! measurable part of a hook's run, and the lean `dstream-hook` has no clap at all), its help
//! text, and the environment variables that tune it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// The most `DSTREAM_HOOK_TIMEOUT_MS` may ask for.
const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Default for `DSTREAM_HOOK_TIMEOUT_MS`: how long the whole exchange may take.
const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// Agents whose hooks the hook answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agent {
    /// Claude Code (settings.json `hooks`; install with `dstream install claude-code`).
    ClaudeCode,
}

impl Agent {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
        }
    }

    /// The `source` name the daemon's mapping plugins know this agent by.
    fn source(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
        }
    }
}

/// Which program runs the hook, so that without a daemon it starts the right `dstream`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// `dstream hook`: it starts itself as `dstream daemon`.
    Dstream,
    /// The lean `dstream-hook`: it starts the `dstream` beside it.
    Lean,
}

/// One run of the hook, as its command line says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub agent: Agent,
    /// `--fail-closed`
    pub fail_closed: bool,
    /// `--socket`
    pub socket: Option<PathBuf>,
    pub program: Program,
}

/// What a hook's command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    Run(Options),
    Help,
    Version,
}

/// Reads the hook's arguments (those after `dstream hook`, or after `dstream-hook`):
/// `<AGENT> [--fail-closed] [--socket PATH]`, options anywhere, `--socket=PATH` too, `--`
/// ending the options, `-h`/`--help`, `-V`/`--version`. `Err` says what is wrong, in clap's
/// words.
pub fn parse(args: &[OsString], program: Program) -> Result<Parsed, String> {
    let mut agent = None;
    let mut fail_closed = false;
    let mut socket: Option<PathBuf> = None;
    let mut it = args.iter();
    let mut options_end = false;
    while let Some(arg) = it.next() {
        let Some(a) = arg.to_str() else {
            return Err(format!("invalid UTF-8 was detected in {arg:?}"));
        };
        let mut set_socket = |value: Option<OsString>| {
            if socket.is_some() {
                return Err(
                    "the argument '--socket <SOCKET>' cannot be used multiple times".into(),
                );
            }
            match value {
                Some(v) if !v.is_empty() => {
                    socket = Some(v.into());
                    Ok(())
                }
                _ => Err(
                    "a value is required for '--socket <SOCKET>' but none was supplied".to_string(),
                ),
            }
        };
        match a {
            _ if options_end || !a.starts_with('-') || a == "-" => {
                if agent.is_some() {
                    return Err(format!("unexpected argument '{a}' found"));
                }
                agent = Some(match a {
                    "claude-code" => Agent::ClaudeCode,
                    _ => {
                        return Err(format!(
                            "invalid value '{a}' for '<AGENT>'\n  [possible values: claude-code]"
                        ));
                    }
                });
            }
            "--" => options_end = true,
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            "--fail-closed" if fail_closed => {
                return Err(
                    "the argument '--fail-closed' cannot be used multiple times".to_string()
                );
            }
            "--fail-closed" => fail_closed = true,
            "--socket" => {
                let value = it.next().filter(|v| !v.to_string_lossy().starts_with("--"));
                set_socket(value.cloned())?;
            }
            _ if a.starts_with("--socket=") => set_socket(Some(a["--socket=".len()..].into()))?,
            _ => return Err(format!("unexpected argument '{a}' found")),
        }
    }
    let Some(agent) = agent else {
        return Err("the following required arguments were not provided:\n  <AGENT>".into());
    };
    Ok(Parsed::Run(Options {
        agent,
        fail_closed,
        socket,
        program,
    }))
}

/// What `--help` says about the arguments, after the usage line.
pub const ARGS_HELP: &str = "\
Arguments:
  <AGENT>
          The agent running this hook [possible values: claude-code]

Options:
      --fail-closed
          Deny tool calls (PreToolUse, PermissionRequest) when the daemon cannot be reached or
          fails, instead of letting them through [env: DSTREAM_HOOK_FAIL_CLOSED=1]
      --socket <SOCKET>
          Socket of the daemon [default: $DSTREAM_SOCKET, else
          $XDG_RUNTIME_DIR/dstream/dstream.sock, else ~/.dstream/dstream.sock]
  -h, --help
          Print help
  -V, --version
          Print version";

/// What the hook does, for `--help` (after the arguments).
pub const HELP: &str = "\
Agents run this command, not people: `dstream install claude-code` registers it for every
Claude Code hook event (as `dstream-hook claude-code`, the lean binary installed beside
`dstream`, when there is one; else as `dstream hook claude-code`: both behave the same). It
reads the event from stdin, stores it through the daemon (`ingest`), and answers on stdout in
Claude Code's format:

  PreToolUse         allow/deny  -> hookSpecificOutput.permissionDecision (+ reason, updatedInput)
  PermissionRequest  allow/deny  -> hookSpecificOutput.decision.behavior (+ updatedInput/message)
  `ask`              the call is held by a dstream checkpoint: the hook waits for the decision
                     (dstream approve|reject|inbox), across daemon restarts, then answers as above
  no decision, any other event -> nothing: Claude Code goes on as it normally would
  remote stop        deny, with `continue: false` (Claude Code ends its turn)

It always exits 0. If no daemon is running, the hook starts one in the background (waiting
at most DSTREAM_AUTOSTART_WAIT_MS, 2000 by default) and sends it the event; if autostart is off
or the start fails, it writes the event to the spool (<data_dir>/spool/), synced before it
exits, and the daemon takes it in when it next runs. If the daemon answers with an error or
takes longer than the deadline, or had to be bypassed, the hook prints nothing (fails open)
unless --fail-closed is given, in which case it denies tool calls and says why.

Input that is not JSON is sent as a JSON string holding the text (stored, never mapped); an
event too big for one frame has its longest strings cut (marked `[dstream: N bytes cut]`), and
then any `updatedInput` in the reply is ignored, since it was computed from the cut input.

Environment:
  DSTREAM_SOCKET              the daemon's socket (--socket wins)
  DSTREAM_HOOK_TIMEOUT_MS     deadline for the whole exchange, in ms [default: 30000, at most 3600000]
  DSTREAM_HOOK_FAIL_CLOSED=1  same as --fail-closed
  DSTREAM_AUTOSTART=0         never start a daemon (spool instead); also `[daemon] autostart`
  DSTREAM_AUTOSTART_WAIT_MS   how long to wait for a started daemon [default: 2000, at most 30000]
  DSTREAM_DATA_DIR, DSTREAM_CONFIG  where the spool is and the config the daemon is started with
  DSTREAM_HOOK_DEBUG=1        one line on stderr about every run (Claude Code shows hook
                              stderr only in its verbose mode)";

/// True when an environment flag is set to something other than empty, `0` or `false`.
fn env_flag(name: &str) -> bool {
    std::env::var(name)
        .map(|v| !matches!(v.trim(), "" | "0" | "false" | "no"))
        .unwrap_or(false)
}

/// How this run of the hook behaves, from its arguments and the environment.
pub(crate) struct Settings {
    /// The `source` the daemon's mapping plugins know the agent by.
    pub(crate) source: &'static str,
    pub(crate) socket: PathBuf,
    /// How long the whole exchange may take (`DSTREAM_HOOK_TIMEOUT_MS`).
    pub(crate) timeout: Duration,
    pub(crate) fail_closed: bool,
    pub(crate) debug: bool,
    pub(crate) program: Program,
}

impl Settings {
    /// The settings, and a note on an environment value that was not taken as given.
    pub(crate) fn new(options: Options) -> (Settings, Option<String>) {
        let mut note = None;
        let timeout_ms = match std::env::var("DSTREAM_HOOK_TIMEOUT_MS") {
            Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
                // A hook that waits forever holds the agent forever: an hour at most.
                Ok(ms) if ms > MAX_TIMEOUT_MS => {
                    note = Some(format!(
                        "DSTREAM_HOOK_TIMEOUT_MS={ms} is more than an hour; using {MAX_TIMEOUT_MS}"
                    ));
                    MAX_TIMEOUT_MS
                }
                Ok(ms) => ms,
                Err(_) => {
                    note = Some(format!(
                        "DSTREAM_HOOK_TIMEOUT_MS={v:?} is not a number of milliseconds; using {DEFAULT_TIMEOUT_MS}"
                    ));
                    DEFAULT_TIMEOUT_MS
                }
            },
            _ => DEFAULT_TIMEOUT_MS,
        };
        let settings = Settings {
            source: options.agent.source(),
            socket: options
                .socket
                .unwrap_or_else(dstream_sdk::socket::default_socket_path),
            timeout: Duration::from_millis(timeout_ms),
            fail_closed: options.fail_closed || env_flag("DSTREAM_HOOK_FAIL_CLOSED"),
            debug: env_flag("DSTREAM_HOOK_DEBUG"),
            program: options.program,
        };
        (settings, note)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Parsed, String> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse(&args, Program::Lean)
    }

    fn options(fail_closed: bool, socket: Option<&str>) -> Result<Parsed, String> {
        Ok(Parsed::Run(Options {
            agent: Agent::ClaudeCode,
            fail_closed,
            socket: socket.map(PathBuf::from),
            program: Program::Lean,
        }))
    }

    #[test]
    fn the_forms_agents_run_and_clap_takes_are_read() {
        assert_eq!(run(&["claude-code"]), options(false, None));
        assert_eq!(
            run(&["claude-code", "--fail-closed", "--socket", "/s"]),
            options(true, Some("/s"))
        );
        assert_eq!(
            run(&["--socket=/s", "--fail-closed", "claude-code"]),
            options(true, Some("/s"))
        );
        assert_eq!(run(&["--", "claude-code"]), options(false, None));
        assert_eq!(run(&["claude-code", "--help"]), Ok(Parsed::Help));
        assert_eq!(run(&["-V"]), Ok(Parsed::Version));
    }

    #[test]
    fn anything_else_is_an_error() {
        for bad in [
            &[][..],
            &["opencode"],
            &["claude-code", "claude-code"],
            &["claude-code", "--bogus"],
            &["claude-code", "-x"],
            &["claude-code", "--fail-closed", "--fail-closed"],
            &["claude-code", "--socket"],
            &["claude-code", "--socket", "--fail-closed"],
            &["claude-code", "--socket="],
            &["claude-code", "--socket", "/a", "--socket", "/b"],
            &["--", "--fail-closed"],
        ] {
            assert!(run(bad).is_err(), "{bad:?}");
        }
    }
}
