//! `dstream import claude-code|opencode`: what a real Claude Code or OpenCode run wrote (with
//! no dstream hooks) becomes a dstream session with the live taxonomy, once; a session dstream
//! captured live is left alone; broken transcripts are reported and everything readable is kept.
//!
//! Uses the pinned agents (`dstream_tests::agents::ensure_installed`) against the mock model;
//! nothing leaves the machine.
#![cfg(unix)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use dstream_tests::agents::{self, AgentEnv};
use dstream_tests::mock_model::{MockModel, Reply, Script};
use dstream_tests::{Client, Daemon};
use serde_json::{Value, json};

const FINAL: &str = "The command printed hello-from-dstream.";

/// `dstream import claude-code --json [paths]` with HOME at `home`, against `daemon`.
fn import(daemon: &Daemon, home: &Path, paths: &[&Path], extra: &[&str]) -> (Output, Value) {
    import_from(daemon, "claude-code", &[("HOME", home)], paths, extra)
}

/// `dstream import AGENT --json [paths]` with only `env` (and PATH) set, against `daemon`.
fn import_from(
    daemon: &Daemon,
    agent: &str,
    env: &[(&str, &Path)],
    paths: &[&Path],
    extra: &[&str],
) -> (Output, Value) {
    let mut cmd = Command::new(dstream_tests::daemon_bin());
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .env("DSTREAM_SOCKET", daemon.socket())
        .args(["import", agent, "--json"])
        .args(extra)
        .args(paths);
    let out = dstream_tests::output_within(&mut cmd, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "dstream import: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("one JSON summary on stdout ({e}): {stdout}"));
    eprintln!(
        "import: {} lines, {} events in {} ms: {} lines/s",
        summary["lines"], summary["events"], summary["elapsed_ms"], summary["lines_per_sec"]
    );
    (out, summary)
}

/// Every session's events.
fn all_events(c: &mut Client) -> Vec<(String, Vec<Value>)> {
    let list = c.ok("sessions.list", json!({}));
    let mut all = Vec::new();
    for s in list["sessions"].as_array().unwrap() {
        let id = s["session_id"].as_str().unwrap().to_string();
        let events = c.read_all(&id);
        all.push((id, events));
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

fn count(all: &[(String, Vec<Value>)]) -> usize {
    all.iter().map(|(_, e)| e.len()).sum()
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

/// What every imported run of the mock's one-tool turn holds: no checkpoint (an imported call
/// is not decided again), `FINAL` as the assistant's text, and one `usage.request` of 12 input
/// and 8 output tokens per model call (two). Returns those.
fn assert_the_imported_turn(events: &[Value]) -> Vec<&Value> {
    assert!(
        !events
            .iter()
            .any(|e| e["type"].as_str().unwrap().starts_with("checkpoint.")),
        "an imported call is not decided again"
    );
    let texts: Vec<&str> = of_type(events, "message.chunk")
        .iter()
        .filter_map(|e| e["payload"]["text"].as_str())
        .collect();
    assert_eq!(texts, [FINAL], "the final assistant message");
    let usage = of_type(events, "usage.request");
    assert_eq!(usage.len(), 2, "one per model call: {usage:#?}");
    for u in &usage {
        let p = &u["payload"];
        assert_eq!(
            (&p["input_tokens"], &p["output_tokens"]),
            (&json!(12), &json!(8)),
            "{u}"
        );
    }
    usage
}

/// The transcripts Claude Code wrote under `home`: `<session id>.jsonl` files.
fn transcripts(home: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![home.join(".claude/projects")];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// One Claude Code run (a Bash call, then `FINAL`) in `env`; with `live`, its hooks report to
/// `daemon` (dstream installed in the project).
fn run_claude(env: &AgentEnv, daemon: &Daemon, prompt: &str, live: bool) {
    let paths = agents::ensure_installed();
    if live {
        agents::install(env, "claude-code");
    }
    let mock = MockModel::anthropic(Script::tool_then_text(
        Reply::bash("echo hello-from-dstream"),
        FINAL,
    ));
    let mut cmd = agents::claude_command(&paths, env, &mock, prompt, &[]);
    if live {
        cmd.envs(dstream_tests::client_env(daemon.socket()));
    }
    let out = agents::run(env, cmd, Duration::from_secs(90));
    out.assert_success("claude -p");
    assert!(out.stdout.contains(FINAL), "stdout: {}", out.stdout);
}

#[test]
fn a_claude_code_transcript_becomes_a_session_once() {
    // A policy that would hold every call: an imported call ran long ago and must not be held.
    let d = Daemon::start_with("[[checkpoints.rules]]\ntool = \"*\"\naction = \"ask\"\n");
    let env = AgentEnv::new();
    run_claude(&env, &d, "Run echo hello-from-dstream", false);
    let files = transcripts(&env.home);
    assert_eq!(files.len(), 1, "one transcript: {files:?}");
    let session = files[0].file_stem().unwrap().to_str().unwrap().to_string();
    let mut c = d.client();
    assert_eq!(count(&all_events(&mut c)), 0, "no hooks: nothing captured");

    // A dry run reads and counts, and stores nothing.
    let (_, dry) = import(&d, &env.home, &[], &["--dry-run"]);
    assert_eq!(dry["dry_run"], true);
    assert!(dry["lines"].as_u64().unwrap() > 5, "{dry}");
    assert_eq!(count(&all_events(&mut c)), 0, "a dry run stored something");

    let (_, s) = import(&d, &env.home, &[], &[]);
    assert_eq!(
        (&s["sessions_found"], &s["sessions_imported"], &s["errors"]),
        (&json!(1), &json!(1), &json!(0)),
        "{s}"
    );
    assert_eq!(s["lines"], dry["lines"], "every line sent: {s}");
    assert!(s["lines_per_sec"].as_f64().unwrap() > 0.0, "{s}");
    let all = all_events(&mut c);
    assert_eq!(all.len(), 1, "one session: {all:#?}");
    let (id, events) = &all[0];
    assert_eq!(id, &session, "the session keeps Claude Code's id");
    assert_eq!(s["events"], json!(events.len()), "{s}");
    assert_eq!(s["unmapped"], json!(0), "{s}");

    let input = of_type(events, "user.input");
    assert_eq!(input.len(), 1, "{input:#?}");
    assert_eq!(input[0]["payload"]["text"], "Run echo hello-from-dstream");
    assert_eq!(input[0]["actor"], "user");

    let calls = of_type(events, "execution.tool_use");
    assert_eq!(calls.len(), 1, "{calls:#?}");
    let call = calls[0];
    assert_eq!(call["payload"]["tool"], "Bash");
    assert_eq!(
        call["payload"]["input"]["command"],
        "echo hello-from-dstream"
    );
    let results = of_type(events, "execution.tool_result");
    assert_eq!(results.len(), 1, "{results:#?}");
    assert_eq!(
        results[0]["causation_id"], call["id"],
        "result joined to its call"
    );
    assert!(
        results[0]["payload"]["output"]
            .to_string()
            .contains("hello-from-dstream"),
        "{}",
        results[0]
    );
    let usage = assert_the_imported_turn(events);
    for u in &usage {
        let p = &u["payload"];
        assert_eq!(p["cache_read_input_tokens"], 0, "{u}");
        assert!(p["model"].as_str().is_some_and(|m| !m.is_empty()), "{u}");
        assert_eq!(p["request_id"], "req_dstream_mock", "{u}");
    }

    let order: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .filter(|t| !t.starts_with("transcript."))
        .collect();
    let first = |t: &str| order.iter().position(|x| *x == t).unwrap();
    assert!(
        first("user.input") < first("execution.tool_use")
            && first("execution.tool_use") < first("execution.tool_result")
            && first("execution.tool_result") < first("message.chunk"),
        "in the transcript's order: {order:?}"
    );
    for e in events {
        assert_eq!(e["metadata"]["source"], "claude-code-transcript", "{e}");
        let import_id = e["metadata"]["import_id"].as_str().unwrap();
        assert!(import_id.starts_with(&format!("{session}:")), "{e}");
        assert_eq!(
            e["raw"]["entry"]["sessionId"],
            session.as_str(),
            "raw kept: {e}"
        );
    }

    // Again: nothing new.
    let before = count(&all_events(&mut c));
    let (_, again) = import(&d, &env.home, &[], &[]);
    assert_eq!(
        (
            &again["sessions_imported"],
            &again["sessions_already_imported"],
            &again["events"]
        ),
        (&json!(0), &json!(1), &json!(0)),
        "{again}"
    );
    assert_eq!(again["lines_skipped"], s["lines"], "{again}");
    assert_eq!(
        count(&all_events(&mut c)),
        before,
        "a second import added events"
    );
}

#[test]
fn a_session_captured_live_is_left_alone_and_another_imported() {
    let d = Daemon::start();
    let live = AgentEnv::new();
    run_claude(&live, &d, "Run echo hello-from-dstream", true);
    let mut c = d.client();
    // The hooks may still be finishing when the agent exits.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut captured = all_events(&mut c);
    while !captured
        .iter()
        .any(|(_, e)| !of_type(e, "lifecycle.session.ended").is_empty())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
        captured = all_events(&mut c);
    }
    assert_eq!(captured.len(), 1, "captured live: {captured:#?}");
    let live_session = captured[0].0.clone();
    let quiet = AgentEnv::new();
    run_claude(&quiet, &d, "Run echo hello-from-dstream quietly", false);
    let quiet_session = transcripts(&quiet.home)[0]
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();

    let roots = [
        live.home.join(".claude/projects"),
        quiet.home.join(".claude/projects"),
    ];
    let (out, s) = import(&d, &live.home, &[&roots[0], &roots[1]], &[]);
    assert_eq!(
        (
            &s["sessions_found"],
            &s["sessions_imported"],
            &s["sessions_captured_live"]
        ),
        (&json!(2), &json!(1), &json!(1)),
        "{s}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{live_session}: captured live, skipped")),
        "{stderr}"
    );
    let after = all_events(&mut c);
    let live_after = &after.iter().find(|(id, _)| *id == live_session).unwrap().1;
    assert_eq!(live_after, &captured[0].1, "the live session is unchanged");
    let imported = &after.iter().find(|(id, _)| *id == quiet_session).unwrap().1;
    assert_eq!(of_type(imported, "user.input").len(), 1);
    assert_eq!(s["events"], json!(imported.len()), "{s}");
}

#[test]
fn a_subagent_lands_in_the_parents_lineage() {
    let paths = agents::ensure_installed();
    let d = Daemon::start();
    let env = AgentEnv::new();
    let mock = MockModel::anthropic(Script::claude_subagent_echo());
    let cmd = agents::claude_command(&paths, &env, &mock, "Delegate an echo to a subagent", &[]);
    agents::run(&env, cmd, Duration::from_secs(90)).assert_success("claude -p");
    let (_, s) = import(&d, &env.home, &[], &[]);
    assert_eq!(
        (&s["sessions_imported"], &s["errors"]),
        (&json!(1), &json!(0)),
        "{s}"
    );
    let mut c = d.client();
    let all = all_events(&mut c);
    assert_eq!(all.len(), 2, "the session and its subagent: {all:#?}");
    let (parent, pe) = &all[0];
    let (child, ce) = &all[1];
    assert!(child.starts_with(&format!("{parent}.agent-")), "{child}");
    assert!(
        ce.iter().all(|e| e["stream_id"] == parent.as_str()),
        "in the parent's lineage"
    );
    assert_eq!(
        of_type(ce, "user.input")[0]["payload"]["text"],
        "dstream-subagent-task: run echo hello-from-subagent"
    );
    let sub_call = of_type(ce, "execution.tool_use")[0];
    assert_eq!(
        of_type(ce, "execution.tool_result")[0]["causation_id"],
        sub_call["id"]
    );
    let spawned = of_type(pe, "agent.spawned");
    let completed = of_type(pe, "agent.completed");
    assert_eq!((spawned.len(), completed.len()), (1, 1), "{pe:#?}");
    assert_eq!(spawned[0]["payload"]["child_session_id"], child.as_str());
    assert_eq!(completed[0]["payload"]["child_session_id"], child.as_str());
    assert!(
        spawned[0]["lsn"].as_u64() < completed[0]["lsn"].as_u64(),
        "spawned before completed"
    );
}

/// A line as Claude Code writes a user prompt.
fn user_line(session: &str, uuid: &str, text: &str) -> String {
    json!({"type": "user", "message": {"role": "user", "content": text}, "uuid": uuid,
           "timestamp": "2026-01-02T03:04:05.000Z", "sessionId": session, "promptId": "p1"})
    .to_string()
}

#[test]
fn broken_transcripts_are_reported_and_every_readable_line_kept() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let garbage = "{\"type\": \"user\", this is not JSON";
    fs::write(
        p.join("good.jsonl"),
        format!(
            "{}\n{garbage}\n{}\n",
            user_line("good", "u1", "first prompt"),
            user_line("good", "u2", "second prompt")
        ),
    )
    .unwrap();
    fs::write(
        p.join("cut.jsonl"),
        format!(
            "{}\n{}",
            user_line("cut", "u1", "kept"),
            &user_line("cut", "u2", "cut short")[..40]
        ),
    )
    .unwrap();
    fs::write(p.join("empty.jsonl"), "").unwrap();
    fs::write(
        p.join("prose.jsonl"),
        "Dear diary,\nnothing here is JSON.\n",
    )
    .unwrap();
    let missing = p.join("missing");

    let (out, s) = import(&d, p, &[p, &missing], &[]);
    let problems: Vec<String> = s["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| format!("{}:{} {}", x["file"], x["line"], x["problem"]))
        .collect();
    let said = |file: &str, what: &str| {
        assert!(
            problems
                .iter()
                .any(|x| x.contains(file) && x.contains(what)),
            "no problem {what:?} for {file}: {problems:#?}"
        )
    };
    said("good.jsonl\":2", "kept as unmapped");
    said("cut.jsonl\":2", "cut short");
    said("empty.jsonl", "empty");
    said("prose.jsonl", "not a transcript");
    said("missing", "cannot read");
    assert_eq!(problems.len(), 5, "{problems:#?}");
    assert_eq!(s["errors"], 4, "all but the kept line cost data: {s}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("warning: ").count(),
        5,
        "each said as found: {stderr}"
    );

    let mut c = d.client();
    let all = all_events(&mut c);
    let ids: Vec<&str> = all.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["cut", "good"], "only sessions with readable lines");
    let good = &all[1].1;
    let types: Vec<&str> = good.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["user.input", "unmapped", "user.input"]);
    assert_eq!(
        good[1]["payload"]["text"], garbage,
        "the garbage's text is kept"
    );
    assert_eq!(good[2]["payload"]["text"], "second prompt");
    let cut = &all[0].1;
    assert_eq!(cut.len(), 1);
    assert_eq!(cut[0]["payload"]["text"], "kept");
    assert_eq!(
        (&s["events"], &s["unmapped"]),
        (&json!(4), &json!(1)),
        "{s}"
    );

    // Once the cut line is whole, the next import takes it, and only it.
    fs::write(
        p.join("cut.jsonl"),
        format!(
            "{}\n{}\n",
            user_line("cut", "u1", "kept"),
            user_line("cut", "u2", "cut short")
        ),
    )
    .unwrap();
    let (_, again) = import(&d, p, &[p], &[]);
    assert_eq!(
        (&again["lines"], &again["events"]),
        (&json!(1), &json!(1)),
        "{again}"
    );
    let cut = c.read_all("cut");
    assert_eq!(cut.len(), 2);
    assert_eq!(cut[1]["payload"]["text"], "cut short");
    assert_eq!(c.read_all("good").len(), 3, "nothing twice");
}

