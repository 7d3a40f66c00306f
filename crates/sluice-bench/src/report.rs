//! Reporting: one [`Row`] per case and metric, printed as JSON lines (`--json`) and as a short
//! table. The JSON fields follow the benchmark conventions of DESIGN.md: `scenario`, `case`,
//! `metric`, `unit`, `value` (sluice), `baseline`, `ratio` (oriented so that higher is better)
//! and `target` when the issue gave one.

use crate::measure::{median, per_second};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

/// One measured figure of one case.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The subcommand, e.g. `pipeline`.
    pub scenario: &'static str,
    /// What was measured within the scenario, e.g. `keyed-p2`.
    pub case: String,
    /// The quantity, e.g. `throughput`.
    pub metric: &'static str,
    /// Its unit, e.g. `records/s`.
    pub unit: &'static str,
    /// sluice's value (a median over the runs).
    pub value: f64,
    /// The baseline's value measured in the same run, when there is a baseline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    /// sluice relative to the baseline, oriented so that higher is better.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// The lowest acceptable ratio, when the issue set one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<f64>,
    /// What the baseline is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_name: Option<String>,
    /// Records per run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records: Option<u64>,
    /// Parallelism of the sluice job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<usize>,
    /// sluice's individual values, in run order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<f64>,
    /// The baseline's individual values, in run order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub baseline_values: Vec<f64>,
    /// Anything else the scenario measured about this case (counts, breakdowns).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

impl Row {
    /// A row with sluice's `value` only; add a baseline with [`against`](Row::against).
    pub fn new(
        scenario: &'static str,
        case: impl Into<String>,
        metric: &'static str,
        unit: &'static str,
        value: f64,
    ) -> Row {
        Row {
            scenario,
            case: case.into(),
            metric,
            unit,
            value,
            baseline: None,
            ratio: None,
            target: None,
            baseline_name: None,
            records: None,
            parallelism: None,
            values: Vec::new(),
            baseline_values: Vec::new(),
            detail: None,
        }
    }

    /// Sets the baseline, its value and the ratio (oriented so that higher is better: pass
    /// `value / baseline` for rates, `baseline / value` for costs such as memory).
    pub fn against(mut self, name: &str, baseline: f64, ratio: f64) -> Row {
        self.baseline_name = Some(name.to_string());
        self.baseline = Some(baseline);
        self.ratio = Some(ratio);
        self
    }

    /// Sets the records per run.
    pub fn records(mut self, records: u64) -> Row {
        self.records = Some(records);
        self
    }

    /// A throughput row in records/s from the timed runs of both sides: medians, and the ratio
    /// sluice/baseline.
    pub fn throughput(
        scenario: &'static str,
        case: impl Into<String>,
        records: u64,
        sluice: &[Duration],
        baseline: Option<(&str, &[Duration])>,
    ) -> Row {
        // Whole records per second are precise enough and keep the JSON readable.
        let rate = |d: Duration| per_second(records, d).round();
        let value = rate(median(sluice));
        let rates = |d: &[Duration]| d.iter().map(|&d| rate(d)).collect();
        let base = baseline.map(|(_, d)| rate(median(d)));
        Row {
            scenario,
            case: case.into(),
            metric: "throughput",
            unit: "records/s",
            value,
            baseline: base,
            ratio: base.map(|b| value / b),
            target: None,
            baseline_name: baseline.map(|(name, _)| name.to_string()),
            records: Some(records),
            parallelism: None,
            values: rates(sluice),
            baseline_values: baseline.map(|(_, d)| rates(d)).unwrap_or_default(),
            detail: None,
        }
    }

    /// Sets the target ratio.
    pub fn target(mut self, target: f64) -> Row {
        self.target = Some(target);
        self
    }

    /// Sets the parallelism of the sluice job.
    pub fn parallelism(mut self, parallelism: usize) -> Row {
        self.parallelism = Some(parallelism);
        self
    }

