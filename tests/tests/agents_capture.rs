//! Captures the real hook payloads of the agent CLIs into `tests/fixtures/` (see
//! `tests/fixtures/README.md`). Not part of the normal suite: run it by hand with
//!
//! ```text
//! DSTREAM_CAPTURE_DIR=tests/fixtures cargo test -p dstream-tests --test agents_capture -- --ignored --test-threads=1
//! ```
//!
//! Each test drives one agent through scripted scenarios against a mock model, with throwaway
//! capture hooks that append every payload as one JSON line, then writes the lines (temp paths
//! replaced by stable placeholders) to `$DSTREAM_CAPTURE_DIR/<agent>/run-<scenario>.jsonl`.
#![cfg(unix)]

use std::fs;
use std::path::{Path, PathBuf};

use dstream_tests::agents::{self, AgentEnv, AgentPaths, RunOutput};
use dstream_tests::mock_model::{MockModel, Reply, Script};
use serde_json::{Value, json};

fn out_dir() -> Option<PathBuf> {
    std::env::var_os("DSTREAM_CAPTURE_DIR").map(PathBuf::from)
}

/// Replace the temp paths of `env` by stable placeholders, most specific first.
fn scrub(text: &str, env: &AgentEnv, mock: Option<&MockModel>) -> String {
    let root = env.root().to_string_lossy().into_owned();
    // Claude Code names per-project dirs after the path with every non-alphanumeric made `-`.
    let sanitized = |p: &Path| -> String {
        p.to_string_lossy()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect()
    };
    let rel = |p: &Path| p.to_string_lossy().trim_start_matches('/').to_string();
    let mut s = text
        .replace(&sanitized(&env.project), "-tmp-project")
        .replace(&env.project.to_string_lossy().into_owned(), "/tmp/project")
        .replace(&env.home.to_string_lossy().into_owned(), "/tmp/home")
        .replace(&format!("{root}/xdg"), "/tmp/xdg")
        .replace(&root, "/tmp/agent-root")
        // OpenCode's session `path` is the project path without its leading slash.
        .replace(&rel(&env.project), "tmp/project");
    if let Some(m) = mock {
        s = s
            .replace(&m.base_url(), "http://127.0.0.1:PORT")
            .replace(&m.addr().to_string(), "127.0.0.1:PORT");
    }
    s
}

fn write_fixture(agent: &str, name: &str, lines: &str) {
    let Some(dir) = out_dir() else { return };
    let dir = dir.join(agent);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(format!("run-{name}.jsonl")), lines).unwrap();
}

/// Dump every request the mock saw to `<root>/requests.txt` (for looking at by hand).
fn dump_requests(env: &AgentEnv, mock: &MockModel, name: &str) {
    let mut s = String::new();
    for r in mock.requests() {
        s.push_str(&format!("=== {} {}\n", r.method, r.path));
        for (k, v) in &r.headers {
            s.push_str(&format!("{k}: {v}\n"));
        }
        s.push_str(&r.body_str());
        s.push_str("\n\n");
    }
    let dir = std::env::var_os("DSTREAM_CAPTURE_DEBUG")
        .map(PathBuf::from)
        .unwrap_or_else(|| env.root().to_path_buf());
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(format!("requests-{name}.txt")), s).unwrap();
}

fn report(what: &str, out: &RunOutput) {
    eprintln!(
        "{what}: status {:?} in {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status, out.elapsed, out.stdout, out.stderr
    );
}

/// `.claude/settings.json` with a capture hook on every event.
fn claude_capture_settings(capture: &Path) -> Value {
    let mut hooks = serde_json::Map::new();
    for ev in agents::CLAUDE_HOOK_EVENTS {
        hooks.insert(
            ev.to_string(),
            json!([{"hooks": [{"type": "command", "command": capture.to_string_lossy()}]}]),
        );
    }
    json!({"hooks": hooks})
}

