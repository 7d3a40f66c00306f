//! The Prometheus text exposition format (version 0.0.4) of job snapshots: [`render`], a pure
//! function from [`JobStatus`]es to the text a scrape returns.
//!
//! Written by hand rather than through a client library: the snapshot already holds every
//! value (the runtime's atomics, summed over attempts), so an exporter only has to print them,
//! and the format is a few lines of rules (one `# HELP` and `# TYPE` per family, its samples
//! together, label values escaped). No registry is kept in step with the job.
//!
//! Families, all prefixed `sluice_`:
//!
//! | family | type | labels |
//! | --- | --- | --- |
//! | `sluice_operator_records_in_total`, `_records_out_total` | counter | job, job_id, vertex, operator, subtask |
//! | `sluice_operator_busy_seconds_total`, `_backpressured_seconds_total` | counter | the same |
//! | `sluice_operator_coordinator_events_sent_total`, `_received_total` | counter | the same |
//! | `sluice_operator_<gauge>` (e.g. `sluice_operator_async_in_flight`) | gauge | the same |
//! | `sluice_operator_<counter>_total` (e.g. `sluice_operator_async_retries_total`) | counter | the same |
//! | `sluice_operator_<histogram>` (e.g. `sluice_operator_async_latency_seconds`) | histogram | the same, and `le` |
//! | `sluice_job_state` (1 for the current state) | gauge | job, job_id, state |
//! | `sluice_job_uptime_seconds` | gauge | job, job_id |
//! | `sluice_job_restarts_total`, `sluice_job_exceptions_total` | counter | job, job_id |
//! | `sluice_checkpoints_triggered_total`, `_completed_total`, `_failed_total` | counter | job, job_id |
//! | `sluice_checkpoints_in_progress` | gauge | job, job_id |
//! | `sluice_checkpoint_duration_seconds`, `sluice_checkpoint_size_bytes` | histogram | job, job_id, `le` |
//! | `sluice_checkpoint_last_duration_seconds`, `_last_size_bytes`, `_last_id` | gauge | job, job_id |
//!
//! ```
//! use sluice_runtime::prelude::*;
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! let env = StreamEnvironment::new();
//! env.from_iter(0u64..100).map(|x| x + 1).name("inc").discard();
//! let job = env.submit("numbers").unwrap();
//! let observer = job.observer();
//! job.await.unwrap();
//! let text = sluice_web::prometheus::render(&[observer.snapshot()]);
//! assert!(text.contains("# TYPE sluice_operator_records_in_total counter"));
//! assert!(text.contains("sluice_job_state{job=\"numbers\""));
//! # }
//! ```

