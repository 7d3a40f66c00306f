//! [`CheckpointSettings`]: how often a job checkpoints, how long a checkpoint may take, and how
//! many failed checkpoints it tolerates, with Flink's defaults.

use std::time::Duration;

/// Checkpointing configuration, set with
/// [`StreamEnvironment::set_checkpoint_settings`](crate::StreamEnvironment::set_checkpoint_settings).
///
/// The names follow Flink's `execution.checkpointing.*` options:
///
/// | field | Flink option | default |
/// | --- | --- | --- |
/// | `interval` | `interval` | (required) |
/// | `timeout` | `timeout` | 10 min |
/// | `min_pause` | `min-pause` | 0 |
/// | `max_concurrent` | `max-concurrent-checkpoints` | 1 |
/// | `retained` | `num-retained` | 1 |
/// | `tolerable_failed_checkpoints` | `tolerable-failed-checkpoints` | 0 |
///
/// ```
/// use sluice_runtime::checkpoint::CheckpointSettings;
/// use std::time::Duration;
///
/// let s = CheckpointSettings::every(Duration::from_millis(500))
///     .with_timeout(Duration::from_secs(30))
///     .with_tolerable_failed_checkpoints(3);
/// assert_eq!(s.max_concurrent, 1);
/// assert!(s.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointSettings {
    /// Time between two triggers.
    pub interval: Duration,
    /// A checkpoint not complete after this long is aborted (it *expired*).
    pub timeout: Duration,
    /// Minimum time between the end of one checkpoint and the trigger of the next.
    pub min_pause: Duration,
    /// How many checkpoints may be in progress at once.
    pub max_concurrent: usize,
    /// How many completed checkpoints storage keeps.
    pub retained: usize,
    /// How many checkpoint failures in a row the job tolerates before it fails over. As in
    /// Flink, only failures that a failover might cure count: a checkpoint that expired, one a
    /// task declined because its snapshot failed, and one whose files could not be written.
    /// Checkpoints aborted because they were subsumed, because the job failed, or because a
    /// coordinator refused to take its part do not count. A completed checkpoint resets the
    /// count.
    pub tolerable_failed_checkpoints: u32,
}

impl CheckpointSettings {
    /// Checkpoints every `interval`, with Flink's defaults otherwise: a 10 minute timeout, no
    /// pause, one at a time, one retained, no failed checkpoint tolerated.
    pub fn every(interval: Duration) -> Self {
        CheckpointSettings {
            interval,
            timeout: Duration::from_secs(600),
            min_pause: Duration::ZERO,
            max_concurrent: 1,
            retained: 1,
            tolerable_failed_checkpoints: 0,
        }
    }

    /// Sets the time after which a checkpoint expires.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the minimum pause between two checkpoints.
    pub fn with_min_pause(mut self, min_pause: Duration) -> Self {
        self.min_pause = min_pause;
        self
    }

    /// Sets how many checkpoints may be in progress at once.
    pub fn with_max_concurrent(mut self, max_concurrent: usize) -> Self {
        self.max_concurrent = max_concurrent;
        self
    }

    /// Sets how many completed checkpoints storage keeps.
    pub fn with_retained(mut self, retained: usize) -> Self {
        self.retained = retained;
        self
    }

    /// Sets how many checkpoint failures in a row are tolerated.
    pub fn with_tolerable_failed_checkpoints(mut self, failures: u32) -> Self {
        self.tolerable_failed_checkpoints = failures;
        self
    }

    /// Checks the values, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err("the checkpoint interval must be greater than zero".into());
        }
        if self.timeout.is_zero() {
            return Err("the checkpoint timeout must be greater than zero".into());
        }
        if self.max_concurrent == 0 {
            return Err(
                "at most 0 concurrent checkpoints would never checkpoint; use 1 or more".into(),
            );
        }
        if self.retained == 0 {
            return Err("at least one completed checkpoint must be retained".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_bad_value() {
        let s = CheckpointSettings::every(Duration::ZERO);
        assert!(s.validate().unwrap_err().contains("interval"));
        let s = CheckpointSettings::every(Duration::from_millis(1)).with_retained(0);
        assert!(s.validate().unwrap_err().contains("retained"));
        let s = CheckpointSettings::every(Duration::from_millis(1)).with_timeout(Duration::ZERO);
        assert!(s.validate().unwrap_err().contains("timeout"));
        let s = CheckpointSettings::every(Duration::from_millis(1)).with_max_concurrent(0);
        assert!(s.validate().unwrap_err().contains("concurrent"));
    }
}
