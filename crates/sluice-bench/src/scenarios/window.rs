//! Scenario `window`: event-time window counts per key, against a hand-written loop over an
//! `FxHashMap<(key, window), count>` that fires windows by the same rule, in the same process:
//!
//! - `tumbling`: 1-minute tumbling windows, 10,000 keys, records in order up to a jitter of
//!   half a second, watermarks 1 s behind the highest timestamp after every batch (target 0.7);
//! - `sliding`: the same records in 1-minute windows sliding by 10 seconds (each record counts
//!   in 6 windows); informational.
//!
//! The job is generator -> timestamps and watermarks -> key_by -> window -> aggregate (a count)
//! -> a sink digesting (key, window start, count), at parallelism 1 (all chained, as the loop
//! is one thread). The loop computes the same records, the same watermark after every batch of
//! the same size, and emits a window when the watermark passes its last millisecond, exactly as
//! the window operator's timers do; both sides' digests must agree.

use super::CommonArgs;
use crate::measure::{Side, interleaved, machine, runtime, timed};
use crate::report::{Report, Row};
use rustc_hash::FxHashMap;
use sluice::prelude::*;
use sluice::window::{AggregateFunction, SlidingEventTimeWindows, TumblingEventTimeWindows};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const SCENARIO: &str = "window";
const KEYS: u64 = 10_000;
/// Out-of-orderness bound of the watermark, ms.
const BOUND_MS: i64 = 1_000;
const MINUTE: i64 = 60_000;
const SLIDE: i64 = 10_000;

/// Flags of `window`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Records per timed run (default 10 million, 1 million with --quick).
    #[arg(long)]
    records: Option<u64>,
    /// Run only these cases (repeatable; default all), e.g. to profile one.
    #[arg(long = "case", value_enum)]
    cases: Vec<Case>,
    /// Keep the windows in RocksDB (a 64 MiB budget, under a temporary directory) instead of
    /// on the heap.
    #[arg(long)]
    rocksdb: bool,
}

/// The cases that `--case` selects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    /// 1-minute tumbling windows (target 0.7).
    Tumbling,
    /// 1-minute windows sliding by 10 seconds (informational).
    Sliding,
}

/// Record `i`: a key out of 10,000 and an event time advancing 0.6 ms per record (100,000
/// records per minute, so 10 per key and window), up to 499 ms early.
#[inline]
pub(super) fn record(i: u64) -> (u64, i64) {
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let key = (h >> 20) % KEYS;
    let jitter = ((h >> 40) % 500) as i64;
    (key, (i as i64) * 3 / 5 - jitter)
}

#[inline]
pub(super) fn digest_entry(key: u64, start: i64, count: u64) -> u64 {
    (key.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ (start as u64).wrapping_mul(0x9E37_79B9))
        .wrapping_add(count)
}

#[derive(Clone)]
pub(super) struct Count;

impl AggregateFunction<(u64, i64)> for Count {
    type Acc = u64;
    type Out = u64;
    #[inline]
    fn create_accumulator(&self) -> u64 {
        0
    }
    #[inline]
    fn add(&self, _: (u64, i64), acc: &mut u64) {
        *acc += 1;
    }
    #[inline]
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}

/// Digests every (key, window start, count) it receives.
#[derive(Clone)]
struct DigestSink {
    sum: u64,
    total: Arc<AtomicU64>,
}

