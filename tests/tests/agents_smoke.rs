//! The real agent CLIs run offline against the mock model servers: one scripted turn each
//! (a Bash tool call, then a final text once the tool result is back). No dstream involved yet;
//! this guards the harness the dstream end-to-end tests build on.
//!
//! The first run installs the pinned agents into the cache (`tests/agents/`, see
//! `dstream_tests::agents::ensure_installed`), which needs the npm registry.
#![cfg(unix)]

use dstream_tests::agents::{self, AgentEnv};
use dstream_tests::mock_model::{MockModel, Reply, Script};
use serde_json::{Value, json};

const FINAL: &str = "The command printed hello-from-dstream.";

/// The tool result that came back to the model carries the command's output.
fn tool_result_mentions(mock: &MockModel, needle: &str) -> bool {
    mock.model_calls()
        .iter()
        .any(|r| r.has_tool_result() && r.body_str().contains(needle))
}

#[test]
fn claude_code_runs_a_tool_against_the_mock() {
    let paths = agents::ensure_installed();
    let env = AgentEnv::new();
    let mock = MockModel::anthropic(Script::tool_then_text(
        Reply::bash("echo hello-from-dstream"),
        FINAL,
    ));
    let out = agents::run_claude(&paths, &env, &mock, "Run echo hello-from-dstream", &[]);
    out.assert_success("claude -p");
    assert!(out.stdout.contains(FINAL), "stdout: {}", out.stdout);
    assert!(
        tool_result_mentions(&mock, "hello-from-dstream"),
        "the mock never saw the Bash result; requests: {:#?}",
        mock.requests().iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    eprintln!("claude -p took {:.1?}", out.elapsed);
}

#[test]
fn opencode_runs_a_tool_against_the_mock() {
    let paths = agents::ensure_installed();
    let env = AgentEnv::new();
    let mock = MockModel::openai(Script::tool_then_text(
        Reply::opencode_bash("echo hello-from-dstream"),
        FINAL,
    ));
    let out = agents::run_opencode(&paths, &env, &mock, "Run echo hello-from-dstream", &[]);
    out.assert_success("opencode run");
    assert!(out.stdout.contains(FINAL), "stdout: {}", out.stdout);
    assert!(
        tool_result_mentions(&mock, "hello-from-dstream"),
        "the mock never saw the bash result"
    );
    eprintln!("opencode run took {:.1?}", out.elapsed);
}

#[test]
fn claude_agent_sdk_streams_a_tool_turn_from_the_mock() {
    let paths = agents::ensure_installed();
    let env = AgentEnv::new();
    let mock = MockModel::anthropic(Script::tool_then_text(
        Reply::bash("echo hello-from-dstream"),
        FINAL,
    ));
    let out = agents::run_sdk_query(
        &paths,
        &env,
        &mock,
        "Run echo hello-from-dstream",
        &json!({}),
    );
    out.assert_success("sdk query()");
    let messages: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let types: Vec<&str> = messages.iter().filter_map(|m| m["type"].as_str()).collect();
    assert!(
        types.contains(&"stream_event"),
        "no partial messages: {types:?}"
    );
    let result = messages.last().expect("no messages");
    assert_eq!(result["type"], "result", "last message: {result}");
    assert_eq!(result["subtype"], "success", "last message: {result}");
    assert_eq!(result["result"], FINAL, "last message: {result}");
    assert!(
        tool_result_mentions(&mock, "hello-from-dstream"),
        "the mock never saw the Bash result"
    );
    eprintln!("sdk query() took {:.1?}", out.elapsed);
}
