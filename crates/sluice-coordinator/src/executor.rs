//! [`CoordinatorExecutor`]: the loop on the coordinator thread that runs queued tasks one at a
//! time, fed by a bounded queue with blocking, async and on-thread submission.

use crate::error::{SubmitError, ThreadFactoryError};
use crate::thread_factory::CoordinatorExecutorThreadFactory;
use crate::util::{in_tokio_runtime, lock};
use std::collections::VecDeque;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};

/// A unit of work for the coordinator thread.
pub type CoordinatorTask = Box<dyn FnOnce() + Send + 'static>;

/// The default number of tasks the coordinator queue holds.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;

struct Shared {
    factory: Arc<CoordinatorExecutorThreadFactory>,
    closed: AtomicBool,
    /// Tasks the coordinator thread queued to itself: it must never wait on its own queue.
    local: Mutex<VecDeque<CoordinatorTask>>,
    capacity: usize,
}

/// Runs tasks on the coordinator thread, one at a time, in the order they were queued.
///
/// The queue is bounded. How a caller waits for room depends on where it runs:
/// - on the coordinator thread itself, a task goes to a separate bounded local queue, so the
///   thread never waits on itself;
/// - on a plain thread (a worker), [`execute`](Self::execute) blocks until there is room;
/// - on a tokio worker, [`execute`](Self::execute) fails with [`SubmitError::WouldBlock`] when
///   the queue is full, and [`execute_async`](Self::execute_async) waits without blocking.
///
/// A panic in a task is caught and reported through the thread factory (it fails the job), and
/// the loop goes on. [`close`](Self::close) stops the loop; queued tasks are dropped.
///
/// ```
/// use sluice_coordinator::{CoordinatorExecutor, CoordinatorExecutorThreadFactory};
/// use std::sync::Arc;
///
/// let factory = Arc::new(CoordinatorExecutorThreadFactory::new("demo", Arc::new(|_| {})));
/// let executor = CoordinatorExecutor::start(factory, 16).unwrap();
/// let (tx, rx) = std::sync::mpsc::channel();
/// let name = move || std::thread::current().name().map(str::to_string);
/// executor.execute(Box::new(move || tx.send(name()).unwrap())).unwrap();
/// assert_eq!(rx.recv().unwrap().as_deref(), Some("coordinator-demo"));
/// executor.close();
/// ```
pub struct CoordinatorExecutor {
    shared: Arc<Shared>,
    tx: mpsc::Sender<CoordinatorTask>,
    terminated: watch::Receiver<bool>,
}

