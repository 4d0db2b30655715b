//! The pipeline and the Lua plugin host through the real daemon: ingest, the sandbox and its
//! limits, the error policy, hot reload, and the `plugins` commands.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use dstream_tests::{Client, Daemon, daemon_bin};
use serde_json::{Value, json};

const LIMITS: &str = "[plugins]\ncall_timeout_ms = 300\nmax_consecutive_errors = 3\n\
                      memory_bytes = 16777216\n";

fn write_plugin(d: &Daemon, file: &str, text: &str) {
    let dir = d.plugin_dir();
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(file), text).unwrap();
}

fn ingest(c: &mut Client, source: &str, event: Value) -> Value {
    c.ok("ingest", json!({"source": source, "event": event}))
}

fn plugin<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no plugin {name} in {list}"))
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

/// Polls `f` until it returns Some, for at most 15 s (the watcher is asynchronous).
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ingest_maps_with_a_plugin_keeps_raw_and_stores_unmapped_events() {
    let d = Daemon::start();
    write_plugin(
        &d,
        "demo.lua",
        r#"
        local M = { name = "demo", api = 1, sources = { "demo" } }
        function M.map(raw, emit, ctx)
          emit({ type = "user.input", session_id = raw.sid, actor = ctx.source,
                 payload = { text = raw.text } })
          if raw.twice then emit({ type = "user.input", session_id = raw.sid }) end
        end
        return M
        "#,
    );
    let mut c = d.client();
    c.ok("plugins.reload", json!({}));
    let raw = json!({"sid": "demo-1", "text": "hi", "twice": true, "n": [1, 2.5, null, {}]});
    let r = ingest(&mut c, "demo", raw.clone());
    let got = r["events"].as_array().unwrap();
    assert_eq!(got.len(), 2, "{r}");
    assert_eq!(got[0]["lsn"], 1);
    assert_eq!(got[1]["lsn"], 2);
    assert_eq!(got[0]["session_id"], "demo-1");
    assert_eq!(got[0]["type"], "user.input");
    assert!(r.get("decision").is_none(), "{r}");
    let stored = c.read_all("demo-1");
    assert_eq!(stored[0]["id"], got[0]["id"]);
    assert_eq!(stored[0]["actor"], "demo");
    assert_eq!(stored[0]["payload"], json!({"text": "hi"}));
    assert_eq!(stored[0]["metadata"]["source"], "demo");
    assert_eq!(stored[0]["raw"], raw, "raw is kept as received");
    assert_eq!(stored[1]["raw"], raw);

    // No plugin maps this source: stored as `unmapped`, raw kept, in the session the caller
    // named.
    let raw = json!({"what": "ever"});
    let r = c.ok(
        "ingest",
        json!({"source": "mystery", "event": raw, "session_id": "m-1"}),
    );
    assert_eq!(r["events"][0]["type"], "unmapped");
    let stored = c.read_all("m-1");
    assert_eq!(stored[0]["raw"], raw);
    assert_eq!(stored[0]["payload"]["source"], "mystery");
    // Without a session anywhere: one per source.
    let r = ingest(&mut c, "mystery", json!(42));
    assert_eq!(r["events"][0]["session_id"], "mystery-unassigned");

    // Bad params get clear errors.
    for (params, needle) in [
        (json!({"source": "", "event": {}}), "invalid source"),
        (json!({"source": "a/b", "event": {}}), "invalid source"),
        (json!({"event": {}}), "source"),
        (json!({"source": "x"}), "event"),
        (
            json!({"source": "x", "event": {}, "session_id": "../x"}),
            "session_id",
        ),
        (json!({"source": "x", "event": {}, "extra": 1}), "extra"),
    ] {
        let e = c.err("ingest", params.clone());
        assert!(e.message.contains(needle), "{params}: {e:?}");
    }
    let stats = c.ok("stats", json!({}));
    assert!(stats["ingested"].as_u64().unwrap() >= 3, "{stats}");
    assert!(plugin(&stats, "demo")["calls"].as_u64().unwrap() >= 1);
}

