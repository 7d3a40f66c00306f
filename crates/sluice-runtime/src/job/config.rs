//! [`JobConfig`]: the knobs of one job, with their defaults, and [`DEFAULT_MAX_PARALLELISM`].

use crate::error::JobError;

pub use crate::key_groups::DEFAULT_MAX_PARALLELISM;

/// The configuration of a job, set through [`StreamEnvironment`](crate::StreamEnvironment).
///
/// ```
/// use sluice_runtime::JobConfig;
/// let c = JobConfig::default();
/// assert_eq!(c.batch_size, 1024);
/// assert_eq!(c.max_parallelism, 128);
/// assert!(c.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobConfig {
    /// Parallelism of operators that do not set their own. Default: the number of CPU cores.
    pub parallelism: usize,
    /// Number of key groups, the upper bound of any operator's parallelism. Default 128.
    pub max_parallelism: usize,
    /// Records per batch on the wire and out of sources. Default 1024.
    pub batch_size: usize,
    /// Batches (or control elements) one channel holds before its producer waits. Default 4.
    pub channel_capacity: usize,
    /// Where keyed state lives: the heap (the default) or the stores of a backend such as
    /// `sluice-rocksdb`'s, for state larger than memory.
    pub state_backend: crate::state::StateBackend,
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            parallelism: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            batch_size: 1024,
            channel_capacity: 4,
            state_backend: crate::state::StateBackend::default(),
        }
    }
}

impl JobConfig {
    /// Checks every value, naming the first one that is invalid.
    pub fn validate(&self) -> Result<(), JobError> {
        let bad = |what: &str, v: usize| {
            Err(JobError::InvalidJob(format!(
                "{what} must be at least 1, got {v}"
            )))
        };
        if self.parallelism == 0 {
            return bad("the default parallelism", 0);
        }
        if self.max_parallelism == 0 {
            return bad("max parallelism", 0);
        }
        if self.batch_size == 0 {
            return bad("the batch size", 0);
        }
        if self.channel_capacity == 0 {
            return bad("the channel capacity", 0);
        }
        Ok(())
    }
}
