//! The real agent CLIs, installed from the npm registry and run offline against the mock model
//! servers of [`crate::mock_model`].
//!
//! [`ensure_installed`] installs the versions pinned by `tests/agents/package-lock.json` into a
//! cache outside the clone (`$DSTREAM_AGENT_CACHE`, default `$HOME/.cache/dstream/agents`) and
//! reinstalls only when the package files change. [`AgentEnv`] is a throwaway HOME, XDG dirs and
//! project dir; [`run_claude`], [`run_opencode`] and [`run_sdk_query`] run one agent in it with a
//! timeout. The caller owns the `AgentEnv`, so it can put hook settings or plugins into the
//! project (or HOME) before the run and read what they wrote afterwards.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mock_model::MockModel;

/// Default deadline for one agent run. A run against the mocks takes seconds; this only stops a
/// wedged agent from hanging the suite.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// The versions pinned in `tests/agents/package.json` (and its lockfile).
pub const CLAUDE_CODE_VERSION: &str = "2.1.330";
pub const OPENCODE_VERSION: &str = "1.18.33";
pub const CLAUDE_AGENT_SDK_VERSION: &str = "0.3.330";

/// Model name the OpenCode runs use: provider `dstream-mock`, model `mock-model`.
pub const OPENCODE_MODEL: &str = "dstream-mock/mock-model";

/// Where the installed agents are.
#[derive(Clone, Debug)]
pub struct AgentPaths {
    /// The cache dir holding `package.json`, `package-lock.json` and `node_modules/`.
    pub cache_dir: PathBuf,
    pub node_modules: PathBuf,
    /// The native `claude` executable (Claude Code).
    pub claude: PathBuf,
    /// The native `opencode` executable.
    pub opencode: PathBuf,
}

/// The package files that pin the agents: `tests/agents/` of this crate.
pub fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("agents")
}

/// `$DSTREAM_AGENT_CACHE`, else `$HOME/.cache/dstream/agents`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("DSTREAM_AGENT_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    crate::npm_cache::cache_root("agents")
}

/// Install the pinned agents into the cache if needed and return their paths.
///
/// Installs when the package files changed since the last install, or when an executable is
/// missing (see [`crate::npm_cache::ensure`]).
pub fn ensure_installed() -> AgentPaths {
    try_ensure_installed().unwrap_or_else(|e| panic!("installing the agent CLIs failed: {e:#}"))
}

pub fn try_ensure_installed() -> anyhow::Result<AgentPaths> {
    crate::npm_cache::ensure(&package_dir(), &cache_dir(), resolve)
}

/// Paths of the installed executables, straight from the platform packages.
fn resolve(cache: &Path) -> anyhow::Result<AgentPaths> {
    let nm = cache.join("node_modules");
    let (os, arch) = (node_os(), node_arch());
    let musl = is_musl();
    let mut claude_pkgs = Vec::new();
    if musl {
        claude_pkgs.push(format!("claude-code-{os}-{arch}-musl"));
    }
    claude_pkgs.push(format!("claude-code-{os}-{arch}"));
    let claude = claude_pkgs
        .iter()
        .map(|p| nm.join("@anthropic-ai").join(p).join("claude"))
        .find(|p| is_executable(p))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no Claude Code executable among {claude_pkgs:?} in {}",
                nm.display()
            )
        })?;

    let oc_os = if os == "win32" { "windows" } else { os };
    let base = format!("opencode-{oc_os}-{arch}");
    let baseline = arch == "x64" && !has_avx2();
    let mut oc_pkgs = Vec::new();
    match (musl, baseline) {
        (true, true) => oc_pkgs.extend([format!("{base}-baseline-musl"), format!("{base}-musl")]),
        (true, false) => oc_pkgs.extend([format!("{base}-musl"), format!("{base}-baseline-musl")]),
        (false, true) => oc_pkgs.extend([format!("{base}-baseline"), base.clone()]),
        (false, false) => oc_pkgs.extend([base.clone(), format!("{base}-baseline")]),
    }
    let opencode = oc_pkgs
        .iter()
        .map(|p| nm.join(p).join("bin/opencode"))
        .find(|p| is_executable(p))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no OpenCode executable among {oc_pkgs:?} in {}",
                nm.display()
            )
        })?;

    let sdk = nm.join("@anthropic-ai/claude-agent-sdk/sdk.mjs");
    anyhow::ensure!(sdk.is_file(), "no {}", sdk.display());
    Ok(AgentPaths {
        cache_dir: cache.to_path_buf(),
        node_modules: nm,
        claude,
        opencode,
    })
}

