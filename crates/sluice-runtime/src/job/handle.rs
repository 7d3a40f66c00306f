//! [`JobHandle`] and [`JobResult`]: watching, cancelling and awaiting a submitted job.

use crate::error::JobError;
use crate::job::master::SharedMetrics;
use crate::metrics::JobMetrics;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What a finished job reports.
#[derive(Clone, Debug)]
pub struct JobResult {
    /// The name given to `execute`.
    pub job_name: String,
    /// Wall-clock time from submission to the end.
    pub duration: Duration,
    /// Final metrics of every operator subtask (of the last attempt, after restarts).
    pub metrics: JobMetrics,
    /// How many times the job was restarted after a failure.
    pub restarts: u32,
    /// How many checkpoints completed.
    pub completed_checkpoints: u64,
    /// The id of the last completed checkpoint.
    pub last_checkpoint: Option<u64>,
    /// The checkpoint the job was started from (`restore_from`), if any.
    pub restored_from: Option<u64>,
}

/// A running job: await it for its [`JobResult`], read its metrics, or cancel it.
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
pub struct JobHandle {
    name: String,
    join: JoinHandle<Result<JobResult, JobError>>,
    cancel: CancellationToken,
    metrics: Arc<SharedMetrics>,
    triggers: mpsc::Sender<()>,
}

impl JobHandle {
    pub(crate) fn new(
        name: String,
        join: JoinHandle<Result<JobResult, JobError>>,
        cancel: CancellationToken,
        metrics: Arc<SharedMetrics>,
        triggers: mpsc::Sender<()>,
    ) -> Self {
        JobHandle {
            name,
            join,
            cancel,
            metrics,
            triggers,
        }
    }

    /// Asks for a checkpoint now (as soon as the checkpoint rules allow). Does nothing when
    /// checkpointing is disabled or a request is already waiting.
    pub fn trigger_checkpoint(&self) {
        let _ = self.triggers.try_send(());
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

    /// The metrics of every operator subtask, as of now.
    pub fn metrics(&self) -> JobMetrics {
        self.metrics.current().snapshot()
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
