//! The worker pool of a coordinator context base (Flink's `callAsync`): slow or blocking work
//! runs on worker threads, and its result is handled back on the coordinator thread, once or
//! periodically.

use crate::base::{CoordinatorContextBase, call_catching};
use crate::error::{CallFailure, SubmitError};
use crate::executor::CoordinatorTask;
use crate::util::{in_tokio_runtime, lock};
use crossbeam_channel::{RecvTimeoutError, Sender, TrySendError};
use sluice_core::UserError;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The shortest period of a periodic call.
const MIN_PERIOD: Duration = Duration::from_millis(1);

/// Worker threads, started on first use, fed by a bounded queue.
pub(crate) struct WorkerPool {
    name: String,
    threads: usize,
    capacity: usize,
    closed: Arc<AtomicBool>,
    tx: Mutex<Option<Sender<CoordinatorTask>>>,
    periodic: Mutex<Vec<Sender<()>>>,
    periodic_count: AtomicUsize,
}

impl WorkerPool {
    pub(crate) fn new(name: String, threads: usize, capacity: usize) -> Self {
        WorkerPool {
            name,
            threads: threads.max(1),
            capacity: capacity.max(1),
            closed: Arc::new(AtomicBool::new(false)),
            tx: Mutex::new(None),
            periodic: Mutex::new(Vec::new()),
            periodic_count: AtomicUsize::new(0),
        }
    }

    fn sender(&self) -> Result<Sender<CoordinatorTask>, SubmitError> {
        let mut tx = lock(&self.tx);
        if self.closed.load(Ordering::SeqCst) {
            return Err(SubmitError::Closed);
        }
        if let Some(tx) = tx.as_ref() {
            return Ok(tx.clone());
        }
        let (new_tx, rx) = crossbeam_channel::bounded::<CoordinatorTask>(self.capacity);
        for i in 0..self.threads {
            let rx = rx.clone();
            let closed = self.closed.clone();
            std::thread::Builder::new()
                .name(format!("{}-worker-{i}", self.name))
                .spawn(move || {
                    for job in rx.iter() {
                        if closed.load(Ordering::SeqCst) {
                            continue; // drop queued work after close
                        }
                        if catch_unwind(AssertUnwindSafe(job)).is_err() {
                            tracing::error!("a coordinator worker job panicked outside its guard");
                        }
                    }
                })
                .map_err(|e| SubmitError::Spawn(e.to_string()))?;
        }
        *tx = Some(new_tx.clone());
        Ok(new_tx)
    }

    /// Queues `job`. Never blocks the coordinator thread or a tokio worker (a full queue is an
    /// error there); blocks other threads while the queue is full.
    fn submit(&self, job: CoordinatorTask, on_coordinator_thread: bool) -> Result<(), SubmitError> {
        let tx = self.sender()?;
        match tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Disconnected(_)) => Err(SubmitError::Closed),
            Err(TrySendError::Full(job)) => {
                if on_coordinator_thread {
                    Err(SubmitError::WorkerQueueFull(self.capacity))
                } else if in_tokio_runtime() {
                    Err(SubmitError::WouldBlock)
                } else {
                    tx.send(job).map_err(|_| SubmitError::Closed)
                }
            }
        }
    }

    fn register_periodic(&self, stop: Sender<()>) -> Result<usize, SubmitError> {
        let mut periodic = lock(&self.periodic);
        if self.closed.load(Ordering::SeqCst) {
            return Err(SubmitError::Closed);
        }
        periodic.push(stop);
        Ok(self.periodic_count.fetch_add(1, Ordering::SeqCst))
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Stops the pool: queued jobs are dropped, periodic calls end.
    pub(crate) fn close(&self) {
        // Take both locks so no thread or periodic call can be added after this.
        let mut tx = lock(&self.tx);
        let mut periodic = lock(&self.periodic);
        self.closed.store(true, Ordering::SeqCst);
        *tx = None;
        for stop in periodic.drain(..) {
            let _ = stop.try_send(());
        }
    }
}

/// A running periodic call; [`cancel`](Self::cancel) stops it. Dropping the handle does not.
#[derive(Debug, Clone)]
pub struct PeriodicCall {
    stop: Sender<()>,
}

impl PeriodicCall {
    /// Stops the periodic call after its current run.
    pub fn cancel(&self) {
        let _ = self.stop.try_send(());
    }
}