#[test]
fn hostile_plugins_are_contained_and_nothing_is_lost() {
    let d = Daemon::start_with(LIMITS);
    let plugins = [
        ("spin.lua", "while true do end"),
        (
            "pcall-spin.lua",
            "while true do pcall(function() while true do end end) end",
        ),
        (
            "memory.lua",
            // 64 KiB a step: the 16 MiB limit is reached in a few hundred steps, well within
            // the call's deadline even on a busy machine.
            "local s = string.rep('x', 1 << 16) local t = {} for i = 1, 1e9 do t[i] = s .. i end",
        ),
        (
            "rep.lua",
            "local s = string.rep('x', 1 << 40) emit({type = 'x'})",
        ),
        (
            "concat.lua",
            "local s = 'x' for i = 1, 64 do s = s .. s end emit({type = 'x'})",
        ),
        ("error.lua", "error('broken on purpose')"),
        ("badtype.lua", "emit({payload = 1})"),
        ("badfield.lua", "emit({type = 'x', bogus = 1})"),
    ];
    for (file, body) in plugins {
        let name = file.trim_end_matches(".lua");
        write_plugin(
            &d,
            file,
            &format!(
                "local M = {{ name = '{name}', api = 1, sources = {{ '{name}' }} }}\n\
                 function M.map(raw, emit, ctx)\n{body}\nend\nreturn M\n"
            ),
        );
    }
    // What the sandbox leaves a script: reported as an event.
    write_plugin(
        &d,
        "probe.lua",
        r#"
        local M = { name = "probe", api = 1, sources = { "probe" } }
        function M.map(raw, emit, ctx)
          local bytecode_ok = false
          if string.dump == nil then
            bytecode_ok = pcall(load, "\27Lua")
            bytecode_ok = bytecode_ok and load("\27Lua") ~= nil
          end
          emit({ type = "probe", payload = {
            io = type(io), os = type(os), require = type(require), package = type(package),
            dofile = type(dofile), loadfile = type(loadfile), debug = type(debug),
            dump = type(string.dump), bytecode = bytecode_ok,
            ulid = #host.ulid(), now = host.now_ms() > 0,
            text_load = load("return string.len('ab')")() == 2,
          } })
        end
        return M
        "#,
    );
    let mut c = d.client();
    let list = c.ok("plugins.reload", json!({}));
    assert_eq!(list["errors"], json!([]), "{list}");

    let p = ingest(&mut c, "probe", json!({"session_id": "probe-1"}));
    assert_eq!(p["events"][0]["type"], "probe", "{p}");
    let probe = &c.read_all("probe-1")[0]["payload"];
    for lib in [
        "io", "os", "require", "package", "dofile", "loadfile", "debug", "dump",
    ] {
        assert_eq!(probe[lib], "nil", "{lib} must not be reachable: {probe}");
    }
    assert_eq!(probe["bytecode"], false, "{probe}");
    assert_eq!(probe["ulid"], 26);
    assert_eq!(
        probe["text_load"], true,
        "load of text sees the globals: {probe}"
    );
    assert_eq!(probe["now"], true);

    let mut other = d.client();
    for (i, (file, _)) in plugins.iter().enumerate() {
        let name = file.trim_end_matches(".lua");
        let session = format!("{name}-1");
        let raw = json!({"n": i, "session_id": session});
        let r = ingest(&mut c, name, raw.clone());
        let t: Vec<_> = r["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(t, ["unmapped", "plugin.error"], "{name}: {r}");
        let stored = c.read_all(&session);
        assert_eq!(stored[0]["raw"], raw, "{name}: the raw event is kept");
        let error = stored[1]["payload"]["error"].as_str().unwrap().to_string();
        assert_eq!(stored[1]["payload"]["plugin"], name);
        assert!(!error.is_empty());
        // Another client is served meanwhile, and the daemon is still up.
        other.append("bystander", "user.input", json!({"after": name}));
        assert!(d.is_running(), "{name} took the daemon down");
    }
    let bystander = other.read_all("bystander");
    assert_eq!(bystander.len(), plugins.len());
    let list = c.ok("plugins.list", json!({}));
    assert!(plugin(&list, "spin")["errors"].as_u64().unwrap() >= 1);
    assert!(
        c.read_all("spin-1")[1]["payload"]["error"]
            .as_str()
            .unwrap()
            .contains("exceeded"),
        "the error says why"
    );
    let error = c.read_all("memory-1")[1]["payload"]["error"].clone();
    assert!(error.as_str().unwrap().contains("memory"), "{error}");
}

#[test]
fn failing_hooks_follow_the_error_policy_and_repeated_failure_disables() {
    let d = Daemon::start_with(LIMITS);
    write_plugin(
        &d,
        "mapper.lua",
        r#"
        local M = { name = "mapper", api = 1, sources = { "agent" } }
        function M.map(raw, emit) emit({ type = raw.type, session_id = "s", payload = raw }) end
        return M
        "#,
    );
    write_plugin(
        &d,
        "flaky.lua",
        r#"
        local M = { name = "flaky", api = 1 }
        function M.process(event, emit)
          if event.payload.boom then error("process failed") end
          event.payload.seen = true
          emit(event)
        end
        function M.decide(request)
          if request.payload.boom then error("decide failed") end
          if request.payload.tool == "rm" then return { action = "deny", reason = "no rm" } end
          return "allow"
        end
        return M
        "#,
    );
    let mut c = d.client();
    c.ok("plugins.reload", json!({}));
    // process ok; decide allows.
    let r = ingest(
        &mut c,
        "agent",
        json!({"type": "execution.tool_use", "tool": "ls"}),
    );
    assert_eq!(r["decision"]["action"], "allow", "{r}");
    assert_eq!(r["decision"]["decided_by"], "plugin:flaky");
    let r = ingest(
        &mut c,
        "agent",
        json!({"type": "execution.tool_use", "tool": "rm"}),
    );
    assert_eq!(r["decision"]["action"], "deny");
    assert_eq!(r["decision"]["reason"], "no rm");
    let stored = c.read_all("s");
    // Each decision is recorded right after its call (checkpoint.approved / .rejected, auto).
    assert_eq!(
        types(&stored),
        [
            "execution.tool_use",
            "checkpoint.approved",
            "execution.tool_use",
            "checkpoint.rejected"
        ]
    );
    assert_eq!(stored[0]["payload"]["seen"], true);
    assert_eq!(stored[2]["metadata"]["decision"]["action"], "deny");
    assert_eq!(stored[3]["payload"]["decided_by"], "plugin:flaky");

    // process and decide fail: the event passes through unchanged, the decision is "deny"
    // (a plugin that cannot decide counts as its strictest outcome), and each failure is
    // recorded.
    let r = ingest(
        &mut c,
        "agent",
        json!({"type": "execution.tool_use", "tool": "x", "boom": true}),
    );
    assert_eq!(r["decision"]["action"], "deny", "{r}");
    assert_eq!(r["decision"]["decided_by"], "plugin:flaky", "{r}");
    let reason = r["decision"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("plugin flaky failed to decide")
            && reason.contains("decide failed")
            && reason.contains("a failing plugin counts as deny"),
        "{reason}"
    );
    let stored = c.read_all("s");
    let tail: Vec<_> = stored[4..].to_vec();
    assert_eq!(
        types(&tail),
        [
            "execution.tool_use",
            "checkpoint.rejected",
            "plugin.error",
            "plugin.error"
        ]
    );
    assert_eq!(tail[1]["payload"]["auto"], true);
    assert_eq!(
        tail[0]["payload"]["seen"],
        Value::Null,
        "passed through unchanged"
    );
    assert_eq!(tail[2]["payload"]["hook"], "process");
    assert_eq!(tail[3]["payload"]["hook"], "decide");

    // A third consecutive failure disables it, and says so.
    let _ = ingest(&mut c, "agent", json!({"type": "note", "boom": true}));
    let list = c.ok("plugins.list", json!({}));
    let flaky = plugin(&list, "flaky");
    assert_eq!(flaky["state"], "disabled", "{list}");
    assert!(
        flaky["error"].as_str().unwrap().contains("in a row"),
        "{flaky}"
    );
    let stored = c.read_all("s");
    assert!(
        stored
            .iter()
            .any(|e| e["type"] == "plugin.error" && e["payload"]["disabled"].is_string()),
        "a plugin.error says it was disabled"
    );
    // Disabled: events go on without it.
    let r = ingest(&mut c, "agent", json!({"type": "note"}));
    assert_eq!(types(r["events"].as_array().unwrap()), ["note"]);
    // A reload gives it another chance.
    let list = c.ok("plugins.reload", json!({}));
    assert_eq!(plugin(&list, "flaky")["state"], "active");
    let r = ingest(
        &mut c,
        "agent",
        json!({"type": "execution.tool_use", "tool": "ls"}),
    );
    assert_eq!(r["decision"]["action"], "allow");
}

#[test]
fn a_decide_that_answers_nonsense_or_hangs_denies_the_call() {
    let d = Daemon::start_with(LIMITS);
    write_plugin(
        &d,
        "mapper.lua",
        r#"
        local M = { name = "mapper", api = 1, sources = { "agent" } }
        function M.map(raw, emit) emit({ type = raw.type, session_id = "odd", payload = raw }) end
        return M
        "#,
    );
    write_plugin(
        &d,
        "odd.lua",
        r#"
        local M = { name = "odd", api = 1 }
        function M.decide(request)
          if request.payload.tool == "hang" then while true do end end
          return "maybe"
        end
        return M
        "#,
    );
    let mut c = d.client();
    c.ok("plugins.reload", json!({}));
    for (tool, why) in [
        ("x", "decide returned \"maybe\""),
        ("hang", "plugin odd failed to decide"),
    ] {
        let r = ingest(
            &mut c,
            "agent",
            json!({"type": "execution.tool_use", "tool": tool}),
        );
        assert_eq!(r["decision"]["action"], "deny", "{tool}: {r}");
        assert_eq!(r["decision"]["decided_by"], "plugin:odd", "{tool}: {r}");
        let reason = r["decision"]["reason"].as_str().unwrap();
        assert!(
            reason.contains(why) && reason.contains("a failing plugin counts as deny"),
            "{tool}: {reason}"
        );
    }
    let stored = c.read_all("odd");
    assert_eq!(
        stored
            .iter()
            .filter(|e| e["type"] == "plugin.error")
            .count(),
        2,
        "{stored:?}"
    );
}

#[test]
fn editing_a_plugin_takes_effect_without_a_restart_and_a_broken_edit_keeps_the_old_one() {
    let d = Daemon::start();
    let mut c = d.client();
    let version = |v: &str| {
        format!(
            "local M = {{ name = 'live', api = 1, sources = {{ 'live' }} }}\n\
             function M.map(raw, emit) emit({{ type = 'live.{v}', session_id = 'live' }}) end\n\
             return M\n"
        )
    };
    write_plugin(&d, "live.lua", &version("v1"));
    let first = |c: &mut Client| {
        ingest(c, "live", json!({}))["events"][0]["type"]
            .as_str()
            .unwrap()
            .to_string()
    };
    eventually("the new plugin to be picked up", || {
        (first(&mut c) == "live.v1").then_some(())
    });
    write_plugin(&d, "live.lua", &version("v2"));
    eventually("the edit to take effect", || {
        (first(&mut c) == "live.v2").then_some(())
    });
    // A syntax error: the last good version keeps running; the error is shown.
    write_plugin(&d, "live.lua", "local M = { name = 'live', api = 1 ");
    let list = eventually("the error to show", || {
        let list = c.ok("plugins.list", json!({}));
        (!list["errors"].as_array().unwrap().is_empty()).then_some(list)
    });
    assert!(
        list["errors"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with("live.lua"),
        "{list}"
    );
    assert!(
        plugin(&list, "live")["error"]
            .as_str()
            .unwrap()
            .contains("newer version failed")
    );
    assert_eq!(first(&mut c), "live.v2");
    let out = dstream(&d, &["plugins", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("live.lua"), "{text}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "errors make `plugins list` fail"
    );
    // Removing the file removes the plugin.
    fs::remove_file(d.plugin_dir().join("live.lua")).unwrap();
    eventually("the removal to take effect", || {
        (first(&mut c) == "unmapped").then_some(())
    });
}

#[test]
fn editing_the_config_file_reconfigures_plugins() {
    let d = Daemon::start_with("[plugins]\ndisabled = []\n");
    let mut c = d.client();
    let list = c.ok("plugins.list", json!({}));
    assert_eq!(plugin(&list, "opencode")["state"], "active");
    fs::write(
        d.config_path().unwrap(),
        "[plugins]\ndisabled = [\"opencode\"]\n",
    )
    .unwrap();
    eventually("opencode to be disabled by config", || {
        let list = c.ok("plugins.list", json!({}));
        let names: Vec<_> = list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].clone())
            .collect();
        (!names.contains(&json!("opencode"))).then_some(())
    });
    // A broken config keeps the last good one and says so.
    fs::write(d.config_path().unwrap(), "[plugins\n").unwrap();
    let list = eventually("the config error to show", || {
        let list = c.ok("plugins.list", json!({}));
        (!list["errors"].as_array().unwrap().is_empty()).then_some(list)
    });
    assert!(
        list["errors"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with("config.toml")
    );
}

#[test]
fn redaction_removes_secrets_before_they_are_stored() {
    let d = Daemon::start();
    let mut c = d.client();
    let secrets = [
        "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
        "AKIAIOSFODNN7EXAMPLE",
        "xoxb-123456789012-abcdefghijkl",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
    ];
    let command = format!(
        "curl -H 'Authorization: Bearer abcdef0123456789abcdef' -d {} && \
         export GITHUB_TOKEN=gho_secretvalue123 DB_PASSWORD=hunter2hunter2",
        secrets.join(" ")
    );
    let raw = json!({
        "session_id": "redact-1",
        "tool_input": {"command": command},
        "env": {"API_KEY": "plainvalue-in-a-secret-key", "harmless": "max_tokens=100"},
    });
    ingest(&mut c, "mystery", raw);
    let stored = c.read_all("redact-1");
    let text = stored[0].to_string();
    for s in secrets.iter().chain(&[
        "abcdef0123456789abcdef",
        "gho_secretvalue123",
        "hunter2hunter2",
        "plainvalue-in-a-secret-key",
    ]) {
        let probe = s.lines().nth(1).unwrap_or(s);
        assert!(!text.contains(probe), "{probe} was stored: {text}");
    }
    assert!(text.contains("[REDACTED]"));
    assert!(
        text.contains("max_tokens=100"),
        "not everything is a secret"
    );
    assert!(stored[0]["metadata"]["redactions"].as_u64().unwrap() >= 8);

    // An event with nothing that could be a secret is stored as it came.
    let plain = json!({"session_id": "redact-2", "text": "nothing to hide here"});
    ingest(&mut c, "mystery", plain.clone());
    assert_eq!(c.read_all("redact-2")[0]["raw"], plain);
    ingest(
        &mut c,
        "mystery",
        json!({"session_id": "redact-2", "Password": "hunter2hunter2"}),
    );
    assert_eq!(c.read_all("redact-2")[1]["raw"]["Password"], "[REDACTED]");
    // Redaction is not a plugin: it cannot be disabled or replaced by one.
    let list = c.ok("plugins.list", json!({}));
    assert!(
        !list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "redact"),
        "{list}"
    );
}

fn dstream(d: &Daemon, args: &[&str]) -> Output {
    d.cli(args)
}

fn check(file: &Path) -> Output {
    Command::new(daemon_bin())
        .args(["plugins", "check"])
        .arg(file)
        .env_remove("DSTREAM_CONFIG")
        .output()
        .unwrap()
}

#[test]
fn plugins_check_reports_what_a_file_declares_or_why_it_fails() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.lua");
    fs::write(
        &good,
        "local M = { name = 'good', api = 1, sources = { 'x' } }\n\
         function M.map(raw, emit) end\nfunction M.on_event(e) end\nreturn M\n",
    )
    .unwrap();
    let out = check(&good);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("\"good\"") && text.contains("map, on_event"),
        "{text}"
    );
    for (body, needle) in [
        ("return 1", "must return a plugin table"),
        (
            "return { name = 'x', api = 2, process = function() end }",
            "api",
        ),
        ("return { name = 'x', api = 1 }", "none of"),
        (
            "return { name = 'x', api = 1, map = function() end }",
            "sources",
        ),
        ("local x = ", "bad.lua"),
        ("while true do end", "exceeded"),
    ] {
        let bad = dir.path().join("bad.lua");
        fs::write(&bad, body).unwrap();
        let out = check(&bad);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{body}");
        assert!(err.contains(needle), "{body}: {err}");
    }
}

