//! [`JobHandle`] and [`JobResult`]: watching, checkpointing, stopping, cancelling and awaiting a
//! submitted job.

use crate::error::JobError;
use crate::job::JobObserver;
use crate::job::attempt::{RequestId, RequestKind};
use crate::job::deploy::MetricsRegistry;
use crate::metrics::JobMetrics;
use sluice_core::CheckpointId;
use sluice_core::sync::lock;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Checkpoint counts of a whole job, over every attempt (Flink's checkpoint statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Checkpoints triggered.
    pub triggered: u64,
    /// Checkpoints completed.
    pub completed: u64,
    /// Checkpoints that failed in a way that counts against
    /// [`tolerable_failed_checkpoints`](crate::checkpoint::CheckpointSettings::tolerable_failed_checkpoints).
    pub failed: u64,
    /// Of those, checkpoints that expired (not acknowledged within the timeout).
    pub expired: u64,
}

/// What a finished job reports.
#[derive(Clone, Debug)]
pub struct JobResult {
    /// The name given to `execute`.
    pub job_name: String,
    /// Wall-clock time from submission to the end.
    pub duration: Duration,
    /// Metrics of every operator subtask over the whole job: records and times are summed over
    /// every attempt, so records processed by an attempt that failed are counted too.
    pub metrics: JobMetrics,
    /// Metrics of the last attempt only.
    pub attempt_metrics: JobMetrics,
    /// How many times the job was restarted after a failure.
    pub restarts: u32,
    /// How many checkpoints completed.
    pub completed_checkpoints: u64,
    /// Checkpoint counts (triggered, completed, failed, expired).
    pub checkpoints: CheckpointStats,
    /// The id of the last completed checkpoint.
    pub last_checkpoint: Option<CheckpointId>,
    /// The checkpoint the job was started from (`restore_from`), if any.
    pub restored_from: Option<CheckpointId>,
    /// The savepoint the job stopped with ([`JobHandle::stop_with_savepoint`]), if it did.
    pub stopped_with_savepoint: Option<CheckpointId>,
}

/// Why a requested checkpoint did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// The job does not checkpoint.
    #[error("checkpointing is not enabled for this job")]
    NotEnabled,
    /// The checkpoint was aborted or its attempt ended.
    #[error("{0}")]
    Failed(String),
    /// The job ended before the checkpoint could complete.
    #[error("the job ended before the checkpoint completed")]
    JobEnded,
}

/// A checkpoint requested through [`JobHandle::trigger_checkpoint`]: its id, and its outcome to
/// await.
#[derive(Debug)]
pub struct PendingCheckpoint {
    id: CheckpointId,
    done: oneshot::Receiver<Result<CheckpointId, String>>,
}

impl PendingCheckpoint {
    /// The checkpoint's id.
    pub fn id(&self) -> CheckpointId {
        self.id
    }

    /// Waits until the checkpoint completed (it is durable and sinks were told to commit), or
    /// failed.
    pub async fn completed(self) -> Result<CheckpointId, CheckpointError> {
        outcome(self.done).await
    }
}

async fn outcome(
    done: oneshot::Receiver<Result<CheckpointId, String>>,
) -> Result<CheckpointId, CheckpointError> {
    match done.await {
        Ok(Ok(id)) => Ok(id),
        Ok(Err(reason)) if reason.contains("not enabled") => Err(CheckpointError::NotEnabled),
        Ok(Err(reason)) => Err(CheckpointError::Failed(reason)),
        Err(_) => Err(CheckpointError::JobEnded),
    }
}

