//! `dstream import claude-code` throughput: transcripts shaped like the ones Claude Code
//! 2.1.330 writes (a prompt, a Bash call, its result and a reply per turn, each assistant line
//! with its usage), generated here, imported into a fresh daemon; the rate is the importer's own
//! summary (`lines_per_sec`: reading, mapping, storing).

use std::io::Write;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// Writes `sessions` transcripts of `turns` turns each under `dir/-bench-project/`; returns the
/// number of lines.
pub fn write_transcripts(dir: &Path, sessions: usize, turns: usize) -> Result<u64> {
    let project = dir.join("-bench-project");
    std::fs::create_dir_all(&project)?;
    let mut lines = 0;
    for s in 0..sessions {
        let session = format!("00000000-0000-4000-8000-{s:012}");
        let mut out = std::io::BufWriter::new(std::fs::File::create(
            project.join(format!("{session}.jsonl")),
        )?);
        let mut n = 0u64;
        let mut line = |v: Value| -> Result<()> {
            n += 1;
            let mut v = v;
            v["sessionId"] = json!(session);
            v["uuid"] = json!(format!("{session}-{n}"));
            v["timestamp"] = json!(format!(
                "2026-01-01T00:{:02}:{:02}.000Z",
                n / 60 % 60,
                n % 60
            ));
            v["cwd"] = json!("/home/me/project");
            v["version"] = json!("2.1.330");
            serde_json::to_writer(&mut out, &v)?;
            out.write_all(b"\n")?;
            Ok(())
        };
        for t in 0..turns {
            let prompt = format!("p{t}");
            let tool = format!("toolu_{s}_{t}");
            let usage = json!({"input_tokens": 1200, "output_tokens": 80,
                "cache_read_input_tokens": 9000, "cache_creation_input_tokens": 300});
            line(json!({"type": "user", "promptId": prompt,
                "message": {"role": "user", "content": format!("Turn {t}: list the files and count them")}}))?;
            line(
                json!({"type": "assistant", "requestId": format!("req_{s}_{t}a"),
                "message": {"id": format!("msg_{s}_{t}a"), "model": "claude-sonnet-4-5", "role": "assistant",
                    "content": [{"type": "tool_use", "id": tool, "name": "Bash",
                        "input": {"command": "ls -la | wc -l", "description": "Count files"}}],
                    "usage": usage, "stop_reason": "tool_use"}}),
            )?;
            line(json!({"type": "user", "promptId": prompt,
                "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool,
                    "content": "42\n", "is_error": false}]},
                "toolUseResult": {"stdout": "42\n", "stderr": "", "interrupted": false}}))?;
            line(
                json!({"type": "assistant", "requestId": format!("req_{s}_{t}b"),
                "message": {"id": format!("msg_{s}_{t}b"), "model": "claude-sonnet-4-5", "role": "assistant",
                    "content": [{"type": "text", "text": "There are 42 entries in the folder, counting . and .."}],
                    "usage": usage, "stop_reason": "end_turn"}}),
            )?;
        }
        out.flush()?;
        lines += n;
    }
    Ok(lines)
}

/// `dstream import claude-code --json DIR` against the daemon at `socket`: its summary.
pub fn import(bin: &Path, socket: &Path, dir: &Path) -> Result<Value> {
    let out = Command::new(bin)
        .args(["import", "claude-code", "--json"])
        .arg(dir)
        .env("DSTREAM_SOCKET", socket)
        .env("DSTREAM_AUTOSTART", "0")
        .output()
        .context("running dstream import")?;
    if !out.status.success() {
        bail!(
            "dstream import failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("the import summary is not JSON")
}
