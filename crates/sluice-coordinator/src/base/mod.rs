//! [`CoordinatorContextBase`]: the reusable part of every coordinator. It owns the coordinator
//! thread, the subtask gateways and the job-failure hook; coordinators hold one and add their
//! own methods (composition, not inheritance).
//!
//! - `mod.rs`: calls into the coordinator thread, the event loop, sends, readiness, failure;
//! - [`workers`]: the worker pool behind `call_async` (once and periodic).

mod workers;

pub use workers::PeriodicCall;

use crate::context::CoordinatorContext;
use crate::error::{
    CallError, CallFailure, CoordinatorError, GatewayError, SendError, SubmitError,
};
use crate::executor::{CoordinatorExecutor, CoordinatorTask, DEFAULT_QUEUE_CAPACITY};
use crate::gateway::{AckFuture, SubtaskGateway, SubtaskGateways};
use crate::thread_factory::CoordinatorExecutorThreadFactory;
use crate::util::{in_tokio_runtime, lock};
use sluice_core::{AttemptNumber, OperatorEvent, SubtaskIndex, UserError, panic_message};
use std::borrow::Cow;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use workers::WorkerPool;

/// Sizes of the queues and pools of a [`CoordinatorContextBase`].
///
/// ```
/// let options = sluice_coordinator::BaseOptions { worker_threads: 2, ..Default::default() };
/// assert_eq!(options.queue_capacity, 1024);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseOptions {
    /// Tasks the coordinator thread's queue holds.
    pub queue_capacity: usize,
    /// Threads of the worker pool behind `call_async` (started on first use).
    pub worker_threads: usize,
    /// Tasks the worker pool's queue holds.
    pub worker_queue_capacity: usize,
}

impl Default for BaseOptions {
    fn default() -> Self {
        BaseOptions {
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            worker_threads: 1,
            worker_queue_capacity: DEFAULT_QUEUE_CAPACITY,
        }
    }
}

/// Fails the job at most once until reset, and never after close.
pub(crate) struct FailOnce {
    context: CoordinatorContext,
    failed: AtomicBool,
    closed: AtomicBool,
}

impl FailOnce {
    pub(crate) fn fail(&self, cause: UserError) -> bool {
        if self.closed.load(Ordering::SeqCst) {
            tracing::debug!(cause = %cause, "ignoring a failure of a closed coordinator");
            return false;
        }
        if self.failed.swap(true, Ordering::SeqCst) {
            tracing::debug!(cause = %cause, "ignoring a failure: the job is already failing");
            return false;
        }
        self.context.fail_job(cause)
    }
}

struct Inner {
    failure: Arc<FailOnce>,
    executor: CoordinatorExecutor,
    gateways: Mutex<SubtaskGateways>,
    started: AtomicBool,
    workers: WorkerPool,
}

impl Inner {
    fn action_failed(&self, action_name: Option<&str>, failure: CallFailure) {
        let what = match action_name {
            Some(name) => format!("failed to execute '{name}'"),
            None => format!(
                "uncaught failure in thread '{}'",
                self.executor.thread_factory().thread_name()
            ),
        };
        let message = match failure {
            CallFailure::Failed(e) => format!("{what}: {e}"),
            other => format!("{what}: {other}"),
        };
        self.failure.fail(message.into());
    }
}

/// The coordinator context base: coordinator thread, subtask gateways and job-failure hook.
///
/// Cheap to clone (all clones share one thread). Coordinator code runs on the coordinator
/// thread, so it needs no locks of its own beyond what it shares with other threads. Every
/// blocking form has an async twin for callers on tokio tasks, so no tokio worker ever waits.
/// Call [`close`](Self::close) when the coordinator closes: it stops the thread and the workers.
///
/// ```
/// use sluice_coordinator::gateway::memory::InMemoryTransport;
/// use sluice_coordinator::{CoordinatorContext, CoordinatorContextBase, JobFailureHook};
/// use sluice_core::{NodeId, OperatorEvent};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let context = CoordinatorContext::new("stats", NodeId(1), 2, JobFailureHook::new(|_| {}));
/// let base = CoordinatorContextBase::new(context).unwrap();
///
/// // The job master reports subtask 0 ready; the coordinator sends it an event.
/// let transport = InMemoryTransport::new(8);
/// let mut inbox = transport.start_attempt(0, 0);
/// base.subtask_ready(transport.gateway(0, 0)).unwrap();
/// let ack = base.send_event_to_operator_async(0, OperatorEvent::new(vec![1])).await;
/// assert_eq!(inbox.recv().await.unwrap().ack().payload(), &[1]);
/// assert_eq!(ack.await, Ok(()));
///
/// // Subtask 1 is not ready: the error names it.
/// let err = base.send_event_to_operator_async(1, OperatorEvent::new(vec![])).await.await;
/// assert_eq!(err.unwrap_err().to_string(), "subtask 1 is not ready yet to receive events");
///
/// // Work runs on the coordinator thread; results come back to the async caller.
/// let name = base
///     .call_in_coordinator_thread_async(
///         || Ok(std::thread::current().name().map(str::to_string)),
///         "cannot read the thread name",
///     )
///     .await
///     .unwrap();
/// assert_eq!(name.as_deref(), Some("coordinator-stats"));
/// base.close();
/// base.terminated().await;
/// # });
/// ```
#[derive(Clone)]
pub struct CoordinatorContextBase {
    context: CoordinatorContext,
    inner: Arc<Inner>,
}

