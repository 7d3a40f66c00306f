//! [`blocking`]: running a call that may block from operator code without stalling the other
//! tasks of the tokio worker it runs on.

/// Runs `f`, which may block (a file write, a store read from disk, waiting for another
/// runtime), telling a multi-threaded tokio runtime first that this worker will block, so that
/// its other tasks move to another thread meanwhile (`tokio::task::block_in_place`). Outside
/// such a runtime (a current-thread runtime, as in tests, or none) `f` simply runs: there is no
/// other worker to hand them to.
///
/// ```
/// use sluice_runtime::operator::blocking;
///
/// let dir = std::env::temp_dir().join(format!("sluice-blocking-doc-{}", std::process::id()));
/// let made = blocking(|| std::fs::create_dir_all(&dir));
/// assert!(made.is_ok());
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}
