//! The job master: runs the tasks, stops them all on the first failure or on cancel.

use crate::error::{JobError, TaskError};
use crate::job::deploy::DeployedTask;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Runs `tasks` until all finish, one fails, or `cancel` fires.
///
/// On failure every other task is aborted and awaited before this returns, so no task of the job
/// is left running. When several tasks fail, a root cause (user code) is reported in preference
/// to the failures it caused (peers that lost a channel).
pub(crate) async fn run_tasks(
    tasks: Vec<DeployedTask>,
    cancel: CancellationToken,
) -> Result<(), JobError> {
    let mut set = JoinSet::new();
    for t in tasks {
        let description = t.description;
        let fut = t.task.run();
        set.spawn(async move {
            let r = fut.await;
            if let Err(e) = &r {
                tracing::debug!(task = %description, error = ?e, "task failed");
            }
            r
        });
    }
    let mut first: Option<TaskError> = None;
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled(), if first.is_none() => {
                set.abort_all();
                while set.join_next().await.is_some() {}
                return Err(JobError::Cancelled);
            }
            joined = set.join_next() => {
                let Some(joined) = joined else { break };
                let err = match joined {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => e,
                    Err(j) if j.is_cancelled() => continue,
                    Err(j) => TaskError::Internal(format!("a task panicked outside user code: {j}")),
                };
                if first.is_none() {
                    set.abort_all();
                }
                let replace = match &first {
                    None => true,
                    Some(f) => !f.is_root_cause() && err.is_root_cause(),
                };
                if replace {
                    first = Some(err);
                }
            }
        }
    }
    match first {
        Some(e) => Err(e.into_job_error()),
        None => Ok(()),
    }
}
