//! Human-readable rendering for the client commands.

use std::time::{Duration, UNIX_EPOCH};

use dstream_sdk::Event;

/// `2026-11-21T15:09:00.123Z`
pub fn time(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

pub fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// `3s`, `2m 05s`, `1h 02m`: a duration for people.
pub fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The first `max` characters of `s`, with `…` when cut.
pub fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// One line per event: LSN, time, type, actor and a clipped payload.
pub fn event_line(e: &Event, with_session: bool) -> String {
    let payload = if e.payload.is_null() {
        String::new()
    } else {
        clip(&e.payload.to_string(), 120)
    };
    let session = if with_session {
        format!("{}  ", e.session_id)
    } else {
        String::new()
    };
    format!(
        "{session}{:>7}  {}  {:<28} {:<14} {payload}",
        e.lsn,
        time(e.timestamp),
        e.event_type,
        e.actor.as_deref().unwrap_or("-"),
    )
}

pub fn print_plugin(p: &dstream_sdk::protocol::PluginInfo) {
    let per_call = if p.calls == 0 {
        "-".to_string()
    } else {
        format!("{:.1}", p.micros as f64 / p.calls as f64)
    };
    println!(
        "{:<18} {:<9} {:<22} {:>8} {:>7} {:>9}  {}",
        p.name,
        p.state,
        p.hooks.join(","),
        p.calls,
        p.errors,
        per_call,
        p.origin
    );
    if !p.sources.is_empty() {
        println!("{:<18} maps {}", "", p.sources.join(", "));
    }
    if let Some(e) = &p.error {
        println!("{:<18} {e}", "");
    }
}
