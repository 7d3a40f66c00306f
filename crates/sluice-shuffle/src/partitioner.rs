//! [`RangePartitioner`]: the custom partitioner on the edge after the shuffle operator, and the
//! per-subtask cell through which the operator hands it the statistics to route by.
//!
//! Iceberg sends the statistics in-band: the operator emits a wrapper record that replaces the
//! partitioner's delegate, and a later `flatMap` drops the wrappers. In sluice the operator and
//! its partitioner always run in one task (the partitioner routes that operator's output), so
//! the operator publishes the compiled statistics into a [`RouteCell`] shared with the
//! partitioner instead, and records stay unwrapped. The effect is the same: statistics
//! published while the operator snapshots apply from the records after the barrier, statistics
//! published at once (the answer to a request after a restore) from the next record.
//!
//! The partitioner finds its cell in [`Partitioner::open`], by the producer subtask and attempt;
//! the operator finds the same cell when it opens. Until statistics arrive, records go round
//! robin from a random start.

use crate::metrics::ShuffleMetrics;
use crate::rng::{Rng, mix};
use crate::router::{RangeRouter, RouteTable};
use crate::statistics::ShuffleKey;
use sluice_core::sync::lock;
use sluice_core::{AttemptNumber, SubtaskIndex};
use sluice_runtime::{OperatorContext, Partitioner};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Records between two updates of the shared routing counters.
const FLUSH_EVERY: u64 = 4096;

/// What the shuffle operator of one producer subtask shares with its partitioner(s).
#[derive(Debug)]
pub struct RouteCell<K> {
    version: AtomicU64,
    table: Mutex<Option<Arc<RouteTable<K>>>>,
    downstream: AtomicUsize,
}

impl<K> RouteCell<K> {
    /// Publishes `table`: the partitioner routes by it from its next record.
    pub fn publish(&self, table: Arc<RouteTable<K>>) {
        *lock(&self.table) = Some(table);
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The table published last.
    pub fn current(&self) -> Option<Arc<RouteTable<K>>> {
        lock(&self.table).clone()
    }

    /// The downstream parallelism the partitioner was opened with (0: not opened, for example
    /// because the edge is chained and never partitions).
    pub fn downstream_parallelism(&self) -> usize {
        self.downstream.load(Ordering::Acquire)
    }

    fn set_downstream(&self, n: usize) {
        self.downstream.store(n, Ordering::Release);
    }
}

/// Each producer subtask's attempt and cell.
type CellsBySubtask<K> = HashMap<SubtaskIndex, (AttemptNumber, Arc<RouteCell<K>>)>;

/// The cells of every producer subtask of one range shuffle, shared by its operator and
/// partitioner instances.
#[derive(Debug)]
pub struct RouteCells<K> {
    cells: Mutex<CellsBySubtask<K>>,
}

impl<K> Default for RouteCells<K> {
    fn default() -> Self {
        RouteCells {
            cells: Mutex::new(HashMap::new()),
        }
    }
}

impl<K> RouteCells<K> {
    /// The cell of `attempt` of `subtask`. A newer attempt replaces an older attempt's cell (a
    /// restarted subtask starts from nothing); an older attempt gets a cell of its own.
    pub fn cell(&self, subtask: SubtaskIndex, attempt: AttemptNumber) -> Arc<RouteCell<K>> {
        let mut cells = lock(&self.cells);
        match cells.get(&subtask) {
            Some((a, cell)) if *a == attempt => cell.clone(),
            Some((a, _)) if *a > attempt => Arc::new(RouteCell::default_cell()),
            _ => {
                let cell = Arc::new(RouteCell::default_cell());
                cells.insert(subtask, (attempt, cell.clone()));
                cell
            }
        }
    }
}

impl<K> RouteCell<K> {
    fn default_cell() -> Self {
        RouteCell {
            version: AtomicU64::new(0),
            table: Mutex::new(None),
            downstream: AtomicUsize::new(0),
        }
    }
}

/// Routes records by their key with the statistics the shuffle operator of the same subtask
/// published (see the [module](self) documentation). Made by
/// [`range_shuffle`](crate::RangeShuffle::range_shuffle); cloned per producer subtask.
pub struct RangePartitioner<K, F> {
    key_fn: F,
    cells: Arc<RouteCells<K>>,
    metrics: ShuffleMetrics,
    cell: Option<Arc<RouteCell<K>>>,
    version: u64,
    router: Option<RangeRouter<K>>,
    round_robin: Option<u64>,
    seed: u64,
    by_statistics: u64,
    by_round_robin: u64,
    unknown_flushed: u64,
}

impl<K: ShuffleKey, F: Clone> Clone for RangePartitioner<K, F> {
    /// A fresh partitioner over the same cells (what a new producer subtask gets).
    fn clone(&self) -> Self {
        RangePartitioner::new(
            self.key_fn.clone(),
            self.cells.clone(),
            self.metrics.clone(),
        )
        .with_seed(self.seed)
    }
}

impl<K: ShuffleKey, F> RangePartitioner<K, F> {
    /// A partitioner reading the cells of `cells`, counting into `metrics`.
    pub fn new(key_fn: F, cells: Arc<RouteCells<K>>, metrics: ShuffleMetrics) -> Self {
        RangePartitioner {
            key_fn,
            cells,
            metrics,
            cell: None,
            version: 0,
            router: None,
            round_robin: None,
            seed: Rng::random().next_u64(),
            by_statistics: 0,
            by_round_robin: 0,
            unknown_flushed: 0,
        }
    }

