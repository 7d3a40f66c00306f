//! Rates over a window of samples: records per second and the backpressured and busy share of
//! each vertex, and the backpressure level the dashboard colours a vertex by. Pure: samples go
//! in with the time they were taken, rates come out; the server samples on a timer.
//!
//! ```
//! use sluice_web::rates::{BackpressureLevel, RateWindow};
//! use std::time::Duration;
//!
//! let mut w = RateWindow::new(Duration::from_secs(2));
//! // In a server: w.push(elapsed_since_start, &observer.snapshot()) on every tick.
//! assert!(w.rates().is_none()); // one sample makes no rate
//! assert_eq!(BackpressureLevel::from_ratio(0.05), BackpressureLevel::Ok);
//! assert_eq!(BackpressureLevel::from_ratio(0.3), BackpressureLevel::Low);
//! assert_eq!(BackpressureLevel::from_ratio(0.8), BackpressureLevel::High);
//! ```

use serde::Serialize;
use sluice_runtime::job::JobStatus;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// Most samples a window keeps, whatever its length.
pub const MAX_SAMPLES: usize = 32;

/// A vertex's backpressure, in Flink's three levels of backpressured time per second: up to
/// 10 % is OK (green), up to 50 % LOW (amber), above HIGH (red).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackpressureLevel {
    /// At most 10 % of the time backpressured.
    Ok,
    /// More than 10 %, at most 50 %.
    Low,
    /// More than 50 %.
    High,
}

impl BackpressureLevel {
    /// The level of a backpressured share (0.0 to 1.0).
    pub fn from_ratio(ratio: f64) -> Self {
        if ratio > 0.5 {
            BackpressureLevel::High
        } else if ratio > 0.1 {
            BackpressureLevel::Low
        } else {
            BackpressureLevel::Ok
        }
    }

    /// `"ok"`, `"low"` or `"high"`: the name in the REST API and the dashboard's CSS class.
    pub fn as_str(self) -> &'static str {
        match self {
            BackpressureLevel::Ok => "ok",
            BackpressureLevel::Low => "low",
            BackpressureLevel::High => "high",
        }
    }

    /// The colour the dashboard paints it: green, amber or red.
    pub fn colour(self) -> &'static str {
        match self {
            BackpressureLevel::Ok => "green",
            BackpressureLevel::Low => "amber",
            BackpressureLevel::High => "red",
        }
    }
}

/// One vertex's rates over the window.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct VertexRates {
    /// Records into the vertex per second.
    pub records_in_per_second: f64,
    /// Records out of the vertex per second.
    pub records_out_per_second: f64,
    /// Records through the vertex per second: records in, or for a vertex without inputs (a
    /// source) records out. The figure the dashboard shows.
    pub records_per_second: f64,
    /// The largest share of time any of its subtasks was backpressured (0.0 to 1.0).
    pub backpressure_ratio: f64,
    /// The largest share of time any of its subtasks was busy (0.0 to 1.0).
    pub busy_ratio: f64,
}

impl VertexRates {
    /// The vertex's backpressure level.
    pub fn level(&self) -> BackpressureLevel {
        BackpressureLevel::from_ratio(self.backpressure_ratio)
    }
}

/// Rates of every vertex of a job between two samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rates {
    /// When the newer sample was taken (the job's snapshot time, milliseconds since the epoch).
    pub sampled_at_ms: u64,
    /// The time between the two samples, milliseconds.
    pub window_ms: u64,
    /// By vertex id.
    pub vertices: BTreeMap<String, VertexRates>,
}

#[derive(Clone, Debug)]
struct VertexSample {
    records_in: u64,
    records_out: u64,
    /// Per subtask: (busy ms, backpressured ms).
    times: Vec<(u64, u64)>,
    is_source: bool,
}

#[derive(Clone, Debug)]
struct Sample {
    at: Duration,
    now_ms: u64,
    vertices: BTreeMap<String, VertexSample>,
}

/// The samples of one job over the last `window` (at most [`MAX_SAMPLES`]).
#[derive(Clone, Debug)]
pub struct RateWindow {
    window: Duration,
    samples: VecDeque<Sample>,
}

impl RateWindow {
    /// A window over the last `window` of samples.
    pub fn new(window: Duration) -> Self {
        RateWindow {
            window,
            samples: VecDeque::new(),
        }
    }

    /// Adds a sample of `status` taken at `at` (any monotonic clock: only differences count).
    /// A sample not later than the newest is ignored.
    pub fn push(&mut self, at: Duration, status: &JobStatus) {
        if self.samples.back().is_some_and(|s| s.at >= at) {
            return;
        }
        let targets: BTreeSet<&str> = status.edges.iter().map(|e| e.target.as_str()).collect();
        let vertices = status
            .vertices
            .iter()
            .map(|v| {
                let sample = VertexSample {
                    records_in: v.records_in(),
                    records_out: v.records_out(),
                    times: v
                        .subtasks
                        .iter()
                        .map(|s| (s.busy_ms, s.backpressured_ms))
                        .collect(),
                    is_source: !targets.contains(v.id.as_str()),
                };
                (v.id.clone(), sample)
            })
            .collect();
        self.samples.push_back(Sample {
            at,
            now_ms: status.now_ms,
            vertices,
        });
        // Keeps the newest sample at least `window` old (the base of the rates), and nothing
        // older.
        while self.samples.len() > MAX_SAMPLES
            || (self.samples.len() > 2 && at.saturating_sub(self.samples[1].at) >= self.window)
        {
            self.samples.pop_front();
        }
    }

