//! Small helpers shared by the modules of this crate.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, recovering the data if a previous holder panicked: every critical section in this
/// crate leaves its data consistent before it can panic, so poisoning carries no information.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether the current thread runs inside a tokio runtime, where blocking is not allowed.
pub(crate) fn in_tokio_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}