/// A running job: await it for its [`JobResult`], read its metrics, take checkpoints, stop it
/// with a savepoint, or cancel it.
///
/// ```
/// use sluice_runtime::prelude::*;
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// let env = StreamEnvironment::new();
/// env.from_generator(Generator::new(|i| i)).discard();
/// let job = env.submit("endless").unwrap();
/// job.cancel();
/// assert!(matches!(job.await, Err(JobError::Cancelled)));
/// # }
/// ```
///
/// Stopping with a savepoint that a later run restores from (Flink's stop-with-savepoint):
///
/// ```
/// use sluice_runtime::prelude::*;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// let dir = tempfile::tempdir().unwrap();
/// let env = StreamEnvironment::new();
/// env.enable_checkpointing(Duration::from_secs(3600));
/// env.set_checkpoint_storage(dir.path());
/// env.from_generator(Generator::new(|i| i)).discard();
/// let job = env.submit("stoppable").unwrap();
/// let savepoint = job.stop_with_savepoint().await.unwrap();
/// let result = job.await.unwrap();
/// assert_eq!(result.stopped_with_savepoint, Some(savepoint));
/// // A later run: env.restore_from(dir.path()) resumes from the savepoint.
/// # }
/// ```
pub struct JobHandle {
    name: String,
    join: JoinHandle<Result<JobResult, JobError>>,
    cancel: CancellationToken,
    metrics: Arc<SharedMetrics>,
    requests: mpsc::Sender<HandleRequest>,
    observer: JobObserver,
}

impl JobHandle {
    pub(crate) fn new(
        name: String,
        join: JoinHandle<Result<JobResult, JobError>>,
        cancel: CancellationToken,
        metrics: Arc<SharedMetrics>,
        requests: mpsc::Sender<HandleRequest>,
        observer: JobObserver,
    ) -> Self {
        JobHandle {
            name,
            join,
            cancel,
            metrics,
            requests,
            observer,
        }
    }

    async fn request(
        &self,
        kind: RequestKind,
    ) -> Result<
        (
            oneshot::Receiver<CheckpointId>,
            oneshot::Receiver<Result<CheckpointId, String>>,
        ),
        CheckpointError,
    > {
        let (triggered_tx, triggered) = oneshot::channel();
        let (done_tx, done) = oneshot::channel();
        let request = HandleRequest {
            kind,
            triggered: triggered_tx,
            done: done_tx,
        };
        self.requests
            .send(request)
            .await
            .map_err(|_| CheckpointError::JobEnded)?;
        Ok((triggered, done))
    }

    /// Asks for a checkpoint now (as soon as the checkpoint rules allow: at most
    /// `max_concurrent` in progress, the minimum pause). Returns once it is triggered, with
    /// its id and its outcome to await.
    pub async fn trigger_checkpoint(&self) -> Result<PendingCheckpoint, CheckpointError> {
        let (triggered, done) = self.request(RequestKind::Checkpoint).await?;
        match triggered.await {
            Ok(id) => Ok(PendingCheckpoint { id, done }),
            // Refused before it was triggered: the outcome says why.
            Err(_) => Err(outcome(done)
                .await
                .err()
                .unwrap_or(CheckpointError::JobEnded)),
        }
    }