use sluice_runtime::job::{JobState, JobStatus};
use sluice_runtime::metrics::HistogramSnapshot;
use std::fmt::Write;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders `jobs` in the Prometheus text format.
pub fn render(jobs: &[JobStatus]) -> String {
    let mut out = Families::default();
    for job in jobs {
        job_families(&mut out, job);
        for v in &job.vertices {
            for op in &v.operators {
                for s in &op.subtasks {
                    let labels = [
                        ("job", job.name.as_str()),
                        ("job_id", job.job_id.as_str()),
                        ("vertex", v.name.as_str()),
                        ("operator", op.name.as_str()),
                        ("subtask", &s.subtask.to_string()),
                    ];
                    let labels = labels_text(&labels);
                    let counter = |out: &mut Families, name: &str, help: &str, value: String| {
                        out.sample(name, Kind::Counter, help, &labels, &value);
                    };
                    counter(
                        &mut out,
                        "sluice_operator_records_in_total",
                        "Records into the operator subtask.",
                        s.records_in.to_string(),
                    );
                    counter(
                        &mut out,
                        "sluice_operator_records_out_total",
                        "Records the operator subtask emitted.",
                        s.records_out.to_string(),
                    );
                    counter(
                        &mut out,
                        "sluice_operator_busy_seconds_total",
                        "Time the subtask's task spent working (per task, reported for each operator of its chain).",
                        seconds(s.busy_ms),
                    );
                    counter(
                        &mut out,
                        "sluice_operator_backpressured_seconds_total",
                        "Time the subtask's task waited for room in a full output channel (per task).",
                        seconds(s.backpressured_ms),
                    );
                    counter(
                        &mut out,
                        "sluice_operator_coordinator_events_sent_total",
                        "Events the subtask sent to its operator's coordinator.",
                        s.events_to_coordinator.to_string(),
                    );
                    counter(
                        &mut out,
                        "sluice_operator_coordinator_events_received_total",
                        "Events the subtask received from its operator's coordinator.",
                        s.events_from_coordinator.to_string(),
                    );
                    for (name, value) in &s.reported.gauges {
                        let family = format!("sluice_operator_{}", sanitize(name));
                        let help = format!("Gauge '{name}' the operator publishes.");
                        out.sample(&family, Kind::Gauge, &help, &labels, &value.to_string());
                    }
                    for (name, value) in &s.reported.counters {
                        let base = sanitize(name);
                        let base = base.strip_suffix("_total").unwrap_or(&base);
                        let family = format!("sluice_operator_{base}_total");
                        let help = format!("Counter '{name}' the operator publishes.");
                        out.sample(&family, Kind::Counter, &help, &labels, &value.to_string());
                    }
                    for (name, h) in &s.reported.histograms {
                        let family = format!("sluice_operator_{}", sanitize(name));
                        let help = format!("Histogram '{name}' the operator publishes.");
                        out.histogram(&family, &help, &labels, h);
                    }
                }
            }
        }
    }
    out.finish()
}

fn job_families(out: &mut Families, job: &JobStatus) {
    let labels = labels_text(&[("job", job.name.as_str()), ("job_id", job.job_id.as_str())]);
    for state in [
        JobState::Running,
        JobState::Restarting,
        JobState::Finished,
        JobState::Failed,
        JobState::Canceled,
    ] {
        let with_state = labels_text(&[
            ("job", job.name.as_str()),
            ("job_id", job.job_id.as_str()),
            ("state", state.as_str()),
        ]);
        let value = if job.state == state { "1" } else { "0" };
        out.sample(
            "sluice_job_state",
            Kind::Gauge,
            "The job's state: 1 for the state it is in, 0 for the others.",
            &with_state,
            value,
        );
    }
    let mut gauge = |name: &str, help: &str, value: String| {
        out.sample(name, Kind::Gauge, help, &labels, &value);
    };
    gauge(
        "sluice_job_uptime_seconds",
        "Time since the job was submitted (until it ended).",
        seconds(job.duration_ms),
    );
    let c = &job.checkpoints;
    gauge(
        "sluice_checkpoints_in_progress",
        "Checkpoints triggered and not complete yet.",
        c.counts.in_progress.to_string(),
    );
    if let Some(last) = &c.latest_completed {
        gauge(
            "sluice_checkpoint_last_id",
            "The id of the last completed checkpoint.",
            last.id.to_string(),
        );
        if let Some(ms) = last.duration_ms {
            gauge(
                "sluice_checkpoint_last_duration_seconds",
                "The duration (trigger to completion) of the last completed checkpoint.",
                seconds(ms),
            );
        }
        if let Some(bytes) = last.size_bytes {
            gauge(
                "sluice_checkpoint_last_size_bytes",
                "The bytes written by the last completed checkpoint.",
                bytes.to_string(),
            );
        }
    }
    let mut counter = |name: &str, help: &str, value: String| {
        out.sample(name, Kind::Counter, help, &labels, &value);
    };
    counter(
        "sluice_job_restarts_total",
        "Restarts of the job or of one of its pipelined regions.",
        job.restarts.to_string(),
    );
    counter(
        "sluice_job_exceptions_total",
        "Failures of the job (tasks, coordinators, checkpoints).",
        job.exceptions_total.to_string(),
    );
    counter(
        "sluice_checkpoints_triggered_total",
        "Checkpoints triggered.",
        c.counts.triggered.to_string(),
    );
    counter(
        "sluice_checkpoints_completed_total",
        "Checkpoints completed.",
        c.counts.completed.to_string(),
    );
    counter(
        "sluice_checkpoints_failed_total",
        "Checkpoints that failed, for any reason.",
        c.counts.failed.to_string(),
    );
    out.histogram(
        "sluice_checkpoint_duration_seconds",
        "Durations of completed checkpoints, trigger to completion.",
        &labels,
        &c.duration_seconds,
    );
    out.histogram(
        "sluice_checkpoint_size_bytes",
        "Bytes written by completed checkpoints.",
        &labels,
        &c.size_bytes,
    );
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

struct Family {
    name: String,
    kind: Kind,
    help: String,
    samples: String,
}

/// Families in the order first seen, each with its samples kept together.
#[derive(Default)]
struct Families {
    families: Vec<Family>,
}

impl Families {
    /// The family `name` of kind `kind`; `None` when the name is taken by another kind (an
    /// operator's metric clashing with another): its samples are dropped.
    fn family(&mut self, name: &str, kind: Kind, help: &str) -> Option<&mut Family> {
        match self.families.iter().position(|f| f.name == name) {
            Some(i) if self.families[i].kind == kind => Some(&mut self.families[i]),
            Some(_) => None,
            None => {
                self.families.push(Family {
                    name: name.to_string(),
                    kind,
                    help: help.to_string(),
                    samples: String::new(),
                });
                self.families.last_mut()
            }
        }
    }

    fn sample(&mut self, name: &str, kind: Kind, help: &str, labels: &str, value: &str) {
        if let Some(f) = self.family(name, kind, help) {
            let _ = writeln!(f.samples, "{name}{{{labels}}} {value}");
        }
    }

    fn histogram(&mut self, name: &str, help: &str, labels: &str, h: &HistogramSnapshot) {
        let Some(f) = self.family(name, Kind::Histogram, help) else {
            return;
        };
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in h.cumulative() {
            let _ = writeln!(
                f.samples,
                "{name}_bucket{{{labels}{sep}le=\"{}\"}} {count}",
                float(bound)
            );
        }
        let _ = writeln!(f.samples, "{name}_sum{{{labels}}} {}", float(h.sum));
        let _ = writeln!(f.samples, "{name}_count{{{labels}}} {}", h.count());
    }

    fn finish(self) -> String {
        let mut out = String::new();
        for f in self.families {
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
            out.push_str(&f.samples);
        }
        out
    }
}

/// `name="value",...` with values escaped.
fn labels_text(labels: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{k}=\"{}\"", escape_label(v));
    }
    s
}