struct ClaudeCapture {
    env: AgentEnv,
    file: PathBuf,
}

fn claude_capture_env() -> ClaudeCapture {
    let env = AgentEnv::new();
    let file = env.root().join("hooks.jsonl");
    let capture = agents::write_capture_script(&env, &file);
    fs::create_dir_all(env.project.join(".claude")).unwrap();
    fs::write(
        env.project.join(".claude/settings.json"),
        serde_json::to_vec_pretty(&claude_capture_settings(&capture)).unwrap(),
    )
    .unwrap();
    ClaudeCapture { env, file }
}

fn captured(c: &ClaudeCapture) -> String {
    fs::read_to_string(&c.file).unwrap_or_default()
}

fn events_of(lines: &str) -> Vec<String> {
    lines
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            v.get("hook_event_name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

fn claude_paths() -> AgentPaths {
    agents::ensure_installed()
}

/// One Claude Code capture: a fresh env with capture hooks, `setup` on it, then one or more
/// `claude -p` runs (each `(prompt, extra args)`) against one mock with `script`.
fn claude_scenario(
    name: &str,
    script: Script,
    runs: &[(&str, &[&str])],
    setup: impl FnOnce(&AgentEnv),
) -> (String, Vec<RunOutput>) {
    let paths = claude_paths();
    let c = claude_capture_env();
    setup(&c.env);
    let mock = MockModel::anthropic(script);
    let mut outs = Vec::new();
    for (prompt, args) in runs {
        let out = agents::run_claude(&paths, &c.env, &mock, prompt, args);
        report(&format!("claude {name}"), &out);
        outs.push(out);
    }
    dump_requests(&c.env, &mock, &format!("claude-{name}"));
    let lines = captured(&c);
    eprintln!("{name} events: {:?}", events_of(&lines));
    eprintln!("{name} saw tool result: {}", mock.saw_tool_result());
    write_fixture("claude-code", name, &scrub(&lines, &c.env, Some(&mock)));
    if std::env::var_os("DSTREAM_CAPTURE_KEEP").is_some() {
        eprintln!("kept {}", c.env.keep().display());
    }
    (lines, outs)
}

fn only(filter: &str) -> bool {
    std::env::var("DSTREAM_CAPTURE_ONLY").map_or(true, |f| f.split(',').any(|x| x == filter))
}

#[test]
#[ignore = "captures fixtures; run by hand"]
fn capture_claude() {
    if only("basic") {
        claude_scenario(
            "basic",
            Script::tool_then_text(
                Reply::bash("echo hello-from-dstream"),
                "The command printed hello-from-dstream.",
            ),
            &[("Run echo hello-from-dstream", &[])],
            |_| {},
        );
    }
    if only("failure") {
        claude_scenario(
            "tool-failure",
            Script::tool_then_text(
                Reply::bash("ls /nonexistent-dstream-dir"),
                "The directory does not exist.",
            ),
            &[("List /nonexistent-dstream-dir", &[])],
            |_| {},
        );
    }
    if only("subagent") {
        claude_scenario(
            "subagent",
            Script::new()
                .on(
                    "dstream-subagent-task",
                    vec![
                        Reply::bash("echo hello-from-subagent"),
                        Reply::text("The subagent ran echo."),
                    ],
                )
                .on(
                    "",
                    vec![
                        Reply::tool(
                            "Agent",
                            json!({"description": "Run echo in a subagent", "prompt": "dstream-subagent-task: run echo hello-from-subagent", "subagent_type": "general-purpose"}),
                        ),
                        Reply::text("The subagent is done."),
                    ],
                ),
            &[("Delegate an echo to a subagent", &[])],
            |_| {},
        );
    }
    if only("permission") {
        claude_scenario(
            "permission",
            Script::tool_then_text(
                Reply::tool(
                    "Write",
                    json!({"file_path": "/tmp/dstream-never-written.txt", "content": "x"}),
                ),
                "Writing was not allowed.",
            ),
            &[("Write a file", &[])],
            |_| {},
        );
    }
    if only("stopfailure") {
        claude_scenario(
            "stop-failure",
            Script::new().on(
                "",
                vec![Reply::anthropic_error(
                    500,
                    "api_error",
                    "mock model: internal error",
                )],
            ),
            &[("Say hello", &[])],
            |_| {},
        );
    }

    if only("subagent-sync") {
        claude_scenario(
            "subagent-sync",
            Script::claude_subagent_echo(),
            &[("Delegate an echo to a subagent and wait for it", &[])],
            |_| {},
        );
    }
    if only("extras") {
        let extra_dir =
            std::env::temp_dir().join(format!("dstream-extra-dir-{}", std::process::id()));
        fs::create_dir_all(&extra_dir).unwrap();
        let extra = extra_dir.to_string_lossy().into_owned();
        claude_scenario(
            "session-extras",
            Script::new().on(
                "",
                vec![
                    Reply::bash("cd sub && echo in-sub"),
                    Reply::bash(
                        "echo changed > ../watched.txt && sh ../touch-settings.sh && sleep 2",
                    ),
                    Reply::text("done"),
                ],
            ),
            &[("/dstream-hello", &["--add-dir", &extra])],
            |env| {
                fs::write(
                    env.project.join("CLAUDE.md"),
                    "# dstream test project\n\nRun harmless commands only.\n",
                )
                .unwrap();
                fs::create_dir_all(env.project.join(".claude/commands")).unwrap();
                fs::write(
                    env.project.join(".claude/commands/dstream-hello.md"),
                    "---\ndescription: Say hello from a custom command\n---\nRun echo hello-from-command\n",
                )
                .unwrap();
                fs::create_dir_all(env.project.join("sub")).unwrap();
                fs::write(env.project.join("watched.txt"), "original\n").unwrap();
                // Changes the local settings behind the permission check's back (a direct write
                // to .claude/ asks for permission, which -p denies).
                fs::write(
                    env.project.join("touch-settings.sh"),
                    "cd \"$(dirname \"$0\")\" && printf '{\"env\": {\"DSTREAM_TOUCHED\": \"1\"}}\\n' > .claude/settings.local.json\n",
                )
                .unwrap();
                let path = env.project.join(".claude/settings.json");
                let mut v: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
                let cmd = v["hooks"]["PreToolUse"][0]["hooks"][0]["command"].clone();
                v["hooks"]["FileChanged"] = json!([{"matcher": "watched.txt", "hooks": [{"type": "command", "command": cmd}]}]);
                fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
            },
        );
        let _ = fs::remove_dir_all(&extra_dir);
    }
    if only("compact") {
        claude_scenario(
            "compact",
            Script::tool_then_text(
                Reply::bash("echo hello-from-dstream"),
                "The command printed hello-from-dstream.",
            ),
            &[
                ("Run echo hello-from-dstream", &[]),
                ("/compact", &["--continue"]),
                ("/model claude-haiku-4-5", &["--continue"]),
            ],
            |_| {},
        );
    }
    if only("worktree") {
        claude_scenario(
            "worktree",
            Script::new()
                .on(
                    "dstream-subagent-task",
                    vec![
                        Reply::bash("echo hello-from-worktree"),
                        Reply::text("The subagent ran echo in a worktree."),
                    ],
                )
                .on(
                    "",
                    vec![
                        Reply::tool(
                            "Agent",
                            json!({"description": "Run echo in a worktree", "prompt": "dstream-subagent-task: run echo hello-from-worktree", "subagent_type": "general-purpose", "run_in_background": false, "isolation": "worktree"}),
                        ),
                        Reply::text("The subagent is done."),
                    ],
                ),
            &[("Delegate an echo to a subagent in a worktree", &[])],
            |env| {
                let git = |args: &[&str]| {
                    let st = std::process::Command::new("git")
                        .args(args)
                        .current_dir(&env.project)
                        .env("HOME", &env.home)
                        .env("GIT_AUTHOR_NAME", "t").env("GIT_AUTHOR_EMAIL", "t@example.com")
                        .env("GIT_COMMITTER_NAME", "t").env("GIT_COMMITTER_EMAIL", "t@example.com")
                        .status()
                        .unwrap();
                    assert!(st.success(), "git {args:?}");
                };
                // A WorktreeCreate hook replaces Claude Code's own `git worktree add`: it must
                // print the new worktree's path. This one captures its payload, then does that.
                let capture = env.root().join("capture.sh");
                let wt = env.root().join("worktree-create.sh");
                fs::write(
                    &wt,
                    format!(
                        "#!/bin/sh\npayload=$(cat)\nprintf '%s' \"$payload\" | '{}'\n\
                         name=$(printf '%s' \"$payload\" | sed -n 's/.*\"name\":\"\\([^\"]*\\)\".*/\\1/p')\n\
                         dir=\"$CLAUDE_PROJECT_DIR/.claude/worktrees/$name\"\n\
                         git -C \"$CLAUDE_PROJECT_DIR\" worktree add -q -b \"$name\" \"$dir\" >&2 && echo \"$dir\"\n",
                        capture.display()
                    ),
                )
                .unwrap();
                fs::set_permissions(&wt, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
                let path = env.project.join(".claude/settings.json");
                let mut v: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
                v["hooks"]["WorktreeCreate"] = json!([{"hooks": [{"type": "command", "command": wt.to_string_lossy()}]}]);
                fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
                fs::write(env.project.join("README"), "x\n").unwrap();
                git(&["init", "-q", "-b", "main"]);
                git(&["add", "README"]);
                git(&["commit", "-qm", "init"]);
            },
        );
    }
    if only("setup") {
        claude_scenario(
            "setup",
            Script::new(),
            &[
                ("Say hello", &["--init"]),
                ("Say hello", &["--maintenance"]),
            ],
            |_| {},
        );
    }
    if only("denied") {
        // Auto mode's safety check runs on Anthropic's side; through a mock it cannot run,
        // so the action is refused and PermissionDenied fires (and claude exits 1).
        {
            let mode = "auto";
            claude_scenario(
                "permission-denied",
                Script::tool_then_text(
                    Reply::tool(
                        "Write",
                        json!({"file_path": "/tmp/dstream-never-written.txt", "content": "x"}),
                    ),
                    "Writing was not allowed.",
                ),
                &[("Write a file", &["--permission-mode", mode])],
                |_| {},
            );
        }
    }
}

/// One OpenCode capture: a fresh env with the capture plugin in `.opencode/plugins/`, then one
/// `opencode run` against an OpenAI-compatible mock with `script`.
fn opencode_scenario(
    name: &str,
    script: Script,
    prompt: &str,
    setup: impl FnOnce(&AgentEnv),
) -> (String, RunOutput) {
    let paths = agents::ensure_installed();
    let env = AgentEnv::new();
    setup(&env);
    let file = env.root().join("opencode-events.jsonl");
    let plugins = env.project.join(".opencode/plugins");
    fs::create_dir_all(&plugins).unwrap();
    fs::copy(
        agents::package_dir().join("opencode-capture-plugin.js"),
        plugins.join("dstream-capture.js"),
    )
    .unwrap();
    let mock = MockModel::openai(script);
    let mut cmd = agents::opencode_command(&paths, &env, &mock, prompt, &[]);
    cmd.env("DSTREAM_CAPTURE_FILE", &file);
    let out = agents::run(&env, cmd, agents::RUN_TIMEOUT);
    report(&format!("opencode {name}"), &out);
    dump_requests(&env, &mock, &format!("opencode-{name}"));
    let lines = fs::read_to_string(&file).unwrap_or_default();
    let kinds: Vec<String> = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| match v["hook"].as_str() {
            Some("event") => v["event"]["type"].as_str().unwrap_or("?").to_string(),
            Some(h) => h.to_string(),
            None => "?".to_string(),
        })
        .collect();
    eprintln!("{name} events: {kinds:?}");
    eprintln!("{name} saw tool result: {}", mock.saw_tool_result());
    write_fixture("opencode", name, &scrub(&lines, &env, Some(&mock)));
    if std::env::var_os("DSTREAM_CAPTURE_KEEP").is_some() {
        eprintln!("kept {}", env.keep().display());
    }
    (lines, out)
}

#[test]
#[ignore = "captures fixtures; run by hand"]
fn capture_opencode() {
    if only("basic") {
        opencode_scenario(
            "basic",
            Script::tool_then_text(
                Reply::opencode_bash("echo hello-from-dstream"),
                "The command printed hello-from-dstream.",
            ),
            "Run echo hello-from-dstream",
            |_| {},
        );
    }
    if only("failure") {
        opencode_scenario(
            "tool-failure",
            // A command that exits non-zero (the bash tool still completes), then a tool that
            // throws (state "error").
            Script::new().on(
                "",
                vec![
                    Reply::opencode_bash("ls /nonexistent-dstream-dir"),
                    Reply::tool("read", json!({"filePath": "missing-dstream-file.txt"})),
                    Reply::text("The directory does not exist."),
                ],
            ),
            "List /nonexistent-dstream-dir",
            |_| {},
        );
    }
    if only("subagent") {
        opencode_scenario(
            "subagent",
            Script::new()
                .on(
                    "dstream-subagent-task",
                    vec![
                        Reply::opencode_bash("echo hello-from-subagent"),
                        Reply::text("The subagent ran echo."),
                    ],
                )
                .on(
                    "",
                    vec![
                        Reply::tool(
                            "task",
                            json!({"description": "Run echo in a subagent", "prompt": "dstream-subagent-task: run echo hello-from-subagent", "subagent_type": "general"}),
                        ),
                        Reply::text("The subagent is done."),
                    ],
                ),
            "Delegate an echo to a subagent",
            |_| {},
        );
    }
    if only("permission") {
        opencode_scenario(
            "permission",
            Script::tool_then_text(
                Reply::opencode_bash("touch dstream-asked.txt"),
                "The command needed permission.",
            ),
            "Touch a file",
            |env| {
                fs::write(
                    env.project.join("opencode.json"),
                    r#"{"$schema": "https://opencode.ai/config.json", "permission": {"bash": {"*": "allow", "touch *": "ask"}}}"#,
                )
                .unwrap();
            },
        );
    }
}

#[test]
#[ignore = "captures fixtures; run by hand"]
fn capture_claude_agent_sdk() {
    let paths = agents::ensure_installed();
    let env = AgentEnv::new();
    let mock = MockModel::anthropic(Script::tool_then_text(
        Reply::bash("echo hello-from-dstream"),
        "The command printed hello-from-dstream.",
    ));
    let out = agents::run_sdk_query(
        &paths,
        &env,
        &mock,
        "Run echo hello-from-dstream",
        &json!({}),
    );
    report("sdk basic", &out);
    dump_requests(&env, &mock, "sdk-basic");
    let kinds: Vec<String> = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            let mut k = v["type"].as_str().unwrap_or("?").to_string();
            if let Some(st) = v["subtype"].as_str() {
                k = format!("{k}/{st}");
            }
            if let Some(e) = v["event"]["type"].as_str() {
                k = format!("{k}/{e}");
            }
            k
        })
        .collect();
    eprintln!("sdk events: {kinds:?}");
    write_fixture(
        "claude-agent-sdk",
        "basic",
        &scrub(&out.stdout, &env, Some(&mock)),
    );
    out.assert_success("sdk basic");
    assert!(mock.saw_tool_result());
}