impl CoordinatorContextBase {
    /// A base for the coordinator described by `context`, with default sizes. Starts the
    /// coordinator thread, named `coordinator-<operator name>`.
    pub fn new(context: CoordinatorContext) -> Result<Self, CoordinatorError> {
        Self::with_options(context, BaseOptions::default())
    }

    /// A base with the given queue and pool sizes.
    pub fn with_options(
        context: CoordinatorContext,
        options: BaseOptions,
    ) -> Result<Self, CoordinatorError> {
        let failure = Arc::new(FailOnce {
            context: context.clone(),
            failed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        let on_panic = failure.clone();
        let factory = Arc::new(CoordinatorExecutorThreadFactory::new(
            context.operator_name(),
            Arc::new(move |cause| {
                on_panic.fail(cause);
            }),
        ));
        let executor = CoordinatorExecutor::start(factory, options.queue_capacity)?;
        let workers = WorkerPool::new(
            format!("coordinator-{}", context.operator_name()),
            options.worker_threads,
            options.worker_queue_capacity,
        );
        Ok(CoordinatorContextBase {
            inner: Arc::new(Inner {
                failure,
                executor,
                gateways: Mutex::new(SubtaskGateways::new(context.parallelism())),
                started: AtomicBool::new(false),
                workers,
            }),
            context,
        })
    }

    /// The context the coordinator was created with.
    pub fn context(&self) -> &CoordinatorContext {
        &self.context
    }

    /// The operator's name.
    pub fn operator_name(&self) -> &str {
        self.context.operator_name()
    }

    /// The operator's parallelism.
    pub fn parallelism(&self) -> usize {
        self.context.parallelism()
    }

    /// The factory that made the coordinator thread.
    pub fn thread_factory(&self) -> &Arc<CoordinatorExecutorThreadFactory> {
        self.inner.executor.thread_factory()
    }

    /// Whether the calling thread is the coordinator thread.
    pub fn is_coordinator_thread(&self) -> bool {
        self.inner.executor.is_coordinator_thread()
    }

    // ----- calls into the coordinator thread -------------------------------------------------

    /// Runs `f` on the coordinator thread and returns its result.
    ///
    /// On the coordinator thread it runs inline (no deadlock). On a plain thread it queues `f`
    /// and blocks until it ran. On a tokio worker it does not block: it fails with
    /// [`CallFailure::WouldBlockRuntime`]; use
    /// [`call_in_coordinator_thread_async`](Self::call_in_coordinator_thread_async) there. Any
    /// failure (an error, a panic, a closed coordinator) carries `error_message`.
    pub fn call_in_coordinator_thread<R, F>(
        &self,
        f: F,
        error_message: impl Into<String>,
    ) -> Result<R, CallError>
    where
        F: FnOnce() -> Result<R, UserError> + Send + 'static,
        R: Send + 'static,
    {
        let message = error_message.into();
        if self.is_coordinator_thread() {
            return call_catching(f).map_err(|e| CallError::new(message, e));
        }
        if in_tokio_runtime() {
            return Err(CallError::new(message, CallFailure::WouldBlockRuntime));
        }
        let (tx, rx) = oneshot::channel();
        let task: CoordinatorTask = Box::new(move || {
            let _ = tx.send(call_catching(f));
        });
        if let Err(e) = self.inner.executor.execute(task) {
            return Err(CallError::new(message, e.into()));
        }
        match rx.blocking_recv() {
            Ok(r) => r.map_err(|e| CallError::new(message, e)),
            Err(_) => Err(CallError::new(message, CallFailure::Dropped)),
        }
    }

    /// Runs `f` on the coordinator thread and waits for its result without blocking a tokio
    /// worker. Failures carry `error_message`.
    pub async fn call_in_coordinator_thread_async<R, F>(
        &self,
        f: F,
        error_message: impl Into<String>,
    ) -> Result<R, CallError>
    where
        F: FnOnce() -> Result<R, UserError> + Send + 'static,
        R: Send + 'static,
    {
        let message = error_message.into();
        if self.is_coordinator_thread() {
            return call_catching(f).map_err(|e| CallError::new(message, e));
        }
        let (tx, rx) = oneshot::channel();
        let task: CoordinatorTask = Box::new(move || {
            let _ = tx.send(call_catching(f));
        });
        if let Err(e) = self.inner.executor.execute_async(task).await {
            return Err(CallError::new(message, e.into()));
        }
        match rx.await {
            Ok(r) => r.map_err(|e| CallError::new(message, e)),
            Err(_) => Err(CallError::new(message, CallFailure::Dropped)),
        }
    }

    /// Runs `f` on the coordinator thread later (fire and forget). If it fails or panics, the
    /// job fails with a message naming the coordinator thread.
    ///
    /// From a tokio worker this fails with [`SubmitError::WouldBlock`] when the queue is full;
    /// use [`run_in_coordinator_thread_async`](Self::run_in_coordinator_thread_async) there.
    pub fn run_in_coordinator_thread<F>(&self, f: F) -> Result<(), SubmitError>
    where
        F: FnOnce() -> Result<(), UserError> + Send + 'static,
    {
        self.inner.executor.execute(self.guarded(f, None))
    }

    /// Like [`run_in_coordinator_thread`](Self::run_in_coordinator_thread), waiting
    /// asynchronously while the queue is full.
    pub async fn run_in_coordinator_thread_async<F>(&self, f: F) -> Result<(), SubmitError>
    where
        F: FnOnce() -> Result<(), UserError> + Send + 'static,
    {
        self.inner
            .executor
            .execute_async(self.guarded(f, None))
            .await
    }

    /// Resolves once everything queued to the coordinator thread before this call has run (a
    /// no-op round trip through the queue). Resolves at once when the thread is closed.
    pub async fn flush(&self) -> Result<(), CoordinatorError> {
        if self.is_closed() {
            return Ok(());
        }
        self.call_in_coordinator_thread_async(|| Ok(()), "flush the coordinator queue")
            .await
            .map_err(CoordinatorError::from)
    }

    /// Marks the coordinator started: from now on [`run_in_event_loop`](Self::run_in_event_loop)
    /// accepts actions. Coordinators call it from `start`.
    pub fn mark_started(&self) {
        self.inner.started.store(true, Ordering::SeqCst);
    }

    /// Whether [`mark_started`](Self::mark_started) was called.
    pub fn is_started(&self) -> bool {
        self.inner.started.load(Ordering::SeqCst)
    }

    /// Runs a coordinator callback on the coordinator thread (fire and forget).
    ///
    /// Fails with [`CoordinatorError::NotStarted`] before [`mark_started`](Self::mark_started).
    /// If the action fails or panics, the job fails with `action_name` in the message.
    pub fn run_in_event_loop<F>(
        &self,
        action: F,
        action_name: impl Into<Cow<'static, str>>,
    ) -> Result<(), CoordinatorError>
    where
        F: FnOnce() -> Result<(), UserError> + Send + 'static,
    {
        self.ensure_started()?;
        let task = self.guarded(action, Some(action_name.into()));
        Ok(self.inner.executor.execute(task)?)
    }

    /// Like [`run_in_event_loop`](Self::run_in_event_loop), waiting asynchronously while the
    /// queue is full. Coordinator trait methods called by the job master use this form.
    pub async fn run_in_event_loop_async<F>(
        &self,
        action: F,
        action_name: impl Into<Cow<'static, str>>,
    ) -> Result<(), CoordinatorError>
    where
        F: FnOnce() -> Result<(), UserError> + Send + 'static,
    {
        self.ensure_started()?;
        let task = self.guarded(action, Some(action_name.into()));
        Ok(self.inner.executor.execute_async(task).await?)
    }

    fn ensure_started(&self) -> Result<(), CoordinatorError> {
        if self.is_started() {
            Ok(())
        } else {
            Err(CoordinatorError::NotStarted {
                operator: self.operator_name().to_string(),
            })
        }
    }

    /// Wraps `f` so that an error or a panic fails the job.
    fn guarded<F>(&self, f: F, action_name: Option<Cow<'static, str>>) -> CoordinatorTask
    where
        F: FnOnce() -> Result<(), UserError> + Send + 'static,
    {
        // One reference count and nothing formatted or allocated beyond the task's box unless
        // the action fails.
        let inner = self.inner.clone();
        Box::new(move || {
            if let Err(e) = call_catching(f) {
                inner.action_failed(action_name.as_deref(), e);
            }
        })
    }

    /// Queues a task that reports its own failure through
    /// [`action_failed`](Self::action_failed), for the per-event path, whose task already holds
    /// the base and so needs no second reference count.
    pub(crate) fn execute_self_guarded(
        &self,
        task: CoordinatorTask,
    ) -> Result<(), CoordinatorError> {
        self.ensure_started()?;
        Ok(self.inner.executor.execute(task)?)
    }

    /// Fails the job because the event-loop action `action_name` failed (`None`: an action with
    /// no name).
    pub(crate) fn action_failed(&self, action_name: Option<&str>, failure: CallFailure) {
        self.inner.action_failed(action_name, failure);
    }

    // ----- sending events --------------------------------------------------------------------

    /// Sends `event` to the ready attempt of `subtask` and returns the future of its
    /// acknowledgement. A subtask with no ready gateway fails the future with
    /// [`SendError::NotReady`], which names the subtask.
    ///
    /// The send happens on the coordinator thread, in order with the coordinator's other
    /// actions: inline when called there, queued otherwise (blocking a plain thread while the
    /// queue is full; from a tokio worker a full queue fails the send with
    /// [`SubmitError::WouldBlock`], use
    /// [`send_event_to_operator_async`](Self::send_event_to_operator_async)).
    pub fn send_event_to_operator(&self, subtask: SubtaskIndex, event: OperatorEvent) -> AckFuture {
        if self.is_coordinator_thread() {
            return self.send_now(subtask, None, event);
        }
        let (deferred, ack) = AckFuture::deferred();
        let base = self.clone();
        let task: CoordinatorTask =
            Box::new(move || deferred.resolve(base.send_now(subtask, None, event)));
        match self.inner.executor.execute(task) {
            Ok(()) => ack,
            Err(e) => AckFuture::failed(e.into()),
        }
    }

    /// Like [`send_event_to_operator`](Self::send_event_to_operator), waiting asynchronously
    /// for room in the coordinator queue.
    pub async fn send_event_to_operator_async(
        &self,
        subtask: SubtaskIndex,
        event: OperatorEvent,
    ) -> AckFuture {
        self.send_async(subtask, None, event).await
    }

    /// Sends `event` to one specific attempt of `subtask` (when attempts run concurrently).
    pub fn send_event_to_operator_attempt(
        &self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        event: OperatorEvent,
    ) -> AckFuture {
        if self.is_coordinator_thread() {
            return self.send_now(subtask, Some(attempt), event);
        }
        let (deferred, ack) = AckFuture::deferred();
        let base = self.clone();
        let task: CoordinatorTask =
            Box::new(move || deferred.resolve(base.send_now(subtask, Some(attempt), event)));
        match self.inner.executor.execute(task) {
            Ok(()) => ack,
            Err(e) => AckFuture::failed(e.into()),
        }
    }

    async fn send_async(
        &self,
        subtask: SubtaskIndex,
        attempt: Option<AttemptNumber>,
        event: OperatorEvent,
    ) -> AckFuture {
        if self.is_coordinator_thread() {
            return self.send_now(subtask, attempt, event);
        }
        let (deferred, ack) = AckFuture::deferred();
        let base = self.clone();
        let task: CoordinatorTask =
            Box::new(move || deferred.resolve(base.send_now(subtask, attempt, event)));
        match self.inner.executor.execute_async(task).await {
            Ok(()) => ack,
            Err(e) => AckFuture::failed(e.into()),
        }
    }

    /// Looks up the gateway and sends, on the calling thread.
    fn send_now(
        &self,
        subtask: SubtaskIndex,
        attempt: Option<AttemptNumber>,
        event: OperatorEvent,
    ) -> AckFuture {
        let gateway = {
            let gateways = lock(&self.inner.gateways);
            let found = match attempt {
                None => gateways.only_gateway(subtask).cloned(),
                Some(a) => gateways
                    .gateway(subtask, a)
                    .cloned()
                    .ok_or(SendError::NotReady { subtask }),
            };
            match found {
                Ok(g) => g,
                Err(e) => return AckFuture::failed(e),
            }
        };
        gateway.send_event(event)
    }

    // ----- readiness ---------------------------------------------------------------------------

    /// Registers the gateway of an attempt that became ready.
    pub fn subtask_ready(&self, gateway: SubtaskGateway) -> Result<(), GatewayError> {
        lock(&self.inner.gateways).register(gateway)
    }

    /// Forgets `attempt` of `subtask` (it failed). Returns whether it was ready.
    pub fn attempt_not_ready(&self, subtask: SubtaskIndex, attempt: AttemptNumber) -> bool {
        lock(&self.inner.gateways)
            .unregister(subtask, attempt)
            .is_some()
    }

    /// Forgets every attempt of `subtask` (it is being reset).
    pub fn subtask_not_ready(&self, subtask: SubtaskIndex) {
        lock(&self.inner.gateways).reset(subtask);
    }

    /// Whether `subtask` has a ready attempt.
    pub fn is_subtask_ready(&self, subtask: SubtaskIndex) -> bool {
        lock(&self.inner.gateways).is_ready(subtask)
    }

    /// The ready attempts of `subtask`.
    pub fn ready_attempts(&self, subtask: SubtaskIndex) -> Vec<AttemptNumber> {
        lock(&self.inner.gateways).attempts(subtask)
    }

    /// Whether an event from `attempt` of `subtask` comes from a ready attempt (events from
    /// failed or replaced attempts should be dropped).
    pub fn accepts_event_from(&self, subtask: SubtaskIndex, attempt: AttemptNumber) -> bool {
        lock(&self.inner.gateways).accepts_event_from(subtask, attempt)
    }

    // ----- failure -----------------------------------------------------------------------------

    /// Fails the job with `cause`. Only the first call after creation (or after
    /// [`reset_failure`](Self::reset_failure)) is passed on; later calls are ignored, as are
    /// calls after [`close`](Self::close). Returns whether this call was passed on.
    pub fn fail_job(&self, cause: impl Into<UserError>) -> bool {
        self.inner.failure.fail(cause.into())
    }

    /// Whether the job was failed since creation or the last reset.
    pub fn has_failed(&self) -> bool {
        self.inner.failure.failed.load(Ordering::SeqCst)
    }

    /// Allows [`fail_job`](Self::fail_job) again; coordinators call it in
    /// `reset_to_checkpoint`.
    pub fn reset_failure(&self) {
        self.inner.failure.failed.store(false, Ordering::SeqCst);
    }

    // ----- lifecycle ---------------------------------------------------------------------------

    /// Closes the base: stops the worker pool and periodic calls, and stops the coordinator
    /// thread after the task it is running (queued tasks are dropped). Later failures are
    /// ignored. Does not wait; see [`terminated`](Self::terminated).
    pub fn close(&self) {
        self.inner.failure.closed.store(true, Ordering::SeqCst);
        self.inner.workers.close();
        self.inner.executor.close();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.inner.executor.is_closed()
    }

    /// Resolves once the coordinator thread has stopped.
    pub async fn terminated(&self) {
        self.inner.executor.terminated().await
    }

    pub(crate) fn executor(&self) -> &CoordinatorExecutor {
        &self.inner.executor
    }

    pub(crate) fn failure(&self) -> &Arc<FailOnce> {
        &self.inner.failure
    }

    pub(crate) fn workers(&self) -> &WorkerPool {
        &self.inner.workers
    }
}

/// Runs `f`, turning an error or a panic into a [`CallFailure`].
pub(crate) fn call_catching<R>(f: impl FnOnce() -> Result<R, UserError>) -> Result<R, CallFailure> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(CallFailure::Failed(e)),
        Err(payload) => Err(CallFailure::Panicked(panic_message(payload.as_ref()))),
    }
}

impl fmt::Debug for CoordinatorContextBase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoordinatorContextBase")
            .field("operator", &self.operator_name())
            .field("started", &self.is_started())
            .field("closed", &self.is_closed())
            .finish()
    }
}
