//! Rates over a window of samples: records per second and the backpressured and busy share of
//! each vertex and of each operator in it, the backpressure level the dashboard colours a vertex
//! by, and which operator of a chain holds the operators before it back ([`holding_back`]).
//! Pure: samples go in with the time they were taken, rates come out; the server samples on a
//! timer.
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

/// One operator's share of busy and backpressured time over the window, and whether it holds
/// the operators before it in its chain back.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct OperatorRates {
    /// The largest share of time any of its subtasks was busy (0.0 to 1.0).
    pub busy_ratio: f64,
    /// The largest share of time any of its subtasks was backpressured (0.0 to 1.0).
    pub backpressure_ratio: f64,
    /// The operators before it in its chain wait on it (see [`holding_back`]): it is what holds
    /// the chain back, as an async operator with every request slot taken does.
    pub holds_back_chain: bool,
}

/// Least drop of the backpressured share from one operator of a chain to the next that names
/// the next one as holding the chain back: Flink's bound between an OK and a LOW level.
pub const HOLDING_BACK_DROP: f64 = 0.1;

/// Which operator of a chain (operators head first, each as its `(busy, backpressured)` shares)
/// holds the operators before it back, if one does.
///
/// A task's time is the same for every operator of its chain, except the time its input waits
/// on an operator that refuses more: that wait is backpressured for the operators before that
/// operator and busy for it and those after it. So the operator where the backpressured share
/// drops by at least [`HOLDING_BACK_DROP`] is the one the chain waits on; the first such drop
/// counts, since what waits on it is held back whatever comes after.
///
/// ```
/// use sluice_web::rates::holding_back;
/// // source and parse wait 80 % of the time on the lookup, which is busy.
/// let chain = [(0.2, 0.8), (0.2, 0.8), (1.0, 0.0), (1.0, 0.0)];
/// assert_eq!(holding_back(&chain), Some(2));
/// // A chain backpressured from downstream: every operator alike, nobody inside holds it.
/// assert_eq!(holding_back(&[(0.1, 0.9), (0.1, 0.9)]), None);
/// ```
pub fn holding_back(chain: &[(f64, f64)]) -> Option<usize> {
    chain
        .windows(2)
        // The margin keeps a drop of exactly the bound (0.5 to 0.4) from reading 0.0999….
        .position(|w| w[0].1 - w[1].1 >= HOLDING_BACK_DROP - 1e-9)
        .map(|i| i + 1)
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
    /// By operator id.
    pub operators: BTreeMap<usize, OperatorRates>,
}

#[derive(Clone, Debug)]
struct VertexSample {
    records_in: u64,
    records_out: u64,
    /// Per subtask: (busy ms, backpressured ms).
    times: Vec<(u64, u64)>,
    /// Its operators head first, each with its times per subtask.
    operators: Vec<(usize, Vec<(u64, u64)>)>,
    is_source: bool,
}

/// The largest share of `ms` milliseconds that any subtask spent in the time `pick` chooses, between the
/// times of an older sample (absent: from zero) and a newer one.
fn share(
    new: &[(u64, u64)],
    old: Option<&[(u64, u64)]>,
    ms: f64,
    pick: fn(&(u64, u64)) -> u64,
) -> f64 {
    new.iter()
        .enumerate()
        .map(|(i, t)| {
            let before = old.and_then(|o| o.get(i)).map_or(0, pick);
            (pick(t).saturating_sub(before) as f64 / ms).clamp(0.0, 1.0)
        })
        .fold(0.0, f64::max)
}