impl CoordinatorExecutor {
    /// Starts the coordinator thread from `factory`, with a queue of `capacity` tasks.
    pub fn start(
        factory: Arc<CoordinatorExecutorThreadFactory>,
        capacity: usize,
    ) -> Result<Self, ThreadFactoryError> {
        let capacity = capacity.max(1);
        let (tx, rx) = mpsc::channel(capacity);
        let (done_tx, done_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            factory: factory.clone(),
            closed: AtomicBool::new(false),
            local: Mutex::new(VecDeque::new()),
            capacity,
        });
        let loop_shared = shared.clone();
        factory.new_thread(move || {
            run_loop(&loop_shared, rx);
            let _ = done_tx.send(true);
        })?;
        Ok(CoordinatorExecutor {
            shared,
            tx,
            terminated: done_rx,
        })
    }

    /// Whether the calling thread is the coordinator thread.
    pub fn is_coordinator_thread(&self) -> bool {
        self.shared.factory.is_current_thread_coordinator_thread()
    }

    /// The factory that made the coordinator thread.
    pub fn thread_factory(&self) -> &Arc<CoordinatorExecutorThreadFactory> {
        &self.shared.factory
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::SeqCst)
    }

    /// Queues `task`. Blocks a plain thread while the queue is full; never blocks a tokio
    /// worker (it fails with [`SubmitError::WouldBlock`] instead).
    pub fn execute(&self, task: CoordinatorTask) -> Result<(), SubmitError> {
        if self.is_closed() {
            return Err(SubmitError::Closed);
        }
        if self.is_coordinator_thread() {
            return self.push_local(task);
        }
        match self.tx.try_send(task) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(SubmitError::Closed),
            Err(mpsc::error::TrySendError::Full(task)) => {
                if in_tokio_runtime() {
                    Err(SubmitError::WouldBlock)
                } else {
                    self.tx.blocking_send(task).map_err(|_| SubmitError::Closed)
                }
            }
        }
    }

    /// Queues `task`, waiting asynchronously while the queue is full.
    pub async fn execute_async(&self, task: CoordinatorTask) -> Result<(), SubmitError> {
        if self.is_closed() {
            return Err(SubmitError::Closed);
        }
        if self.is_coordinator_thread() {
            return self.push_local(task);
        }
        self.tx.send(task).await.map_err(|_| SubmitError::Closed)
    }

    fn push_local(&self, task: CoordinatorTask) -> Result<(), SubmitError> {
        let mut local = lock(&self.shared.local);
        if local.len() >= self.shared.capacity {
            return Err(SubmitError::SelfQueueFull(self.shared.capacity));
        }
        local.push_back(task);
        Ok(())
    }

    /// Stops the loop after the task it is running; queued tasks are dropped (their callers
    /// see the coordinator as closed). Does not wait; see [`terminated`](Self::terminated).
    pub fn close(&self) {
        if self.shared.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Wake the loop if it waits for work; if the queue is full it is not waiting.
        let _ = self.tx.try_send(Box::new(|| {}));
    }

    /// Resolves once the coordinator thread has left its loop.
    pub async fn terminated(&self) {
        let mut rx = self.terminated.clone();
        // An error means the thread is gone, which is what we wait for.
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Whether the coordinator thread has left its loop.
    pub fn is_terminated(&self) -> bool {
        *self.terminated.borrow()
    }
}

fn run_loop(shared: &Shared, mut rx: mpsc::Receiver<CoordinatorTask>) {
    loop {
        if shared.closed.load(Ordering::SeqCst) {
            break;
        }
        let local = lock(&shared.local).pop_front();
        if let Some(task) = local {
            run_one(shared, task);
            // Alternate with queued work so a self-feeding coordinator cannot starve callers.
            if let Ok(task) = rx.try_recv()
                && !shared.closed.load(Ordering::SeqCst)
            {
                run_one(shared, task);
            }
            continue;
        }
        // Local tasks are only added while a task runs on this thread, so none can appear
        // while the loop waits here.
        match rx.blocking_recv() {
            Some(task) => {
                if shared.closed.load(Ordering::SeqCst) {
                    break;
                }
                run_one(shared, task);
            }
            None => break,
        }
    }
    rx.close();
    while rx.try_recv().is_ok() {}
    lock(&shared.local).clear();
}

fn run_one(shared: &Shared, task: CoordinatorTask) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(task)) {
        shared.factory.report_panic(payload.as_ref());
    }
}

