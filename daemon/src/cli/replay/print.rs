//! The state at a step as plain lines: what `--print` writes for scripts, and what the side
//! pane shows. One wording for both, so a test of `--print` also reads what people see.

use crate::cli::output;
use crate::cli::replay::state::{Outcome, StateAt};
use crate::cli::tail_view::dollars;

/// Files listed at most (the count says how many there are).
const MAX_FILES: usize = 200;

fn outcome(o: Outcome) -> &'static str {
    match o {
        Outcome::Approved => "approved",
        Outcome::Rejected => "rejected",
        Outcome::Expired => "expired",
        Outcome::Bypassed => "ran undecided",
    }
}

/// `position`, `time`, `tool calls`, `cost`, `checkpoints`, `files` and their lists.
pub fn state_lines(s: &StateAt<'_>) -> Vec<String> {
    let mut out = vec![
        format!("position    LSN {}/{}", s.lsn, s.last_lsn),
        format!("event       {} of {}", s.index + 1, s.count),
        format!("time        {}", output::time(s.timestamp)),
        format!("tool calls  {}", s.totals.calls),
    ];
    let t = &s.totals;
    let calls = t.model_calls();
    let mut cost = format!(
        "cost        {} ({calls} model call{})",
        dollars(t.cost_micros() as f64 / 1e6),
        if calls == 1 { "" } else { "s" }
    );
    // `dstream usage`'s rule, said where it changes the sum.
    if t.telemetry_requests > 0 && t.other_requests > 0 {
        cost.push_str(&format!(
            "; telemetry only, {} other{} not counted",
            t.other_requests,
            if t.other_requests == 1 { "" } else { "s" }
        ));
    }
    out.push(cost);
    if let Some(r) = t.reported_micros {
        out.push(format!("reported    {}", dollars(r as f64 / 1e6)));
    }
    out.push(format!(
        "checkpoints {} pending, {} decided",
        s.pending.len(),
        s.decided.len()
    ));
    for c in &s.pending {
        out.push(format!("  pending   {} ({})", c.summary, c.id));
    }
    for (c, o) in &s.decided {
        out.push(format!("  {:<9} {} ({})", outcome(*o), c.summary, c.id));
    }
    let changed = s.files.iter().filter(|f| f.1).count();
    out.push(format!(
        "files       {} touched, {changed} changed",
        s.files.len()
    ));
    for (path, edited) in s.files.iter().take(MAX_FILES) {
        out.push(format!(
            "  {:<9} {path}",
            if *edited { "changed" } else { "read" }
        ));
    }
    if s.files.len() > MAX_FILES {
        out.push(format!("  … {} more", s.files.len() - MAX_FILES));
    }
    out
}
