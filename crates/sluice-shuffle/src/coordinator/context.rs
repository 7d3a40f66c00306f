//! [`ShuffleCoordinatorContext`]: the coordinator context base plus what only the shuffle needs,
//! sending global statistics to the subtasks.

use crate::global::GlobalStatistics;
use crate::statistics::ShuffleKey;
use serde::Serialize;
use sluice_coordinator::{CoordinatorContextBase, encode_event};
use sluice_core::{SubtaskIndex, UserError};

/// [`ToOperator`](crate::event::ToOperator) encoded from a borrow (the same encoding), so that
/// broadcasting statistics does not copy them.
#[derive(Serialize)]
#[serde(bound = "K: ShuffleKey")]
enum ToOperatorRef<'a, K> {
    Statistics {
        statistics: &'a GlobalStatistics<K>,
        apply_immediately: bool,
    },
}

/// The shuffle coordinator's context: a [`CoordinatorContextBase`] (which owns the coordinator
/// thread, the subtask gateways, readiness and the job-failure hook) and the two sends that are
/// the shuffle's own. It is the seed's `ShuffleCoordinatorContext extends CoordinatorContextBase`,
/// by composition.
///
/// ```
/// use sluice_coordinator::gateway::memory::InMemoryTransport;
/// use sluice_coordinator::{CoordinatorContext, CoordinatorContextBase, JobFailureHook, decode_event};
/// use sluice_core::NodeId;
/// use sluice_shuffle::coordinator::ShuffleCoordinatorContext;
/// use sluice_shuffle::event::ToOperator;
/// use sluice_shuffle::{CompletedData, CompletedStatistics, GlobalStatistics};
///
/// let context = CoordinatorContext::new("shuffle", NodeId(1), 2, JobFailureHook::new(|_| {}));
/// let shuffle = ShuffleCoordinatorContext::new(CoordinatorContextBase::new(context).unwrap());
/// // Only subtask 0 is ready.
/// let transport = InMemoryTransport::new(8);
/// let mut inbox = transport.start_attempt(0, 0);
/// shuffle.base().subtask_ready(transport.gateway(0, 0)).unwrap();
///
/// let completed = CompletedStatistics {
///     checkpoint: 1,
///     downstream_parallelism: 2,
///     data: CompletedData::Map(vec![(7u32, 3)]),
/// };
/// let statistics = GlobalStatistics::compute(&completed, 2, 0.0).unwrap();
/// assert_eq!(shuffle.send_statistics_to_subtasks(&statistics).unwrap(), 1);
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let event = inbox.recv().await.unwrap().ack();
/// let ToOperator::Statistics { statistics: got, apply_immediately } = decode_event(&event).unwrap();
/// assert_eq!((got, apply_immediately), (statistics, false));
/// # });
/// shuffle.base().close();
/// ```
#[derive(Clone, Debug)]
pub struct ShuffleCoordinatorContext {
    base: CoordinatorContextBase,
}

impl ShuffleCoordinatorContext {
    /// The shuffle's context over `base`.
    pub fn new(base: CoordinatorContextBase) -> Self {
        ShuffleCoordinatorContext { base }
    }

    /// The base: thread, gateways, readiness, failure.
    pub fn base(&self) -> &CoordinatorContextBase {
        &self.base
    }

    /// Sends `statistics` to every ready subtask, to apply at their next checkpoint (so that
    /// every subtask switches at the same barrier). A subtask that is not ready misses them; it
    /// asks for them after its restore. Returns how many subtasks they were sent to.
    pub fn send_statistics_to_subtasks<K: ShuffleKey>(
        &self,
        statistics: &GlobalStatistics<K>,
    ) -> Result<usize, UserError> {
        let event = encode_event(&ToOperatorRef::Statistics {
            statistics,
            apply_immediately: false,
        })?;
        let mut sent = 0;
        for subtask in 0..self.base.parallelism() {
            if !self.base.is_subtask_ready(subtask) {
                tracing::debug!(
                    operator = self.base.operator_name(),
                    subtask,
                    "subtask not ready: it will ask for the statistics after its restore"
                );
                continue;
            }
            // The acknowledgement is not awaited: a subtask that fails meanwhile asks again.
            drop(self.base.send_event_to_operator(subtask, event.clone()));
            sent += 1;
        }
        Ok(sent)
    }

    /// Sends `statistics` to `subtask` alone, to apply at once (the answer to its request).
    /// Returns whether it was ready.
    pub fn send_statistics_to_subtask<K: ShuffleKey>(
        &self,
        subtask: SubtaskIndex,
        statistics: &GlobalStatistics<K>,
    ) -> Result<bool, UserError> {
        if !self.base.is_subtask_ready(subtask) {
            return Ok(false);
        }
        let event = encode_event(&ToOperatorRef::Statistics {
            statistics,
            apply_immediately: true,
        })?;
        drop(self.base.send_event_to_operator(subtask, event));
        Ok(true)
    }
}
