//! The source coordinator: [`SourceLogic`], the split source's [`CoordinatorLogic`], run by the
//! coordinator crate's [`BaseCoordinator`] (so the thread, gateways, event loop, failure and
//! lifecycle are the base's, not the source's), with its [`SourceCoordinatorContext`] and the
//! [`SplitAssignmentTracker`].
//!
//! - `context.rs`: the reader registry, assignment, no-more-splits, `call_async` with the
//!   enumerator;
//! - `tracker.rs`: assignments per checkpoint, for subtask resets.

mod context;
mod tracker;

pub use context::{ReaderInfo, SourceCoordinatorContext, SplitEnumeratorContext};
pub use tracker::SplitAssignmentTracker;

use crate::api::{Source, SplitEnumerator};
use crate::event::ReaderEvent;
use sluice_coordinator::{
    BaseCoordinator, CoordinatorContextBase, CoordinatorLogic, CoordinatorProvider, decode_event,
};
use sluice_core::codec;
use sluice_core::{AttemptNumber, CheckpointId, OperatorEvent, SubtaskIndex, UserError};
use std::sync::Arc;

/// The coordinator of a split source: a [`BaseCoordinator`] running [`SourceLogic`].
pub type SourceCoordinator<Src> = BaseCoordinator<SourceLogic<Src>>;

/// A provider of the coordinator of `source`, for the job master (one per job, and a fresh one
/// on each global failover, restored from the checkpoint).
pub fn source_coordinator_provider<Src: Source>(
    source: Arc<Src>,
) -> impl CoordinatorProvider + 'static {
    SourceCoordinator::<Src>::provider(move || SourceLogic::new(source.clone()))
}

/// What a split source's coordinator does (Flink's `SourceCoordinator`), on the coordinator
/// thread:
///
/// - `start` creates the enumerator (or restores it from the checkpoint given to `restore`) and
///   starts it; a failure fails the job with its cause;
/// - a reader's registration registers it and calls `add_reader`; a split request calls
///   `handle_split_request` unless the subtask was told no more splits will come; custom events
///   go to `handle_source_event`;
/// - a checkpoint files the assignments made so far under it and stores the enumerator's
///   checkpoint (not the registered readers); its completion drops older assignments;
/// - a failed attempt's reader is forgotten; a subtask reset to checkpoint `c` forgets its
///   reader and gives the splits assigned to it after `c` back through `add_splits_back`.
pub struct SourceLogic<Src: Source> {
    source: Arc<Src>,
    context: Option<SourceCoordinatorContext<Src::Enumerator>>,
    restored: Option<Vec<u8>>,
}

impl<Src: Source> SourceLogic<Src> {
    /// The logic of `source`'s coordinator.
    pub fn new(source: Arc<Src>) -> Self {
        SourceLogic {
            source,
            context: None,
            restored: None,
        }
    }

    fn context(
        &mut self,
        base: &CoordinatorContextBase,
    ) -> SourceCoordinatorContext<Src::Enumerator> {
        self.context
            .get_or_insert_with(|| SourceCoordinatorContext::new(base.clone()))
            .clone()
    }

    /// Runs `f` with the enumerator, if it exists (its creation may have failed the job).
    fn with_enumerator(
        &mut self,
        base: &CoordinatorContextBase,
        f: impl FnOnce(
            &mut Src::Enumerator,
            &SourceCoordinatorContext<Src::Enumerator>,
        ) -> Result<(), UserError>,
    ) -> Result<(), UserError> {
        let ctx = self.context(base);
        match ctx.lock_enumerator()?.as_mut() {
            Some(e) => f(e, &ctx),
            None => Ok(()),
        }
    }
}

impl<Src: Source> CoordinatorLogic for SourceLogic<Src> {
    fn start(&mut self, base: &CoordinatorContextBase) -> Result<(), UserError> {
        let ctx = self.context(base);
        let enumerator = match self.restored.take() {
            Some(bytes) => {
                let checkpoint = codec::decode(&bytes)
                    .map_err(|e| format!("cannot decode the enumerator's checkpoint: {e}"))?;
                self.source.restore_enumerator(&ctx, checkpoint)?
            }
            None => self.source.create_enumerator(&ctx)?,
        };
        let mut slot = ctx.lock_enumerator()?;
        let enumerator = slot.insert(enumerator);
        enumerator
            .start(&ctx)
            .map_err(|e| format!("the split enumerator failed to start: {e}").into())
    }

    fn handle_event(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        event: OperatorEvent,
    ) -> Result<(), UserError> {
        let event: ReaderEvent = decode_event(&event)
            .map_err(|e| format!("unrecognised operator event from subtask {subtask}: {e}"))?;
        let ctx = self.context(base);
        match event {
            ReaderEvent::Register => {
                ctx.register_reader(subtask, attempt)?;
                self.with_enumerator(base, |e, c| e.add_reader(c, subtask))
            }
            ReaderEvent::RequestSplit if ctx.has_no_more_splits(subtask) => Ok(()),
            ReaderEvent::RequestSplit => {
                self.with_enumerator(base, |e, c| e.handle_split_request(c, subtask))
            }
            ReaderEvent::Source(bytes) => {
                self.with_enumerator(base, |e, c| e.handle_source_event(c, subtask, bytes))
            }
        }
    }

    fn checkpoint(
        &mut self,
        base: &CoordinatorContextBase,
        checkpoint: CheckpointId,
    ) -> Result<Vec<u8>, UserError> {
        let ctx = self.context(base);
        ctx.on_checkpoint(checkpoint);
        let mut slot = ctx.lock_enumerator()?;
        let enumerator = slot
            .as_mut()
            .ok_or("the split enumerator was never created")?;
        let state = enumerator.snapshot_state(checkpoint).map_err(|e| {
            format!(
                "failed to checkpoint the split enumerator of '{}': {e}",
                base.operator_name()
            )
        })?;
        Ok(codec::encode(&state)?)
    }

    fn checkpoint_complete(
        &mut self,
        base: &CoordinatorContextBase,
        checkpoint: CheckpointId,
    ) -> Result<(), UserError> {
        self.context(base).on_checkpoint_complete(checkpoint);
        self.with_enumerator(base, |e, _| e.notify_checkpoint_complete(checkpoint))
    }

    fn restore(&mut self, checkpoint: CheckpointId, state: Option<&[u8]>) -> Result<(), UserError> {
        if self.context.as_ref().is_some_and(|c| c.base().is_started()) {
            return Err(format!(
                "the source coordinator can only be reset to checkpoint {checkpoint} before it starts"
            )
            .into());
        }
        self.restored = state.map(<[u8]>::to_vec);
        Ok(())
    }

    fn subtask_reset(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: SubtaskIndex,
        checkpoint: CheckpointId,
    ) -> Result<(), UserError> {
        let splits = self.context(base).subtask_reset(subtask, checkpoint);
        if splits.is_empty() {
            return Ok(());
        }
        self.with_enumerator(base, |e, c| e.add_splits_back(c, splits, subtask))
    }

    fn attempt_failed(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
    ) -> Result<(), UserError> {
        self.context(base).unregister_reader(subtask, attempt);
        Ok(())
    }

    fn close(&mut self, base: &CoordinatorContextBase) -> Result<(), UserError> {
        self.with_enumerator(base, |e, _| e.close())
    }
}

#[cfg(test)]
mod tests;