/// A label value: backslash, double quote and line feed escaped.
fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Help text: backslash and line feed escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A metric name part: every character outside `[a-zA-Z0-9_]` becomes `_`; a leading digit
/// gets a `_` before it.
fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) || s.is_empty() {
        s.insert(0, '_');
    }
    s
}

fn seconds(ms: u64) -> String {
    float(ms as f64 / 1000.0)
}

/// A sample value: `+Inf`, `-Inf`, `NaN`, or the number.
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::status;

    #[test]
    fn every_family_is_typed_once_and_its_samples_follow() {
        let text = render(&[status()]);
        let mut seen = std::collections::BTreeSet::new();
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap().to_string();
                assert!(seen.insert(name.clone()), "{name} typed twice");
                current = name;
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = name
                    .strip_suffix("_bucket")
                    .or_else(|| name.strip_suffix("_sum"))
                    .or_else(|| name.strip_suffix("_count"))
                    .filter(|f| *f == current)
                    .unwrap_or(name);
                assert_eq!(family, current, "{line} outside its family");
            }
        }
        for name in [
            "sluice_operator_records_in_total",
            "sluice_operator_records_out_total",
            "sluice_operator_busy_seconds_total",
            "sluice_operator_backpressured_seconds_total",
            "sluice_operator_coordinator_events_sent_total",
            "sluice_operator_async_in_flight",
            "sluice_operator_async_completed_total",
            "sluice_operator_async_latency_seconds",
            "sluice_job_state",
            "sluice_job_restarts_total",
            "sluice_checkpoints_completed_total",
            "sluice_checkpoints_failed_total",
            "sluice_checkpoint_duration_seconds",
            "sluice_checkpoint_size_bytes",
            "sluice_checkpoint_last_size_bytes",
        ] {
            assert!(seen.contains(name), "{name} missing:\n{text}");
        }
    }

    #[test]
    fn samples_carry_their_labels_and_values() {
        let text = render(&[status()]);
        let labels = r#"job="clicks",job_id="0123456789abcdef0123456789abcdef",vertex="Source: numbers -> parse",operator="numbers",subtask="1""#;
        assert!(text.contains(&format!(
            "sluice_operator_records_in_total{{{labels}}} 100\n"
        )));
        assert!(text.contains(&format!(
            "sluice_operator_busy_seconds_total{{{labels}}} 1.5\n"
        )));
        assert!(text.contains(&format!(
            "sluice_operator_backpressured_seconds_total{{{labels}}} 0.25\n"
        )));
        // Quotes in names are escaped.
        assert!(text.contains(r#"operator="enrich \"async\"""#), "{text}");
        let async_labels = r#"job="clicks",job_id="0123456789abcdef0123456789abcdef",vertex="enrich \"async\" -> sink",operator="enrich \"async\"",subtask="0""#;
        for line in [
            format!("sluice_operator_async_in_flight{{{async_labels}}} 7"),
            format!(
                "sluice_operator_async_latency_seconds_bucket{{{async_labels},le=\"0.001\"}} 1"
            ),
            format!("sluice_operator_async_latency_seconds_bucket{{{async_labels},le=\"0.01\"}} 2"),
            format!("sluice_operator_async_latency_seconds_bucket{{{async_labels},le=\"+Inf\"}} 3"),
            format!(
                "sluice_operator_async_latency_seconds_sum{{{async_labels}}} {}",
                0.0005f64 + 0.005 + 0.5
            ),
            format!("sluice_operator_async_latency_seconds_count{{{async_labels}}} 3"),
        ] {
            assert!(
                text.contains(&format!("{line}\n")),
                "{line} missing:\n{text}"
            );
        }
        let job = r#"job="clicks",job_id="0123456789abcdef0123456789abcdef""#;
        for line in [
            format!("sluice_job_state{{{job},state=\"RUNNING\"}} 1"),
            format!("sluice_job_state{{{job},state=\"FAILED\"}} 0"),
            format!("sluice_job_restarts_total{{{job}}} 1"),
            format!("sluice_checkpoints_completed_total{{{job}}} 1"),
            format!("sluice_checkpoints_failed_total{{{job}}} 1"),
            format!("sluice_checkpoint_last_duration_seconds{{{job}}} 0.012"),
            format!("sluice_checkpoint_last_size_bytes{{{job}}} 2048"),
            format!("sluice_checkpoint_size_bytes_bucket{{{job},le=\"10000\"}} 1"),
        ] {
            assert!(
                text.contains(&format!("{line}\n")),
                "{line} missing:\n{text}"
            );
        }
    }

    #[test]
    fn names_and_values_are_made_valid() {
        assert_eq!(sanitize("lookup.cache-hits"), "lookup_cache_hits");
        assert_eq!(sanitize("9lives"), "_9lives");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(0.25), "0.25");
        assert_eq!(float(1e-7), "0.0000001");
    }

    #[test]
    fn a_name_taken_by_another_kind_is_dropped_not_mixed() {
        let mut s = status();
        // A gauge named like the histogram's family.
        s.vertices[1].operators[0].subtasks[0]
            .reported
            .gauge("async_latency_seconds", 1);
        let text = render(&[s]);
        assert_eq!(
            text.matches("# TYPE sluice_operator_async_latency_seconds ")
                .count(),
            1
        );
        // The first kind seen keeps the name (here the gauge); the histogram's samples go.
        assert!(text.contains("# TYPE sluice_operator_async_latency_seconds gauge"));
        assert!(!text.contains("sluice_operator_async_latency_seconds_bucket"));
    }

    #[test]
    fn no_jobs_render_nothing() {
        assert_eq!(render(&[]), "");
    }
}
