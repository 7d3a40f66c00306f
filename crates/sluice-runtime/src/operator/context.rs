//! [`OperatorContext`]: what an operator instance knows about where it runs.

use crate::metrics::OperatorMetrics;
use crate::operator::to_coordinator::{CoordinatorLink, LinkError};
use crate::state::{
    AttachKeyedState, KeyedStore, StateBackend, StateError, StoreError, StoreScope,
};
use crate::storage::CheckpointStorage;
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::{AttemptNumber, NodeId, OperatorEvent, SubtaskIndex, UserError};
use std::hash::Hash;
use std::sync::Arc;

/// Publishes a keyed store's [`StoreStats`](crate::state::StoreStats) as operator metrics:
/// gauges `state_memory_bytes` and `state_disk_bytes`, counters `state_block_cache_hits`,
/// `state_block_cache_misses` and `state_compactions`.
struct StoreMetrics(std::sync::Weak<dyn KeyedStore>);

impl crate::metrics::MetricSource for StoreMetrics {
    fn report(&self, out: &mut crate::metrics::MetricsReport) {
        let Some(store) = self.0.upgrade() else {
            return;
        };
        let s = store.stats();
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        out.gauge("state_memory_bytes", gauge(s.memory_bytes));
        out.gauge("state_disk_bytes", gauge(s.disk_bytes));
        out.counter("state_block_cache_hits", s.cache_hits);
        out.counter("state_block_cache_misses", s.cache_misses);
        out.counter("state_compactions", s.compactions);
    }
}

/// A subtask's keyed store and the value caches its states share.
pub(crate) type StoreAndCache = (Arc<dyn KeyedStore>, crate::state::ValueCaches);

/// Where an operator instance runs: its operator, subtask, parallelism and attempt.
///
/// Cheap to clone; an operator that needs it after `open` keeps a clone.
///
/// ```
/// use sluice_runtime::OperatorContext;
/// let ctx = OperatorContext::for_test("enrich", 2, 4);
/// assert_eq!(ctx.subtask_index(), 2);
/// assert_eq!(ctx.parallelism(), 4);
/// assert_eq!(ctx.describe(), "operator 'enrich' (#0), subtask 2 of 4, attempt 0");
/// ```
#[derive(Clone, Debug)]
pub struct OperatorContext {
    inner: Arc<Inner>,
}

/// What an [`OperatorContext`] is made of.
pub(crate) struct ContextParts {
    pub(crate) operator_id: NodeId,
    pub(crate) operator_name: String,
    pub(crate) subtask_index: SubtaskIndex,
    pub(crate) parallelism: usize,
    pub(crate) max_parallelism: usize,
    pub(crate) attempt_number: AttemptNumber,
    pub(crate) metrics: Arc<OperatorMetrics>,
    pub(crate) checkpointing: bool,
    pub(crate) to_coordinator: Option<CoordinatorLink>,
    pub(crate) state_backend: StateBackend,
    /// The job's checkpoint storage, where an incremental keyed store uploads its files ahead
    /// of checkpoints (`state/ahead.rs`); `None` without checkpointing.
    pub(crate) checkpoint_storage: Option<Arc<dyn CheckpointStorage>>,
}

#[derive(Debug)]
struct Inner {
    operator_id: NodeId,
    operator_name: String,
    subtask_index: SubtaskIndex,
    parallelism: usize,
    max_parallelism: usize,
    attempt_number: AttemptNumber,
    metrics: Arc<OperatorMetrics>,
    checkpointing: bool,
    to_coordinator: Option<CoordinatorLink>,
    state_backend: StateBackend,
    checkpoint_storage: Option<Arc<dyn CheckpointStorage>>,
    /// The keyed store, once an operator state asked for it.
    store: std::sync::Mutex<Option<Arc<dyn KeyedStore>>>,
    /// The files of the stores to restore from, until the store opens.
    restored: std::sync::Mutex<Vec<crate::state::StoreHandle>>,
}

