//! When no daemon answers: start one (unless autostart is off), and if none answers within the
//! bound either, write the event to the spool, durably, for the daemon to take in later. The
//! session is then complete in dstream whatever happened to the daemon.
//!
//! Only this slow path reads the config file: it names the data directory (where the spool
//! is) and whether to autostart. The hook's own socket wins over the config's, so the daemon
//! started is the one the hook talks to.

use std::path::{Path, PathBuf};

use dstream_daemon::autostart::{self, Launch, Started};
use dstream_daemon::config::{Config, DaemonFlags};
use dstream_daemon::spool::SpoolRecord;
use dstream_daemon::spool::write::{SpoolError, SpoolWriter};
use dstream_sdk::protocol::DEFAULT_MAX_FRAME_BYTES;

use super::fit::fit;
use super::input::Input;

/// Room in a frame for the JSON-RPC envelope (as when sending), so a spooled event fits one.
const ENVELOPE_ROOM: usize = 4096;

pub(super) struct Fallback {
    launch: Launch,
    autostart: bool,
    spool: SpoolWriter,
    /// A problem with the config file, said on stderr (the defaults were used).
    pub(super) note: Option<String>,
}

impl Fallback {
    /// Resolves the config as `dstream daemon` would, with the hook's socket.
    pub(super) fn resolve(socket: &Path) -> Fallback {
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
                exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("dstream")),
                config: config.file.clone(),
                socket: socket.to_path_buf(),
                data_dir: data_dir.clone(),
            },
            autostart: config.daemon.autostart && !autostart::disabled_by_env(),
            spool: SpoolWriter::new(&data_dir, config.daemon.spool_max_bytes),
            note,
        }
    }

    pub(super) fn autostart(&self) -> bool {
        self.autostart
    }

    /// Starts a daemon, waiting at most the autostart bound for it to answer.
    pub(super) fn start(&self) -> Result<Started, String> {
        autostart::ensure_running(&self.launch, autostart::wait_bound()).map_err(|e| e.to_string())
    }

    /// Writes the event to the spool, durably. `answered` is what the hook told the agent
    /// when it decided the call itself (`deny` when failing closed).
    pub(super) fn spool(
        &self,
        source: &str,
        input: &mut Input,
        answered: Option<&str>,
    ) -> Result<PathBuf, SpoolError> {
        fit(&mut input.event, DEFAULT_MAX_FRAME_BYTES - ENVELOPE_ROOM);
        let record = SpoolRecord {
            v: dstream_daemon::spool::RECORD_VERSION,
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