#[test]
fn on_event_sees_every_committed_event_with_its_lsn() {
    let d = Daemon::start();
    write_plugin(
        &d,
        "sink.lua",
        r#"
        local M = { name = "sink", api = 1 }
        function M.on_event(e) host.log("warn", "sink saw " .. e.session_id .. " lsn " .. e.lsn .. " " .. e.type) end
        return M
        "#,
    );
    write_plugin(
        &d,
        "failing-sink.lua",
        "local M = { name = 'failing-sink', api = 1 }\n\
         function M.on_event(e) error('sink broke') end\nreturn M\n",
    );
    let mut c = d.client();
    c.ok("plugins.reload", json!({}));
    c.append("observed", "user.input", json!({"n": 1}));
    ingest(&mut c, "mystery", json!({"session_id": "observed"}));
    let text = eventually("on_event to run", || {
        let text = d.stderr();
        text.contains("sink saw observed lsn 2 unmapped")
            .then_some(text)
    });
    assert!(
        text.contains("sink saw observed lsn 1 user.input"),
        "{text}"
    );
    eventually("both calls to be counted", || {
        let list = c.ok("plugins.list", json!({}));
        (plugin(&list, "sink")["calls"] == 2 && plugin(&list, "failing-sink")["errors"] == 2)
            .then_some(())
    });
    // A failing sink harms nothing: the events are stored, the daemon answers.
    assert_eq!(c.read_all("observed").len(), 2);
    assert!(d.stderr().contains("sink broke"));
}

