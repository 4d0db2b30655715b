//! The HTTP listener's OTLP receiver against a real daemon: Claude Code's log records (JSON,
//! protobuf, gzip) become the session's `usage.request`, `execution.permission` and
//! `session.error` events, once each; a request without the token, from a foreign Host or
//! Origin, oversize, malformed or of another type is refused with the right status and
//! stores nothing.
#![cfg(unix)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use dstream_tests::Daemon;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use prost::Message;
use serde_json::{Value, json};

const CONFIG: &str = "[http]\nlisten = \"0\"\nmax_body_bytes = 65536\n";

/// Request headers, in order.
type Head = Vec<(&'static str, String)>;

struct Listener {
    addr: String,
    token: String,
}

fn listener(d: &Daemon) -> Listener {
    let stats = d.client().ok("stats", json!({}));
    let addr = stats["http"]["listen"]
        .as_str()
        .unwrap_or_else(|| panic!("no listener: {stats}"))
        .to_string();
    let token_file = d.data_dir().join("http.token");
    let mode = std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(&token_file).unwrap());
    assert_eq!(mode & 0o777, 0o600, "the token is the owner's only");
    let token = std::fs::read_to_string(token_file)
        .unwrap()
        .trim()
        .to_string();
    Listener { addr, token }
}

/// One HTTP/1.1 request; the status and body of the answer.
fn request(addr: &str, head: &[(&str, String)], body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = "POST /v1/logs HTTP/1.1\r\nConnection: close\r\n".to_string();
    for (k, v) in head {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !head
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
    {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn good_head(l: &Listener, content_type: &str) -> Head {
    vec![
        ("Host", l.addr.clone()),
        ("Authorization", format!("Bearer {}", l.token)),
        ("Content-Type", content_type.to_string()),
    ]
}

fn attr(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

fn s(v: &str) -> any_value::Value {
    any_value::Value::StringValue(v.into())
}

/// An `api_request` record as Claude Code 2.1.330 sends it.
fn api_request(session: &str, seq: i64, cost: f64) -> LogRecord {
    LogRecord {
        time_unix_nano: 1_795_000_000_000_000_000,
        body: Some(AnyValue {
            value: Some(s("claude_code.api_request")),
        }),
        attributes: vec![
            attr("event.name", s("api_request")),
            attr("session.id", s(session)),
            attr("event.sequence", any_value::Value::IntValue(seq)),
            attr("event.timestamp", s("2026-11-25T10:00:00.000Z")),
            attr("prompt.id", s("p-1")),
            attr("model", s("claude-sonnet-4-5")),
            attr("input_tokens", s("1200")),
            attr("output_tokens", s("80")),
            attr("cache_read_tokens", s("9000")),
            attr("cache_creation_tokens", s("300")),
            attr("cost_usd", any_value::Value::DoubleValue(cost)),
            attr("duration_ms", s("1500")),
            attr("request_id", s("req_1")),
        ],
        ..Default::default()
    }
}

fn tool_decision(session: &str, seq: i64) -> LogRecord {
    LogRecord {
        body: Some(AnyValue {
            value: Some(s("claude_code.tool_decision")),
        }),
        attributes: vec![
            attr("event.name", s("tool_decision")),
            attr("session.id", s(session)),
            attr("event.sequence", any_value::Value::IntValue(seq)),
            attr("event.timestamp", s("2026-11-25T10:00:01.000Z")),
            attr("tool_name", s("Bash")),
            attr("tool_use_id", s("toolu_1")),
            attr("decision", s("accept")),
            attr("source", s("user_temporary")),
        ],
        ..Default::default()
    }
}

fn export(records: Vec<LogRecord>) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn of_type(events: &[Value], t: &str) -> Vec<Value> {
    events.iter().filter(|e| e["type"] == t).cloned().collect()
}

#[test]
fn claude_code_telemetry_lands_in_its_session_once() {
    let d = Daemon::start_with(CONFIG);
    let l = listener(&d);
    let mut c = d.client();

    // Protobuf, gzip.
    let body = export(vec![api_request("s1", 0, 0.0123), tool_decision("s1", 1)]).encode_to_vec();
    let mut head = good_head(&l, "application/x-protobuf");
    head.push(("Content-Encoding", "gzip".into()));
    let (status, _) = request(&l.addr, &head, &gzip(&body));
    assert_eq!(status, 200);
    let events = c.read_all("s1");
    let usage = of_type(&events, "usage.request");
    assert_eq!(usage.len(), 1, "{events:#?}");
    let p = &usage[0]["payload"];
    assert_eq!(
        (
            &p["input_tokens"],
            &p["output_tokens"],
            &p["cache_read_input_tokens"],
            &p["cache_creation_input_tokens"]
        ),
        (&json!(1200), &json!(80), &json!(9000), &json!(300)),
        "{p}"
    );
    assert_eq!(p["cost_usd_micros"], 12300, "money as an integer: {p}");
    assert_eq!(p["model"], "claude-sonnet-4-5");
    assert_eq!(usage[0]["metadata"]["source"], "otlp");
    let decisions = of_type(&events, "execution.permission");
    assert_eq!(decisions.len(), 1, "{events:#?}");
    assert_eq!(decisions[0]["payload"]["decision"], "accept");
    assert_eq!(decisions[0]["payload"]["tool_use_id"], "toolu_1");

    // The same records again (an exporter's retry), as JSON: nothing new. A resumed process
    // starts its sequence at 0 again, with a new timestamp: that one is new.
    let json_body = r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[
        {"body":{"stringValue":"claude_code.api_request"},"attributes":[
          {"key":"event.name","value":{"stringValue":"api_request"}},
          {"key":"session.id","value":{"stringValue":"s1"}},
          {"key":"event.sequence","value":{"intValue":"0"}},
          {"key":"event.timestamp","value":{"stringValue":"2026-11-25T10:00:00.000Z"}},
          {"key":"cost_usd","value":{"doubleValue":0.0123}}]},
        {"body":{"stringValue":"claude_code.api_request"},"attributes":[
          {"key":"event.name","value":{"stringValue":"api_request"}},
          {"key":"session.id","value":{"stringValue":"s1"}},
          {"key":"event.sequence","value":{"intValue":"0"}},
          {"key":"event.timestamp","value":{"stringValue":"2026-11-25T11:00:00.000Z"}},
          {"key":"cost_usd","value":{"doubleValue":0.5}}]}]}]}]}"#;
    let (status, answer) = request(
        &l.addr,
        &good_head(&l, "application/json"),
        json_body.as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    let usage = of_type(&c.read_all("s1"), "usage.request");
    let micros: Vec<&Value> = usage
        .iter()
        .map(|u| &u["payload"]["cost_usd_micros"])
        .collect();
    assert_eq!(micros, [&json!(12300), &json!(500000)], "{usage:#?}");

    let stats = c.ok("stats", json!({}));
    assert_eq!(stats["http"]["otlp_records"], 4, "{stats}");
}