impl Sink<(u64, i64, u64)> for DigestSink {
    fn write_batch(&mut self, batch: Vec<(u64, i64, u64)>) -> Result<(), UserError> {
        for (k, s, n) in batch {
            self.sum = self.sum.wrapping_add(digest_entry(k, s, n));
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<(), UserError> {
        self.total.fetch_add(self.sum, Ordering::Relaxed);
        Ok(())
    }
}

/// The sluice job: windows of `size` sliding by `slide` (tumbling when equal).
async fn job(records: u64, size: i64, slide: i64, rocksdb: bool) -> anyhow::Result<u64> {
    let env = StreamEnvironment::new();
    let dir = tempfile::tempdir()?;
    if rocksdb {
        env.set_state_backend(
            sluice_rocksdb::RocksDbStateBackend::new(dir.path()).memory_budget(64 << 20),
        );
    }
    env.set_parallelism(1);
    let total = Arc::new(AtomicU64::new(0));
    let ms = |x: i64| Duration::from_millis(x as u64);
    let assigner = if size == slide {
        TumblingEventTimeWindows::of(ms(size))
    } else {
        SlidingEventTimeWindows::of(ms(size), ms(slide))
    };
    env.from_generator(Generator::new(record).take(records))
        .assign_timestamps_and_watermarks(WatermarkStrategy::for_bounded_out_of_orderness(
            ms(BOUND_MS),
            |r: &(u64, i64)| r.1,
        ))
        .key_by(|r: &(u64, i64)| r.0)
        .window(assigner)
        .aggregate_with(Count, |k: &u64, w, n| (*k, w.start, n))
        .sink_to(DigestSink {
            sum: 0,
            total: total.clone(),
        });
    env.execute("window").await?;
    Ok(total.load(Ordering::Relaxed))
}

/// The loop: counts in an `FxHashMap<(key, window start), count>`, windows waiting to fire in a
/// `BTreeMap` by end, the watermark after every `batch` records, windows emitted when the
/// watermark reaches `end - 1`.
fn baseline(records: u64, size: i64, slide: i64, batch: u64) -> u64 {
    let mut counts: FxHashMap<(u64, i64), u64> = FxHashMap::default();
    let mut by_end: BTreeMap<i64, Vec<(u64, i64)>> = BTreeMap::new();
    let mut max_ts = i64::MIN;
    let mut watermark = i64::MIN;
    let mut digest = 0u64;
    let mut fire = |counts: &mut FxHashMap<(u64, i64), u64>,
                    by_end: &mut BTreeMap<i64, Vec<(u64, i64)>>,
                    watermark: i64| {
        while let Some(entry) = by_end.first_entry() {
            if *entry.key() - 1 > watermark {
                break;
            }
            for (k, start) in entry.remove() {
                if let Some(n) = counts.remove(&(k, start)) {
                    digest = digest.wrapping_add(digest_entry(k, start, n));
                }
            }
        }
    };
    let mut i = 0;
    while i < records {
        let end = (i + batch).min(records);
        for j in i..end {
            let (k, t) = record(j);
            max_ts = max_ts.max(t);
            let mut start = t - (t).rem_euclid(slide);
            while start > t - size {
                let c = counts.entry((k, start)).or_insert(0);
                if *c == 0 {
                    by_end.entry(start + size).or_default().push((k, start));
                }
                *c += 1;
                start -= slide;
            }
        }
        let w = max_ts - BOUND_MS - 1;
        if w > watermark {
            watermark = w;
            fire(&mut counts, &mut by_end, watermark);
        }
        i = end;
    }
    fire(&mut counts, &mut by_end, i64::MAX);
    digest
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let records = args
        .records
        .unwrap_or(if quick { 1_000_000 } else { 10_000_000 });
    let reps = args.common.reps_or(5, 7);
    let rt = runtime()?;
    let batch = sluice::JobConfig::default().batch_size as u64;
    let mut report = Report::new(args.common.json);
    report.progress(&format!(
        "window on {}: {records} records per run, {KEYS} keys, {reps} timed runs per side, medians",
        machine()
    ));
    for (which, case, size, slide, target) in [
        (Case::Tumbling, "tumbling", MINUTE, MINUTE, Some(0.7)),
        (Case::Sliding, "sliding", MINUTE, SLIDE, None),
    ] {
        if !args.cases.is_empty() && !args.cases.contains(&which) {
            continue;
        }
        report.progress(&format!(
            "{case}: {size} ms windows every {slide} ms, sluice vs an FxHashMap loop"
        ));
        let t = interleaved(
            reps,
            vec![Side::new("FxHashMap loop", || {
                timed(|| Ok(baseline(records, size, slide, batch)))
            })],
            Side::new("sluice", || {
                timed(|| rt.block_on(job(records, size, slide, args.rocksdb)))
            }),
        )?;
        let mut row = Row::throughput(
            SCENARIO,
            case,
            records,
            &t.sluice,
            Some(("FxHashMap loop", &t.baselines[0])),
        )
        .parallelism(1);
        if let Some(target) = target {
            row = row.target(target);
        }
        report.add(row)?;
    }
    report.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The comparison is only honest if both sides compute the same windows.
    #[test]
    fn the_job_and_the_loop_agree() {
        let rt = runtime().unwrap();
        let n = 300_007;
        for (size, slide) in [(MINUTE, MINUTE), (MINUTE, SLIDE)] {
            let want = baseline(n, size, slide, 1024);
            assert_eq!(rt.block_on(job(n, size, slide, false)).unwrap(), want);
            assert_eq!(rt.block_on(job(n, size, slide, true)).unwrap(), want);
            assert_ne!(baseline(n - 1, size, slide, 1024), want);
        }
    }
}