#[test]
fn keep_raw_false_drops_raw_except_from_unmapped_events() {
    let d = Daemon::start_with("[plugins]\nkeep_raw = false\n");
    write_plugin(
        &d,
        "own-raw.lua",
        "local M = { name = 'own-raw', api = 1, sources = { 'own' } }\n\
         function M.map(raw, emit) emit({ type = 'x', session_id = 'kr', raw = raw }) end\n\
         return M\n",
    );
    let mut c = d.client();
    c.ok("plugins.reload", json!({}));
    ingest(&mut c, "own", json!({"a": 1}));
    c.ok(
        "ingest",
        json!({"source": "nobody", "event": {"b": 2}, "session_id": "kr"}),
    );
    let stored = c.read_all("kr");
    assert_eq!(stored[0]["type"], "x");
    assert!(stored[0].get("raw").is_none(), "{}", stored[0]);
    assert_eq!(stored[1]["type"], "unmapped");
    assert_eq!(
        stored[1]["raw"],
        json!({"b": 2}),
        "an unmapped event is nothing without it"
    );
}

/// A plugin file whose `map` runs `body`, for source `name`.
fn mapper(d: &Daemon, name: &str, body: &str) {
    write_plugin(
        d,
        &format!("{name}.lua"),
        &format!(
            "local M = {{ name = '{name}', api = 1, sources = {{ '{name}' }} }}\n\
             function M.map(raw, emit, ctx)\n{body}\nend\nreturn M\n"
        ),
    );
}

