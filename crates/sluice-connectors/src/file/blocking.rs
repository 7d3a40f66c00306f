//! Running short blocking file operations from a task without stalling the tokio worker's
//! other tasks.

/// Runs `f`, telling a multi-threaded tokio runtime first that this worker will block (its other
/// tasks move to another worker meanwhile). Outside such a runtime, `f` simply runs.
pub(crate) fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}