    /// The rates between the oldest and the newest sample, once there are two.
    pub fn rates(&self) -> Option<Rates> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        let dt = last.at.checked_sub(first.at).filter(|d| !d.is_zero())?;
        let secs = dt.as_secs_f64();
        let ms = secs * 1000.0;
        let vertices = last
            .vertices
            .iter()
            .map(|(id, new)| {
                let old = first.vertices.get(id);
                let per_second = |now: u64, then: Option<u64>| {
                    now.saturating_sub(then.unwrap_or(0)) as f64 / secs
                };
                let records_in_per_second = per_second(new.records_in, old.map(|o| o.records_in));
                let records_out_per_second =
                    per_second(new.records_out, old.map(|o| o.records_out));
                let share = |pick: fn(&(u64, u64)) -> u64| {
                    new.times
                        .iter()
                        .enumerate()
                        .map(|(i, t)| {
                            let before = old.and_then(|o| o.times.get(i)).map_or(0, pick);
                            (pick(t).saturating_sub(before) as f64 / ms).clamp(0.0, 1.0)
                        })
                        .fold(0.0, f64::max)
                };
                let rates = VertexRates {
                    records_in_per_second,
                    records_out_per_second,
                    records_per_second: if new.is_source {
                        records_out_per_second
                    } else {
                        records_in_per_second
                    },
                    backpressure_ratio: share(|t| t.1),
                    busy_ratio: share(|t| t.0),
                };
                (id.clone(), rates)
            })
            .collect();
        Some(Rates {
            sampled_at_ms: last.now_ms,
            window_ms: u64::try_from(dt.as_millis()).unwrap_or(u64::MAX),
            vertices,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::status;

    #[test]
    fn rates_are_the_difference_over_the_window() {
        let mut w = RateWindow::new(Duration::from_secs(2));
        let mut s = status();
        w.push(Duration::from_secs(10), &s);
        assert!(w.rates().is_none());
        // One second later: 1000 more records out of the source, 500 more into the sink; the
        // sink's subtask 1 was backpressured 600 ms of it.
        s.now_ms += 1000;
        s.vertices[0].subtasks[0].records_out += 600;
        s.vertices[0].subtasks[1].records_out += 400;
        s.vertices[1].subtasks[0].records_in += 500;
        s.vertices[1].subtasks[1].backpressured_ms += 600;
        s.vertices[1].subtasks[0].busy_ms += 250;
        w.push(Duration::from_secs(11), &s);
        let r = w.rates().unwrap();
        assert_eq!(r.window_ms, 1000);
        assert_eq!(r.sampled_at_ms, s.now_ms);
        let src = &r.vertices["source"];
        assert_eq!(src.records_out_per_second, 1000.0);
        assert_eq!(src.records_per_second, 1000.0, "a source shows records out");
        assert_eq!(src.level(), BackpressureLevel::Ok);
        let sink = &r.vertices["sink"];
        assert_eq!(sink.records_per_second, 500.0, "others show records in");
        assert_eq!(sink.backpressure_ratio, 0.6, "the worst subtask");
        assert_eq!(sink.busy_ratio, 0.25);
        assert_eq!(sink.level(), BackpressureLevel::High);
        assert_eq!(sink.level().colour(), "red");
    }

    #[test]
    fn old_samples_leave_the_window_and_the_window_is_bounded() {
        let mut w = RateWindow::new(Duration::from_secs(2));
        let mut s = status();
        for i in 0..100u64 {
            s.vertices[0].subtasks[0].records_out = i * 100; // 100 records per 100 ms
            w.push(Duration::from_millis(i * 100), &s);
            assert!(w.samples.len() <= MAX_SAMPLES);
        }
        let r = w.rates().unwrap();
        assert!((2000..=2100).contains(&r.window_ms), "{}", r.window_ms);
        assert!((r.vertices["source"].records_per_second - 1000.0).abs() < 1e-6);
        // A sample out of order is ignored.
        w.push(Duration::from_millis(50), &s);
        assert_eq!(w.rates().unwrap(), r);
    }

    #[test]
    fn levels_follow_flinks_thresholds() {
        for (ratio, level) in [
            (0.0, BackpressureLevel::Ok),
            (0.1, BackpressureLevel::Ok),
            (0.11, BackpressureLevel::Low),
            (0.5, BackpressureLevel::Low),
            (0.51, BackpressureLevel::High),
            (1.0, BackpressureLevel::High),
        ] {
            assert_eq!(BackpressureLevel::from_ratio(ratio), level, "{ratio}");
        }
        assert_eq!(BackpressureLevel::Low.colour(), "amber");
        assert_eq!(BackpressureLevel::Ok.as_str(), "ok");
    }
}