/// The operators' rates of one vertex, head first, between two samples.
fn operator_rates(
    new: &VertexSample,
    old: Option<&VertexSample>,
    ms: f64,
) -> Vec<(usize, OperatorRates)> {
    let shares: Vec<(usize, (f64, f64))> = new
        .operators
        .iter()
        .map(|(id, times)| {
            let before = old.and_then(|o| {
                o.operators
                    .iter()
                    .find(|(i, _)| i == id)
                    .map(|(_, t)| t.as_slice())
            });
            let busy = share(times, before, ms, |t| t.0);
            let backpressured = share(times, before, ms, |t| t.1);
            (*id, (busy, backpressured))
        })
        .collect();
    let chain: Vec<(f64, f64)> = shares.iter().map(|(_, s)| *s).collect();
    let holder = holding_back(&chain);
    shares
        .into_iter()
        .enumerate()
        .map(|(i, (id, (busy, backpressured)))| {
            let rates = OperatorRates {
                busy_ratio: busy,
                backpressure_ratio: backpressured,
                holds_back_chain: holder == Some(i),
            };
            (id, rates)
        })
        .collect()
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
                    operators: v
                        .operators
                        .iter()
                        .map(|o| {
                            let times = o
                                .subtasks
                                .iter()
                                .map(|s| (s.busy_ms, s.backpressured_ms))
                                .collect();
                            (o.id, times)
                        })
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
        let mut operators = BTreeMap::new();
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
                let old_times = old.map(|o| o.times.as_slice());
                let rates = VertexRates {
                    records_in_per_second,
                    records_out_per_second,
                    records_per_second: if new.is_source {
                        records_out_per_second
                    } else {
                        records_in_per_second
                    },
                    backpressure_ratio: share(&new.times, old_times, ms, |t| t.1),
                    busy_ratio: share(&new.times, old_times, ms, |t| t.0),
                };
                operators.extend(operator_rates(new, old, ms));
                (id.clone(), rates)
            })
            .collect();
        Some(Rates {
            sampled_at_ms: last.now_ms,
            window_ms: u64::try_from(dt.as_millis()).unwrap_or(u64::MAX),
            vertices,
            operators,
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
    fn the_operator_a_chain_waits_on_is_named() {
        let mut w = RateWindow::new(Duration::from_secs(2));
        let mut s = status();
        w.push(Duration::from_secs(10), &s);
        // One second later: the input of the sink's chain waited 700 ms on `enrich "async"`
        // (operator 2) on subtask 0: busy for it and the sink after it. In the source's
        // chain, both operators were backpressured alike (the exchange was full).
        s.now_ms += 1000;
        for o in &mut s.vertices[1].operators {
            o.subtasks[0].busy_ms += 700;
        }
        for o in &mut s.vertices[0].operators {
            o.subtasks[1].backpressured_ms += 900;
        }
        w.push(Duration::from_secs(11), &s);
        let r = w.rates().unwrap();
        assert_eq!(r.operators.len(), 4);
        assert!(r.operators.values().all(|o| !o.holds_back_chain));
        assert_eq!(r.operators[&2].busy_ratio, 0.7);
        assert_eq!(r.operators[&0].backpressure_ratio, 0.9);

        // Now the source's chain: `numbers` (0) waits 600 ms on `parse` (1), which refuses
        // more; parse is busy.
        let mut w = RateWindow::new(Duration::from_secs(2));
        w.push(Duration::from_secs(11), &s);
        s.now_ms += 1000;
        s.vertices[0].operators[0].subtasks[0].backpressured_ms += 600;
        s.vertices[0].operators[1].subtasks[0].busy_ms += 600;
        w.push(Duration::from_secs(12), &s);
        let r = w.rates().unwrap();
        let holders: Vec<usize> = r
            .operators
            .iter()
            .filter(|(_, o)| o.holds_back_chain)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(holders, [1], "{:?}", r.operators);
    }

    #[test]
    fn holding_back_is_the_first_drop_of_backpressure() {
        assert_eq!(holding_back(&[]), None);
        assert_eq!(holding_back(&[(1.0, 0.0)]), None, "a lone operator");
        assert_eq!(
            holding_back(&[(0.5, 0.5), (0.5, 0.41)]),
            None,
            "below the bound"
        );
        assert_eq!(holding_back(&[(0.5, 0.5), (0.6, 0.4)]), Some(1));
        assert_eq!(
            holding_back(&[(0.0, 0.9), (0.4, 0.5), (1.0, 0.0)]),
            Some(1),
            "the first drop"
        );
        assert_eq!(
            holding_back(&[(0.9, 0.0), (0.0, 0.9)]),
            None,
            "a rise is not a drop"
        );
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
