//! Crash isolation for native plugins: `isolation = "process"` runs the library in a child
//! `dstream plugin-host` process, so a segfault or an abort there costs one call, not the
//! daemon.
//!
//! Protocol, one JSON object per line each way, one request in flight:
//! - child → daemon, once after loading: `{"ready": {"name", "sources", "priority", "hooks"}}`
//!   or `{"error": "..."}`;
//! - daemon → child: `{"hook": "map", "raw": …, "ctx": {"source", "session_id"}}`, or
//!   `{"hook": "process" | "decide" | "on_event", "event": …}`;
//! - child → daemon: `{"ok": [events]}` (map, process), `{"ok": verdict}` (decide),
//!   `{"ok": null}` (on_event), or `{"error": "..."}`.
//!
//! The daemon side is a plugin thread like any other (the same [`Call`] queue). When the child
//! dies, or does not answer within the call's deadline (it is then killed), the call in flight
//! fails, so the event is kept by the error policy (unmapped, or passed through), and the child
//! is started again on a later call, backing off from 100 ms to 5 s while it keeps dying.

use crate::util::backoff::Backoff;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};

use super::contract::{CALL_QUEUE, Call, Hooks, Input, Limits, PluginError, PluginMeta, Shared};
use super::native;

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// One running child and the thread reading its answers.
struct Host {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Host {
    fn start(
        exe: &Path,
        lib: &Path,
        cache: &Path,
        config: &Json,
        wait: Duration,
    ) -> Result<(Host, PluginMeta), PluginError> {
        let load = |m: String| PluginError::Load(m);
        let mut child = Command::new(exe)
            .arg("plugin-host")
            .arg(lib)
            .arg(cache)
            .arg(config.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| load(format!("cannot start `{} plugin-host`: {e}", exe.display())))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::Builder::new()
            .name("dstream-plugin-host-reader".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| load(format!("cannot start its reader: {e}")))?;
        let mut host = Host {
            child,
            stdin,
            lines,
        };
        let first = host.lines.recv_timeout(wait).map_err(|_| {
            host.kill();
            load(format!(
                "the plugin-host did not report within {} ms",
                wait.as_millis()
            ))
        })?;
        let v: Json =
            serde_json::from_str(&first).map_err(|e| load(format!("the plugin-host said: {e}")))?;
        if let Some(e) = v.get("error").and_then(Json::as_str) {
            host.kill();
            return Err(load(e.to_string()));
        }
        let r = &v["ready"];
        let mut hooks = Hooks::empty();
        for h in r["hooks"].as_array().into_iter().flatten() {
            hooks |= h
                .as_str()
                .and_then(Hooks::from_name)
                .unwrap_or(Hooks::empty());
        }
        let meta = PluginMeta {
            name: r["name"].as_str().unwrap_or("?").to_string(),
            sources: r["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect(),
            priority: r["priority"].as_i64().unwrap_or(0),
            hooks,
            process_if_contains: None,
        };
        Ok((host, meta))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends one request and waits for its answer, at most `wait`.
    fn ask(&mut self, request: &Json, wait: Duration) -> Result<Json, String> {
        let mut line = request.to_string();
        line.push('\n');
        if let Err(e) = self
            .stdin
            .write_all(line.as_bytes())
            .and_then(|_| self.stdin.flush())
        {
            return Err(self.died(&format!("cannot write to it: {e}")));
        }
        match self.lines.recv_timeout(wait) {
            Ok(line) => {
                serde_json::from_str(&line).map_err(|e| format!("it answered invalid JSON: {e}"))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.kill();
                Err(format!(
                    "it did not answer within {} ms and was killed",
                    wait.as_millis()
                ))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(self.died("it closed its output")),
        }
    }

    fn died(&mut self, what: &str) -> String {
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
        format!("the plugin-host process died ({what}; {status})")
    }
}

/// Starts the plugin in a child process and returns what it declares and its call queue.
pub fn spawn(
    lib: &Path,
    cache: &Path,
    config: Json,
    limits: Limits,
    shared: Arc<Shared>,
) -> Result<(PluginMeta, SyncSender<Call>), PluginError> {
    let exe = std::env::current_exe()
        .map_err(|e| PluginError::Load(format!("cannot find the dstream binary: {e}")))?;
    let load_wait = limits.call_timeout * 4 + Duration::from_secs(2);
    let (host, meta) = Host::start(&exe, lib, cache, &config, load_wait)?;
    let (tx, rx) = mpsc::sync_channel::<Call>(CALL_QUEUE);
    let (lib, cache, name) = (lib.to_path_buf(), cache.to_path_buf(), meta.name.clone());
    std::thread::Builder::new()
        .name(format!(
            "dstream-isolated-{}",
            native::stem(&lib.file_name().unwrap_or_default().to_string_lossy())
        ))
        .spawn(move || {
            let mut keeper = Keeper {
                exe,
                lib,
                cache,
                config,
                limits,
                name,
                host: Some(host),
                backoff: Backoff::new(BACKOFF_MIN, BACKOFF_MAX),
                next_start: Instant::now(),
            };
            keeper.serve(&rx, &shared);
            if let Some(h) = keeper.host.as_mut() {
                h.kill();
            }
        })
        .map_err(|e| PluginError::Load(format!("cannot start its thread: {e}")))?;
    Ok((meta, tx))
}

/// Keeps a child running for the plugin thread, restarting it with backoff.
struct Keeper {
    exe: PathBuf,
    lib: PathBuf,
    cache: PathBuf,
    config: Json,
    limits: Limits,
    name: String,
    host: Option<Host>,
    backoff: Backoff,
    next_start: Instant,
}

impl Keeper {
    fn serve(&mut self, rx: &Receiver<Call>, shared: &Shared) {
        let name = self.name.clone();
        super::contract::serve_calls(rx, shared, &name, |hook, input| self.run(hook, input));
    }

    fn run(&mut self, hook: Hooks, input: Input) -> Result<Vec<Json>, PluginError> {
        let request = match (hook, input) {
            (
                Hooks::MAP,
                Input::Map {
                    raw,
                    source,
                    session_id,
                },
            ) => {
                json!({"hook": "map", "raw": *raw, "ctx": {"source": source, "session_id": session_id}})
            }
            (h, Input::Event(event)) => json!({"hook": h.name(), "event": *event}),
            _ => return Err(PluginError::Call("a call the plugin cannot take".into())),
        };
        if self.host.is_none() {
            // Answer at once while backing off: a call must not wait out a restart.
            if Instant::now() < self.next_start {
                return Err(PluginError::Call(
                    "its plugin-host process is restarting".into(),
                ));
            }
            let wait = self.limits.call_timeout * 4 + Duration::from_secs(2);
            match Host::start(&self.exe, &self.lib, &self.cache, &self.config, wait) {
                Ok((host, _)) => {
                    tracing::info!(plugin = %self.name, "plugin-host process restarted");
                    self.host = Some(host);
                }
                Err(e) => {
                    self.failed();
                    return Err(PluginError::Call(format!(
                        "cannot restart its plugin-host: {e}"
                    )));
                }
            }
        }
        // A little less than the pipeline waits, so the child is killed and the call counted
        // as a failure rather than abandoned.
        let wait = self
            .limits
            .call_timeout
            .saturating_sub(Duration::from_millis(20))
            .max(Duration::from_millis(10));
        let host = self.host.as_mut().expect("started above");
        match host.ask(&request, wait) {
            Ok(v) => {
                self.backoff.reset();
                if let Some(e) = v.get("error").and_then(Json::as_str) {
                    return Err(PluginError::Call(e.to_string()));
                }
                let ok = v.get("ok").cloned().unwrap_or(Json::Null);
                Ok(match (hook, ok) {
                    (Hooks::DECIDE, verdict) => vec![verdict],
                    (_, Json::Array(events)) => events,
                    _ => Vec::new(),
                })
            }
            Err(why) => {
                tracing::error!(plugin = %self.name, %why, "plugin-host failed");
                if let Some(mut h) = self.host.take() {
                    h.kill();
                }
                self.failed();
                Err(PluginError::Call(why))
            }
        }
    }

    fn failed(&mut self) {
        self.next_start = Instant::now() + self.backoff.next_delay(None);
    }
}

/// `dstream plugin-host LIBRARY CACHE CONFIG_JSON`: the child side. Loads the library and
/// answers requests on stdin until it closes.
pub fn host_main(lib: &Path, cache: &Path, config: &str) -> ExitCode {
    let config: Json = serde_json::from_str(config).unwrap_or_else(|_| json!({}));
    let mut out = std::io::stdout().lock();
    let plugin = match native::Local::load(lib, cache, &config) {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(out, "{}", json!({"error": e.to_string()}));
            return ExitCode::FAILURE;
        }
    };
    let meta = plugin.meta();
    let ready = json!({"ready": {"name": meta.name, "sources": meta.sources, "priority": meta.priority, "hooks": meta.hooks.names()}});
    if writeln!(out, "{ready}").and_then(|_| out.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let Ok(req) = serde_json::from_str::<Json>(&line) else {
            continue;
        };
        let hook = match req["hook"].as_str().and_then(Hooks::from_name) {
            Some(h) => h,
            None => {
                let _ = writeln!(out, "{}", json!({"error": "unknown hook"}));
                continue;
            }
        };
        let input = if hook == Hooks::MAP {
            Input::Map {
                raw: Arc::new(req["raw"].clone()),
                source: req["ctx"]["source"].as_str().unwrap_or("").to_string(),
                session_id: req["ctx"]["session_id"].as_str().map(str::to_string),
            }
        } else {
            Input::Event(Arc::new(req["event"].clone()))
        };
        let answer = match plugin.call(hook, input) {
            Ok(mut out) if hook == Hooks::DECIDE => json!({"ok": out.pop().unwrap_or(Json::Null)}),
            Ok(out) => json!({"ok": out}),
            Err(e) => json!({"error": e.to_string()}),
        };
        if writeln!(out, "{answer}").and_then(|_| out.flush()).is_err() {
            break;
        }
    }
    plugin.shutdown();
    ExitCode::SUCCESS
}
