//! Poison-tolerant locking: [`lock`].

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, recovering the data if a previous holder panicked.
///
/// Sluice catches panics in user code and fails (or restarts) the job, so a panic while a lock
/// is held must not turn every later use of that lock into a second panic. Use it only where each
/// critical section leaves its data consistent before it can panic, so that poisoning carries no
/// information.
///
/// ```
/// use sluice_core::sync::lock;
/// use std::sync::{Arc, Mutex};
///
/// let m = Arc::new(Mutex::new(1));
/// let m2 = m.clone();
/// let _ = std::thread::spawn(move || {
///     let _guard = m2.lock().unwrap();
///     panic!("poisons the mutex");
/// })
/// .join();
/// assert!(m.is_poisoned());
/// *lock(&m) += 1;
/// assert_eq!(*lock(&m), 2);
/// ```
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