impl CoordinatorContextBase {
    /// Runs `callable` on a worker thread, then `handler` with its result on the coordinator
    /// thread (Flink's `callAsync`).
    ///
    /// An error or panic of `callable` reaches `handler` as `Err`. If `handler` fails or
    /// panics, the job fails. After [`close`](Self::close) nothing more runs.
    ///
    /// ```
    /// use sluice_coordinator::{CoordinatorContext, CoordinatorContextBase, JobFailureHook};
    /// use sluice_core::NodeId;
    ///
    /// let ctx = CoordinatorContext::new("files", NodeId(0), 1, JobFailureHook::new(|_| {}));
    /// let base = CoordinatorContextBase::new(ctx).unwrap();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let b = base.clone();
    /// base.call_async(
    ///     || Ok(vec!["a.json", "b.json"]), // e.g. list a directory
    ///     move |listed| {
    ///         tx.send((listed.unwrap().len(), b.is_coordinator_thread())).unwrap();
    ///         Ok(())
    ///     },
    /// )
    /// .unwrap();
    /// assert_eq!(rx.recv().unwrap(), (2, true));
    /// base.close();
    /// ```
    pub fn call_async<T, C, H>(&self, callable: C, handler: H) -> Result<(), SubmitError>
    where
        T: Send + 'static,
        C: FnOnce() -> Result<T, UserError> + Send + 'static,
        H: FnOnce(Result<T, UserError>) -> Result<(), UserError> + Send + 'static,
    {
        let base = self.clone();
        let job: CoordinatorTask = Box::new(move || {
            let result = run_callable(callable);
            base.handle_async_result(result, handler);
        });
        self.workers().submit(job, self.is_coordinator_thread())
    }

    /// Runs `callable` on a worker thread after `initial_delay` and then every `period`, and
    /// `handler` with each result on the coordinator thread.
    ///
    /// A failing run does not cancel the period: its error goes to `handler`, and the next run
    /// happens on time. If `handler` fails or panics, the job fails (and the period goes on;
    /// the job master stops the coordinator). Runs that fall behind are skipped, not bunched.
    /// The call stops on [`PeriodicCall::cancel`] or [`close`](Self::close).
    pub fn call_async_periodic<T, C, H>(
        &self,
        callable: C,
        handler: H,
        initial_delay: Duration,
        period: Duration,
    ) -> Result<PeriodicCall, SubmitError>
    where
        T: Send + 'static,
        C: FnMut() -> Result<T, UserError> + Send + 'static,
        H: FnMut(Result<T, UserError>) -> Result<(), UserError> + Send + 'static,
    {
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(1);
        let index = self.workers().register_periodic(stop_tx.clone())?;
        let period = period.max(MIN_PERIOD);
        let handler = Arc::new(Mutex::new(handler));
        let base = self.clone();
        let mut callable = callable;
        std::thread::Builder::new()
            .name(format!(
                "coordinator-{}-periodic-{index}",
                self.operator_name()
            ))
            .spawn(move || {
                let mut next = Instant::now() + initial_delay;
                // Each timeout is a run; a stop signal or a dropped pool ends the call.
                while let Err(RecvTimeoutError::Timeout) = stop_rx.recv_deadline(next) {
                    if base.workers().is_closed() {
                        break;
                    }
                    let result = run_callable(&mut callable);
                    let h = handler.clone();
                    base.handle_async_result(result, move |r| {
                        let mut handler = lock(&h);
                        (*handler)(r)
                    });
                    next += period;
                    let now = Instant::now();
                    while next <= now {
                        next += period;
                    }
                }
            })
            .map_err(|e| SubmitError::Spawn(e.to_string()))?;
        Ok(PeriodicCall { stop: stop_tx })
    }

    /// Hands `result` to `handler` on the coordinator thread; a failing handler fails the job.
    fn handle_async_result<T, H>(&self, result: Result<T, UserError>, handler: H)
    where
        T: Send + 'static,
        H: FnOnce(Result<T, UserError>) -> Result<(), UserError> + Send + 'static,
    {
        let failure = self.failure().clone();
        let task: CoordinatorTask = Box::new(move || match call_catching(|| handler(result)) {
            Ok(()) => {}
            Err(CallFailure::Failed(e)) => {
                failure.fail(
                    format!("failed to handle the result of an asynchronous call: {e}").into(),
                );
            }
            Err(other) => {
                failure.fail(
                    format!("failed to handle the result of an asynchronous call: {other}").into(),
                );
            }
        });
        if let Err(e) = self.executor().execute(task) {
            tracing::debug!(error = %e, "dropping the result of an asynchronous call");
        }
    }
}

fn run_callable<T>(callable: impl FnOnce() -> Result<T, UserError>) -> Result<T, UserError> {
    match call_catching(callable) {
        Ok(v) => Ok(v),
        Err(CallFailure::Failed(e)) => Err(e),
        Err(other) => Err(format!("the asynchronous call failed: {other}").into()),
    }
}
