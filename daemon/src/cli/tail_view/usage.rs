//! What model calls cost, in words: `$0.0123  claude-sonnet-4-5 1,234 in / 567 out`.

use dstream_sdk::Event;
use serde_json::Value as Json;

use crate::cli::tail_view::fields::{count, duration, number, text};
use crate::cli::tail_view::paint::{Line, Tone};

/// Dollars for the label column: four decimals under a dollar, two from there.
pub fn dollars(usd: f64) -> String {
    if usd.abs() < 1.0 {
        format!("${usd:.4}")
    } else {
        format!("${usd:.2}")
    }
}

/// The cost of a payload: exact micro-dollars when the mapping gave them, else the float.
fn cost(p: &Json, micros_key: &str, usd_key: &str) -> Option<f64> {
    number(p, micros_key)
        .map(|m| m as f64 / 1e6)
        .or_else(|| p.get(usd_key).and_then(Json::as_f64))
}

/// ` 1,234 in / 567 out (9,000 cached)`.
fn tokens(p: &Json) -> String {
    let mut s = format!(
        "{} in / {} out",
        count(number(p, "input_tokens").unwrap_or(0)),
        count(number(p, "output_tokens").unwrap_or(0))
    );
    match number(p, "cache_read_input_tokens") {
        Some(n) if n > 0 => s.push_str(&format!(" ({} cached)", count(n))),
        _ => {}
    }
    s
}

/// `usage.request`: one model call.
pub fn request(e: &Event) -> Line {
    let p = &e.payload;
    let label = cost(p, "cost_usd_micros", "cost_usd").map_or_else(|| "$?".into(), dollars);
    let model = text(p, "model").unwrap_or("model");
    Line::new(label, Tone::Money)
        .then(format!("{model} "), Tone::Plain)
        .then(tokens(p), Tone::Quiet)
}

/// `usage.session`: a run's totals (the Agent SDK's result).
pub fn session(e: &Event) -> Line {
    let p = &e.payload;
    let label =
        cost(p, "total_cost_usd_micros", "total_cost_usd").map_or_else(|| "$?".into(), dollars);
    let models = p
        .get("model_usage")
        .and_then(Json::as_object)
        .map(|m| m.keys().cloned().collect::<Vec<_>>().join(", "))
        .filter(|m| !m.is_empty())
        .map(|m| format!(" {m}"))
        .unwrap_or_default();
    let mut tail = String::new();
    if let Some(n) = number(p, "num_turns") {
        tail.push_str(&format!(", {n} turns"));
    }
    if let Some(ms) = number(p, "duration_ms") {
        tail.push_str(&format!(", {}", duration(ms)));
    }
    Line::new(label, Tone::Money)
        .then(format!("session total{models} "), Tone::Plain)
        .then(format!("{}{tail}", tokens(p)), Tone::Quiet)
}
