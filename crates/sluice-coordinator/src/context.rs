//! [`CoordinatorContext`]: what the job master tells a coordinator when it creates it (operator
//! name, id, parallelism) and the hook through which the coordinator fails the job.

use crate::error::CoordinatorFailure;
use sluice_core::{CheckpointId, NodeId, UserError};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The checkpoint id passed to `reset_to_checkpoint` when no checkpoint was completed yet.
///
/// Checkpoint ids start at 1, so 0 never names a real checkpoint.
///
/// ```
/// assert_eq!(sluice_coordinator::NO_CHECKPOINT, sluice_core::CheckpointId(0));
/// ```
pub const NO_CHECKPOINT: CheckpointId = CheckpointId(0);

/// Where a coordinator's failures go: the job master's global failure handler.
///
/// The hook must return quickly and must not block (it may be called on the coordinator
/// thread, a worker thread or a tokio worker).
///
/// ```
/// use sluice_coordinator::JobFailureHook;
/// use std::sync::{Arc, Mutex};
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = seen.clone();
/// let hook = JobFailureHook::new(move |f| sink.lock().unwrap().push(f.to_string()));
/// hook.fail(sluice_coordinator::CoordinatorFailure::new("op", sluice_core::NodeId(1), "x".into()));
/// assert_eq!(seen.lock().unwrap().len(), 1);
/// ```
#[derive(Clone)]
pub struct JobFailureHook(Arc<dyn Fn(CoordinatorFailure) + Send + Sync>);

impl JobFailureHook {
    /// A hook calling `f` with each failure.
    pub fn new(f: impl Fn(CoordinatorFailure) + Send + Sync + 'static) -> Self {
        JobFailureHook(Arc::new(f))
    }

    /// Reports `failure`.
    pub fn fail(&self, failure: CoordinatorFailure) {
        (self.0)(failure)
    }
}

impl fmt::Debug for JobFailureHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobFailureHook")
    }
}

struct Inner {
    operator_name: String,
    operator_id: NodeId,
    parallelism: usize,
    hook: JobFailureHook,
}

/// What a coordinator knows about its operator, and its way to fail the job.
///
/// Cheap to clone. A context can be *quiesced*: afterwards `fail_job` is ignored, so that a
/// coordinator being replaced (see [`RecreateOnResetCoordinator`](crate::RecreateOnResetCoordinator))
/// cannot fail the job. [`quiesceable`](Self::quiesceable) makes a child context that can be
/// quiesced on its own; quiescing a parent quiesces its children too.
///
/// ```
/// use sluice_coordinator::{CoordinatorContext, JobFailureHook};
/// use sluice_core::NodeId;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
///
/// let failures = Arc::new(AtomicUsize::new(0));
/// let f = failures.clone();
/// let hook = JobFailureHook::new(move |_| { f.fetch_add(1, Ordering::SeqCst); });
/// let ctx = CoordinatorContext::new("enumerator", NodeId(3), 4, hook);
/// assert_eq!(ctx.parallelism(), 4);
///
/// let child = ctx.quiesceable();
/// assert!(child.fail_job("boom".into()));
/// child.quiesce();
/// assert!(!child.fail_job("ignored".into()));
/// assert_eq!(failures.load(Ordering::SeqCst), 1);
/// ```
#[derive(Clone)]
pub struct CoordinatorContext {
    inner: Arc<Inner>,
    /// This context's quiesce flag last, its ancestors' before it.
    quiesced: Arc<Vec<Arc<AtomicBool>>>,
}

impl CoordinatorContext {
    /// The context of the coordinator of operator `operator_name` (`operator_id`) running with
    /// `parallelism` subtasks; failures go to `hook`.
    pub fn new(
        operator_name: impl Into<String>,
        operator_id: NodeId,
        parallelism: usize,
        hook: JobFailureHook,
    ) -> Self {
        CoordinatorContext {
            inner: Arc::new(Inner {
                operator_name: operator_name.into(),
                operator_id,
                parallelism,
                hook,
            }),
            quiesced: Arc::new(vec![Arc::new(AtomicBool::new(false))]),
        }
    }

    /// The operator's name.
    pub fn operator_name(&self) -> &str {
        &self.inner.operator_name
    }

    /// The operator's id in the job graph.
    pub fn operator_id(&self) -> NodeId {
        self.inner.operator_id
    }

    /// How many subtasks the operator runs as.
    pub fn parallelism(&self) -> usize {
        self.inner.parallelism
    }

    /// Fails the job with `cause`, unless this context is quiesced. Returns whether the
    /// failure was passed on.
    pub fn fail_job(&self, cause: UserError) -> bool {
        if self.is_quiesced() {
            tracing::debug!(
                operator = %self.inner.operator_name,
                cause = %cause,
                "ignoring a job failure from a quiesced coordinator"
            );
            return false;
        }
        let failure = CoordinatorFailure::new(
            self.inner.operator_name.clone(),
            self.inner.operator_id,
            cause,
        );
        tracing::error!(error = %failure, "operator coordinator fails the job");
        self.inner.hook.fail(failure);
        true
    }

    /// A child context for one coordinator instance, which can be quiesced on its own.
    pub fn quiesceable(&self) -> CoordinatorContext {
        let mut flags: Vec<Arc<AtomicBool>> = self.quiesced.as_ref().clone();
        flags.push(Arc::new(AtomicBool::new(false)));
        CoordinatorContext {
            inner: self.inner.clone(),
            quiesced: Arc::new(flags),
        }
    }

    /// From now on, `fail_job` on this context (and its children) is ignored.
    pub fn quiesce(&self) {
        if let Some(own) = self.quiesced.last() {
            own.store(true, Ordering::SeqCst);
        }
    }

    /// Whether this context (or an ancestor) was quiesced.
    pub fn is_quiesced(&self) -> bool {
        self.quiesced.iter().any(|f| f.load(Ordering::SeqCst))
    }
}

impl fmt::Debug for CoordinatorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoordinatorContext")
            .field("operator_name", &self.inner.operator_name)
            .field("operator_id", &self.inner.operator_id)
            .field("parallelism", &self.inner.parallelism)
            .field("quiesced", &self.is_quiesced())
            .finish()
    }
}
