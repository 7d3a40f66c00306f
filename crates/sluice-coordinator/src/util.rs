//! Small helpers shared by the modules of this crate.

/// Locks a mutex, recovering the data if a previous holder panicked: every critical section in
/// this crate leaves its data consistent before it can panic, so poisoning carries no information.
pub(crate) use sluice_core::sync::lock;

/// Whether the current thread runs inside a tokio runtime, where blocking is not allowed.
pub(crate) fn in_tokio_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}