impl OperatorContext {
    pub(crate) fn new(parts: ContextParts) -> Self {
        OperatorContext {
            inner: Arc::new(Inner {
                operator_id: parts.operator_id,
                operator_name: parts.operator_name,
                subtask_index: parts.subtask_index,
                parallelism: parts.parallelism,
                max_parallelism: parts.max_parallelism,
                attempt_number: parts.attempt_number,
                metrics: parts.metrics,
                checkpointing: parts.checkpointing,
                to_coordinator: parts.to_coordinator,
                state_backend: parts.state_backend,
                checkpoint_storage: parts.checkpoint_storage,
                store: std::sync::Mutex::new(None),
                restored: std::sync::Mutex::new(Vec::new()),
            }),
        }
    }

    /// A context for unit-testing an operator outside a job (operator id 0, attempt 0).
    pub fn for_test(operator_name: &str, subtask_index: SubtaskIndex, parallelism: usize) -> Self {
        Self::new(ContextParts {
            operator_id: NodeId(0),
            operator_name: operator_name.to_string(),
            subtask_index,
            parallelism,
            max_parallelism: crate::DEFAULT_MAX_PARALLELISM,
            attempt_number: 0,
            metrics: Arc::new(OperatorMetrics::default()),
            checkpointing: false,
            to_coordinator: None,
            state_backend: StateBackend::default(),
            checkpoint_storage: None,
        })
    }

    /// The same context with keyed state in stores of `backend` (for tests of operators).
    pub fn with_state_backend(self, backend: impl Into<StateBackend>) -> Self {
        let i = &self.inner;
        Self::new(ContextParts {
            operator_id: i.operator_id,
            operator_name: i.operator_name.clone(),
            subtask_index: i.subtask_index,
            parallelism: i.parallelism,
            max_parallelism: i.max_parallelism,
            attempt_number: i.attempt_number,
            metrics: i.metrics.clone(),
            checkpointing: i.checkpointing,
            to_coordinator: i.to_coordinator.clone(),
            state_backend: backend.into(),
            checkpoint_storage: i.checkpoint_storage.clone(),
        })
    }

    /// The job's state backend.
    pub fn state_backend(&self) -> &StateBackend {
        &self.inner.state_backend
    }

    /// This subtask's keyed store and the bytes each state may cache in front of it, or `None`
    /// when keyed state lives on the heap. The store is opened on the first call; later calls
    /// (other states of the same operator) share it.
    pub(crate) fn keyed_store(&self) -> Result<Option<StoreAndCache>, StoreError> {
        let Some(backend) = self.inner.state_backend.store() else {
            return Ok(None);
        };
        let mut slot = sluice_core::sync::lock(&self.inner.store);
        if let Some(store) = slot.as_ref() {
            return Ok(Some((store.clone(), backend.value_caches())));
        }
        let i = &self.inner;
        let scope = StoreScope {
            node: i.operator_id,
            operator_name: i.operator_name.clone(),
            subtask: i.subtask_index,
            attempt: i.attempt_number,
            max_parallelism: i.max_parallelism,
            parallelism: i.parallelism,
        };
        let restored = std::mem::take(&mut *sluice_core::sync::lock(&i.restored));
        let store = if restored.is_empty() {
            backend.open(&scope)?
        } else {
            let mut files = Vec::with_capacity(restored.len());
            for h in &restored {
                files.push(h.local_files().ok_or_else(|| StoreError::Open {
                    backend: backend.name().to_string(),
                    operator: scope.describe(),
                    path: Default::default(),
                    message: format!(
                        "the {} files of key groups {:?} were not fetched from checkpoint storage",
                        h.backend, h.key_groups
                    ),
                })?);
            }
            backend.open_restored(&scope, &files)?
        };
        *slot = Some(store.clone());
        if let (true, Some(storage)) = (store.incremental(), &i.checkpoint_storage) {
            crate::state::ahead::spawn(&store, storage.clone());
        }
        // The store's size, cache and compactions go out with the subtask's other metrics
        // (dashboard, REST, Prometheus). A weak reference: the store goes with its operator.
        i.metrics.register_source(
            "keyed_store",
            Arc::new(StoreMetrics(Arc::downgrade(&store))),
        );
        Ok(Some((store, backend.value_caches())))
    }

