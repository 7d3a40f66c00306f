//! What the run shows while it runs: one live progress line (indicatif) on a terminal, a plain
//! line every few seconds otherwise; and the checkpoint clock, a pass-through operator right
//! behind the source that times each checkpoint (from its barrier at the source to the
//! notification that it completed) and notices restores.
//!
//! The clock stands in for what the runtime does not hand a running job yet: the last completed
//! checkpoint with its duration, and the restarts as they happen. The live `JobObserver` of
//! sluice-runtime (with its checkpoint history) replaces it once it exists.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluice::JobMetrics;
use sluice::core::CheckpointId;
use sluice::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal as _;
use std::sync::{Arc, Mutex, OnceLock};
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

/// What the clock saw, shared by its subtasks and the progress line.
#[derive(Debug, Default)]
struct ClockState {
    /// When the first subtask saw each barrier still in flight.
    barriers: BTreeMap<u64, Instant>,
    /// The last completed checkpoint and its duration.
    last: Option<(u64, Duration)>,
    /// Attempts that started, with the checkpoint each restored (`None`: from the start), not
    /// yet reported.
    restores: BTreeMap<u32, Option<u64>>,
    /// The first attempt not reported yet.
    unreported: u32,
}

/// The checkpoint clock's shared side.
#[derive(Clone, Debug, Default)]
pub struct Clock(Arc<Mutex<ClockState>>);

impl Clock {
    fn with<R>(&self, f: impl FnOnce(&mut ClockState) -> R) -> R {
        let mut state = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut state)
    }

    /// The last completed checkpoint and how long it took.
    pub fn last(&self) -> Option<(u64, Duration)> {
        self.with(|s| s.last)
    }

    /// Restarts not reported yet: (attempt, checkpoint it restored).
    pub fn take_restores(&self) -> Vec<(u32, Option<u64>)> {
        self.with(|s| {
            let new: Vec<_> = s
                .restores
                .range(s.unreported..)
                .map(|(&a, &c)| (a, c))
                .collect();
            if let Some(&(a, _)) = new.last() {
                s.unreported = a + 1;
            }
            new
        })
    }

    /// The operator to chain behind the source.
    pub fn operator(&self) -> ClockOp {
        ClockOp {
            clock: self.clone(),
            restored: None,
        }
    }
}

/// The pass-through operator of the [`Clock`]; its state is the id of the checkpoint it belongs
/// to, so that a restored subtask knows which checkpoint it restored.
#[derive(Clone)]
pub struct ClockOp {
    clock: Clock,
    restored: Option<u64>,
}

impl<T: Data> Operator<T> for ClockOp {
    type Out = T;

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        for entry in state.entries() {
            let bytes: [u8; 8] = entry
                .as_slice()
                .try_into()
                .map_err(|_| format!("checkpoint clock: a state entry of {} bytes", entry.len()))?;
            let id = u64::from_le_bytes(bytes);
            self.restored = Some(self.restored.map_or(id, |r| r.max(id)));
        }
        Ok(())
    }

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let (attempt, restored) = (ctx.attempt_number(), self.restored);
        if attempt > 0 || restored.is_some() {
            self.clock.with(|s| {
                let r = s.restores.entry(attempt).or_insert(restored);
                *r = (*r).max(restored);
            });
        }
        Ok(())
    }

    fn process_batch(&mut self, batch: Vec<T>, out: &mut Collector<T>) -> Result<(), UserError> {
        out.forward_batch(batch);
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        _out: &mut Collector<T>,
    ) -> Result<OperatorState, UserError> {
        let now = Instant::now();
        self.clock.with(|s| {
            s.barriers.entry(checkpoint.0).or_insert(now);
        });
        Ok(OperatorState::from_entries(vec![
            checkpoint.0.to_le_bytes().to_vec(),
        ]))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        let now = Instant::now();
        self.clock.with(|s| {
            if let Some(started) = s.barriers.remove(&checkpoint.0) {
                s.last = Some((checkpoint.0, now - started));
            }
            // Barriers of aborted checkpoints are never notified.
            s.barriers = s.barriers.split_off(&checkpoint.0);
        });
        Ok(())
    }
}

/// One reading of the job, compared with the one before it.
struct Sample {
    at: Instant,
    records: u64,
    backpressured: HashMap<(String, usize), Duration>,
}

impl Sample {
    fn take(metrics: &JobMetrics, source: &str) -> Self {
        Sample {
            at: Instant::now(),
            records: metrics.operator(source).records_out,
            backpressured: metrics
                .subtasks
                .iter()
                .map(|s| ((s.operator_name.clone(), s.subtask), s.backpressured))
                .collect(),
        }
    }
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
            backpressured: HashMap::new(),
        });
        let secs = (now.at - then.at).as_secs_f64().max(1e-9);
        let rate = now.records.saturating_sub(then.records) as f64 / secs;
        // The largest share of the last interval that a subtask spent waiting for output room.
        let mut backpressure: Option<(f64, &str)> = None;
        for ((name, subtask), b) in &now.backpressured {
            let before = then
                .backpressured
                .get(&(name.clone(), *subtask))
                .copied()
                .unwrap_or_default();
            let share = b.saturating_sub(before).as_secs_f64() / secs;
            if backpressure.is_none_or(|(max, _)| share > max) {
                backpressure = Some((share, name));
            }
        }
        let (share, busiest) = backpressure.unwrap_or((0.0, ""));
        let share = (share * 100.0).min(100.0);
        let checkpoint = match reading.checkpoint {
            Some((id, took)) => format!("chk-{id} took {} ms", took.as_millis()),
            None => "none yet".to_string(),
        };
        match &self.bar {
            // Short, to fit a terminal's width next to the bar (indicatif cuts what does not).
            Some(bar) => {
                bar.set_position(now.records.min(bar.length().unwrap_or(u64::MAX)));
                bar.set_message(format!(
                    "{:.1}k clicks/s | {} lookups | backpressure {share:.0}% | {checkpoint}",
                    rate / 1e3,
                    reading.in_flight,
                ));
            }
            None if now.at - self.last_plain >= PLAIN_EVERY => {
                self.last_plain = now.at;
                let busiest = if share >= 0.5 {
                    format!(" ({busiest})")
                } else {
                    String::new()
                };
                println!(
                    "  {:>5.0} s  {:>11} clicks read {:>6.1} k/s | lookups {:>4} in flight | \
                     backpressured {share:>3.0} %{busiest} | last checkpoint {checkpoint}",
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