fn node_os() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        "windows" => "win32",
        other => other,
    }
}

fn node_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn is_musl() -> bool {
    cfg!(target_env = "musl") || Path::new("/etc/alpine-release").exists()
}

fn has_avx2() -> bool {
    fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.split_whitespace().any(|w| w == "avx2"))
        .unwrap_or(true)
}

fn is_executable(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A throwaway environment for one agent run: HOME, the XDG dirs and a project dir, all under
/// one temporary root that is removed on drop.
pub struct AgentEnv {
    root: tempfile::TempDir,
    pub home: PathBuf,
    pub project: PathBuf,
    pub xdg_config: PathBuf,
    pub xdg_data: PathBuf,
    pub xdg_cache: PathBuf,
    pub xdg_state: PathBuf,
}

impl Default for AgentEnv {
    fn default() -> Self {
        AgentEnv::new()
    }
}

impl AgentEnv {
    pub fn new() -> AgentEnv {
        let root = tempfile::Builder::new()
            .prefix("dstream-agent-")
            .tempdir()
            .expect("tempdir");
        let r = root.path().to_path_buf();
        let env = AgentEnv {
            home: r.join("home"),
            project: r.join("project"),
            xdg_config: r.join("xdg/config"),
            xdg_data: r.join("xdg/data"),
            xdg_cache: r.join("xdg/cache"),
            xdg_state: r.join("xdg/state"),
            root,
        };
        for d in [
            &env.home,
            &env.project,
            &env.xdg_config,
            &env.xdg_data,
            &env.xdg_cache,
            &env.xdg_state,
        ] {
            fs::create_dir_all(d).expect("create agent env dir");
        }
        env
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Keep the directory after the test (for debugging); returns its path.
    pub fn keep(self) -> PathBuf {
        self.root.keep()
    }

    /// A command with a clean environment: only PATH, LANG, HOME, the XDG dirs, `TMPDIR` and
    /// `DSTREAM_AUTOSTART=0` from here, so nothing of the caller's session (API keys, agent settings) leaks in.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .current_dir(&self.project)
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
            )
            .env("LANG", "C.UTF-8")
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", &self.xdg_config)
            .env("XDG_DATA_HOME", &self.xdg_data)
            .env("XDG_CACHE_HOME", &self.xdg_cache)
            .env("XDG_STATE_HOME", &self.xdg_state)
            .env("TMPDIR", std::env::temp_dir())
            // A hook never starts a daemon the test did not ask for (autostart tests set it).
            .env("DSTREAM_AUTOSTART", "0");
        cmd
    }
}

/// `dstream install <agent> --project <project>`, as the agent's user would run it.
pub fn install(env: &AgentEnv, agent: &str) {
    let out = env
        .command(crate::daemon_bin())
        .args(["install", agent, "--project"])
        .arg(&env.project)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dstream install {agent}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What an agent run left behind.
#[derive(Debug)]
pub struct RunOutput {
    /// `None` when the run was killed at its deadline.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl RunOutput {
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    pub fn timed_out(&self) -> bool {
        self.status.is_none()
    }

    /// Panic with the output unless the run exited 0.
    pub fn assert_success(&self, what: &str) {
        assert!(
            self.success(),
            "{what}: status {:?} after {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status,
            self.elapsed,
            self.stdout,
            self.stderr
        );
    }
}

/// Run `cmd` (stdin null, stdout and stderr to files in `env`) in its own process group; kill
/// the group at `timeout`. Whatever the agent left running in its group is killed at the end.
pub fn run(env: &AgentEnv, mut cmd: Command, timeout: Duration) -> RunOutput {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let out_path = env.root().join(format!("run-{n}.stdout"));
    let err_path = env.root().join(format!("run-{n}.stderr"));
    cmd.stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("stdout file"))
        .stderr(File::create(&err_path).expect("stderr file"))
        .process_group(0);
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let pgid = child.id() as libc::pid_t;
    let status = crate::wait_child(&mut child, timeout);
    // SAFETY: signalling the process group this function created.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let status = match status {
        Some(s) => Some(s),
        None => {
            let _ = child.wait();
            None
        }
    };
    RunOutput {
        status,
        stdout: fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: fs::read_to_string(&err_path).unwrap_or_default(),
        elapsed: started.elapsed(),
    }
}

