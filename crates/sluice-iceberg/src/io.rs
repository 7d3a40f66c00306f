//! Where iceberg-rust's async calls run: one process-wide tokio runtime for the sink's I/O
//! (catalog calls, data file writes, commits); [`spawn`] starts one (the writer polls the data
//! file writes from its `poll_pending`, so records are encoded while the last batch is written),
//! and [`run`] / [`wait`] wait for one from the synchronous operator methods (open, barrier,
//! commit).
//!
//! Operator methods are synchronous and run on the task loop, but the barrier and the commit must
//! finish before the method returns (the file list goes out ahead of the barrier; a commit must
//! be done before its checkpoint is acknowledged as committed). So the future runs on the I/O
//! runtime, and the caller waits for it inside `tokio::task::block_in_place` when it is on a
//! multi-thread runtime's worker, which hands that worker's other tasks to another thread first:
//! no other task waits behind the sink's I/O.

use std::future::Future;
use std::sync::OnceLock;

/// The I/O runtime, built on first use (two worker threads named `sluice-iceberg-io`).
fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("sluice-iceberg-io")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the Iceberg I/O runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Starts `future` on the I/O runtime; poll the handle (from any executor) or [`wait`] for it.
pub(crate) fn spawn<F>(future: F) -> Result<tokio::task::JoinHandle<F::Output>, String>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Ok(runtime()?.spawn(future))
}

/// Waits for a future started with [`spawn`].
///
/// Errors only when the future panicked or was cancelled; its own result is in the `Ok`.
pub(crate) fn wait<T: Send + 'static>(handle: tokio::task::JoinHandle<T>) -> Result<T, String> {
    wait_join(handle).map_err(|e| format!("Iceberg I/O task failed: {e}"))
}

/// Waits for a future started with [`spawn`], keeping the join error for the caller.
pub(crate) fn wait_join<T: Send + 'static>(
    handle: tokio::task::JoinHandle<T>,
) -> Result<T, tokio::task::JoinError> {
    // On a current-thread runtime (or none) nothing else can be moved off this thread; the
    // future runs on the I/O runtime, so waiting here cannot deadlock.
    sluice_runtime::operator::blocking(move || futures::executor::block_on(handle))
}

/// Runs `future` on the I/O runtime and waits for its output.
///
/// Errors only when the I/O runtime cannot start or the future panicked; the future's own
/// result is in the `Ok`.
pub(crate) fn run<F>(future: F) -> Result<F::Output, String>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    wait(spawn(future)?)
}
