//! What the run shows while it runs: one live progress line (indicatif) on a terminal, a plain
//! line every few seconds otherwise; the last completed checkpoint with its duration and the
//! restores as they happen, read from the job's live view (`JobObserver`).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluice::{JobMetrics, JobObserver};
use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The live bar, for the panic hook to print above it.
static BAR: OnceLock<ProgressBar> = OnceLock::new();

/// Prints `line` to stderr on its own, with the live bar (if any) out of the way meanwhile.
pub fn print_above(line: &str) {
    match BAR.get() {
        Some(bar) if !bar.is_finished() => bar.suspend(|| eprintln!("{line}")),
        _ => eprintln!("{line}"),
    }
}

/// Where log lines go: one buffer per event, printed with [`print_above`] when dropped, so that
/// a log line never tears the live bar.
#[derive(Default)]
pub struct LogWriter(Vec<u8>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            print_above(String::from_utf8_lossy(&self.0).trim_end());
        }
    }
}

/// What the job's live view ([`JobObserver`]) says about checkpoints and restarts, read by the
/// progress line: the last completed checkpoint with its duration, and the restores not
/// reported yet.
pub struct Checkpoints {
    observer: JobObserver,
    last: Option<(u64, Duration)>,
    reported_restarts: u32,
    reported_start: bool,
}

impl Checkpoints {
    /// Reads the live view of the job `observer` watches.
    pub fn new(observer: JobObserver) -> Self {
        Checkpoints {
            observer,
            last: None,
            reported_restarts: 0,
            reported_start: false,
        }
    }

    /// Takes a fresh snapshot; returns the restores since the last call: (attempt, the
    /// checkpoint it restored, `None` for a start from the beginning). A restarted attempt
    /// restores the last completed checkpoint.
    pub fn refresh(&mut self) -> Vec<(u32, Option<u64>)> {
        let status = self.observer.snapshot();
        let mut restores = Vec::new();
        if !self.reported_start {
            self.reported_start = true;
            if let Some(id) = status.checkpoints.restored_from {
                restores.push((0, Some(id)));
            }
        }
        let restored = status
            .checkpoints
            .latest_completed
            .as_ref()
            .map(|c| c.id)
            .or(status.checkpoints.restored_from);
        for attempt in self.reported_restarts + 1..=status.restarts {
            restores.push((attempt, restored));
        }
        self.reported_restarts = self.reported_restarts.max(status.restarts);
        self.last = status
            .checkpoints
            .latest_completed
            .map(|c| (c.id, Duration::from_millis(c.duration_ms.unwrap_or(0))));
        restores
    }

    /// The last completed checkpoint and how long it took, as of the last refresh.
    pub fn last(&self) -> Option<(u64, Duration)> {
        self.last
    }
}

/// One reading of the job, compared with the one before it.
struct Sample {
    at: Instant,
    records: u64,
    /// Per operator subtask, in graph order: (busy, backpressured) so far.
    times: Vec<((String, usize), (Duration, Duration))>,
}

impl Sample {
    fn take(metrics: &JobMetrics, source: &str) -> Self {
        Sample {
            at: Instant::now(),
            records: metrics.operator(source).records_out,
            times: metrics
                .subtasks
                .iter()
                .map(|s| {
                    (
                        (s.operator_name.clone(), s.subtask),
                        (s.busy, s.backpressured),
                    )
                })
                .collect(),
        }
    }
}

/// The largest share of the interval `secs` long between `then` and `now` that an operator
/// subtask spent as `pick` says (busy or backpressured), and the operator's name (the first in
/// graph order on a tie).
fn largest_share<'a>(
    now: &'a Sample,
    then: &HashMap<&(String, usize), (Duration, Duration)>,
    secs: f64,
    pick: fn(&(Duration, Duration)) -> Duration,
) -> (f64, &'a str) {
    let mut largest: Option<(f64, &str)> = None;
    for (key, times) in &now.times {
        let before = then.get(key).map_or(Duration::ZERO, pick);
        let share = pick(times).saturating_sub(before).as_secs_f64() / secs;
        if largest.is_none_or(|(max, _)| share > max) {
            largest = Some((share, key.0.as_str()));
        }
    }
    let (share, name) = largest.unwrap_or((0.0, ""));
    ((share * 100.0).min(100.0), name)
}