/// The environment variables that point Claude Code (or the Agent SDK) at an Anthropic mock
/// and keep it off the network.
pub fn claude_env(mock: &MockModel) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", mock.base_url()),
        ("ANTHROPIC_API_KEY", "sk-test".to_string()),
        ("DISABLE_TELEMETRY", "1".to_string()),
        ("DISABLE_ERROR_REPORTING", "1".to_string()),
        ("DISABLE_AUTOUPDATER", "1".to_string()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
        ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
    ]
}

/// `claude -p PROMPT --allowedTools Bash ARGS...` in `env.project`, pointed at `mock`; not yet
/// run, so the caller can add arguments or variables.
pub fn claude_command(
    paths: &AgentPaths,
    env: &AgentEnv,
    mock: &MockModel,
    prompt: &str,
    args: &[&str],
) -> Command {
    let mut cmd = env.command(&paths.claude);
    cmd.envs(claude_env(mock))
        .arg("-p")
        .arg(prompt)
        .args(["--allowedTools", "Bash"])
        .args(args);
    cmd
}

/// Run Claude Code once (see [`claude_command`]) with [`RUN_TIMEOUT`].
pub fn run_claude(
    paths: &AgentPaths,
    env: &AgentEnv,
    mock: &MockModel,
    prompt: &str,
    args: &[&str],
) -> RunOutput {
    run(
        env,
        claude_command(paths, env, mock, prompt, args),
        RUN_TIMEOUT,
    )
}

/// Write the OpenCode config that declares the mock as an OpenAI-compatible provider
/// (`dstream-mock/mock-model`) into `<root>/opencode-mock.json` and return its path; the runner
/// hands it over with `OPENCODE_CONFIG`, so the project's `opencode.json` and `.opencode/`
/// stay the caller's.
pub fn opencode_config(env: &AgentEnv, mock: &MockModel) -> PathBuf {
    let cfg = json!({
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": false,
        "share": "disabled",
        "model": OPENCODE_MODEL,
        "small_model": OPENCODE_MODEL,
        "permission": {"bash": "allow", "edit": "allow", "webfetch": "deny"},
        "provider": {
            "dstream-mock": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "dstream mock",
                "options": {"baseURL": format!("{}/v1", mock.base_url()), "apiKey": "sk-test"},
                "models": {"mock-model": {"name": "Mock model", "tool_call": true, "limit": {"context": 200000, "output": 8192}}}
            }
        }
    });
    let p = env.root().join("opencode-mock.json");
    fs::write(&p, serde_json::to_vec_pretty(&cfg).unwrap()).expect("write opencode config");
    p
}

/// The environment variables that keep OpenCode off the network.
pub fn opencode_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
        ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
        ("OPENCODE_DISABLE_SHARE", "1"),
        ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
        ("npm_config_offline", "true"),
    ]
}

/// `opencode run PROMPT --model dstream-mock/mock-model ARGS...` in `env.project`, pointed at
/// `mock`; not yet run.
pub fn opencode_command(
    paths: &AgentPaths,
    env: &AgentEnv,
    mock: &MockModel,
    prompt: &str,
    args: &[&str],
) -> Command {
    let cfg = opencode_config(env, mock);
    let mut cmd = env.command(&paths.opencode);
    cmd.envs(opencode_env())
        .env("OPENCODE_CONFIG", cfg)
        .args(["run", "--model", OPENCODE_MODEL])
        .args(args)
        .arg(prompt);
    cmd
}

/// Run OpenCode once (see [`opencode_command`]) with [`RUN_TIMEOUT`].
pub fn run_opencode(
    paths: &AgentPaths,
    env: &AgentEnv,
    mock: &MockModel,
    prompt: &str,
    args: &[&str],
) -> RunOutput {
    run(
        env,
        opencode_command(paths, env, mock, prompt, args),
        RUN_TIMEOUT,
    )
}

/// The committed Node script that runs one Agent SDK `query()` and prints every message it
/// yields as one JSON line; see `tests/agents/sdk-query.mjs`.
pub fn sdk_query_script() -> PathBuf {
    package_dir().join("sdk-query.mjs")
}

