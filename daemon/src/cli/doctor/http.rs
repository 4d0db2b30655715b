//! The HTTP listener (the OTLP receiver) and the budgets: whether the listener the configuration
//! asks for is up, with the reason when it is not, and which budgets are crossed.

use super::report::{Check, Context};
use crate::cli::usage_cmd::budget_line;

/// Check 8: the listener the configuration asks for is listening.
pub fn listener(cx: &Context) -> Check {
    let wanted = cx.config.http.listen.trim().to_string();
    if wanted == "off" {
        return Check::ok(
            "http",
            "off ([http] listen = \"off\"): no OTLP receiver, so no cost from Claude Code's telemetry",
        );
    }
    let Some(a) = &cx.daemon else {
        return Check::warn(
            "http",
            format!("configured at {wanted}, but the daemon is not running"),
            "dstream daemon",
        );
    };
    match &a.stats {
        Err(e) => Check::warn(
            "http",
            format!("the daemon did not say how its listener stands: {e}"),
            "dstream stats",
        ),
        Ok(s) => match (&s.http.listen, &s.http.off) {
            (Some(at), _) => Check::ok(
                "http",
                format!(
                    "listening at http://{at} ({} OTLP records received, {} requests refused)",
                    s.http.otlp_records, s.http.refused
                ),
            ),
            (None, why) => Check::warn(
                "http",
                format!(
                    "configured at {wanted}, but off: {}",
                    why.as_deref().unwrap_or("no reason given")
                ),
                "free the port or set another in [http] listen (\"0\" picks a free one), then restart the daemon",
            ),
        },
    }
}

/// Check 9: budgets crossed (a warning: tool calls may be held or refused because of them).
pub fn budgets(cx: &Context) -> Check {
    if cx.config.budgets.is_empty() {
        return Check::ok("budgets", "none configured");
    }
    let Some(Ok(status)) = cx.daemon.as_ref().map(|a| &a.budgets) else {
        return Check::ok("budgets", format!("{} configured", cx.config.budgets.len()));
    };
    let crossed: Vec<String> = status
        .budgets
        .iter()
        .filter(|b| b.crossed)
        .map(budget_line)
        .collect();
    if crossed.is_empty() {
        Check::ok(
            "budgets",
            format!("{} configured, none crossed", status.budgets.len()),
        )
    } else {
        Check::warn(
            "budgets",
            crossed.join("; "),
            "raise limit_usd in [[budgets]], or wait for the next period",
        )
    }
}
