//! [`SourceCoordinatorContext`]: what a split enumerator sees of its coordinator (Flink's
//! `SourceCoordinatorContext`, the enumerator's `SplitEnumeratorContext`), composed on
//! [`CoordinatorContextBase`].
//!
//! The base does the thread, the gateways, readiness, failure and the worker pool; this context
//! adds only what is the source's own: the registry of readers, split assignment (checked against
//! the registry, recorded in the [`SplitAssignmentTracker`], sent as events), the subtasks told
//! that no more splits will come, and `call_async` handlers that get the enumerator back.

use crate::api::{SourceSplit, SplitEnumerator};
use crate::coordinator::tracker::SplitAssignmentTracker;
use crate::error::SourceError;
use crate::event::EnumeratorEvent;
use sluice_coordinator::{CoordinatorContextBase, PeriodicCall, encode_event};
use sluice_core::sync::lock;
use sluice_core::{AttemptNumber, CheckpointId, SubtaskIndex, UserError};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The enumerator's view of its coordinator (see [`SourceCoordinatorContext`]).
pub type SplitEnumeratorContext<E> = SourceCoordinatorContext<E>;

/// A registered reader: the attempt of its subtask that registered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReaderInfo {
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// The attempt that registered.
    pub attempt: AttemptNumber,
}

struct State<S> {
    readers: BTreeMap<SubtaskIndex, ReaderInfo>,
    tracker: SplitAssignmentTracker<S>,
    no_more_splits: BTreeSet<SubtaskIndex>,
}

/// The source coordinator's context, composed on a [`CoordinatorContextBase`]. Cheap to clone;
/// every method may be called from any thread (work that must run on the coordinator thread is
/// moved there through the base).
///
/// ```
/// use sluice_coordinator::{CoordinatorContext, CoordinatorContextBase, JobFailureHook};
/// use sluice_core::NodeId;
/// use sluice_source::{SequenceEnumerator, SequenceSplit, SourceCoordinatorContext};
///
/// let hook = JobFailureHook::new(|_| {});
/// let base = CoordinatorContextBase::new(CoordinatorContext::new("numbers", NodeId(0), 2, hook)).unwrap();
/// let ctx = SourceCoordinatorContext::<SequenceEnumerator>::new(base.clone());
/// assert_eq!(ctx.current_parallelism(), 2);
/// assert!(ctx.registered_readers().is_empty());
///
/// // No reader registered yet: the assignment is refused, naming the subtask (from this plain
/// // thread the call runs on the coordinator thread and waits for it).
/// let split = SequenceSplit { index: 0, next: 1, last: 10 };
/// let err = ctx.assign_split(1, vec![split]).unwrap_err();
/// assert!(err.to_string().contains("to subtask 1 because the subtask has no registered reader"));
/// base.close();
/// ```
pub struct SourceCoordinatorContext<E: SplitEnumerator> {
    base: CoordinatorContextBase,
    state: Arc<Mutex<State<E::Split>>>,
    /// The enumerator, for `call_async` handlers. Only touched on the coordinator thread.
    enumerator: Arc<Mutex<Option<E>>>,
}

impl<E: SplitEnumerator> Clone for SourceCoordinatorContext<E> {
    fn clone(&self) -> Self {
        SourceCoordinatorContext {
            base: self.base.clone(),
            state: self.state.clone(),
            enumerator: self.enumerator.clone(),
        }
    }
}

impl<E: SplitEnumerator> fmt::Debug for SourceCoordinatorContext<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceCoordinatorContext")
            .field("operator", &self.base.operator_name())
            .field("readers", &lock(&self.state).readers)
            .finish()
    }
}

impl<E: SplitEnumerator> SourceCoordinatorContext<E> {
    /// A context on `base`, with no reader registered.
    pub fn new(base: CoordinatorContextBase) -> Self {
        SourceCoordinatorContext {
            base,
            state: Arc::new(Mutex::new(State {
                readers: BTreeMap::new(),
                tracker: SplitAssignmentTracker::default(),
                no_more_splits: BTreeSet::new(),
            })),
            enumerator: Arc::new(Mutex::new(None)),
        }
    }

    /// The base this context is composed on.
    pub fn base(&self) -> &CoordinatorContextBase {
        &self.base
    }

    /// The source's parallelism.
    pub fn current_parallelism(&self) -> usize {
        self.base.parallelism()
    }

    /// The registered readers, by subtask.
    pub fn registered_readers(&self) -> BTreeMap<SubtaskIndex, ReaderInfo> {
        lock(&self.state).readers.clone()
    }