/// Run a Node ES module `script` against the installed `@anthropic-ai/claude-agent-sdk`,
/// pointed at the Anthropic `mock`, with `env.project` as its working directory.
///
/// The script is copied into `<root>/node/` next to a `node_modules` link to the cache, so it
/// can `import { query } from "@anthropic-ai/claude-agent-sdk"`. `vars` are extra environment
/// variables for the script.
pub fn run_node_script(
    paths: &AgentPaths,
    env: &AgentEnv,
    mock: &MockModel,
    script: &Path,
    vars: &[(&str, &str)],
    timeout: Duration,
) -> RunOutput {
    let dir = env.root().join("node");
    fs::create_dir_all(&dir).expect("create node dir");
    let link = dir.join("node_modules");
    if fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink(&paths.node_modules, &link).expect("link node_modules");
    }
    let name = script.file_name().expect("script file name");
    let target = dir.join(name);
    fs::copy(script, &target).unwrap_or_else(|e| panic!("copy {}: {e}", script.display()));
    let mut cmd = env.command("node");
    cmd.envs(claude_env(mock))
        .envs(vars.iter().copied())
        .arg(&target);
    run(env, cmd, timeout)
}

/// Run one Agent SDK `query()` with `prompt` (through `tests/agents/sdk-query.mjs`, with
/// `includePartialMessages: true` and `allowedTools: ["Bash"]`); stdout holds one JSON line per
/// yielded message. `options` is merged into the `query()` options.
pub fn run_sdk_query(
    paths: &AgentPaths,
    env: &AgentEnv,
    mock: &MockModel,
    prompt: &str,
    options: &Value,
) -> RunOutput {
    let opts = options.to_string();
    run_node_script(
        paths,
        env,
        mock,
        &sdk_query_script(),
        &[
            ("DSTREAM_SDK_PROMPT", prompt),
            ("DSTREAM_SDK_OPTIONS", &opts),
        ],
        RUN_TIMEOUT,
    )
}

/// Append-only helper for capture hooks: a shell script at `<root>/capture.sh` that appends
/// its stdin, as one line, to `file`. Returns the script's path.
pub fn write_capture_script(env: &AgentEnv, file: &Path) -> PathBuf {
    let p = env.root().join("capture.sh");
    let mut f = File::create(&p).expect("create capture script");
    writeln!(
        f,
        "#!/bin/sh\n# Appends the hook payload on stdin as one line, under a lock: hooks can run at once.\n\
         exec 9>>'{f}.lock'\nflock 9\n{{ tr -d '\\n'; echo; }} >> '{f}'",
        f = file.display()
    )
    .unwrap();
    drop(f);
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// Claude Code, hooked to the daemon at `socket` (`dstream install`), asked by the mock model
/// to run `command` in Bash and then to say `final_text`; runs on a thread of its own so the
/// test can decide meanwhile. The mock lives as long as the run.
pub fn spawn_claude_bash(
    paths: &AgentPaths,
    env: &AgentEnv,
    socket: &Path,
    command: &str,
    final_text: &str,
) -> std::thread::JoinHandle<RunOutput> {
    use crate::mock_model::{Reply, Script};
    install(env, "claude-code");
    let mock = MockModel::anthropic(Script::tool_then_text(Reply::bash(command), final_text));
    let mut cmd = claude_command(paths, env, &mock, "Run the command", &[]);
    cmd.envs(crate::client_env(socket));
    spawn_run(cmd, mock)
}

/// Runs `cmd` on a thread of its own, keeping `mock` up until it ends.
pub fn spawn_run(cmd: Command, mock: MockModel) -> std::thread::JoinHandle<RunOutput> {
    // Output files go to a directory of their own, which lives as long as the run.
    let files = AgentEnv::new();
    std::thread::spawn(move || {
        let out = run(&files, cmd, Duration::from_secs(150));
        drop(mock);
        out
    })
}

/// The hook events of Claude Code 2.1.330 (the list its binary validates settings
/// against): the tests' own record, kept apart from what `dstream install` writes.
pub const CLAUDE_HOOK_EVENTS: &[&str] = &[
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "Notification",
    "UserPromptSubmit",
    "UserPromptExpansion",
    "SessionStart",
    "SessionEnd",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "PreModelSwitch",
    "PostModelSwitch",
    "PermissionRequest",
    "PermissionDenied",
    "Setup",
    "TeammateIdle",
    "TaskCreated",
    "TaskCompleted",
    "Elicitation",
    "ElicitationResult",
    "ConfigChange",
    "WorktreeCreate",
    "WorktreeRemove",
    "InstructionsLoaded",
    "CwdChanged",
    "FileChanged",
    "DirectoryAdded",
    "MessageDisplay",
];
