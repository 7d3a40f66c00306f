//! [`OperatorContext`]: what an operator instance knows about where it runs.

use crate::metrics::OperatorMetrics;
use crate::operator::to_coordinator::{CoordinatorLink, LinkError};
use sluice_core::{AttemptNumber, NodeId, OperatorEvent, SubtaskIndex, UserError};
use std::sync::Arc;

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
        })
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
