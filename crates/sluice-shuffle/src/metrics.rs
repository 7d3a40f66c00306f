//! What the shuffle lets a user see: [`ShuffleMetrics`], a handle made with the configuration
//! and readable while the job runs and after it ended.
//!
//! - Every new global statistics (an aggregation completed, a restore, a rescale) becomes a
//!   [`StatisticsReport`]: type, checkpoint, key count, downstream parallelism, and the
//!   assignment (each key's subtasks and weights, each subtask's load) or the range bounds, so
//!   that one can tell why a key went where. The latest is kept in full, earlier ones as
//!   summaries. The coordinator also logs one `tracing` line per report (target
//!   `sluice_shuffle`, level `info`).
//! - Routing counters, summed over every producer subtask and attempt: records routed by
//!   statistics, round robin (no statistics yet), and by round robin because Map statistics did
//!   not know the key.
//! - Each shuffle operator subtask also sets gauges in its operator metrics
//!   (`JobResult::metrics`): [`GAUGE_CHECKPOINT`], [`GAUGE_TYPE`] and [`GAUGE_KEYS`].

use crate::assignment::SubtaskShare;
use crate::global::{GlobalStatistics, Routing};
use crate::statistics::{ShuffleKey, StatisticsType};
use sluice_core::sync::lock;
use std::collections::VecDeque;
use std::fmt::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Gauge: the checkpoint of the statistics a subtask routes by (absent before any).
pub const GAUGE_CHECKPOINT: &str = "shuffle_statistics_checkpoint";
/// Gauge: their type, 1 for Map and 2 for Sketch.
pub const GAUGE_TYPE: &str = "shuffle_statistics_type";
/// Gauge: keys assigned (Map) or range bounds (Sketch).
pub const GAUGE_KEYS: &str = "shuffle_statistics_keys";

/// Summaries kept besides the latest full report.
const HISTORY: usize = 256;
/// Keys or bounds listed in a log line.
const LOGGED: usize = 16;

/// Why new global statistics were computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportCause {
    /// Every subtask reported for a checkpoint.
    Aggregated,
    /// Recomputed from the coordinator's checkpoint on restore.
    Restored,
    /// Recomputed because the subtasks report another downstream parallelism.
    Rescaled,
}

/// One key's route in a Map assignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRoute {
    /// The key, as `Debug` prints it.
    pub key: String,
    /// Its subtasks.
    pub subtasks: Vec<usize>,
    /// The routing weight of each (base weight excluded).
    pub weights: Vec<u64>,
}

/// New global statistics, as a user reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatisticsReport {
    /// The checkpoint whose statistics they come from.
    pub checkpoint: u64,
    /// Map or Sketch.
    pub statistics_type: StatisticsType,
    /// Keys assigned (Map) or range bounds (Sketch).
    pub keys: usize,
    /// The downstream parallelism they were computed for.
    pub downstream_parallelism: usize,
    /// Why they were computed.
    pub cause: ReportCause,
    /// Map: per subtask, the routing weight and keys assigned. Empty for Sketch.
    pub subtasks: Vec<SubtaskShare>,
    /// Map: every key's route, keys in sort order (empty in the history's summaries).
    pub assignment: Vec<KeyRoute>,
    /// Sketch: the range bounds, as `Debug` prints them (empty in the history's summaries).
    pub bounds: Vec<String>,
}

impl StatisticsReport {
    pub(crate) fn new<K: ShuffleKey>(g: &GlobalStatistics<K>, cause: ReportCause) -> Self {
        let (subtasks, assignment, bounds) = match &g.routing {
            Routing::Map(m) => (
                m.assignment_info(),
                m.keys()
                    .iter()
                    .map(|(k, a)| KeyRoute {
                        key: format!("{k:?}"),
                        subtasks: a.subtasks().to_vec(),
                        weights: a.routing_weights(),
                    })
                    .collect(),
                Vec::new(),
            ),
            Routing::Sketch(b) => (
                Vec::new(),
                Vec::new(),
                b.iter().map(|k| format!("{k:?}")).collect(),
            ),
        };
        StatisticsReport {
            checkpoint: g.checkpoint,
            statistics_type: g.kind(),
            keys: g.len(),
            downstream_parallelism: g.downstream_parallelism,
            cause,
            subtasks,
            assignment,
            bounds,
        }
    }

    /// The route of the key that `Debug` prints as `key` (Map statistics).
    pub fn route_of(&self, key: &str) -> Option<&KeyRoute> {
        self.assignment.iter().find(|r| r.key == key)
    }

    /// The report without the assignment and bounds.
    fn summary(&self) -> StatisticsReport {
        StatisticsReport {
            assignment: Vec::new(),
            bounds: Vec::new(),
            ..self.clone()
        }
    }

