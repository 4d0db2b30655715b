//! When no daemon answers: start one (unless autostart is off), and if none answers within the
//! bound either, write the event to the spool, durably, for the daemon to take in later. The
//! session is then complete in dstream whatever happened to the daemon.
//!
//! Only this slow path reads the config file: it names the data directory (where the spool
//! is) and whether to autostart. The hook's own socket wins over the config's, so the daemon
//! started is the one the hook talks to.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::autostart::{self, Launch, Started};
use crate::config::{Config, DaemonFlags};
use crate::spool::SpoolRecord;
use crate::spool::write::{SpoolError, SpoolWriter};
use dstream_sdk::protocol::DEFAULT_MAX_FRAME_BYTES;

use crate::hook::args::Program;
use crate::hook::fit::fit;
use crate::hook::input::Input;

/// Room in a frame for the JSON-RPC envelope (as when sending), so a spooled event fits one.
const ENVELOPE_ROOM: usize = 4096;

/// The `dstream` that starts a daemon: this program for `dstream hook`; for the lean
/// `dstream-hook`, the `dstream` beside it (installed together; without one there, the start
/// fails and the event is spooled, and `dstream doctor` says so).
fn daemon_exe(program: Program) -> PathBuf {
    let exe = std::env::current_exe();
    match (program, exe) {
        (Program::Dstream, Ok(exe)) => exe,
        (Program::Lean, Ok(exe)) => {
            exe.with_file_name(format!("dstream{}", std::env::consts::EXE_SUFFIX))
        }
        (_, Err(_)) => PathBuf::from("dstream"),
    }
}

pub(crate) struct Fallback {
    launch: Launch,
    autostart: bool,
    spool: SpoolWriter,
    /// A problem with the config file, said on stderr (the defaults were used).
    pub(crate) note: Option<String>,
}

impl Fallback {
    /// Resolves the config as `dstream daemon` would, with the hook's socket.
    pub(crate) fn resolve(socket: &Path, program: Program) -> Fallback {
        let flags = DaemonFlags {
            socket: Some(socket.to_path_buf()),
            ..DaemonFlags::default()
        };
        let (config, note) = match Config::resolve(&flags) {
            Ok(c) => (c, None),
            Err(e) => {
                let mut c = Config::default();
                c.daemon.socket = socket.to_path_buf();
                (c, Some(format!("{e}; using the defaults")))
            }
        };
        let data_dir = config.data_dir();
        Fallback {
            launch: Launch {
                exe: daemon_exe(program),
                config: config.file.clone(),
                socket: socket.to_path_buf(),
                data_dir: data_dir.clone(),
            },
            autostart: config.daemon.autostart && !autostart::disabled_by_env(),
            spool: SpoolWriter::new(&data_dir, config.daemon.spool_max_bytes),
            note,
        }
    }

    pub(crate) fn autostart(&self) -> bool {
        self.autostart
    }

    /// Starts a daemon, waiting for it to answer at most the autostart bound, or `within`
    /// if that is shorter.
    pub(crate) fn start(&self, within: Duration) -> Result<Started, String> {
        autostart::ensure_running(&self.launch, autostart::wait_bound().min(within))
            .map_err(|e| e.to_string())
    }

    /// Writes the event to the spool, durably. `answered` is what the hook told the agent
    /// when it decided the call itself (`deny` when failing closed).
    pub(crate) fn spool(
        &self,
        source: &str,
        input: &mut Input,
        answered: Option<&str>,
    ) -> Result<PathBuf, SpoolError> {
        fit(&mut input.event, DEFAULT_MAX_FRAME_BYTES - ENVELOPE_ROOM);
        let record = SpoolRecord {
            v: crate::spool::RECORD_VERSION,
            received_ms: input.received_ms,
            source: source.to_string(),
            session_id: input
                .session_id
                .clone()
                .filter(|s| dstream_sdk::validate_session_id(s).is_ok()),
            answered: answered.map(str::to_string),
            event: &input.event,
        };
        self.spool.write("hook", &[record])
    }
}