    /// Starts the round-robin position and the split keys' sequences from `seed` (for
    /// reproducible tests).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Whether statistics were published to this partitioner's cell and are routed by.
    pub fn has_statistics(&self) -> bool {
        self.router.is_some()
    }

    /// Picks up statistics published since the last record.
    #[inline]
    fn refresh(&mut self) {
        let Some(cell) = &self.cell else { return };
        let version = cell.version.load(Ordering::Acquire);
        if version == self.version {
            return;
        }
        let table = cell.current();
        self.version = version;
        self.flush();
        self.router = table.map(|table| RangeRouter::new(table, mix(self.seed ^ version)));
        self.unknown_flushed = 0;
    }

    /// Adds the counts since the last flush to the shared metrics.
    fn flush(&mut self) {
        let unknown = self.router.as_ref().map_or(0, |r| r.unknown_keys());
        self.metrics.add_routed(
            self.by_statistics,
            self.by_round_robin,
            unknown.saturating_sub(self.unknown_flushed),
        );
        self.unknown_flushed = unknown;
        self.by_statistics = 0;
        self.by_round_robin = 0;
    }
}

impl<K, F> Drop for RangePartitioner<K, F> {
    fn drop(&mut self) {
        let unknown = self.router.as_ref().map_or(0, |r| r.unknown_keys());
        self.metrics.add_routed(
            self.by_statistics,
            self.by_round_robin,
            unknown.saturating_sub(self.unknown_flushed),
        );
    }
}

impl<T, K, F> Partitioner<T> for RangePartitioner<K, F>
where
    K: ShuffleKey,
    F: Fn(&T) -> K + Send + 'static,
{
    fn ship_strategy(&self) -> &'static str {
        "RANGE"
    }

    fn open(&mut self, producer: &OperatorContext, num_partitions: usize) {
        let cell = self
            .cells
            .cell(producer.subtask_index(), producer.attempt_number());
        cell.set_downstream(num_partitions);
        self.seed = mix(self.seed ^ mix(producer.subtask_index() as u64));
        self.cell = Some(cell);
    }

    #[inline]
    fn partition(&mut self, record: &T, num_partitions: usize) -> usize {
        self.refresh();
        let subtask = match &mut self.router {
            Some(router) => {
                self.by_statistics += 1;
                router.route(&(self.key_fn)(record), num_partitions)
            }
            None => {
                self.by_round_robin += 1;
                let n = num_partitions.max(1) as u64;
                // Randomly started, so that the producer subtasks do not move in step.
                let next = self.round_robin.get_or_insert(self.seed % n);
                let s = *next % n;
                *next = next.wrapping_add(1);
                s as usize
            }
        };
        if (self.by_statistics + self.by_round_robin) >= FLUSH_EVERY {
            self.flush();
        }
        subtask
    }

    /// The network writer's call: the cell is checked once for the whole batch (the shuffle
    /// operator publishes between batches, never while its output is being routed), then every
    /// record is routed as [`partition`](Partitioner::partition) would route it.
    fn partition_batch(&mut self, records: &[T], num_partitions: usize, out: &mut Vec<usize>) {
        self.refresh();
        let count = records.len() as u64;
        match &mut self.router {
            Some(router) => {
                self.by_statistics += count;
                router.route_batch(records, &self.key_fn, num_partitions, out);
            }
            None => {
                self.by_round_robin += count;
                let n = num_partitions.max(1) as u64;
                let next = self.round_robin.get_or_insert(self.seed % n);
                out.reserve(records.len());
                for _ in records {
                    out.push((*next % n) as usize);
                    *next = next.wrapping_add(1);
                }
            }
        }
        if (self.by_statistics + self.by_round_robin) >= FLUSH_EVERY {
            self.flush();
        }
    }
}

#[cfg(test)]
mod tests;
