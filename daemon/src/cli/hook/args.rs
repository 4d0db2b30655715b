//! What the hook is told: its arguments (read without clap for the plain forms agents run),
//! its help text, and the environment variables that tune it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// The most `DSTREAM_HOOK_TIMEOUT_MS` may ask for.
const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Default for `DSTREAM_HOOK_TIMEOUT_MS`: how long the whole exchange may take.
const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// Agents whose hooks `dstream hook` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HookAgent {
    /// Claude Code (settings.json `hooks`; install with `dstream install claude-code`).
    ClaudeCode,
}

impl HookAgent {
    /// The `source` name the daemon's mapping plugins know this agent by.
    fn source(self) -> &'static str {
        match self {
            HookAgent::ClaudeCode => "claude-code",
        }
    }
}

#[derive(Args)]
#[command(after_long_help = HOOK_HELP)]
pub struct HookArgs {
    /// The agent running this hook.
    #[arg(value_enum)]
    agent: HookAgent,
    /// Deny tool calls (PreToolUse, PermissionRequest) when the daemon cannot be reached or
    /// fails, instead of letting them through [env: DSTREAM_HOOK_FAIL_CLOSED=1]
    #[arg(long)]
    fail_closed: bool,
    /// Socket of the daemon [default: $DSTREAM_SOCKET, else $XDG_RUNTIME_DIR/dstream/dstream.sock, else ~/.dstream/dstream.sock]
    #[arg(long)]
    socket: Option<PathBuf>,
}

impl HookArgs {
    /// The plain forms agents run (`hook claude-code [--fail-closed] [--socket PATH]`), read
    /// without clap: building the whole CLI's parser is a measurable part of a hook's
    /// ~2 ms. Anything else (help, typos) returns `None` and goes through clap as usual.
    pub fn from_plain_args(args: &[std::ffi::OsString]) -> Option<HookArgs> {
        let mut it = args.iter();
        if it.next()? != "hook" || it.next()? != "claude-code" {
            return None;
        }
        let mut parsed = HookArgs {
            agent: HookAgent::ClaudeCode,
            fail_closed: false,
            socket: None,
        };
        while let Some(a) = it.next() {
            match a.to_str()? {
                "--fail-closed" if !parsed.fail_closed => parsed.fail_closed = true,
                "--socket" if parsed.socket.is_none() => parsed.socket = Some(it.next()?.into()),
                _ => return None,
            }
        }
        Some(parsed)
    }
}

const HOOK_HELP: &str = "\
Agents run this command, not people: `dstream install claude-code` registers it for every
Claude Code hook event. It reads the event from stdin, stores it through the daemon (`ingest`),
and answers on stdout in Claude Code's format:

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
pub(super) struct Settings {
    /// The `source` the daemon's mapping plugins know the agent by.
    pub(super) source: &'static str,
    pub(super) socket: PathBuf,
    /// How long the whole exchange may take (`DSTREAM_HOOK_TIMEOUT_MS`).
    pub(super) timeout: Duration,
    pub(super) fail_closed: bool,
    pub(super) debug: bool,
}

impl Settings {
    /// The settings, and a note on an environment value that was not taken as given.
    pub(super) fn new(args: HookArgs) -> (Settings, Option<String>) {
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
            source: args.agent.source(),
            socket: args
                .socket
                .unwrap_or_else(dstream_sdk::socket::default_socket_path),
            timeout: Duration::from_millis(timeout_ms),
            fail_closed: args.fail_closed || env_flag("DSTREAM_HOOK_FAIL_CLOSED"),
            debug: env_flag("DSTREAM_HOOK_DEBUG"),
        };
        (settings, note)
    }
}