    /// Whether the ratio reaches the target (true when there is no target).
    pub fn meets_target(&self) -> bool {
        match (self.ratio, self.target) {
            (Some(r), Some(t)) => r >= t,
            _ => true,
        }
    }
}

/// Collects the rows of a run, printing JSON lines as they come (with `--json`) and the table at
/// the end.
pub struct Report {
    json: bool,
    rows: Vec<Row>,
}

impl Report {
    /// A report that prints JSON lines when `json` is set.
    pub fn new(json: bool) -> Self {
        Report {
            json,
            rows: Vec::new(),
        }
    }

    /// Adds a row, printing it at once as a JSON line with `--json`.
    pub fn add(&mut self, row: Row) -> anyhow::Result<()> {
        if self.json {
            let line = serde_json::to_string(&row)?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}")?;
            out.flush()?;
        }
        self.rows.push(row);
        Ok(())
    }

    /// A progress message, on stderr so that stdout stays machine-readable.
    pub fn progress(&self, message: &str) {
        eprintln!("... {message}");
    }

    /// Prints the table: on stdout, or on stderr with `--json`.
    pub fn finish(&self) -> anyhow::Result<()> {
        let table = table(&self.rows);
        if self.json {
            eprint!("{table}");
        } else {
            print!("{table}");
        }
        Ok(())
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:<21} {:>12} {:>12} {:>7} {:>8} {:<6} baseline",
        "case", "metric", "sluice", "baseline", "ratio", "target", ""
    );
    for r in rows {
        let fmt = |v: f64| human(v, r.unit);
        let status = match (r.ratio, r.target) {
            (Some(_), Some(_)) if r.meets_target() => "ok",
            (Some(_), Some(_)) => "MISS",
            _ => "",
        };
        let _ = writeln!(
            out,
            "{:<20} {:<21} {:>12} {:>12} {:>7} {:>8} {:<6} {}",
            r.case,
            r.metric,
            fmt(r.value),
            r.baseline.map(fmt).unwrap_or_default(),
            r.ratio.map(|x| format!("{x:.2}")).unwrap_or_default(),
            r.target.map(|x| format!(">={x:.2}")).unwrap_or_default(),
            status,
            r.baseline_name.as_deref().unwrap_or(""),
        );
    }
    out
}

/// A short human form: `123.4M/s` for rates, `12.3MiB` for memory.
fn human(v: f64, unit: &str) -> String {
    match unit {
        "records/s" if v >= 1e9 => format!("{:.2}G/s", v / 1e9),
        "records/s" if v >= 1e6 => format!("{:.1}M/s", v / 1e6),
        "records/s" => format!("{:.0}/s", v),
        "MiB" => format!("{v:.1}MiB"),
        "ms" => format!("{v:.1}ms"),
        "per run" => format!("{v:.0}"),
        _ => format!("{v:.3}{unit}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_row_takes_medians_and_orients_the_ratio() {
        let ms = Duration::from_millis;
        let row = Row::throughput(
            "pipeline",
            "x",
            1_000,
            &[ms(10), ms(1000), ms(20)],
            Some(("loop", &[ms(5), ms(10), ms(15)])),
        )
        .target(0.9);
        // sluice median 20 ms -> 50k/s; baseline median 10 ms -> 100k/s
        assert_eq!(row.value, 50_000.0);
        assert_eq!(row.baseline, Some(100_000.0));
        assert_eq!(row.ratio, Some(0.5));
        assert!(!row.meets_target());
        let json = serde_json::to_value(&row).unwrap();
        for field in [
            "scenario", "case", "metric", "unit", "value", "baseline", "ratio", "target",
        ] {
            assert!(json.get(field).is_some(), "missing {field}: {json}");
        }
    }

    #[test]
    fn table_flags_a_missed_target() {
        let ms = Duration::from_millis;
        let row = Row::throughput("p", "slow", 10, &[ms(2)], Some(("b", &[ms(1)]))).target(0.7);
        let t = table(&[row]);
        assert!(t.contains("MISS"), "{t}");
    }
}
