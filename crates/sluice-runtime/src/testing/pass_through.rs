//! [`PassThrough`]: a pass-through operator that signals what happens to it, for tests that
//! need to watch a running job (records seen, snapshots, completed checkpoints, end of input).

use crate::operator::{Collector, Operator, OperatorContext};
use crate::state::OperatorState;
use sluice_core::{CheckpointId, Data, UserError};
use std::sync::Arc;

/// A hook of a [`PassThrough`]: the subtask's context and what happened.
type Hook<A> = Arc<dyn Fn(&OperatorContext, A) -> Result<(), UserError> + Send + Sync>;

/// What a [`PassThrough`] hook returns: nothing, or a `Result` whose error fails the subtask
/// (as the operator's own error would), e.g. that of `OperatorContext::send_to_coordinator`.
pub trait HookResult {
    /// The hook's outcome as a `Result`.
    fn into_result(self) -> Result<(), UserError>;
}

impl HookResult for () {
    fn into_result(self) -> Result<(), UserError> {
        Ok(())
    }
}

impl HookResult for Result<(), UserError> {
    fn into_result(self) -> Result<(), UserError> {
        self
    }
}

/// `hook` as a [`Hook`].
fn hook<A, R: HookResult>(
    hook: impl Fn(&OperatorContext, A) -> R + Send + Sync + 'static,
) -> Option<Hook<A>> {
    Some(Arc::new(move |ctx: &OperatorContext, arg: A| {
        hook(ctx, arg).into_result()
    }))
}

/// Passes every record and watermark through unchanged and calls its hooks: on every batch (with
/// the number of records), at every snapshot, at every completed checkpoint and at end of input.
/// Clones share the hooks, so one instance given to the API signals for every subtask. A hook
/// returns nothing or a [`HookResult`] `Result`, whose error fails the subtask: a hook can send
/// events to the operator's coordinator, e.g.
/// `PassThrough::new().on_end_input(|ctx| ctx.send_to_coordinator(&ctx.subtask_index()))`.
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::testing::PassThrough;
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// let seen = Arc::new(AtomicU64::new(0));
/// let counter = seen.clone();
/// let env = StreamEnvironment::new();
/// env.set_parallelism(2);
/// let watch = PassThrough::new().on_batch(move |_ctx, n| {
///     counter.fetch_add(n as u64, Ordering::SeqCst);
/// });
/// let out = env.from_iter(0u64..100).process(watch).collect();
/// env.execute_blocking("watched").unwrap();
/// assert_eq!(seen.load(Ordering::SeqCst), 100);
/// assert_eq!(out.len(), 100);
/// ```
pub struct PassThrough {
    ctx: Option<OperatorContext>,
    on_batch: Option<Hook<usize>>,
    on_snapshot: Option<Hook<CheckpointId>>,
    on_complete: Option<Hook<CheckpointId>>,
    on_end: Option<Hook<()>>,
}

impl Clone for PassThrough {
    fn clone(&self) -> Self {
        PassThrough {
            ctx: None,
            on_batch: self.on_batch.clone(),
            on_snapshot: self.on_snapshot.clone(),
            on_complete: self.on_complete.clone(),
            on_end: self.on_end.clone(),
        }
    }
}

impl std::fmt::Debug for PassThrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassThrough")
            .field("on_batch", &self.on_batch.is_some())
            .field("on_snapshot", &self.on_snapshot.is_some())
            .field("on_complete", &self.on_complete.is_some())
            .field("on_end_input", &self.on_end.is_some())
            .finish()
    }
}

impl Default for PassThrough {
    fn default() -> Self {
        Self::new()
    }
}

impl PassThrough {
    /// A pass-through without hooks.
    pub fn new() -> Self {
        PassThrough {
            ctx: None,
            on_batch: None,
            on_snapshot: None,
            on_complete: None,
            on_end: None,
        }
    }

    /// Calls `hook` after passing on each batch, with its number of records.
    pub fn on_batch<R: HookResult>(
        mut self,
        hook: impl Fn(&OperatorContext, usize) -> R + Send + Sync + 'static,
    ) -> Self {
        self.on_batch = self::hook(hook);
        self
    }

    /// Calls `hook` at each snapshot (the barrier reached this subtask).
    pub fn on_snapshot<R: HookResult>(
        mut self,
        hook: impl Fn(&OperatorContext, CheckpointId) -> R + Send + Sync + 'static,
    ) -> Self {
        self.on_snapshot = self::hook(hook);
        self
    }

    /// Calls `hook` when a checkpoint completed.
    pub fn on_checkpoint_complete<R: HookResult>(
        mut self,
        hook: impl Fn(&OperatorContext, CheckpointId) -> R + Send + Sync + 'static,
    ) -> Self {
        self.on_complete = self::hook(hook);
        self
    }

    /// Calls `hook` at end of input, after the last batch.
    pub fn on_end_input<R: HookResult>(
        mut self,
        hook: impl Fn(&OperatorContext) -> R + Send + Sync + 'static,
    ) -> Self {
        self.on_end = self::hook(move |ctx, ()| hook(ctx));
        self
    }

    fn call<A>(&self, hook: &Option<Hook<A>>, arg: A) -> Result<(), UserError> {
        if let Some(hook) = hook {
            let ctx = self.ctx.as_ref().ok_or("PassThrough used before open")?;
            hook(ctx, arg)?;
        }
        Ok(())
    }
}

impl<T: Data> Operator<T> for PassThrough {
    type Out = T;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.ctx = Some(ctx.clone());
        Ok(())
    }

    fn process_batch(&mut self, batch: Vec<T>, out: &mut Collector<T>) -> Result<(), UserError> {
        let n = batch.len();
        out.forward_batch(batch);
        self.call(&self.on_batch, n)
    }

    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        _out: &mut Collector<T>,
    ) -> Result<OperatorState, UserError> {
        self.call(&self.on_snapshot, checkpoint)?;
        Ok(OperatorState::default())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        self.call(&self.on_complete, checkpoint)
    }

    fn end_input(&mut self, _out: &mut Collector<T>) -> Result<(), UserError> {
        self.call(&self.on_end, ())
    }
}
