//! Tolerable checkpoint failures (Flink's `CheckpointFailureManager`), as a pure counter.
//!
//! Every aborted checkpoint is reported with its [`AbortReason`]; the kinds a failover might cure
//! (expired, declined by a failing snapshot, not writable) count, once per checkpoint, unless the
//! checkpoint is older than the last one that completed. A completed checkpoint resets the count.
//! When the count exceeds the tolerated number, the counter answers with the failure that fails
//! the job over, naming the checkpoint and why it failed, and starts counting afresh.
//!
//! ```text
//! tolerated = 1
//! failed(3, Expired)   -> None          1 failure, tolerated
//! failed(4, Subsumed)  -> None          does not count
//! failed(5, Expired)   -> Some(5: ...)  2 failures in a row: fail over
//! ```

use super::planner::AbortReason;
use sluice_core::CheckpointId;
use std::collections::BTreeSet;

/// The failure that exceeded the tolerated number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TooManyFailures {
    /// The checkpoint whose failure was one too many.
    pub(crate) checkpoint: CheckpointId,
    /// Why it failed.
    pub(crate) reason: String,
    /// How many failures in a row were tolerated.
    pub(crate) tolerated: u32,
}

/// Counts checkpoint failures in a row. See the module documentation.
#[derive(Clone, Debug, Default)]
pub(crate) struct FailureCounter {
    tolerated: u32,
    counted: BTreeSet<CheckpointId>,
    last_completed: CheckpointId,
}

impl FailureCounter {
    /// A counter that tolerates `tolerated` failures in a row.
    pub(crate) fn new(tolerated: u32) -> Self {
        FailureCounter {
            tolerated,
            ..Default::default()
        }
    }

    /// How many counted failures in a row there are now.
    #[cfg(test)]
    pub(crate) fn failures_in_a_row(&self) -> usize {
        self.counted.len()
    }

    /// Checkpoint `id` completed.
    pub(crate) fn on_completed(&mut self, id: CheckpointId) {
        if id > self.last_completed {
            self.last_completed = id;
            self.counted.clear();
        }
    }

    /// Checkpoint `id` was aborted because of `reason`: returns the failure that must fail the
    /// job over when the tolerated number is exceeded.
    pub(crate) fn on_aborted(
        &mut self,
        id: CheckpointId,
        reason: &AbortReason,
    ) -> Option<TooManyFailures> {
        if !reason.counts_as_failure() || id <= self.last_completed {
            return None;
        }
        self.counted.insert(id);
        if self.counted.len() as u64 <= u64::from(self.tolerated) {
            return None;
        }
        self.counted.clear();
        Some(TooManyFailures {
            checkpoint: id,
            reason: reason.to_string(),
            tolerated: self.tolerated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn expired() -> AbortReason {
        AbortReason::Expired {
            after: Duration::from_millis(10),
        }
    }

    #[test]
    fn the_default_tolerates_nothing() {
        let mut f = FailureCounter::new(0);
        let failed = f.on_aborted(CheckpointId(1), &expired()).unwrap();
        assert_eq!(failed.checkpoint, CheckpointId(1));
        assert!(failed.reason.contains("expired"), "{}", failed.reason);
    }

    #[test]
    fn n_failures_are_tolerated_and_the_next_one_fails() {
        let mut f = FailureCounter::new(2);
        assert_eq!(f.on_aborted(CheckpointId(1), &expired()), None);
        assert_eq!(
            f.on_aborted(CheckpointId(1), &expired()),
            None,
            "one checkpoint counts once"
        );
        let io = AbortReason::PersistFailed("disk full".into());
        assert_eq!(f.on_aborted(CheckpointId(2), &io), None);
        assert_eq!(f.failures_in_a_row(), 2);
        let failed = f.on_aborted(CheckpointId(3), &io).unwrap();
        assert_eq!(failed.checkpoint, CheckpointId(3));
        assert!(failed.reason.contains("disk full"));
        assert_eq!(failed.tolerated, 2);
        assert_eq!(f.failures_in_a_row(), 0, "counting starts afresh");
    }

    #[test]
    fn a_completed_checkpoint_resets_the_count_and_older_failures_do_not_count() {
        let mut f = FailureCounter::new(1);
        assert_eq!(f.on_aborted(CheckpointId(1), &expired()), None);
        f.on_completed(CheckpointId(3));
        assert_eq!(f.failures_in_a_row(), 0);
        assert_eq!(
            f.on_aborted(CheckpointId(2), &expired()),
            None,
            "older than the last completed"
        );
        assert_eq!(f.on_aborted(CheckpointId(4), &expired()), None);
        assert!(f.on_aborted(CheckpointId(5), &expired()).is_some());
    }

    #[test]
    fn aborts_a_failover_cannot_cure_do_not_count() {
        let mut f = FailureCounter::new(0);
        for (i, r) in [
            AbortReason::Subsumed {
                by: CheckpointId(9),
            },
            AbortReason::JobFailed,
            AbortReason::DeclinedSubsumed { task: 1 },
            AbortReason::CoordinatorDeclined("no".into()),
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(f.on_aborted(CheckpointId(i as u64 + 1), r), None);
        }
    }
}
