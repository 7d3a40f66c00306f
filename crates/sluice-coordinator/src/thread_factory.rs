//! [`CoordinatorExecutorThreadFactory`]: makes the one named OS thread a coordinator runs on,
//! tells whether the current thread is it, and turns a panic on it into a job failure.

use crate::error::ThreadFactoryError;
use sluice_core::{UserError, panic_message};
use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

/// Each factory's identity, never 0 (0 marks a thread no factory made).
static NEXT_FACTORY_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The identity of the factory that made the current thread, 0 if none did. A plain
    /// thread-local read: the identity check runs once or twice per event, on hot paths.
    static MADE_BY: Cell<u64> = const { Cell::new(0) };
}

/// What the factory calls when code on its thread panics: in a job, the coordinator context's
/// `fail_job`.
pub type PanicHandler = Arc<dyn Fn(UserError) + Send + Sync>;

/// Makes exactly one named thread for one coordinator (Flink's
/// `CoordinatorExecutorThreadFactory`).
///
/// - The thread is named `coordinator-<operator name>`.
/// - [`is_current_thread_coordinator_thread`](Self::is_current_thread_coordinator_thread) tells
///   whether the caller runs on it; coordinator code uses it to run calls inline instead of
///   queueing them to itself.
/// - A panic that escapes code on the thread is turned into a job failure through the panic
///   handler (Flink fails the job; Iceberg's copy exits the process, which sluice does not do).
/// - One factory makes one thread: a second [`new_thread`](Self::new_thread) is an error, since
///   the identity check would otherwise be ambiguous. Never share a factory between
///   coordinators.
///
/// ```
/// use sluice_coordinator::CoordinatorExecutorThreadFactory;
/// use std::sync::{Arc, Mutex};
///
/// let failures = Arc::new(Mutex::new(Vec::new()));
/// let sink = failures.clone();
/// let factory = Arc::new(CoordinatorExecutorThreadFactory::new(
///     "enumerator",
///     Arc::new(move |e| sink.lock().unwrap().push(e.to_string())),
/// ));
/// assert_eq!(factory.thread_name(), "coordinator-enumerator");
///
/// let f = factory.clone();
/// let handle = factory
///     .new_thread(move || {
///         assert!(f.is_current_thread_coordinator_thread());
///         panic!("lost the split assignment");
///     })
///     .unwrap();
/// handle.join().unwrap(); // the panic was caught and reported, not propagated
/// assert!(!factory.is_current_thread_coordinator_thread());
/// assert!(failures.lock().unwrap()[0].contains("lost the split assignment"));
/// assert!(factory.new_thread(|| ()).is_err()); // one thread per factory
/// ```
pub struct CoordinatorExecutorThreadFactory {
    thread_name: String,
    spawned: AtomicBool,
    id: u64,
    on_panic: PanicHandler,
}

impl CoordinatorExecutorThreadFactory {
    /// A factory for the coordinator of `operator_name`, reporting panics to `on_panic`.
    pub fn new(operator_name: &str, on_panic: PanicHandler) -> Self {
        CoordinatorExecutorThreadFactory {
            thread_name: format!("coordinator-{operator_name}"),
            spawned: AtomicBool::new(false),
            id: NEXT_FACTORY_ID.fetch_add(1, Ordering::Relaxed),
            on_panic,
        }
    }

    /// The name of the coordinator thread.
    pub fn thread_name(&self) -> &str {
        &self.thread_name
    }

    /// Spawns the coordinator thread running `body`. Fails if this factory already made one.
    pub fn new_thread<F>(&self, body: F) -> Result<JoinHandle<()>, ThreadFactoryError>
    where
        F: FnOnce() + Send + 'static,
    {
        if self.spawned.swap(true, Ordering::SeqCst) {
            return Err(ThreadFactoryError::AlreadyCreated {
                name: self.thread_name.clone(),
            });
        }
        let id = self.id;
        let on_panic = self.on_panic.clone();
        let name = self.thread_name.clone();
        std::thread::Builder::new()
            .name(self.thread_name.clone())
            .spawn(move || {
                MADE_BY.with(|m| m.set(id));
                if let Err(payload) = catch_unwind(AssertUnwindSafe(body)) {
                    report(&name, &on_panic, payload.as_ref());
                }
            })
            .map_err(|e| ThreadFactoryError::Spawn {
                name: self.thread_name.clone(),
                reason: e.to_string(),
            })
    }

    /// Whether the calling thread is the thread this factory made.
    pub fn is_current_thread_coordinator_thread(&self) -> bool {
        MADE_BY.with(Cell::get) == self.id
    }

    /// Reports a panic caught on the coordinator thread (by its executor loop) as a job failure.
    pub fn report_panic(&self, payload: &(dyn Any + Send)) {
        report(&self.thread_name, &self.on_panic, payload);
    }
}

fn report(thread_name: &str, on_panic: &PanicHandler, payload: &(dyn Any + Send)) {
    let message = format!(
        "thread '{thread_name}' produced an uncaught panic: {}",
        panic_message(payload)
    );
    tracing::error!("{message}; failing the job");
    on_panic(message.into());
}

impl fmt::Debug for CoordinatorExecutorThreadFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoordinatorExecutorThreadFactory")
            .field("thread_name", &self.thread_name)
            .field("spawned", &self.spawned.load(Ordering::SeqCst))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn other_threads_are_not_the_coordinator_thread() {
        let factory = Arc::new(CoordinatorExecutorThreadFactory::new("x", Arc::new(|_| {})));
        let f = factory.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        factory
            .new_thread(move || {
                let inner = f.clone();
                let elsewhere =
                    std::thread::spawn(move || inner.is_current_thread_coordinator_thread())
                        .join()
                        .unwrap_or(true);
                let name = std::thread::current().name().map(str::to_string);
                let _ = tx.send((f.is_current_thread_coordinator_thread(), elsewhere, name));
            })
            .unwrap()
            .join()
            .unwrap();
        let (here, elsewhere, name) = rx.recv().unwrap();
        assert!(here);
        assert!(!elsewhere);
        assert_eq!(name.as_deref(), Some("coordinator-x"));
    }

    #[test]
    fn one_coordinators_thread_is_not_anothers() {
        let a = Arc::new(CoordinatorExecutorThreadFactory::new("a", Arc::new(|_| {})));
        let b = Arc::new(CoordinatorExecutorThreadFactory::new("b", Arc::new(|_| {})));
        let (fa, fb) = (a.clone(), b.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        a.new_thread(move || {
            let _ = tx.send((
                fa.is_current_thread_coordinator_thread(),
                fb.is_current_thread_coordinator_thread(),
            ));
        })
        .unwrap()
        .join()
        .unwrap();
        assert_eq!(rx.recv().unwrap(), (true, false));
    }

    #[test]
    fn a_body_that_returns_normally_reports_nothing() {
        let failures = Arc::new(Mutex::new(0));
        let f = failures.clone();
        let factory = CoordinatorExecutorThreadFactory::new(
            "quiet",
            Arc::new(move |_| *f.lock().unwrap() += 1),
        );
        factory.new_thread(|| ()).unwrap().join().unwrap();
        assert_eq!(*failures.lock().unwrap(), 0);
    }
}