    /// Takes a savepoint (a checkpoint of every operator), then stops every task without
    /// ending its input, as Flink's stop-with-savepoint does. Returns the savepoint's id once
    /// it completed; awaiting the handle then returns a [`JobResult`] whose
    /// `stopped_with_savepoint` names it. A later run restores from it with
    /// [`restore_from`](crate::StreamEnvironment::restore_from) (the checkpoint storage
    /// directory, or its `chk-N` directory). If the savepoint fails the job keeps running.
    pub async fn stop_with_savepoint(&self) -> Result<CheckpointId, CheckpointError> {
        let (_triggered, done) = self.request(RequestKind::StopWithSavepoint).await?;
        outcome(done).await
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops every task of the job; awaiting the handle then returns [`JobError::Cancelled`]
    /// (or the job's result, if it had already finished).
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The metrics of every operator subtask, as of now, over the whole job (summed over every
    /// attempt).
    pub fn metrics(&self) -> JobMetrics {
        self.metrics.job()
    }

    /// The metrics of the attempt running now.
    pub fn attempt_metrics(&self) -> JobMetrics {
        self.metrics.attempt()
    }

    /// A read-only live view of the job (state, graph, per-subtask metrics, checkpoints,
    /// restarts, failures) to hand to a dashboard or a metrics exporter. Cheap to clone; it
    /// outlives this handle and keeps showing the final state after the job ended.
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_runtime::job::JobState;
    ///
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() {
    /// let env = StreamEnvironment::new();
    /// env.from_generator(Generator::new(|i| i)).name("numbers").discard();
    /// let job = env.submit("endless").unwrap();
    /// let observer = job.observer();
    /// assert_eq!(observer.state(), JobState::Running);
    /// assert_eq!(observer.snapshot().vertices[0].name, "Source: numbers -> Sink: Discard");
    /// job.cancel();
    /// let _ = job.await;
    /// assert_eq!(observer.state(), JobState::Canceled);
    /// # }
    /// ```
    pub fn observer(&self) -> JobObserver {
        self.observer.clone()
    }

    /// Whether the job has ended.
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }
}

impl Future for JobHandle {
    type Output = Result<JobResult, JobError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.join).poll(cx) {
            Poll::Ready(Ok(r)) => Poll::Ready(r),
            Poll::Ready(Err(e)) => Poll::Ready(Err(JobError::Internal(format!(
                "the job master stopped abnormally: {e}"
            )))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A request from the job handle to the job master.
pub(crate) struct HandleRequest {
    pub(crate) kind: RequestKind,
    /// Told the checkpoint's id once it is triggered.
    pub(crate) triggered: oneshot::Sender<CheckpointId>,
    /// Told how the checkpoint ended.
    pub(crate) done: oneshot::Sender<Result<CheckpointId, String>>,
}

/// How many requests the job handle may have waiting for the master.
pub(crate) const REQUEST_CAPACITY: usize = 16;

/// The metrics of the job: the attempts that ended, and the one running now.
#[derive(Default)]
pub(crate) struct SharedMetrics {
    current: Mutex<Arc<MetricsRegistry>>,
    earlier: Mutex<JobMetrics>,
}

impl SharedMetrics {
    /// The whole job so far: counters summed over every attempt.
    pub(crate) fn job(&self) -> JobMetrics {
        let mut all = lock(&self.earlier).clone();
        all.accumulate(&self.attempt());
        all
    }

    /// The attempt running now (or the last one).
    pub(crate) fn attempt(&self) -> JobMetrics {
        lock(&self.current).snapshot()
    }

    /// A new attempt of the whole job counts into `m` from now on.
    pub(crate) fn next_attempt(&self, m: Arc<MetricsRegistry>) {
        let ended = std::mem::replace(&mut *lock(&self.current), m);
        lock(&self.earlier).accumulate(&ended.snapshot());
    }
}

/// A request's answers still owed: its checkpoint's id once triggered, then its outcome.
struct OpenRequest {
    triggered: Option<oneshot::Sender<CheckpointId>>,
    done: oneshot::Sender<Result<CheckpointId, String>>,
}

/// The master's side of the handle's requests: each one by id, until it is answered.
#[derive(Default)]
pub(crate) struct Requests {
    next: u64,
    open: BTreeMap<RequestId, OpenRequest>,
}

impl Requests {
    /// Takes request `r`; returns the id and kind the machine is told.
    pub(crate) fn add(&mut self, r: HandleRequest) -> (RequestId, RequestKind) {
        let id = RequestId(self.next);
        self.next += 1;
        let open = OpenRequest {
            triggered: Some(r.triggered),
            done: r.done,
        };
        self.open.insert(id, open);
        (id, r.kind)
    }

    /// Request `id` started checkpoint `checkpoint`.
    pub(crate) fn triggered(&mut self, id: RequestId, checkpoint: CheckpointId) {
        if let Some(tx) = self.open.get_mut(&id).and_then(|r| r.triggered.take()) {
            // The handle may have stopped waiting.
            let _ = tx.send(checkpoint);
        }
    }

    /// Request `id` ended with `result`.
    pub(crate) fn done(&mut self, id: RequestId, result: Result<CheckpointId, String>) {
        if let Some(r) = self.open.remove(&id) {
            // The handle may have stopped waiting.
            let _ = r.done.send(result);
        }
    }
}