    /// Assigns `splits` to the reader of `subtask` (see [`assign_splits`](Self::assign_splits)).
    pub fn assign_split(
        &self,
        subtask: SubtaskIndex,
        splits: Vec<E::Split>,
    ) -> Result<(), SourceError> {
        self.assign_splits(BTreeMap::from([(subtask, splits)]))
    }

    /// Assigns splits to readers: every target must have a registered reader, or nothing is
    /// assigned and the error names the subtask. The assignment is recorded for the next
    /// checkpoint and sent to each reader, on the coordinator thread (from another plain thread
    /// the call waits for it; from a tokio worker, which must not wait, it fails), so that it is
    /// ordered with the checkpoints.
    pub fn assign_splits(
        &self,
        assignment: BTreeMap<SubtaskIndex, Vec<E::Split>>,
    ) -> Result<(), SourceError> {
        let me = self.clone();
        self.on_coordinator_thread(move || me.assign_now(assignment), "cannot assign splits")
    }

    fn assign_now(
        &self,
        assignment: BTreeMap<SubtaskIndex, Vec<E::Split>>,
    ) -> Result<(), SourceError> {
        let mut sends = Vec::new();
        {
            let mut state = lock(&self.state);
            for (subtask, splits) in &assignment {
                self.check_subtask(*subtask)?;
                if !state.readers.contains_key(subtask) {
                    return Err(SourceError::UnregisteredReader {
                        subtask: *subtask,
                        splits: split_ids(splits),
                    });
                }
            }
            for (subtask, splits) in assignment {
                if splits.is_empty() {
                    continue;
                }
                let attempt = state.readers[&subtask].attempt;
                let event = encode_event(&EnumeratorEvent::AddSplits(splits.clone()))
                    .map_err(|e| SourceError::codec("a split assignment", e))?;
                state.tracker.record_assignment(subtask, splits);
                sends.push((subtask, attempt, event));
            }
        }
        for (subtask, attempt, event) in sends {
            // A lost event is the valve's business: it fails the attempt over.
            drop(
                self.base
                    .send_event_to_operator_attempt(subtask, attempt, event),
            );
        }
        Ok(())
    }

    /// Tells the reader of `subtask` that no more splits will come.
    pub fn signal_no_more_splits(&self, subtask: SubtaskIndex) -> Result<(), SourceError> {
        let me = self.clone();
        self.on_coordinator_thread(
            move || {
                me.check_subtask(subtask)?;
                let attempt = {
                    let mut state = lock(&me.state);
                    let Some(reader) = state.readers.get(&subtask).copied() else {
                        return Err(SourceError::UnregisteredReader {
                            subtask,
                            splits: "(no more splits)".into(),
                        });
                    };
                    state.no_more_splits.insert(subtask);
                    reader.attempt
                };
                let event = encode_event(&EnumeratorEvent::<E::Split>::NoMoreSplits)
                    .map_err(|e| SourceError::codec("a no-more-splits event", e))?;
                drop(
                    me.base
                        .send_event_to_operator_attempt(subtask, attempt, event),
                );
                Ok(())
            },
            "cannot signal no more splits",
        )
    }

    /// Sends a custom event to the reader of `subtask`.
    pub fn send_event_to_source_reader(
        &self,
        subtask: SubtaskIndex,
        event: Vec<u8>,
    ) -> Result<(), SourceError> {
        self.check_subtask(subtask)?;
        let event = encode_event(&EnumeratorEvent::<E::Split>::Source(event))
            .map_err(|e| SourceError::codec("a source event", e))?;
        drop(self.base.send_event_to_operator(subtask, event));
        Ok(())
    }

    /// Runs `callable` on the base's worker pool and then `handler` with the enumerator and the
    /// result on the coordinator thread (Flink's `callAsync`). A failing `callable` or `handler`
    /// fails the job with its cause.
    pub fn call_async<T, C, H>(&self, callable: C, handler: H) -> Result<(), SourceError>
    where
        T: Send + 'static,
        C: FnOnce() -> Result<T, UserError> + Send + 'static,
        H: FnOnce(&mut E, &Self, T) -> Result<(), UserError> + Send + 'static,
    {
        let me = self.clone();
        Ok(self
            .base
            .call_async(callable, move |result| me.with_enumerator(result, handler))?)
    }

