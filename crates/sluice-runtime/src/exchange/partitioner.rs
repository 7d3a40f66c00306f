//! Partitioners: which downstream subtask a record goes to.
//!
//! The built-in strategies are chosen on the stream (`forward`, `rebalance`, `broadcast`,
//! `key_by`); [`Partitioner`] is the trait for a custom one (`partition_custom`), like the range
//! partitioner of the shuffle. `key_by` routes by key group ([`crate::key_groups`]).

use crate::operator::OperatorContext;

/// Chooses the target subtask of each record on a custom edge.
///
/// One instance runs per producer subtask (it is cloned from the one given to the API), so it may
/// keep state such as a round-robin counter.
///
/// ```
/// use sluice_runtime::Partitioner;
///
/// #[derive(Clone)]
/// struct ByParity;
/// impl Partitioner<u64> for ByParity {
///     fn partition(&mut self, record: &u64, num_partitions: usize) -> usize {
///         (*record % 2) as usize % num_partitions
///     }
/// }
/// assert_eq!(ByParity.partition(&3, 2), 1);
/// ```
pub trait Partitioner<T>: Send + 'static {
    /// The target subtask of `record`, in `0..num_partitions`. A value out of range fails the job.
    fn partition(&mut self, record: &T, num_partitions: usize) -> usize;

    /// Appends to `out` the target subtask of each of `records`, in order: what the network
    /// writer calls, once per batch of records its producer emits. The default calls
    /// [`partition`](Self::partition) for each record; a partitioner with per-batch work (reading
    /// shared state once, or routing several records at a time) overrides it, and must give the
    /// same targets as `partition` called on the records in order would.
    ///
    /// ```
    /// use sluice_runtime::Partitioner;
    ///
    /// struct Modulo;
    /// impl Partitioner<u64> for Modulo {
    ///     fn partition(&mut self, record: &u64, num_partitions: usize) -> usize {
    ///         (*record % num_partitions as u64) as usize
    ///     }
    /// }
    /// let mut targets = Vec::new();
    /// Modulo.partition_batch(&[5, 6, 7], 3, &mut targets);
    /// assert_eq!(targets, vec![2, 0, 1]);
    /// ```
    fn partition_batch(&mut self, records: &[T], num_partitions: usize, out: &mut Vec<usize>) {
        out.reserve(records.len());
        for r in records {
            out.push(self.partition(r, num_partitions));
        }
    }

    /// Called once on each producer subtask's instance when its network writer is built, before
    /// the producer's operators are restored or opened: `producer` is the context of the
    /// operator whose output this partitioner routes (its subtask, parallelism and attempt), and
    /// `num_partitions` the number of consumer subtasks. A partitioner that works with the
    /// operator before it (like the range shuffle's, which routes by statistics that operator
    /// receives) finds its partner here. Not called when the edge is chained (both sides run as
    /// one subtask), where the partitioner is never called either. Does nothing by default.
    fn open(&mut self, producer: &OperatorContext, num_partitions: usize) {
        let _ = (producer, num_partitions);
    }

    /// How the edge is named in the job's live view (the REST API, the web dashboard), as
    /// Flink names an edge's ship strategy: `"CUSTOM"` by default; the range shuffle's
    /// partitioner says `"RANGE"`.
    ///
    /// ```
    /// use sluice_runtime::Partitioner;
    ///
    /// struct Modulo;
    /// impl Partitioner<u64> for Modulo {
    ///     fn partition(&mut self, record: &u64, n: usize) -> usize {
    ///         (*record % n as u64) as usize
    ///     }
    ///     fn ship_strategy(&self) -> &'static str {
    ///         "MODULO"
    ///     }
    /// }
    /// assert_eq!(Modulo.ship_strategy(), "MODULO");
    /// ```
    fn ship_strategy(&self) -> &'static str {
        "CUSTOM"
    }
}
