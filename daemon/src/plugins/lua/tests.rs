//! The sandbox and the limits, tried from inside a plugin: scripts that try to outrun the
//! budget, the memory limit or the output allowance, and must fail soon and cleanly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use super::state::Host;
use crate::plugins::contract::{Hooks, Input, Limits, PluginError};

fn limits() -> Limits {
    Limits {
        call_timeout: Duration::from_millis(200),
        instructions: 50_000_000,
        memory_bytes: 32 << 20,
        output_bytes: 1 << 20,
    }
}

/// A plugin whose `map` runs `body` (with `raw`, `emit` in scope).
fn host(body: &str) -> Host {
    let source = format!(
        "local M = {{ name = 't', api = 1, sources = {{ 't' }} }}\n\
         function M.map(raw, emit, ctx)\n{body}\nend\nreturn M\n"
    );
    Host::load("@t.lua", &source, &Json::Null, limits()).unwrap()
}

fn map(host: &Host, raw: Json) -> Result<Vec<Json>, PluginError> {
    let input = Input::Map {
        raw: Arc::new(raw),
        source: "t".into(),
        session_id: None,
    };
    host.run(Hooks::MAP, input)
}

/// Runs a call that must fail; returns the error, and checks it ended soon after its
/// deadline (the script could not keep the thread).
fn fails(host: &Host, raw: Json) -> String {
    let started = Instant::now();
    let e = map(host, raw).unwrap_err().to_string();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "took {took:?}: {e}");
    e
}

#[test]
fn a_loop_that_catches_the_budget_error_cannot_go_on() {
    for body in [
        // the loop's own instructions are few: the count check mostly fires inside pcall
        "while true do pcall(function() for i = 1, 300 do end end) end",
        "while true do pcall(pcall, function() while true do end end) end",
        "while true do xpcall(function() while true do end end, function(m) return m end) end",
        "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
        "coroutine.wrap(function() while true do end end)()",
        "local co = coroutine.wrap(function() while true do pcall(function() while true do end end) end end) co()",
        "while true do load(function() while true do end end) end",
    ] {
        let h = host(&format!(
            "if raw.ok then emit({{type='ok'}}) return end\n{body}"
        ));
        let e = fails(&h, serde_json::json!({}));
        // Whichever limit the loop meets first (50M instructions or 200 ms: a fast machine
        // spends the instructions first), catching its error does not let the loop go on.
        assert!(
            e.contains("exceeded its deadline") || e.contains("exceeded its instruction budget"),
            "{body}: {e}"
        );
        // The state is usable again for the next call.
        let ok = map(&h, serde_json::json!({"ok": true})).unwrap();
        assert_eq!(ok.len(), 1, "{body}");
    }
}

#[test]
fn finalizers_are_refused_and_the_array_metatable_is_out_of_reach() {
    let h = host("setmetatable({}, { __gc = function() while true do end end })");
    assert!(fails(&h, Json::Null).contains("__gc"));
    let h =
        host("local mt = getmetatable(host.array({})) emit({ type = 'x', payload = { mt = mt } })");
    let out = map(&h, Json::Null).unwrap();
    assert_eq!(out[0]["payload"]["mt"], "array");
    // Metatables without `__gc` still work.
    let h = host(
        "local t = setmetatable({}, { __index = function() return 7 end }) emit({ type = 'x', n = t.y })",
    );
    assert_eq!(map(&h, Json::Null).unwrap()[0]["n"], 7);
}

#[test]
fn c_loops_that_allocate_nothing_are_bounded() {
    let h = host(
        "local s = string.rep('', 1e18) local t = ('x'):rep(3, ',') emit({ type = t .. #s .. string.rep('', 3, 1) })",
    );
    let started = Instant::now();
    assert_eq!(map(&h, Json::Null).unwrap()[0]["type"], "x,x,x011");
    assert!(started.elapsed() < Duration::from_secs(1));
    let h = host("string.rep('ab', 1e12)");
    assert!(fails(&h, Json::Null).contains("memory limit"));
    // Backtracking patterns are counted against the budget, not run to the end.
    let h = host("string.find(string.rep('a', 100000), '.-.-.-.-b')");
    assert!(fails(&h, Json::Null).contains("exceeded its deadline"));
    let h = host("for w in string.rep('a', 50000):gmatch('a*a*a*b') do end");
    assert!(fails(&h, Json::Null).contains("exceeded its deadline"));
    let h = host("string.gsub(string.rep('a', 50000), '.-.-b', 'x')");
    assert!(fails(&h, Json::Null).contains("exceeded its deadline"));
    let h = host(
        "local i = string.find(string.rep('a', 1e6), string.rep('a', 1e4) .. 'b', 1, true) emit({ type = tostring(i) })",
    );
    assert_eq!(map(&h, Json::Null).unwrap()[0]["type"], "nil");
    let h = host("table.move({}, 1, 1e15, 2)");
    assert!(fails(&h, Json::Null).contains("table.move"));
    let h = host("local t = table.move({1, 2, 3}, 1, 3, 2) emit({ type = 'x', t = t })");
    assert_eq!(
        map(&h, Json::Null).unwrap()[0]["t"],
        serde_json::json!([1, 1, 2, 3])
    );
}

#[test]
fn what_one_call_emits_is_bounded_in_bytes_and_count() {
    let h =
        host(r#"local t = {"x"} for i = 1, 30 do t = {t, t} end emit({type = "x", payload = t})"#);
    assert!(fails(&h, Json::Null).contains("bytes of JSON"));
    // 8 × 256 KB fits the 1 MB (plus twice the input) allowance no more than 4 times.
    let h = host(
        r#"local s = string.rep("y", 256 * 1024) for i = 1, 8 do emit({type = "x", payload = {s = s}}) end"#,
    );
    assert!(fails(&h, Json::Null).contains("bytes of JSON"));
    let h = host(r#"for i = 1, 300 do emit({type = "x"}) end"#);
    assert!(fails(&h, Json::Null).contains("more than 256 times"));
    // A filter may return what it was given, grown: the allowance scales with the input.
    let big = "z".repeat(2 << 20);
    let h = host(r#"emit({type = "x", payload = raw, copy = raw})"#);
    let out = map(&h, serde_json::json!({ "s": big })).unwrap();
    assert_eq!(out[0]["copy"]["s"].as_str().unwrap().len(), 2 << 20);
    // json_encode and json_decode may each build as much as the call's allowance.
    let h = host(r#"local t = {"x"} for i = 1, 30 do t = {t, t} end host.json_encode(t)"#);
    assert!(fails(&h, Json::Null).contains("bytes of JSON"));
    let h = host(r#"host.json_decode(string.rep(" ", 1200 * 1024) .. "0")"#);
    assert!(fails(&h, Json::Null).contains("json_decode"));
    // Encoding a field and decoding it back, twice the input, fits.
    let h = host(
        r#"local t = host.json_decode(host.json_encode(raw)) emit({ type = "x", payload = t })"#,
    );
    let out = map(&h, serde_json::json!({ "s": "w".repeat(3 << 20) })).unwrap();
    assert_eq!(out[0]["payload"]["s"].as_str().unwrap().len(), 3 << 20);
}
