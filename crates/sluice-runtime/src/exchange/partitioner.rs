//! Partitioners: which downstream subtask a record goes to.
//!
//! The built-in strategies are chosen on the stream (`forward`, `rebalance`, `broadcast`,
//! `key_by`); [`Partitioner`] is the trait for a custom one (`partition_custom`), like the range
//! partitioner of the shuffle. `key_by` routes by key group ([`crate::key_groups`]).

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
}