    /// Puts `state` (a [`ValueState`](crate::state::ValueState), `MapState` or `KeyedListState`)
    /// in front of this subtask's keyed store when the job's state backend has one (see
    /// [`ValueState::attach`](crate::state::ValueState::attach));
    /// on the heap it does nothing. Keyed operators call it in `open`, after `initialize_state`
    /// restored what they had; each state shares the store's memory budget.
    pub fn attach_keyed_state<S: AttachKeyedState>(&self, state: &mut S) -> Result<(), StateError> {
        if let Some((name, ttl)) = state.time_to_live() {
            ttl.check(name)?;
        }
        if let Some((store, caches)) = self.keyed_store()? {
            state.attach_to(store, self.max_parallelism(), caches, &self.describe())?;
        }
        Ok(())
    }

    /// Moves `timers` into this subtask's keyed store when the job's state backend has one (see
    /// `InternalTimers::attach`); on the heap it does nothing. Keyed operators with timers call
    /// it in `open`, after `initialize_state` restored them.
    pub(crate) fn attach_timers<K, N>(
        &self,
        timers: &mut crate::timer::InternalTimers<K, N>,
    ) -> Result<(), StoreError>
    where
        K: Hash + Eq + Clone + Serialize + DeserializeOwned,
        N: Hash + Eq + Clone + Serialize + DeserializeOwned,
    {
        if let Some((store, _)) = self.keyed_store()? {
            let groups = crate::key_groups::key_group_range(
                self.subtask_index(),
                self.max_parallelism(),
                self.parallelism(),
            );
            timers.attach(store, self.max_parallelism(), groups, &self.describe())?;
        }
        Ok(())
    }

    /// Before `initialize_state`: remembers the keyed store files in `state` for the store to
    /// open from. Refused when they need a store backend the job does not have.
    pub(crate) fn restore_stores(&self, state: &crate::state::OperatorState) -> Result<(), String> {
        let handles = state.store_handles();
        if handles.is_empty() {
            return Ok(());
        }
        let backend = self.inner.state_backend.name();
        if let Some(h) = handles.iter().find(|h| h.backend != backend) {
            return Err(format!(
                "{}: the checkpoint holds {} files of its keyed state (an incremental checkpoint), \
                 which the {backend} state backend cannot read; restore it with the {} backend, \
                 or restore a checkpoint taken with incremental checkpoints off",
                self.describe(),
                h.backend,
                h.backend
            ));
        }
        *sluice_core::sync::lock(&self.inner.restored) = handles.to_vec();
        Ok(())
    }

    /// At a checkpoint barrier, after the operator's `snapshot_state`: adds the files of this
    /// subtask's keyed store when its snapshots are incremental.
    pub(crate) fn snapshot_store(
        &self,
        checkpoint: sluice_core::CheckpointId,
        state: &mut crate::state::OperatorState,
    ) -> Result<(), StoreError> {
        let store = sluice_core::sync::lock(&self.inner.store).clone();
        if let Some(store) = store
            && let Some(handle) = store.snapshot_files(checkpoint)?
        {
            state.store_handles_mut().push(handle);
        }
        Ok(())
    }

    /// Checkpoint `checkpoint` completed: tells the keyed store, if there is one.
    pub(crate) fn store_checkpoint_complete(&self, checkpoint: sluice_core::CheckpointId) {
        if let Some(store) = sluice_core::sync::lock(&self.inner.store).as_ref() {
            store.checkpoint_complete(checkpoint);
        }
    }

    /// Whether the job takes checkpoints (and so ends with a final checkpoint). Sinks that commit
    /// on checkpoints commit at end of input themselves when it does not.
    pub fn checkpointing_enabled(&self) -> bool {
        self.inner.checkpointing
    }

    /// The operator's id in the job graph.
    pub fn operator_id(&self) -> NodeId {
        self.inner.operator_id
    }

    /// The operator's name, as set with `.name(..)`.
    pub fn operator_name(&self) -> &str {
        &self.inner.operator_name
    }