/// CPU time the daemon has used so far, all threads, in clock ticks (utime + stime).
fn cpu_ticks(d: &Daemon) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{}/stat", d.pid())).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of the line; 11 and 12 after the name and state.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Waits until the daemon, left idle, uses (almost) no CPU: two samples half a second apart
/// differ by at most 5 ticks (50 ms: 10% of one core; a spinning thread costs 100%).
fn wait_until_idle(d: &Daemon) -> u64 {
    eventually("the daemon to stop using CPU", || {
        let before = cpu_ticks(d);
        std::thread::sleep(Duration::from_millis(500));
        let used = cpu_ticks(d) - before;
        (used <= 5).then_some(used)
    })
}

/// The ingest of a raw event from `source` fails in its plugin: kept as `unmapped`, with a
/// `plugin.error` whose text contains `needle`.
fn fails_in_plugin(c: &mut Client, source: &str, needle: &str) {
    let r = ingest(c, source, json!({"session_id": format!("{source}-s")}));
    assert_eq!(
        types(r["events"].as_array().unwrap()),
        ["unmapped", "plugin.error"],
        "{source}: {r}"
    );
    let error = c.read_all(&format!("{source}-s")).last().unwrap()["payload"]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains(needle), "{source}: {error}");
}

#[test]
fn what_a_plugin_emits_is_bounded_and_the_daemon_stays_small() {
    // A 2^30-leaf DAG in a few hundred bytes of Lua (RSS went past 3 GB and the daemon aborted),
    // and 256 emits of one big string (with 8 MB: ~900 MB).
    // Frames of at most 1 MB: the allowance per call is that plus twice the input.
    let mut d = Daemon::new(Some(&format!(
        "[daemon]\nmax_frame_bytes = 1048576\n{LIMITS}"
    )));
    mapper(
        &d,
        "dag",
        r#"local t = {"x"} for i = 1, 30 do t = {t, t} end emit({type = "x", payload = t})"#,
    );
    mapper(
        &d,
        "wide",
        r#"local s = string.rep("x", 512 << 10)
           for i = 1, 256 do emit({type = "x", payload = {s = s}}) end"#,
    );
    mapper(
        &d,
        "encode",
        r#"local t = {"x"} for i = 1, 30 do t = {t, t} end host.json_encode(t)"#,
    );
    d.restart();
    let mut c = d.client();
    let list = c.ok("plugins.list", json!({}));
    assert_eq!(list["errors"], json!([]), "{list}");
    let mut other = d.client();
    for round in 0..2 {
        for source in ["dag", "wide", "encode"] {
            fails_in_plugin(&mut c, source, "bytes of JSON in one call");
            other.append(
                "bystander",
                "user.input",
                json!({"round": round, "after": source}),
            );
        }
    }
    assert_eq!(other.read_all("bystander").len(), 6);
    assert!(c.ok("stats", json!({}))["rss_bytes"].as_u64().unwrap() > 0);
    // Peak RSS over the daemon's life (27 MB measured): each call builds at most 1 MB of
    // JSON (the frame size) plus twice its input, far from the gigabytes it took before.
    let peak_kb = d.proc_status("VmHWM");
    eprintln!("peak RSS {} MB", peak_kb / 1024);
    assert!(peak_kb < 128 * 1024, "peak RSS {peak_kb} kB");
}

