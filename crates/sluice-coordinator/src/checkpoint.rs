//! [`CheckpointResult`]: how a coordinator completes (with its state) or declines its part of a
//! checkpoint, and the [`CheckpointFuture`] the job master waits on (Flink's
//! `CompletableFuture<byte[]>`).

use sluice_core::CheckpointId;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::oneshot;

/// A coordinator declined its part of a checkpoint; the checkpoint is aborted.
///
/// ```
/// use sluice_coordinator::CheckpointDeclined;
/// use sluice_core::CheckpointId;
/// let d = CheckpointDeclined { checkpoint_id: CheckpointId(7), reason: "busy".into() };
/// assert_eq!(d.to_string(), "coordinator checkpoint 7 declined: busy");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("coordinator checkpoint {checkpoint_id} declined: {reason}")]
pub struct CheckpointDeclined {
    /// The checkpoint.
    pub checkpoint_id: CheckpointId,
    /// Why.
    pub reason: String,
}

/// The outcome of a coordinator checkpoint: the coordinator's state, or a decline.
pub type CheckpointOutcome = Result<Vec<u8>, CheckpointDeclined>;

type CompletionHook = Box<dyn FnOnce(CheckpointId, &CheckpointOutcome) + Send>;

/// The completer handed to [`OperatorCoordinator::checkpoint_coordinator`]: complete it with the
/// coordinator's state, or decline.
///
/// The checkpoint *takes place* at the moment `complete` is called: events the coordinator sent
/// before belong to the checkpoint, events sent after belong to the next one. A coordinator
/// must therefore order its sends and the completion on one thread (its coordinator thread).
/// Dropping the result without completing it declines the checkpoint, so a checkpoint can never
/// hang on a forgotten result.
///
/// The job master may attach a hook ([`with_completion_hook`](Self::with_completion_hook)) that
/// runs synchronously on the completing thread before the waiter is woken; the event valve uses
/// it to close the gateways at exactly that point.
///
/// ```
/// use sluice_coordinator::CheckpointResult;
/// use sluice_core::CheckpointId;
///
/// let (result, future) = CheckpointResult::new(CheckpointId(1));
/// result.complete(vec![1, 2, 3]);
/// assert_eq!(futures::executor::block_on(future), Ok(vec![1, 2, 3]));
///
/// let (result, future) = CheckpointResult::new(CheckpointId(2));
/// drop(result);
/// assert!(futures::executor::block_on(future).is_err());
/// ```
///
/// [`OperatorCoordinator::checkpoint_coordinator`]: crate::OperatorCoordinator::checkpoint_coordinator
pub struct CheckpointResult {
    checkpoint_id: CheckpointId,
    tx: Option<oneshot::Sender<CheckpointOutcome>>,
    hooks: Vec<CompletionHook>,
}

impl CheckpointResult {
    /// A result for `checkpoint_id` and the future that resolves when it is completed.
    pub fn new(checkpoint_id: CheckpointId) -> (CheckpointResult, CheckpointFuture) {
        let (tx, rx) = oneshot::channel();
        (
            CheckpointResult {
                checkpoint_id,
                tx: Some(tx),
                hooks: Vec::new(),
            },
            CheckpointFuture { checkpoint_id, rx },
        )
    }

    /// Adds `hook`, run synchronously by whoever completes or declines the result, before the
    /// waiting future sees the outcome. Hooks run in the order they were added.
    pub fn with_completion_hook(
        mut self,
        hook: impl FnOnce(CheckpointId, &CheckpointOutcome) + Send + 'static,
    ) -> Self {
        self.hooks.push(Box::new(hook));
        self
    }

    /// The checkpoint this result belongs to.
    pub fn checkpoint_id(&self) -> CheckpointId {
        self.checkpoint_id
    }

    /// Completes the checkpoint with the coordinator's `state`.
    pub fn complete(mut self, state: Vec<u8>) {
        self.finish(Ok(state));
    }

    /// Declines the checkpoint.
    pub fn decline(mut self, reason: impl Into<String>) {
        let declined = CheckpointDeclined {
            checkpoint_id: self.checkpoint_id,
            reason: reason.into(),
        };
        self.finish(Err(declined));
    }

    fn finish(&mut self, outcome: CheckpointOutcome) {
        let Some(tx) = self.tx.take() else { return };
        for hook in self.hooks.drain(..) {
            hook(self.checkpoint_id, &outcome);
        }
        // The waiter may have given up; nothing to do then.
        let _ = tx.send(outcome);
    }
}

impl Drop for CheckpointResult {
    fn drop(&mut self) {
        if self.tx.is_some() {
            let declined = CheckpointDeclined {
                checkpoint_id: self.checkpoint_id,
                reason: "the coordinator dropped its checkpoint result without completing it"
                    .into(),
            };
            self.finish(Err(declined));
        }
    }
}

impl fmt::Debug for CheckpointResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointResult")
            .field("checkpoint_id", &self.checkpoint_id)
            .field("completed", &self.tx.is_none())
            .finish()
    }
}

/// Resolves with the coordinator's state once its [`CheckpointResult`] is completed.
///
/// ```
/// use sluice_coordinator::CheckpointResult;
/// use sluice_core::CheckpointId;
/// let (result, future) = CheckpointResult::new(CheckpointId(3));
/// assert_eq!(future.checkpoint_id(), CheckpointId(3));
/// result.decline("not now");
/// assert_eq!(futures::executor::block_on(future).unwrap_err().reason, "not now");
/// ```
#[derive(Debug)]
pub struct CheckpointFuture {
    checkpoint_id: CheckpointId,
    rx: oneshot::Receiver<CheckpointOutcome>,
}

impl CheckpointFuture {
    /// The checkpoint this future belongs to.
    pub fn checkpoint_id(&self) -> CheckpointId {
        self.checkpoint_id
    }
}

impl Future for CheckpointFuture {
    type Output = CheckpointOutcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let id = self.checkpoint_id;
        Pin::new(&mut self.rx).poll(cx).map(|r| {
            r.unwrap_or_else(|_| {
                Err(CheckpointDeclined {
                    checkpoint_id: id,
                    reason: "the checkpoint result was dropped".into(),
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn hooks_run_before_the_waiter_sees_the_outcome_and_only_once() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let l1 = log.clone();
        let l2 = log.clone();
        let (result, mut future) = CheckpointResult::new(CheckpointId(5));
        let result = result
            .with_completion_hook(move |id, o| l1.lock().unwrap().push((1, id, o.is_ok())))
            .with_completion_hook(move |id, o| l2.lock().unwrap().push((2, id, o.is_ok())));
        assert!(future.rx.try_recv().is_err());
        result.complete(vec![9]);
        assert_eq!(
            *log.lock().unwrap(),
            vec![(1, CheckpointId(5), true), (2, CheckpointId(5), true)]
        );
        assert_eq!(future.rx.try_recv().unwrap(), Ok(vec![9]));
    }

    #[test]
    fn dropping_an_uncompleted_result_declines_and_runs_hooks() {
        let seen = Arc::new(Mutex::new(None));
        let s = seen.clone();
        let (result, future) = CheckpointResult::new(CheckpointId(2));
        let result = result.with_completion_hook(move |_, o| *s.lock().unwrap() = Some(o.clone()));
        drop(result);
        let outcome = futures::executor::block_on(future);
        assert!(outcome.is_err());
        assert_eq!(*seen.lock().unwrap(), Some(outcome));
    }
}