    /// This instance's subtask index, `0..parallelism`.
    pub fn subtask_index(&self) -> SubtaskIndex {
        self.inner.subtask_index
    }

    /// How many subtasks the operator runs as.
    pub fn parallelism(&self) -> usize {
        self.inner.parallelism
    }

    /// The number of key groups (the upper bound for rescaling keyed state).
    pub fn max_parallelism(&self) -> usize {
        self.inner.max_parallelism
    }

    /// How many times this subtask was restarted before this run (0 for the first run).
    pub fn attempt_number(&self) -> AttemptNumber {
        self.inner.attempt_number
    }

    /// This subtask's metrics.
    pub fn metrics(&self) -> &Arc<OperatorMetrics> {
        &self.inner.metrics
    }

    /// Whether this operator has a coordinator (declared with
    /// [`DataStream::transform_with_coordinator`](crate::DataStream::transform_with_coordinator)).
    pub fn has_coordinator(&self) -> bool {
        self.inner.to_coordinator.is_some()
    }

    /// Sends an encoded event to this operator's coordinator. It reaches the coordinator's
    /// `handle_event_from_operator` with this subtask's index and attempt number, in send order.
    /// Fails if the operator has no coordinator, or if the bounded queue on the way is full (the
    /// coordinator is far behind).
    pub fn send_event_to_coordinator(&self, event: OperatorEvent) -> Result<(), UserError> {
        let Some(link) = &self.inner.to_coordinator else {
            return Err(format!("{} has no coordinator to send events to", self.describe()).into());
        };
        let i = &self.inner;
        link.send(i.operator_id, i.subtask_index, i.attempt_number, event)
            .map_err(|e| -> UserError {
                match e {
                    LinkError::Full(m) | LinkError::Gone(m) => {
                        format!("{}: {m}", self.describe()).into()
                    }
                }
            })?;
        i.metrics.add_event_to_coordinator();
        Ok(())
    }

    /// Encodes `event` with the sluice codec and sends it to the coordinator (see
    /// [`send_event_to_coordinator`](Self::send_event_to_coordinator)).
    pub fn send_to_coordinator<T: serde::Serialize + ?Sized>(
        &self,
        event: &T,
    ) -> Result<(), UserError> {
        self.send_event_to_coordinator(OperatorEvent::new(sluice_core::codec::encode(event)?))
    }

    /// "operator 'name' (#id), subtask i of p, attempt a": how errors name this instance.
    pub fn describe(&self) -> String {
        format!(
            "operator '{}' ({}), subtask {} of {}, attempt {}",
            self.inner.operator_name,
            self.inner.operator_id,
            self.inner.subtask_index,
            self.inner.parallelism,
            self.inner.attempt_number
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{MemoryStateBackend, ValueState};

    #[test]
    fn a_keyed_store_publishes_its_size_with_the_subtask_metrics() {
        let ctx = OperatorContext::for_test("count", 0, 1)
            .with_state_backend(MemoryStateBackend::new(1 << 20));
        let mut state: ValueState<u64, String> = ValueState::new("s");
        state.update(1, "x".repeat(100));
        ctx.attach_keyed_state(&mut state).unwrap();
        let report = ctx.metrics().report();
        assert!(report.gauges["state_memory_bytes"] >= 100, "{report:?}");
        assert_eq!(report.counters["state_compactions"], 0);
        // The source holds the store weakly: it reports nothing once the store is gone.
        drop(state);
        drop(ctx.inner.store.lock().unwrap().take());
        assert!(
            !ctx.metrics()
                .report()
                .gauges
                .contains_key("state_memory_bytes")
        );
    }

    #[test]
    fn a_heap_backend_opens_no_store() {
        let ctx = OperatorContext::for_test("count", 0, 1);
        let mut state: ValueState<u64, u64> = ValueState::new("s");
        ctx.attach_keyed_state(&mut state).unwrap();
        assert!(!state.is_attached());
        assert!(ctx.metrics().report().gauges.is_empty());
    }
}