#[test]
fn hung_plugins_stop_costing_cpu_once_disabled_or_reloaded() {
    // One failure disables a plugin; a short deadline keeps the 64 hostile calls quick.
    let mut d = Daemon::new(Some(
        "[plugins]\ncall_timeout_ms = 100\nmax_consecutive_errors = 1\nmemory_bytes = 16777216\n",
    ));
    let hostile = [
        (
            "pcall-spin",
            "while true do pcall(function() for i = 1, 300 do end end) end",
        ),
        (
            "coroutine-spin",
            "coroutine.wrap(function() while true do pcall(function() while true do end end) end end)()",
        ),
        (
            "resume-spin",
            "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
        ),
        (
            "load-spin",
            "while true do load(function() while true do end end) end",
        ),
        ("rep-bomb", "while true do pcall(string.rep, '', 1e18) end"),
        (
            "find-bomb",
            "string.find(string.rep('a', 100000), '.-.-.-.-b')",
        ),
        (
            "gsub-bomb",
            "string.gsub(string.rep('a', 50000), '.-.-.-b', 'x')",
        ),
        (
            "gc-spin",
            "setmetatable({}, { __gc = function() while true do end end }) emit({ type = 'x' })",
        ),
    ];
    for (name, body) in hostile {
        mapper(&d, name, body);
    }
    // Files in place before the start: no watcher reload races the disabling below.
    d.restart();
    let mut c = d.client();
    let list = c.ok("plugins.list", json!({}));
    assert_eq!(list["errors"], json!([]), "{list}");
    let threads = d.proc_status("Threads");
    let mut other = d.client();
    for cycle in 0..8 {
        // A failure disables each plugin; the reload starts it afresh and drops the old
        // state, whose thread must end.
        for (name, _) in hostile {
            let needle = if name == "gc-spin" {
                "__gc"
            } else {
                "exceeded"
            };
            fails_in_plugin(&mut c, name, needle);
        }
        let list = c.ok("plugins.list", json!({}));
        for (name, _) in hostile {
            assert_eq!(plugin(&list, name)["state"], "disabled", "{cycle}: {list}");
        }
        other.append("bystander", "user.input", json!({"cycle": cycle}));
        c.ok("plugins.reload", json!({}));
    }
    assert_eq!(other.read_all("bystander").len(), 8);
    // Idle now: no thread of the daemon keeps spinning, and the old states' threads ended.
    let used = wait_until_idle(&d);
    eprintln!("idle CPU: {used} ticks in 500 ms");
    eventually("the old plugin threads to end", || {
        (d.proc_status("Threads") <= threads + 2).then_some(())
    });
}
