//! A keyed task's own thread: a task whose chain calls a keyed store (RocksDB) runs its loop on a
//! thread of its own, as Flink runs every task, instead of on the runtime's workers.
//!
//! Such a task may wait on disk in any batch (a read), watermark (timers firing), checkpoint (the
//! store's flush), its opening (a restore) or its closing. On a worker it would have to hand the
//! worker's other tasks away before each of those calls (`block_in_place`), and come back on
//! another thread of the pool afterwards; the memory it allocated would then be freed from
//! threads other than the one that allocated it, and every poll would pay a core hand-off. On
//! its own thread it drives its loop with the runtime's handle: its timers, channels and the
//! tasks it spawns are the runtime's, and the workers stay free for the job master, the
//! sources and the uploads.
//!
//! A stop is waited for: [`ThreadStop::stop`] asks the thread to drop the task, and the task's
//! future ends ([`TaskError::Stopped`]) only once the thread has dropped it, so that a job that
//! ends after a cancel has closed its stores (RocksDB locks a store's directory per process).
//! Dropping the future instead (the runtime shutting down) stops the task without waiting.

use crate::error::TaskError;
use futures::future::{AbortHandle, AbortRegistration, Abortable, Aborted, BoxFuture};

/// The thread name of a task that calls a keyed store.
pub(crate) const TASK_THREAD: &str = "sluice-keyed";

/// A task's loop, boxed.
pub(crate) type BoxedRun = BoxFuture<'static, Result<(), TaskError>>;

/// A task's loop as the job runs it: its future, and, for a task on a thread of its own, the way
/// to stop it there and wait for its end.
pub(crate) struct Started {
    /// The task's loop, or the wait for its thread's outcome.
    pub(crate) run: BoxedRun,
    /// Set when the task runs on a thread of its own.
    pub(crate) stop: Option<ThreadStop>,
}

impl Started {
    /// A task that runs on whichever worker polls `run`.
    pub(crate) fn on_the_workers(run: BoxedRun) -> Self {
        Started { run, stop: None }
    }
}

/// Stops a task on its own thread: the thread drops the task at its next poll, and the task's
/// future then ends with [`TaskError::Stopped`].
#[derive(Clone, Debug)]
pub(crate) struct ThreadStop(AbortHandle);

impl ThreadStop {
    pub(crate) fn stop(&self) {
        self.0.abort();
    }
}

/// Stops the task on its thread when the future that waits for it is dropped.
struct StopOnDrop(AbortHandle);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `task`, started on a thread of its own that drives it with the current runtime's handle,
/// when the runtime is multi-threaded; `task` on the workers otherwise (a current-thread
/// runtime, as in tests, has no worker to spare) or when the thread cannot start. A panic in
/// the task is raised again where the returned future is polled, as it would have been on a
/// worker.
pub(crate) fn on_a_thread_of_its_own(task: BoxedRun) -> Started {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return Started::on_the_workers(task);
    };
    if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return Started::on_the_workers(task);
    }
    let (stop, registration) = AbortHandle::new_pair();
    let (done, outcome) = tokio::sync::oneshot::channel();
    // The task goes to the thread once it started, so that it stays here if it cannot start.
    let (give, take) = std::sync::mpsc::sync_channel::<BoxedRun>(1);
    let spawned = std::thread::Builder::new()
        .name(TASK_THREAD.into())
        .spawn(move || {
            if let Ok(task) = take.recv() {
                let _ = done.send(drive(&runtime, task, registration));
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start a thread for a keyed task; it runs on the workers");
        return Started::on_the_workers(task);
    }
    if let Err(std::sync::mpsc::SendError(task)) = give.send(task) {
        return Started::on_the_workers(task);
    }
    let waits = StopOnDrop(stop.clone());
    let run = Box::pin(async move {
        let _waits = waits;
        match outcome.await {
            Ok(Ok(Ok(result))) => result,
            Ok(Ok(Err(Aborted))) => Err(TaskError::Stopped),
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => Err(TaskError::Internal(
                "the thread of a keyed task ended without its outcome".into(),
            )),
        }
    });
    Started {
        run,
        stop: Some(ThreadStop(stop)),
    }
}

/// What the thread hands back: the task's result, `Aborted` once it was stopped and dropped, or
/// the payload of a panic in it.
type Outcome = std::thread::Result<Result<Result<(), TaskError>, Aborted>>;

/// Runs `task` on this thread until it ends or is stopped; the task is dropped before this
/// returns.
fn drive(
    runtime: &tokio::runtime::Handle,
    task: BoxedRun,
    registration: AbortRegistration,
) -> Outcome {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(Abortable::new(task, registration))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Sets its flag when dropped.
    struct Flag(Arc<AtomicBool>);

    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_task_runs_on_its_thread_and_its_result_comes_back() {
        let started = on_a_thread_of_its_own(Box::pin(async {
            match std::thread::current().name() {
                Some(TASK_THREAD) => Ok(()),
                other => Err(TaskError::Internal(format!("ran on {other:?}"))),
            }
        }));
        assert!(started.stop.is_some());
        assert!(started.run.await.is_ok());
    }

    /// A stopped task's future ends only once the thread has dropped the task.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_ends_the_future_after_the_task_is_dropped() {
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = Flag(dropped.clone());
        let started = on_a_thread_of_its_own(Box::pin(async move {
            let _flag = flag;
            futures::future::pending::<()>().await;
            Ok(())
        }));
        let Some(stop) = started.stop else {
            panic!("a multi-threaded runtime starts the task on a thread");
        };
        stop.stop();
        assert!(matches!(started.run.await, Err(TaskError::Stopped)));
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_on_the_thread_is_raised_where_the_future_is_polled() {
        let started = on_a_thread_of_its_own(Box::pin(async { panic!("user code panicked") }));
        let joined = tokio::spawn(started.run).await;
        assert!(joined.is_err_and(|e| e.is_panic()));
    }

    #[tokio::test]
    async fn a_current_thread_runtime_keeps_the_task_on_its_worker() {
        let started = on_a_thread_of_its_own(Box::pin(async { Ok(()) }));
        assert!(started.stop.is_none());
        assert!(started.run.await.is_ok());
    }
}
