//! dstream's telemetry settings in the `env` block of Claude Code's settings: the OTLP log
//! exporter pointed at the daemon's HTTP listener with its token, so Claude Code reports what
//! each model call used and cost (see the README's Telemetry). Written only into the user's
//! settings (Claude Code 2.1.330 ignores a project's for its exporter, and a project file may
//! be shared: the token is a secret), and only when the user has no OTLP exporter of their
//! own; `DSTREAM_TELEMETRY` marks the keys as dstream's, so uninstall removes exactly them.

use dstream_daemon::Config;
use dstream_daemon::http::settings::Listen;

use super::json::Json;

/// The marker: present when the keys below are dstream's.
const MARKER: &str = "DSTREAM_TELEMETRY";
/// The keys dstream writes, besides the marker.
const KEYS: &[&str] = &[
    "CLAUDE_CODE_ENABLE_TELEMETRY",
    "OTEL_LOGS_EXPORTER",
    "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
];
/// Keys by which a user's own exporter shows: dstream does not replace it.
const USERS_OWN: &[&str] = &[
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    "OTEL_LOGS_EXPORTER",
];

/// Where Claude Code sends its log records, and the token it sends.
pub struct Telemetry {
    pub endpoint: String,
    pub token: String,
}

/// The daemon's listener as `config` sets it, with its token (made now if the daemon never
/// ran); why not, when it has none (off, or a port picked at each start).
pub fn of(config: &Config) -> Result<Telemetry, String> {
    let addr = match config.http.listen() {
        Ok(Listen::At(a)) if a.port() != 0 => a,
        Ok(Listen::At(_)) => return Err("[http] listen picks a free port at each start".into()),
        Ok(Listen::Off) => return Err("the HTTP listener is off ([http] listen)".into()),
        Err(e) => return Err(e),
    };
    let data_dir = config.data_dir();
    dstream_daemon::autostart::make_private_dir(&data_dir)
        .map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    let token = dstream_daemon::http::token::load_or_create(&data_dir)
        .map_err(|e| format!("no token: {e}"))?;
    Ok(Telemetry {
        endpoint: format!("http://{addr}/v1/logs"),
        token,
    })
}

/// What [`add`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Added {
    Written,
    AlreadyThere,
    /// The user exports somewhere else already: named by the key found.
    UsersOwn(String),
}

/// Adds dstream's keys to `doc`'s `env`, unless the settings or the environment already name
/// an exporter that is not dstream's.
pub fn add(doc: &mut Json, t: &Telemetry, process_env: impl Fn(&str) -> Option<String>) -> Added {
    let env = doc.get("env");
    let ours = env.is_some_and(|e| e.get(MARKER).is_some());
    if !ours {
        for key in USERS_OWN {
            if env.and_then(|e| e.get(key)).is_some() || process_env(key).is_some() {
                return Added::UsersOwn((*key).to_string());
            }
        }
    }
    let values = [
        "1".to_string(),
        "otlp".to_string(),
        "http/protobuf".to_string(),
        t.endpoint.clone(),
        format!("Authorization=Bearer {}", t.token),
    ];
    let Some(env) = doc.entry("env", || Json::Object(Vec::new())) else {
        return Added::UsersOwn("a settings file that is not an object".into());
    };
    if !matches!(env, Json::Object(_)) {
        return Added::UsersOwn("`env` (not an object)".into());
    }
    let same = KEYS.iter().zip(&values).all(|(k, v)| {
        env.get(k)
            .and_then(Json::as_str)
            .is_some_and(|x| x == v.as_str())
    });
    if ours && same {
        return Added::AlreadyThere;
    }
    env.set(MARKER, Json::string("1"));
    for (k, v) in KEYS.iter().zip(&values) {
        env.set(k, Json::string(v));
    }
    Added::Written
}

/// Removes dstream's keys (when the marker says they are dstream's), and `env` when nothing
/// else was in it; whether anything was removed.
pub fn remove(doc: &mut Json) -> bool {
    let Some(env) = doc.get_mut("env") else {
        return false;
    };
    if env.get(MARKER).is_none() {
        return false;
    }
    env.remove(MARKER);
    for k in KEYS {
        env.remove(k);
    }
    if matches!(env, Json::Object(entries) if entries.is_empty()) {
        doc.remove("env");
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::install::json;

    fn t() -> Telemetry {
        Telemetry {
            endpoint: "http://127.0.0.1:4438/v1/logs".into(),
            token: "ab".repeat(32),
        }
    }

    #[test]
    fn added_once_removed_exactly() {
        let mut doc = json::parse(r#"{"env": {"FOO": "bar"}, "model": "x"}"#).unwrap();
        assert_eq!(add(&mut doc, &t(), |_| None), Added::Written);
        assert_eq!(add(&mut doc, &t(), |_| None), Added::AlreadyThere);
        let text = json::to_pretty(&doc);
        assert!(text.contains("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"), "{text}");
        assert!(remove(&mut doc));
        assert_eq!(
            json::to_pretty(&doc),
            json::to_pretty(&json::parse(r#"{"env": {"FOO": "bar"}, "model": "x"}"#).unwrap())
        );
        let mut bare = json::parse("{}").unwrap();
        add(&mut bare, &t(), |_| None);
        remove(&mut bare);
        assert_eq!(json::to_pretty(&bare), "{}");
    }

    #[test]
    fn a_users_own_exporter_is_left_alone() {
        let mut doc =
            json::parse(r#"{"env": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}}"#)
                .unwrap();
        let before = json::to_pretty(&doc);
        assert!(matches!(add(&mut doc, &t(), |_| None), Added::UsersOwn(_)));
        assert_eq!(json::to_pretty(&doc), before);
        let mut doc = json::parse("{}").unwrap();
        let env = |k: &str| (k == "OTEL_LOGS_EXPORTER").then(|| "console".to_string());
        assert!(matches!(add(&mut doc, &t(), env), Added::UsersOwn(_)));
        assert!(!remove(&mut doc), "nothing of dstream's to remove");
    }
}
