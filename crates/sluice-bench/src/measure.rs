//! Measuring: interleaved timed repetitions of sluice and its baselines, medians, rates, peak
//! memory of the current process, and the tokio runtime the sluice jobs run on.

use anyhow::{Context, bail};
use std::time::{Duration, Instant};

/// One timed run of one side, with the checksum of what it computed.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// A digest of the run's result; every side of a case must compute the same one.
    pub checksum: u64,
}

/// Times `f`, which returns the checksum of its result.
pub fn timed(f: impl FnOnce() -> anyhow::Result<u64>) -> anyhow::Result<Run> {
    let start = Instant::now();
    let checksum = f()?;
    Ok(Run {
        elapsed: start.elapsed(),
        checksum,
    })
}

/// A named side of a case: something that runs once and reports a [`Run`].
pub struct Side<'a> {
    /// Shown in progress messages and in the report.
    pub name: String,
    /// Runs the side once.
    pub run: Box<dyn FnMut() -> anyhow::Result<Run> + 'a>,
}

impl<'a> Side<'a> {
    /// A side called `name` running `run`.
    pub fn new(name: impl Into<String>, run: impl FnMut() -> anyhow::Result<Run> + 'a) -> Self {
        Side {
            name: name.into(),
            run: Box::new(run),
        }
    }
}

/// The timings of a case: one vector per baseline (in the order given) and one for sluice.
#[derive(Debug)]
pub struct Timings {
    /// Per baseline, its timed runs.
    pub baselines: Vec<Vec<Duration>>,
    /// sluice's timed runs.
    pub sluice: Vec<Duration>,
}

/// Runs the sides alternately so that machine drift hits all of them alike: one untimed warm-up
/// of each, then `reps` rounds of (baselines..., sluice), then the baselines once more, so that a
/// baseline comes first and last. Every run must report the checksum of the first run; a
/// mismatch means the sides did different work and is an error.
pub fn interleaved(
    reps: usize,
    mut baselines: Vec<Side<'_>>,
    mut sluice: Side<'_>,
) -> anyhow::Result<Timings> {
    let mut expected: Option<(u64, String)> = None;
    let mut check = |side: &str, run: Run| -> anyhow::Result<Duration> {
        match &expected {
            None => expected = Some((run.checksum, side.to_string())),
            Some((sum, first)) if *sum != run.checksum => bail!(
                "{side} computed checksum {:#x} but {first} computed {sum:#x}: the sides disagree",
                run.checksum
            ),
            Some(_) => {}
        }
        Ok(run.elapsed)
    };
    for b in baselines.iter_mut() {
        check(&b.name, (b.run)()?)?;
    }
    check(&sluice.name, (sluice.run)()?)?;

    let mut timings = Timings {
        baselines: vec![Vec::with_capacity(reps + 1); baselines.len()],
        sluice: Vec::with_capacity(reps),
    };
    for round in 0..=reps {
        for (b, out) in baselines.iter_mut().zip(timings.baselines.iter_mut()) {
            out.push(check(&b.name, (b.run)()?)?);
        }
        if round < reps {
            timings.sluice.push(check(&sluice.name, (sluice.run)()?)?);
        }
    }
    Ok(timings)
}

/// The median of `durations` (the mean of the two middle ones for an even count).
pub fn median(durations: &[Duration]) -> Duration {
    let mut v = durations.to_vec();
    v.sort();
    match v.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2,
    }
}

/// The median of `values` (the mean of the two middle ones for an even count; 0 when empty).
pub fn median_f64(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The nearest-rank `q`-quantile of `durations` (`q` in 0..=1): the smallest value with at least
/// `q` of the values at or below it; zero when empty. With fewer than 100 values the 0.99
/// quantile is the maximum.
pub fn percentile(durations: &[Duration], q: f64) -> Duration {
    let mut v = durations.to_vec();
    v.sort();
    let n = v.len();
    if n == 0 {
        return Duration::ZERO;
    }
    let rank = (q.clamp(0.0, 1.0) * n as f64).ceil() as usize;
    v[rank.clamp(1, n) - 1]
}

/// `count` items in `elapsed`, per second.
pub fn per_second(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// The peak resident set size of this process so far (`VmHWM` of `/proc/self/status`), in KiB.
pub fn peak_rss_kib() -> anyhow::Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    parse_vm_hwm(&status).context("no VmHWM line in /proc/self/status")
}

fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The CPU time this process used so far, user and system (`utime + stime` of
/// `/proc/self/stat`, in Linux's `USER_HZ` ticks of 10 ms). The difference around a run says how
/// much CPU it took, whatever share of the cores other processes left it.
pub fn process_cpu_time() -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    parse_cpu_ticks(&stat)
        .map(|ticks| Duration::from_millis(ticks * 10))
        .context("no utime/stime in /proc/self/stat")
}

fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The fields after the command name (which may hold spaces) start at field 3, the state.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A one-line description of the machine: cores and CPU model (from `/proc/cpuinfo`).
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cores} cores, {model}")
}

/// The multi-threaded tokio runtime sluice jobs run on: one worker per core.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("sluice-bench-worker")
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_the_command_name() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 17 0 0 20 0 3 0";
        assert_eq!(parse_cpu_ticks(stat), Some(267));
        assert!(process_cpu_time().is_ok());
    }

    #[test]
    fn median_of_floats() {
        assert_eq!(median_f64(&[]), 0.0);
        assert_eq!(median_f64(&[0.9, 0.5, 0.7]), 0.7);
        assert_eq!(median_f64(&[0.8, 0.6]), 0.7);
        assert_eq!(median_f64(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[ms(5), ms(1), ms(3)]), ms(3));
        assert_eq!(
            median(&[ms(4), ms(1), ms(3), ms(2)]),
            Duration::from_micros(2500)
        );
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms = Duration::from_millis;
        let v: Vec<Duration> = (1..=100).rev().map(ms).collect();
        assert_eq!(percentile(&v, 0.5), ms(50));
        assert_eq!(percentile(&v, 0.99), ms(99));
        assert_eq!(percentile(&v, 1.0), ms(100));
        assert_eq!(percentile(&v, 0.0), ms(1));
        assert_eq!(percentile(&v[..20], 0.99), ms(100), "the maximum of 20");
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn vm_hwm_is_read_in_kib() {
        let status = "Name:\tx\nVmPeak:\t  9999 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(1234));
        assert_eq!(parse_vm_hwm("Name:\tx\n"), None);
    }

    #[test]
    fn interleaving_puts_a_baseline_first_and_last_and_rejects_disagreeing_sides() {
        let order = std::cell::RefCell::new(Vec::new());
        let side = |name: &'static str, checksum: u64| {
            let order = &order;
            Side::new(name, move || {
                order.borrow_mut().push(name);
                Ok(Run {
                    elapsed: Duration::from_millis(1),
                    checksum,
                })
            })
        };
        let t = interleaved(2, vec![side("b", 7)], side("s", 7)).unwrap();
        assert_eq!((t.baselines[0].len(), t.sluice.len()), (3, 2));
        assert_eq!(*order.borrow(), ["b", "s", "b", "s", "b", "s", "b"]);

        let err = interleaved(1, vec![side("b", 7)], side("s", 8)).unwrap_err();
        assert!(err.to_string().contains("disagree"), "{err}");
    }
}
