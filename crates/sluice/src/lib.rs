//! sluice: a stream-processing engine with Flink's guarantees, as a Rust library.
//!
//! This facade re-exports the public API of the workspace's crates. Most programs need only the
//! [`prelude`].
//!
//! ```
//! use sluice::prelude::*;
//!
//! let env = StreamEnvironment::new();
//! let out = env.from_iter(vec![1u64, 2, 3]).map(|x| x + 1).collect();
//! env.execute_blocking("hello").unwrap();
//! let mut v = out.take();
//! v.sort();
//! assert_eq!(v, vec![2, 3, 4]);
//! ```

pub use sluice_async_io as async_io;
pub use sluice_connectors as connectors;
pub use sluice_coordinator as coordinator;
pub use sluice_core as core;
pub use sluice_runtime as runtime;
pub use sluice_runtime::*;

/// Everything a job definition usually needs.
pub mod prelude {
    pub use sluice_async_io::{
        AsyncBatchFunction, AsyncDataStream, AsyncFunction, AsyncRetryStrategy, AsyncWait, async_fn,
    };
    pub use sluice_runtime::prelude::*;
}