/// What one progress line shows.
pub struct Reading<'a> {
    /// The job's metrics now.
    pub metrics: &'a JobMetrics,
    /// Lookups in flight now.
    pub in_flight: u64,
    /// The last completed checkpoint and its duration.
    pub checkpoint: Option<(u64, Duration)>,
}

/// The progress line: a live bar on a terminal, a plain line every few seconds otherwise.
pub struct Progress {
    bar: Option<ProgressBar>,
    source: &'static str,
    started: Instant,
    last: Option<Sample>,
    last_plain: Instant,
}

/// How often the plain line is printed when stdout is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

impl Progress {
    /// Progress over `total` records of the operator named `source`.
    pub fn new(total: u64, source: &'static str) -> Self {
        let started = Instant::now();
        let bar = std::io::stdout().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stdout());
            if let Ok(style) =
                ProgressStyle::with_template("{elapsed:>4} [{bar:16}] {percent:>3}% {wide_msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message("starting");
            bar.enable_steady_tick(Duration::from_millis(200));
            let _ = BAR.set(bar.clone());
            bar
        });
        Progress {
            bar,
            source,
            started,
            last: None,
            last_plain: started,
        }
    }

    /// Updates the line with `reading` (called about once a second).
    pub fn update(&mut self, reading: Reading<'_>) {
        let now = Sample::take(reading.metrics, self.source);
        let then = self.last.get_or_insert_with(|| Sample {
            at: self.started,
            records: 0,
            times: Vec::new(),
        });
        let secs = (now.at - then.at).as_secs_f64().max(1e-9);
        let rate = now.records.saturating_sub(then.records) as f64 / secs;
        let before: HashMap<&(String, usize), (Duration, Duration)> =
            then.times.iter().map(|(k, t)| (k, *t)).collect();
        // The largest share of the last interval that a subtask spent held back (by a full
        // output channel, or by an operator after it in its chain refusing input), and the
        // largest it spent busy: the operator holding the job back reads busy, the ones
        // feeding it backpressured.
        let (share, held_back) = largest_share(&now, &before, secs, |t| t.1);
        let (busy, busiest) = largest_share(&now, &before, secs, |t| t.0);
        let checkpoint = match reading.checkpoint {
            Some((id, took)) => format!("chk-{id} took {} ms", took.as_millis()),
            None => "none yet".to_string(),
        };
        match &self.bar {
            // Short, to fit a terminal's width next to the bar (indicatif cuts what does not).
            Some(bar) => {
                bar.set_position(now.records.min(bar.length().unwrap_or(u64::MAX)));
                bar.set_message(format!(
                    "{:.1}k clicks/s | {} lookups | backpressure {share:.0}% | busiest \
                     {busiest} {busy:.0}% | {checkpoint}",
                    rate / 1e3,
                    reading.in_flight,
                ));
            }
            None if now.at - self.last_plain >= PLAIN_EVERY => {
                self.last_plain = now.at;
                let held_back = if share >= 0.5 {
                    format!(" ({held_back})")
                } else {
                    String::new()
                };
                println!(
                    "  {:>5.0} s  {:>11} clicks read {:>6.1} k/s | lookups {:>4} in flight | \
                     backpressured {share:>3.0} %{held_back} | busiest {busiest} {busy:>3.0} % | \
                     last checkpoint {checkpoint}",
                    (now.at - self.started).as_secs_f64(),
                    crate::grouped(now.records),
                    rate / 1e3,
                    reading.in_flight,
                );
            }
            None => {}
        }
        self.last = Some(now);
    }

    /// Prints `line` above the bar (or as it is).
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => println!("{line}"),
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
