//! Latency summaries and the result table.

use std::fmt::Write as _;

/// Value at quantile `q` (0..=1) of an ascending slice, by the nearest-rank method.
pub fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// The median of a round's values (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_unstable_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// p50 and p99 of nanosecond samples, in the unit given by `div` (1e3 = µs, 1e6 = ms).
#[derive(Debug, Clone, Copy, Default)]
pub struct Pcts {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

pub fn pcts(samples: &mut [u64], div: f64) -> Pcts {
    samples.sort_unstable();
    Pcts {
        p50: quantile(samples, 0.50).map(|v| v as f64 / div),
        p99: quantile(samples, 0.99).map(|v| v as f64 / div),
    }
}

/// How a row's ratio reads: for throughput higher is better, for the rest lower is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

pub struct Row {
    pub metric: String,
    pub ours: Option<f64>,
    pub theirs: Option<f64>,
    pub better: Better,
    /// A ratio only makes sense when both sides measured the same thing.
    pub comparable: bool,
    /// Cells shown as text instead of numbers (yes/no answers).
    pub text: Option<(String, String)>,
}

#[derive(Default)]
pub struct Table {
    pub rows: Vec<Row>,
}

impl Table {
    pub fn add(
        &mut self,
        metric: impl Into<String>,
        ours: Option<f64>,
        theirs: Option<f64>,
        better: Better,
    ) {
        self.rows.push(Row {
            metric: metric.into(),
            ours,
            theirs,
            better,
            comparable: true,
            text: None,
        });
    }

    /// A row of text answers, no ratio.
    pub fn add_text(&mut self, metric: impl Into<String>, ours: String, theirs: String) {
        self.rows.push(Row {
            metric: metric.into(),
            ours: None,
            theirs: None,
            better: Better::Higher,
            comparable: false,
            text: Some((ours, theirs)),
        });
    }

    /// A row whose two sides used different methods: both shown, no ratio.
    pub fn add_incomparable(
        &mut self,
        metric: impl Into<String>,
        ours: Option<f64>,
        theirs: Option<f64>,
    ) {
        self.rows.push(Row {
            metric: metric.into(),
            ours,
            theirs,
            better: Better::Higher,
            comparable: false,
            text: None,
        });
    }

    pub fn render(&self, header: &str) -> String {
        let mut s = String::new();
        s.push_str(header);
        s.push_str("\n| metric | dstream | reference (durable-streams 0.1.5) | ratio |\n");
        s.push_str("|---|---:|---:|---:|\n");
        for r in &self.rows {
            let ratio = match (r.ours, r.theirs, r.comparable) {
                (Some(a), Some(b), true) if b > 0.0 => {
                    let mark = match r.better {
                        Better::Higher => "",
                        Better::Lower => " (lower is better)",
                    };
                    format!("{:.2}{mark}", a / b)
                }
                _ => String::new(),
            };
            let (ours, theirs) = r
                .text
                .clone()
                .unwrap_or_else(|| (num(r.ours), num(r.theirs)));
            let _ = writeln!(s, "| {} | {ours} | {theirs} | {ratio} |", r.metric);
        }
        s
    }
}

/// Three significant-ish digits without scientific notation; `–` when not measured.
pub fn num(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&[7], 0.99), Some(7));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
