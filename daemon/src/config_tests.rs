//! Tests of `config` (kept apart to keep that file short).

use super::*;

#[test]
fn embedded_defaults_parse() {
    let c = Config::default();
    assert_eq!(c.store.fsync, FsyncPolicy::Always);
    assert_eq!(c.daemon.max_frame_bytes, 16 * 1024 * 1024);
    // The documented redaction defaults are the built-in ones.
    assert_eq!(c.redact, RedactConfig::default());
}

#[test]
fn a_partial_file_overrides_only_its_keys() {
    let c = Config::from_toml_str("[store]\nfsync = \"interval\"\n", Path::new("x.toml")).unwrap();
    assert_eq!(c.store.fsync, FsyncPolicy::Interval);
    assert_eq!(
        c.store.fsync_interval_ms,
        Config::default().store.fsync_interval_ms
    );
}

#[test]
fn errors_name_the_key_and_the_file() {
    let e = Config::from_toml_str("[store]\nfsync = \"sometimes\"\n", Path::new("/etc/d.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("store.fsync") && e.contains("/etc/d.toml"),
        "{e}"
    );
    let e = Config::from_toml_str("[store]\nfsyncc = 1\n", Path::new("/etc/d.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("key `store.fsyncc`") && e.contains("/etc/d.toml"),
        "{e}"
    );
    let e = Config::from_toml_str("[stor]\nx = 1\n", Path::new("c.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("key `stor`"), "{e}");
    let e = Config::from_toml_str("[read]\ndefault_limit = 0\n", Path::new("c.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("read.default_limit"), "{e}");
}

#[test]
fn relay_settings_are_checked_where_they_are_written() {
    let err = |text: &str| {
        Config::from_toml_str(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string()
    };
    let e = err("[relay]\nurl = \"ftp://x/y\"\n");
    assert!(e.contains("relay.url") && e.contains("http://"), "{e}");
    let e = err("[relay]\nurl = \"http://exa mple/v1\"\n");
    assert!(e.contains("relay.url") && e.contains("not a URL"), "{e}");
    let e = err("[relay]\nprefix = \"my laptop\"\n");
    assert!(e.contains("relay.prefix"), "{e}");
    let e = err("[relay]\nprefix = \"..\"\n");
    assert!(e.contains("relay.prefix"), "{e}");
    let c = Config::from_toml_str(
        "[relay]\nurl = \"https://s.example/v1/stream\"\nprefix = \"lap-top_1.home\"\n",
        Path::new("c.toml"),
    )
    .unwrap();
    assert!(c.relay.enabled());
    assert_eq!(c.relay.prefix(), "lap-top_1.home");
    // A secret comes from a variable or a file, never both, and the file is named whole.
    let e = err("[relay]\ntoken_env = \"T\"\ntoken_file = \"/run/t\"\n");
    assert!(
        e.contains("relay.token_env") && e.contains("relay.token_file"),
        "{e}"
    );
    let e = err("[relay]\napproval_key_env = \"K\"\napproval_key_file = \"/run/k\"\n");
    assert!(
        e.contains("relay.approval_key_env") && e.contains("relay.approval_key_file"),
        "{e}"
    );
    let e = err("[relay]\ntoken_file = \"~/token\"\n");
    assert!(
        e.contains("relay.token_file") && e.contains("absolute"),
        "{e}"
    );
    let e = err("[relay]\napproval_key_file = \"key\"\n");
    assert!(
        e.contains("relay.approval_key_file") && e.contains("absolute"),
        "{e}"
    );
    let c = Config::from_toml_str(
        "[relay]\ntoken_file = \"/run/t\"\napproval_key_file = \"/run/k\"\n",
        Path::new("c.toml"),
    )
    .unwrap();
    assert_eq!(c.relay.token_file, Path::new("/run/t"));
    assert_eq!(c.relay.approval_key_file, Path::new("/run/k"));
    // The default prefix, the host name, is always a usable segment.
    let p = Config::default().relay.prefix();
    assert!(is_path_segment(&p), "{p:?}");
}