impl fmt::Debug for CoordinatorExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoordinatorExecutor")
            .field("thread", &self.shared.factory.thread_name())
            .field("closed", &self.is_closed())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc as std_mpsc;

    fn executor(capacity: usize) -> (CoordinatorExecutor, Arc<Mutex<Vec<String>>>) {
        let failures = Arc::new(Mutex::new(Vec::new()));
        let f = failures.clone();
        let factory = Arc::new(CoordinatorExecutorThreadFactory::new(
            "t",
            Arc::new(move |e| f.lock().unwrap().push(e.to_string())),
        ));
        (
            CoordinatorExecutor::start(factory, capacity).unwrap(),
            failures,
        )
    }

    #[test]
    fn self_submission_never_waits_on_the_full_queue_and_its_local_queue_is_bounded() {
        let (exec, failures) = executor(1);
        let exec = Arc::new(exec);
        let (tx, rx) = std_mpsc::channel();
        let (gate_tx, gate_rx) = std_mpsc::channel::<()>();
        let e = exec.clone();
        let tx1 = tx.clone();
        // The first task holds the thread until the queue is full, then queues to itself.
        exec.execute(Box::new(move || {
            let _ = gate_rx.recv();
            let t = tx1.clone();
            let first = e.execute(Box::new(move || {
                let _ = t.send("self".to_string());
            }));
            let second = e.execute(Box::new(|| {}));
            let _ = tx1.send(format!("{first:?} {second:?}"));
        }))
        .unwrap();
        let tx2 = tx.clone();
        // Blocks this plain thread until the loop has taken the first task, then fills the queue.
        exec.execute(Box::new(move || {
            let _ = tx2.send("foreign".to_string());
        }))
        .unwrap();
        gate_tx.send(()).unwrap();
        let got: Vec<String> = (0..3).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got[0], "Ok(()) Err(SelfQueueFull(1))");
        assert!(got.contains(&"self".to_string()) && got.contains(&"foreign".to_string()));
        assert!(failures.lock().unwrap().is_empty());
        exec.close();
    }

    #[test]
    fn tasks_queued_to_itself_run_in_order() {
        let (exec, _) = executor(8);
        let exec = Arc::new(exec);
        let (tx, rx) = std_mpsc::channel();
        let e = exec.clone();
        exec.execute(Box::new(move || {
            for i in 0..5 {
                let tx = tx.clone();
                let _ = e.execute(Box::new(move || {
                    let _ = tx.send(i);
                }));
            }
        }))
        .unwrap();
        let got: Vec<i32> = (0..5).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got, [0, 1, 2, 3, 4]);
        exec.close();
    }

    #[test]
    fn a_panicking_task_is_reported_and_the_loop_goes_on() {
        let (exec, failures) = executor(4);
        exec.execute(Box::new(|| panic!("kaboom"))).unwrap();
        let (tx, rx) = std_mpsc::channel();
        exec.execute(Box::new(move || tx.send(()).unwrap()))
            .unwrap();
        rx.recv().unwrap();
        let failures = failures.lock().unwrap();
        assert_eq!(failures.len(), 1);
        assert!(failures[0].contains("coordinator-t") && failures[0].contains("kaboom"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_fails_sync_submission_on_tokio_and_waits_in_the_async_form() {
        let (exec, _) = executor(1);
        let (gate_tx, gate_rx) = std_mpsc::channel::<()>();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        exec.execute(Box::new(move || {
            started_tx.send(()).unwrap();
            gate_rx.recv().unwrap();
        }))
        .unwrap();
        started_rx.await.unwrap();
        // The thread is busy; the queue holds one task.
        exec.execute(Box::new(|| {})).unwrap();
        assert_eq!(exec.execute(Box::new(|| {})), Err(SubmitError::WouldBlock));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let waiting = exec.execute_async(Box::new(move || tx.send(()).unwrap()));
        gate_tx.send(()).unwrap();
        waiting.await.unwrap();
        rx.await.unwrap();
        exec.close();
        exec.terminated().await;
        assert_eq!(exec.execute(Box::new(|| {})), Err(SubmitError::Closed));
    }

    #[tokio::test]
    async fn close_drops_queued_tasks_and_ends_the_thread() {
        let (exec, _) = executor(8);
        let (gate_tx, gate_rx) = std_mpsc::channel::<()>();
        let (ran_tx, mut ran_rx) = tokio::sync::mpsc::channel::<()>(8);
        exec.execute(Box::new(move || gate_rx.recv().unwrap()))
            .unwrap();
        exec.execute(Box::new(move || ran_tx.try_send(()).unwrap()))
            .unwrap();
        exec.close();
        gate_tx.send(()).unwrap();
        exec.terminated().await;
        assert!(exec.is_terminated());
        // The queued task was dropped, so its sender is gone without sending.
        assert_eq!(ran_rx.recv().await, None);
    }
}