    /// The load per subtask and the first keys or bounds, on one line (what the log shows).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        match self.statistics_type {
            StatisticsType::Sketch => {
                let _ = write!(s, "bounds [");
                for (i, b) in self.bounds.iter().take(LOGGED).enumerate() {
                    let _ = write!(s, "{}{b}", if i > 0 { ", " } else { "" });
                }
                if self.bounds.len() > LOGGED {
                    let _ = write!(s, ", … {} more", self.bounds.len() - LOGGED);
                }
                s.push(']');
            }
            _ => {
                let _ = write!(s, "load [");
                for (i, share) in self.subtasks.iter().enumerate() {
                    let _ = write!(
                        s,
                        "{}{i}: {} ({} keys)",
                        if i > 0 { ", " } else { "" },
                        share.weight,
                        share.keys
                    );
                }
                let _ = write!(s, "]; keys [");
                for (i, r) in self.assignment.iter().take(LOGGED).enumerate() {
                    let _ = write!(
                        s,
                        "{}{} → {:?}",
                        if i > 0 { ", " } else { "" },
                        r.key,
                        r.subtasks
                    );
                    if r.subtasks.len() > 1 {
                        let _ = write!(s, " by {:?}", r.weights);
                    }
                }
                if self.assignment.len() > LOGGED {
                    let _ = write!(s, ", … {} more", self.assignment.len() - LOGGED);
                }
                s.push(']');
            }
        }
        s
    }
}

#[derive(Default)]
struct Reports {
    latest: Option<StatisticsReport>,
    history: VecDeque<StatisticsReport>,
    total: u64,
}

#[derive(Default)]
struct Inner {
    reports: Mutex<Reports>,
    by_statistics: AtomicU64,
    round_robin: AtomicU64,
    unknown_keys: AtomicU64,
    local_switches: AtomicU64,
}

/// The shuffle's statistics and routing counters (see the [module](self) documentation).
/// Cheap to clone; clones share everything.
#[derive(Clone, Default)]
pub struct ShuffleMetrics {
    inner: Arc<Inner>,
}

impl ShuffleMetrics {
    /// The latest global statistics, in full.
    pub fn latest(&self) -> Option<StatisticsReport> {
        lock(&self.inner.reports).latest.clone()
    }

    /// Summaries of the latest global statistics, oldest first (at most 256).
    pub fn history(&self) -> Vec<StatisticsReport> {
        lock(&self.inner.reports).history.iter().cloned().collect()
    }

    /// How many global statistics were computed.
    pub fn reports(&self) -> u64 {
        lock(&self.inner.reports).total
    }

    /// Records routed by statistics.
    pub fn routed_by_statistics(&self) -> u64 {
        self.inner.by_statistics.load(Ordering::Relaxed)
    }

    /// Records routed round robin because no statistics had arrived yet.
    pub fn routed_round_robin(&self) -> u64 {
        self.inner.round_robin.load(Ordering::Relaxed)
    }

    /// Records routed round robin because the Map statistics did not know their key (counted
    /// within [`routed_by_statistics`](Self::routed_by_statistics)).
    pub fn unknown_keys(&self) -> u64 {
        self.inner.unknown_keys.load(Ordering::Relaxed)
    }

    /// How many times a subtask switched its local statistics from Map to Sketch.
    pub fn local_switches_to_sketch(&self) -> u64 {
        self.inner.local_switches.load(Ordering::Relaxed)
    }

    pub(crate) fn report(&self, report: StatisticsReport) {
        let mut r = lock(&self.inner.reports);
        r.total += 1;
        if r.history.len() == HISTORY {
            r.history.pop_front();
        }
        r.history.push_back(report.summary());
        r.latest = Some(report);
    }

    pub(crate) fn add_routed(&self, by_statistics: u64, round_robin: u64, unknown: u64) {
        if by_statistics > 0 {
            self.inner
                .by_statistics
                .fetch_add(by_statistics, Ordering::Relaxed);
        }
        if round_robin > 0 {
            self.inner
                .round_robin
                .fetch_add(round_robin, Ordering::Relaxed);
        }
        if unknown > 0 {
            self.inner
                .unknown_keys
                .fetch_add(unknown, Ordering::Relaxed);
        }
    }

    pub(crate) fn local_switch(&self) {
        self.inner.local_switches.fetch_add(1, Ordering::Relaxed);
    }
}

impl fmt::Debug for ShuffleMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShuffleMetrics")
            .field("reports", &self.reports())
            .field("routed_by_statistics", &self.routed_by_statistics())
            .field("routed_round_robin", &self.routed_round_robin())
            .field("unknown_keys", &self.unknown_keys())
            .finish()
    }
}