/// One OpenCode run (a bash call, then `FINAL`) in `env`; with `live`, the dstream plugin
/// reports it to `daemon`.
fn run_opencode(env: &AgentEnv, daemon: &Daemon, live: bool) {
    let paths = agents::ensure_installed();
    if live {
        agents::install(env, "opencode");
    }
    let mock = MockModel::openai(Script::tool_then_text(
        Reply::opencode_bash("echo hello-from-dstream"),
        FINAL,
    ));
    let mut cmd = agents::opencode_command(&paths, env, &mock, "Run echo hello-from-dstream", &[]);
    if live {
        cmd.envs(dstream_tests::client_env(daemon.socket()));
    }
    let out = agents::run(env, cmd, Duration::from_secs(120));
    out.assert_success("opencode run");
    assert!(out.stdout.contains(FINAL), "stdout: {}", out.stdout);
}

#[test]
fn an_opencode_session_is_imported_from_its_database_or_export_once() {
    let d = Daemon::start_with("[[checkpoints.rules]]\ntool = \"*\"\naction = \"ask\"\n");
    let env = AgentEnv::new();
    run_opencode(&env, &d, false);
    let mut c = d.client();
    assert_eq!(count(&all_events(&mut c)), 0, "no plugin: nothing captured");

    // The default: OpenCode's database under XDG_DATA_HOME.
    let xdg = [
        ("HOME", env.home.as_path()),
        ("XDG_DATA_HOME", env.xdg_data.as_path()),
    ];
    let (_, s) = import_from(&d, "opencode", &xdg, &[], &[]);
    assert_eq!(
        (
            &s["sessions_found"],
            &s["sessions_imported"],
            &s["errors"],
            &s["unmapped"]
        ),
        (&json!(1), &json!(1), &json!(0), &json!(0)),
        "{s}"
    );
    let all = all_events(&mut c);
    assert_eq!(all.len(), 1, "one session: {all:#?}");
    let (id, events) = &all[0];
    assert!(id.starts_with("ses_"), "OpenCode's session id: {id}");
    assert_eq!(s["events"], json!(events.len()), "{s}");

    let created = of_type(events, "lifecycle.session.created");
    assert_eq!(created.len(), 1, "{created:#?}");
    assert_eq!(
        created[0]["payload"]["version"], "1.18.33",
        "{}",
        created[0]
    );
    let input = of_type(events, "user.input");
    assert_eq!(input.len(), 1, "{input:#?}");
    assert!(
        input[0]["payload"]["text"]
            .as_str()
            .unwrap()
            .contains("Run echo hello-from-dstream"),
        "{}",
        input[0]
    );
    assert_eq!(input[0]["actor"], "user");
    let calls = of_type(events, "execution.tool_use");
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0]["payload"]["tool"], "bash");
    assert_eq!(calls[0]["payload"]["phase"], "called");
    let results = of_type(events, "execution.tool_result");
    assert_eq!(results.len(), 1, "{results:#?}");
    assert_eq!(
        results[0]["causation_id"], calls[0]["id"],
        "joined to its call"
    );
    assert_eq!(results[0]["payload"]["output"], "hello-from-dstream\n");
    let usage = assert_the_imported_turn(events);
    for u in &usage {
        let p = &u["payload"];
        assert_eq!(p["model"], "mock-model", "{u}");
    }
    for e in events {
        assert_eq!(e["metadata"]["source"], "opencode-export", "{e}");
        assert!(
            e["metadata"]["import_id"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{id}:")),
            "{e}"
        );
        assert!(
            e["metadata"]["timestamp"]
                .as_str()
                .unwrap()
                .starts_with("20"),
            "{e}"
        );
    }

    // Again, and from what `opencode export` prints (beside two files that are not exports):
    // nothing new.
    let before = count(&all_events(&mut c));
    let (_, again) = import_from(&d, "opencode", &xdg, &[], &[]);
    assert_eq!(
        (&again["sessions_already_imported"], &again["events"]),
        (&json!(1), &json!(0)),
        "{again}"
    );
    let exports = env.root().join("exports");
    fs::create_dir_all(&exports).unwrap();
    let paths = agents::ensure_installed();
    let out = dstream_tests::output_within(
        env.command(&paths.opencode).args(["export", id.as_str()]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "opencode export: {out:?}");
    fs::write(exports.join("session.json"), &out.stdout).unwrap();
    fs::write(exports.join("broken.json"), "{\"info\": ").unwrap();
    fs::write(exports.join("other.json"), "{\"hello\": 1}").unwrap();
    let (_, from_export) = import_from(&d, "opencode", &xdg, &[&exports], &[]);
    assert_eq!(
        (
            &from_export["sessions_found"],
            &from_export["sessions_already_imported"],
            &from_export["events"]
        ),
        (&json!(1), &json!(1), &json!(0)),
        "the export is the same session: {from_export}"
    );
    let problems = from_export["problems"].to_string();
    assert!(
        problems.contains("broken.json") && problems.contains("other.json"),
        "both bad files reported: {problems}"
    );
    assert_eq!(count(&all_events(&mut c)), before, "nothing added");

    // A session the plugin captured live is left alone (a daemon without the policy that
    // would hold its tool call).
    let d = Daemon::start();
    let mut c = d.client();
    let live = AgentEnv::new();
    run_opencode(&live, &d, true);
    let live_xdg = [
        ("HOME", live.home.as_path()),
        ("XDG_DATA_HOME", live.xdg_data.as_path()),
    ];
    dstream_tests::relay::wait_for("the live run captured", Duration::from_secs(30), || {
        all_events(&mut c)
            .into_iter()
            .any(|(_, e)| {
                e.iter()
                    .any(|e| e["metadata"]["source"] == "opencode" && e["type"] == "user.input")
            })
            .then_some(())
    });
    let (_, s) = import_from(&d, "opencode", &live_xdg, &[], &[]);
    assert_eq!(
        (&s["sessions_captured_live"], &s["events"]),
        (&json!(1), &json!(0)),
        "{s}"
    );
}