    /// Like [`call_async`](Self::call_async), after `initial_delay` and then every `period`
    /// (periodic split discovery).
    pub fn call_async_periodic<T, C, H>(
        &self,
        callable: C,
        handler: H,
        initial_delay: Duration,
        period: Duration,
    ) -> Result<PeriodicCall, SourceError>
    where
        T: Send + 'static,
        C: FnMut() -> Result<T, UserError> + Send + 'static,
        H: FnMut(&mut E, &Self, T) -> Result<(), UserError> + Send + 'static,
    {
        let me = self.clone();
        let mut handler = handler;
        Ok(self.base.call_async_periodic(
            callable,
            move |result| me.with_enumerator(result, &mut handler),
            initial_delay,
            period,
        )?)
    }

    /// On the coordinator thread: hands `result` to `handler` with the enumerator.
    fn with_enumerator<T>(
        &self,
        result: Result<T, UserError>,
        handler: impl FnOnce(&mut E, &Self, T) -> Result<(), UserError>,
    ) -> Result<(), UserError> {
        let value =
            result.map_err(|e| format!("an asynchronous call of the enumerator failed: {e}"))?;
        match self.lock_enumerator()?.as_mut() {
            Some(enumerator) => handler(enumerator, self, value),
            None => Ok(()), // the enumerator was never created: its creation already failed the job
        }
    }

    fn on_coordinator_thread(
        &self,
        f: impl FnOnce() -> Result<(), SourceError> + Send + 'static,
        message: &'static str,
    ) -> Result<(), SourceError> {
        if self.base.is_coordinator_thread() {
            return f();
        }
        self.base
            .call_in_coordinator_thread(move || f().map_err(UserError::from), message)?;
        Ok(())
    }

    fn check_subtask(&self, subtask: SubtaskIndex) -> Result<(), SourceError> {
        let parallelism = self.base.parallelism();
        if subtask >= parallelism {
            return Err(SourceError::NoSuchSubtask {
                subtask,
                parallelism,
            });
        }
        Ok(())
    }

    // ----- the coordinator's side (called on the coordinator thread) -------------------------

    /// The enumerator (`None` until the coordinator created it), shared with `call_async`
    /// handlers; a panic in an earlier enumerator call poisoned it.
    pub(crate) fn lock_enumerator(&self) -> Result<MutexGuard<'_, Option<E>>, UserError> {
        self.enumerator
            .lock()
            .map_err(|_| "the split enumerator panicked in an earlier call".into())
    }

    /// Registers the reader of `attempt` of `subtask`.
    pub(crate) fn register_reader(
        &self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
    ) -> Result<(), SourceError> {
        self.check_subtask(subtask)?;
        let mut state = lock(&self.state);
        if state
            .readers
            .get(&subtask)
            .is_some_and(|r| r.attempt == attempt)
        {
            return Err(SourceError::DuplicateReader { subtask, attempt });
        }
        state
            .readers
            .insert(subtask, ReaderInfo { subtask, attempt });
        Ok(())
    }

    /// Forgets the reader of `attempt` of `subtask` (the attempt failed).
    pub(crate) fn unregister_reader(&self, subtask: SubtaskIndex, attempt: AttemptNumber) {
        let mut state = lock(&self.state);
        if state
            .readers
            .get(&subtask)
            .is_some_and(|r| r.attempt == attempt)
        {
            state.readers.remove(&subtask);
        }
    }

    /// `subtask` is reset (its gateways are already gone, the base coordinator saw to that):
    /// its reader and its no-more-splits flag are forgotten, and the splits assigned to it after
    /// `checkpoint` are returned for the enumerator to take back.
    pub(crate) fn subtask_reset(
        &self,
        subtask: SubtaskIndex,
        checkpoint: CheckpointId,
    ) -> Vec<E::Split> {
        let mut state = lock(&self.state);
        state.readers.remove(&subtask);
        state.no_more_splits.remove(&subtask);
        state.tracker.take_uncheckpointed(subtask, checkpoint)
    }

    /// Whether `subtask` was told no more splits will come.
    pub(crate) fn has_no_more_splits(&self, subtask: SubtaskIndex) -> bool {
        lock(&self.state).no_more_splits.contains(&subtask)
    }

    pub(crate) fn on_checkpoint(&self, checkpoint: CheckpointId) {
        lock(&self.state).tracker.on_checkpoint(checkpoint);
    }

    pub(crate) fn on_checkpoint_complete(&self, checkpoint: CheckpointId) {
        lock(&self.state).tracker.on_checkpoint_complete(checkpoint);
    }

    /// How many assigned splits the tracker holds.
    pub fn tracked_assignments(&self) -> usize {
        lock(&self.state).tracker.len()
    }
}

fn split_ids<S: SourceSplit>(splits: &[S]) -> String {
    let ids: Vec<String> = splits.iter().map(|s| s.split_id().to_string()).collect();
    format!("[{}]", ids.join(", "))
}