#[test]
fn bad_requests_are_refused_and_store_nothing() {
    let d = Daemon::start_with(CONFIG);
    let l = listener(&d);
    let body = export(vec![api_request("s2", 0, 0.01)]).encode_to_vec();
    let good = good_head(&l, "application/x-protobuf");
    let without =
        |name: &str| -> Head { good.iter().filter(|(k, _)| *k != name).cloned().collect() };
    let with = |name: &'static str, value: &str| {
        let mut h = without(name);
        h.push((name, value.to_string()));
        h
    };
    let cases: Vec<(&str, Head, Vec<u8>, u16)> = vec![
        ("no token", without("Authorization"), body.clone(), 401),
        (
            "a wrong token",
            with("Authorization", "Bearer 00ff"),
            body.clone(),
            401,
        ),
        (
            "a foreign Host (DNS rebinding)",
            with("Host", "evil.example:4438"),
            body.clone(),
            403,
        ),
        (
            "a web page's Origin",
            {
                let mut h = good.clone();
                h.push(("Origin", "http://evil.example".into()));
                h
            },
            body.clone(),
            403,
        ),
        (
            "another content type",
            with("Content-Type", "text/plain"),
            body.clone(),
            415,
        ),
        (
            "malformed protobuf",
            good.clone(),
            b"\xff\xff\xff\xff not protobuf".to_vec(),
            400,
        ),
        (
            "malformed JSON",
            with("Content-Type", "application/json"),
            b"{\"resourceLogs\": [".to_vec(),
            400,
        ),
        (
            "an oversize body",
            {
                let mut h = good.clone();
                h.push(("Content-Length", "10000000".into()));
                h
            },
            Vec::new(),
            413,
        ),
        (
            "a gzip bomb",
            {
                let mut h = good.clone();
                h.push(("Content-Encoding", "gzip".into()));
                h
            },
            gzip(&vec![0u8; 1 << 20]),
            413,
        ),
    ];
    for (what, head, body, want) in cases {
        let (status, answer) = request(&l.addr, &head, &body);
        assert_eq!(status, want, "{what}: {answer}");
    }
    let mut c = d.client();
    let list = c.ok("sessions.list", json!({}));
    assert_eq!(list["sessions"], json!([]), "nothing stored: {list}");
    // And the listener still serves.
    let (status, _) = request(&l.addr, &good, &body);
    assert_eq!(status, 200);
    assert_eq!(of_type(&c.read_all("s2"), "usage.request").len(), 1);
    assert!(
        c.ok("stats", json!({}))["http"]["refused"]
            .as_u64()
            .unwrap()
            >= 4
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The real Claude Code, installed with `dstream install claude-code --user`, reports each
/// model call's tokens and cost to the daemon: what the session's `usage.request` events add up
/// to is what `claude -p --output-format json` printed, and the permission decision that no hook
/// sees is in the log. Then a day's budget of half that cost, with `action = "ask"`, holds the
/// Bash call of a second run in a checkpoint that names it, until a person approves.
#[test]
fn a_claude_code_run_reports_its_cost_through_telemetry() {
    use dstream_tests::agents::{self, AgentEnv};
    use dstream_tests::mock_model::{MockModel, Reply, Script};

    let paths = agents::ensure_installed();
    let port = free_port();
    let config = format!("[http]\nlisten = \"127.0.0.1:{port}\"\n");
    let mut d = Daemon::start_with(&config);
    let env = AgentEnv::new();
    let out = env
        .command(dstream_tests::daemon_bin())
        .args(["install", "claude-code", "--user"])
        .env("DSTREAM_CONFIG", d.config_path().unwrap())
        .env("DSTREAM_DATA_DIR", d.data_dir())
        .env("DSTREAM_SOCKET", d.socket())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("telemetry: Claude Code reports usage"),
        "{said}"
    );

    let mock = MockModel::anthropic(Script::tool_then_text(
        Reply::bash("echo hello-from-dstream"),
        "Done.",
    ));
    let mut cmd = agents::claude_command(
        &paths,
        &env,
        &mock,
        "Run echo hello-from-dstream",
        &["--output-format", "json"],
    );
    // Both switch telemetry off (the second stands for DISABLE_TELEMETRY and others).
    cmd.env_remove("DISABLE_TELEMETRY")
        .env_remove("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")
        .envs(dstream_tests::client_env(d.socket()));
    let run = agents::run(&env, cmd, Duration::from_secs(120));
    run.assert_success("claude -p with telemetry");
    let result: Value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("claude's JSON result ({e}): {}", run.stdout));
    let session = result["session_id"].as_str().unwrap().to_string();
    let total = result["total_cost_usd"].as_f64().unwrap();
    assert!(total > 0.0, "a cost to compare: {result}");

    let mut c = d.client();
    let usage =
        dstream_tests::relay::wait_for("the usage records", Duration::from_secs(30), || {
            let u = of_type(&c.read_all(&session), "usage.request");
            let sum: f64 = u
                .iter()
                .filter_map(|e| e["payload"]["cost_usd"].as_f64())
                .sum();
            ((sum - total).abs() < 1e-9).then_some(u)
        });
    let micros: i64 = usage
        .iter()
        .map(|e| e["payload"]["cost_usd_micros"].as_i64().unwrap())
        .sum();
    assert!(
        (micros - (total * 1e6).round() as i64).abs() <= usage.len() as i64,
        "{micros} µ$ for {total} $"
    );
    let tokens: i64 = usage
        .iter()
        .map(|e| e["payload"]["output_tokens"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(
        tokens,
        result["usage"]["output_tokens"].as_i64().unwrap(),
        "{result}"
    );
    // `dstream usage` says the same as Claude Code did.
    let out = d.cli(&["usage", "--by", "session", "--json", "--session", &session]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["total"]["cost_usd_micros"], micros, "{report}");
    assert_eq!(
        report["total"]["output_tokens"], result["usage"]["output_tokens"],
        "{report}"
    );
    assert_eq!(
        report["total"]["input_tokens"], result["usage"]["input_tokens"],
        "{report}"
    );
    assert_eq!(report["rows"][0]["key"], session.as_str(), "{report}");
    assert_eq!(report["mismatches"], json!([]), "{report}");
    let decisions = of_type(&c.read_all(&session), "execution.permission");
    assert!(
        decisions.iter().any(|e| e["metadata"]["source"] == "otlp"),
        "the tool decision record: {decisions:#?}"
    );

    // A budget of half what that run cost, for the day: the next run's Bash call waits.
    drop(c);
    d.stop();
    std::fs::write(
        d.config_path().unwrap(),
        format!(
            "{config}\n[[budgets]]\nname = \"half\"\nscope = \"day\"\nlimit_usd = {}\naction = \"ask\"\n",
            total / 2.0
        ),
    )
    .unwrap();
    d.restart();
    let mock = MockModel::anthropic(Script::tool_then_text(
        Reply::bash("echo second-run"),
        "Done.",
    ));
    let mut cmd = agents::claude_command(&paths, &env, &mock, "Run echo second-run", &[]);
    cmd.env_remove("DISABLE_TELEMETRY")
        .env_remove("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")
        .envs(dstream_tests::client_env(d.socket()));
    let second = agents::spawn_run(cmd, mock);
    let mut c = d.client();
    let pending = dstream_tests::relay::wait_for(
        "the second run's call to wait",
        Duration::from_secs(90),
        || {
            assert!(
                !second.is_finished(),
                "the second run ended without waiting"
            );
            let list = c.ok("checkpoint.list", json!({"state": "pending"}));
            list["checkpoints"]
                .as_array()
                .and_then(|a| a.first())
                .cloned()
        },
    );
    let summary = pending["summary"].as_str().unwrap();
    assert!(
        summary.contains("echo second-run") && summary.contains("\"half\" crossed"),
        "{summary}"
    );
    let approve = d.cli_as_person(&["approve", pending["id"].as_str().unwrap()]);
    assert!(approve.status.success(), "{approve:?}");
    let run = second.join().unwrap();
    run.assert_success("the approved second run");
    let second_session = pending["session_id"].as_str().unwrap().to_string();
    let ran = c
        .read_all(&second_session)
        .iter()
        .any(|e| e["type"] == "execution.tool_result" && e.to_string().contains("second-run"));
    assert!(ran, "the approved command ran");
    // The crossing is recorded once, when the second run's spending arrives.
    let crossed = dstream_tests::relay::wait_for(
        "the crossing to be recorded",
        Duration::from_secs(30),
        || {
            let e = of_type(&c.read_all(&second_session), "usage.budget_exceeded");
            (!e.is_empty()).then_some(e)
        },
    );
    assert_eq!(crossed.len(), 1, "{crossed:#?}");
    assert_eq!(crossed[0]["payload"]["budget"], "half");
}

/// `dstream doctor` says where the listener listens, and why it does not when its port is taken.
#[test]
fn doctor_names_the_listener_or_why_it_is_off() {
    let doctor_http = |d: &Daemon| -> Value {
        let out = d.cli(&[
            "doctor",
            "--json",
            "--config",
            d.config_path().unwrap().to_str().unwrap(),
        ]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "http")
            .cloned()
            .unwrap_or_else(|| panic!("no http check: {report}"))
    };
    let d = Daemon::start_with(CONFIG);
    let l = listener(&d);
    let check = doctor_http(&d);
    assert_eq!(check["status"], "ok", "{check}");
    assert!(
        check["detail"].as_str().unwrap().contains(&l.addr),
        "{check}"
    );

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let d = Daemon::start_with(&format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"));
    let check = doctor_http(&d);
    assert_eq!(check["status"], "warn", "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("127.0.0.1:{port}")) && detail.contains("but off"),
        "{check}"
    );
}

// ---- [otlp] forward_to: the user's own collector ----

/// What the stand-in collector received: the path, the headers (names lower-case), the body.
#[derive(Debug, Clone)]
struct Received {
    /// When it arrived.
    at: std::time::Instant,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The user's own OTLP/HTTP collector: a plain HTTP/1.1 server on loopback that keeps every
/// request and answers 200 (keep-alive, as collectors do).
struct Collector {
    got: std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
}

/// A collector's "yes".
const OK: &str = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";

impl Collector {
    fn serve(listener: std::net::TcpListener) -> Collector {
        Collector::serve_answering(listener, Vec::new())
    }

    /// Answers the first requests with `first`, in order, then 200.
    fn serve_answering(listener: std::net::TcpListener, first: Vec<&'static str>) -> Collector {
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = got.clone();
        let answers = std::sync::Arc::new(std::sync::Mutex::new(
            first.into_iter().collect::<std::collections::VecDeque<_>>(),
        ));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let kept = kept.clone();
                let answers = answers.clone();
                std::thread::spawn(move || {
                    let mut writer = conn.try_clone().unwrap();
                    let mut reader = std::io::BufReader::new(conn);
                    while let Some(r) = read_request(&mut reader) {
                        kept.lock().unwrap().push(r);
                        let answer = answers.lock().unwrap().pop_front().unwrap_or(OK);
                        if writer.write_all(answer.as_bytes()).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Collector { got }
    }

    fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

/// One request off a connection, or none at its end.
fn read_request(r: &mut impl std::io::BufRead) -> Option<Received> {
    let mut line = String::new();
    r.read_line(&mut line).ok().filter(|n| *n > 0)?;
    let path = line.split(' ').nth(1)?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok().filter(|n| *n > 0)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some(Received {
        at: std::time::Instant::now(),
        path,
        headers,
        body,
    })
}

fn forwarding_config(port: u16) -> String {
    format!(
        "{CONFIG}\n[otlp]\nforward_to = \"http://127.0.0.1:{port}/\"\nforward_headers = {{ X-Collector-Token = \"abc\" }}\n"
    )
}

fn http_stats(d: &Daemon) -> Value {
    d.client().ok("stats", json!({}))["http"].clone()
}

#[test]
fn accepted_requests_reach_the_users_collector_unchanged() {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let collector = Collector::serve(socket);
    let d = Daemon::start_with(&forwarding_config(port));
    let l = listener(&d);

    // Protobuf, gzip: the collector gets the very bytes, type and encoding.
    let sent = gzip(&export(vec![api_request("fwd-1", 0, 0.0123)]).encode_to_vec());
    let mut head = good_head(&l, "application/x-protobuf");
    head.push(("Content-Encoding", "gzip".into()));
    let (status, answer) = request(&l.addr, &head, &sent);
    assert_eq!(status, 200, "{answer}");
    // Stored here as ever.
    let mut c = d.client();
    assert_eq!(of_type(&c.read_all("fwd-1"), "usage.request").len(), 1);
    let got = dstream_tests::relay::wait_for(
        "the collector to get the request",
        Duration::from_secs(30),
        || Some(collector.received()).filter(|r| !r.is_empty()),
    );
    assert_eq!(got.len(), 1, "{got:?}");
    let r = &got[0];
    assert_eq!(r.path, "/v1/logs");
    assert_eq!(r.body, sent, "the same body bytes");
    assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("x-collector-token"), Some("abc"));
    assert_eq!(
        r.header("authorization"),
        None,
        "dstream's own token stays here"
    );

    // JSON to the metrics path: forwarded as it came too.
    let metrics = br#"{"resourceMetrics":[]}"#;
    let mut s = TcpStream::connect(&l.addr).unwrap();
    let req = format!(
        "POST /v1/metrics HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        l.addr,
        l.token,
        metrics.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(metrics).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let got =
        dstream_tests::relay::wait_for("the metrics request", Duration::from_secs(30), || {
            Some(collector.received()).filter(|r| r.len() == 2)
        });
    assert_eq!(got[1].path, "/v1/metrics");
    assert_eq!(got[1].body, metrics);
    assert_eq!(got[1].header("content-type"), Some("application/json"));

    let stats = http_stats(&d);
    assert_eq!(stats["forwarded"], 2, "{stats}");
    assert_eq!(
        stats["forward_to"],
        format!("http://127.0.0.1:{port}"),
        "{stats}"
    );
    assert_eq!(stats["forward_errors"], 0, "{stats}");

    // A refused request is not forwarded.
    let (status, _) = request(&l.addr, &good_head(&l, "text/plain"), b"x");
    assert_eq!(status, 415);
    assert_eq!(http_stats(&d)["forwarded"], 2);
    assert_eq!(collector.received().len(), 2);
}

#[test]
fn a_collector_that_is_down_costs_nothing_here_and_gets_the_request_when_it_is_back() {
    let port = free_port();
    let d = Daemon::start_with(&forwarding_config(port));
    let l = listener(&d);
    let sent = export(vec![api_request("fwd-2", 0, 0.5)]).encode_to_vec();
    let (status, answer) = request(&l.addr, &good_head(&l, "application/x-protobuf"), &sent);
    assert_eq!(
        status, 200,
        "the local store does not wait for the collector: {answer}"
    );
    let mut c = d.client();
    assert_eq!(of_type(&c.read_all("fwd-2"), "usage.request").len(), 1);
    let stats = dstream_tests::relay::wait_for(
        "failed attempts to be counted",
        Duration::from_secs(30),
        || Some(http_stats(&d)).filter(|s| s["forward_errors"].as_u64() >= Some(2)),
    );
    assert_eq!(stats["forwarded"], 0, "{stats}");
    assert!(
        stats["forward_last_error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("127.0.0.1:{port}"))),
        "{stats}"
    );

    // The collector comes up: the retry delivers the request, once.
    let collector = Collector::serve(std::net::TcpListener::bind(("127.0.0.1", port)).unwrap());
    let got =
        dstream_tests::relay::wait_for("the retried request", Duration::from_secs(60), || {
            Some(collector.received()).filter(|r| !r.is_empty())
        });
    assert_eq!(got[0].body, sent);
    dstream_tests::relay::wait_for("forwarded = 1", Duration::from_secs(10), || {
        (http_stats(&d)["forwarded"] == 1).then_some(())
    });
    assert_eq!(collector.received().len(), 1, "delivered once");
    assert_eq!(http_stats(&d)["forward_dropped"], 0);
}

/// A busy collector (503 with `Retry-After`) gets the request again, after the wait it asked
/// for; one that refuses a request (400) is not asked again, and the refusal is counted.
#[test]
fn a_busy_collector_is_retried_and_a_refusal_is_counted_and_dropped() {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let collector = Collector::serve_answering(
        socket,
        vec![
            "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n",
            OK,
            "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
        ],
    );
    let d = Daemon::start_with(&forwarding_config(port));
    let l = listener(&d);
    let head = good_head(&l, "application/x-protobuf");

    let first = export(vec![api_request("fwd-3", 0, 0.1)]).encode_to_vec();
    assert_eq!(request(&l.addr, &head, &first).0, 200);
    let got =
        dstream_tests::relay::wait_for("the retry after the 503", Duration::from_secs(30), || {
            Some(collector.received()).filter(|r| r.len() == 2)
        });
    assert!(
        got.iter().all(|r| r.body == first),
        "the same request twice"
    );
    // Not before the second it asked for (the backoff alone would retry within 200 ms).
    let waited = got[1].at - got[0].at;
    assert!(waited >= Duration::from_millis(950), "{waited:?}");
    let stats = http_stats(&d);
    assert_eq!(
        (&stats["forwarded"], &stats["forward_errors"]),
        (&json!(1), &json!(1)),
        "{stats}"
    );
    assert!(
        stats["forward_last_error"]
            .as_str()
            .is_some_and(|e| e.contains("503")),
        "{stats}"
    );

    // The next request is refused with 400: counted, dropped, not sent again; the one after
    // goes through.
    let second = export(vec![api_request("fwd-3", 1, 0.2)]).encode_to_vec();
    assert_eq!(request(&l.addr, &head, &second).0, 200);
    let third = export(vec![api_request("fwd-3", 2, 0.3)]).encode_to_vec();
    assert_eq!(request(&l.addr, &head, &third).0, 200);
    let got = dstream_tests::relay::wait_for(
        "the request after the refused one",
        Duration::from_secs(30),
        || Some(collector.received()).filter(|r| r.len() == 4),
    );
    assert_eq!(got[2].body, second);
    assert_eq!(got[3].body, third);
    // The forwarder counts a request once the collector's answer is back, just after it.
    let stats = dstream_tests::relay::wait_for(
        "the forwarded request to be counted",
        Duration::from_secs(30),
        || Some(http_stats(&d)).filter(|s| s["forwarded"] == 2),
    );
    assert_eq!(stats["forwarded"], 2, "{stats}");
    assert_eq!(stats["forward_dropped"], 1, "{stats}");
    assert_eq!(stats["forward_errors"], 2, "{stats}");
    // All three are stored here whatever the collector said.
    let mut c = d.client();
    assert_eq!(of_type(&c.read_all("fwd-3"), "usage.request").len(), 3);
}
