//! The committer's decisions, as pure functions over what it observed: which checkpoint a table
//! already holds for a job ([`max_committed_checkpoint`], from the snapshot summaries along the
//! current snapshot's ancestry), which pending checkpoints still need a commit
//! ([`still_to_commit`]), and whether a checkpoint without data files is committed
//! ([`EmptyCommits`]).

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;

/// Snapshot summary key: the id of the sink instance ("job") that committed the snapshot.
pub const JOB_ID_KEY: &str = "sluice.job-id";
/// Snapshot summary key: the highest checkpoint whose files the snapshot (and its ancestors of the
/// same job) contain.
pub const MAX_COMMITTED_CHECKPOINT_KEY: &str = "sluice.max-committed-checkpoint-id";

/// The highest checkpoint of `job_id` committed to the table, from the summaries of the current
/// snapshot and its ancestors, newest first: the first summary of that job decides (later
/// commits of one job always carry higher checkpoints). `None` when the job never committed.
pub fn max_committed_checkpoint<'a>(
    newest_first: impl IntoIterator<Item = &'a HashMap<String, String>>,
    job_id: &str,
) -> Option<u64> {
    newest_first
        .into_iter()
        .find(|s| s.get(JOB_ID_KEY).is_some_and(|j| j == job_id))
        .and_then(|s| s.get(MAX_COMMITTED_CHECKPOINT_KEY))
        .and_then(|c| c.parse().ok())
}

/// Splits `pending` (checkpoint → files) into what is already in the table (checkpoints up to
/// `committed`) and what still needs a commit, in checkpoint order.
pub fn still_to_commit<F>(pending: BTreeMap<u64, F>, committed: Option<u64>) -> Vec<(u64, F)> {
    pending
        .into_iter()
        .filter(|(c, _)| committed.is_none_or(|m| *c > m))
        .collect()
}

/// How many checkpoints in a row without data files are skipped before one is committed, by
/// default (Iceberg's `flink.max-continuous-empty-commits` default).
pub const DEFAULT_MAX_CONTINUOUS_EMPTY_COMMITS: NonZeroUsize = NonZeroUsize::new(10).unwrap();

/// Counts the completed checkpoints without data files, as Iceberg's Flink committer does for
/// `flink.max-continuous-empty-commits`: a checkpoint with files is always committed; one without
/// is committed (as a snapshot that only records the checkpoint, so the table's max committed
/// checkpoint moves on) when it is the `max`-th in a row since the last commit, and skipped
/// otherwise. Every commit starts the count again.
#[derive(Clone, Copy, Debug)]
pub struct EmptyCommits {
    max: NonZeroUsize,
    /// Empty checkpoints skipped since the last commit.
    skipped: usize,
}

impl EmptyCommits {
    /// A count that commits every `max`-th empty checkpoint in a row.
    pub fn new(max: NonZeroUsize) -> Self {
        EmptyCommits { max, skipped: 0 }
    }

    /// Whether to commit the next completed checkpoint, which has data files or not; counts it.
    pub fn commit(&mut self, has_files: bool) -> bool {
        if has_files || self.skipped + 1 >= self.max.get() {
            self.skipped = 0;
            true
        } else {
            self.skipped += 1;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn summary(job: &str, checkpoint: u64) -> HashMap<String, String> {
        HashMap::from([
            (JOB_ID_KEY.to_string(), job.to_string()),
            (
                MAX_COMMITTED_CHECKPOINT_KEY.to_string(),
                checkpoint.to_string(),
            ),
        ])
    }

    #[test]
    fn the_newest_summary_of_the_job_decides() {
        let history = [
            summary("b", 9),
            summary("a", 4),
            HashMap::new(),
            summary("a", 3),
        ];
        assert_eq!(max_committed_checkpoint(&history, "a"), Some(4));
        assert_eq!(max_committed_checkpoint(&history, "b"), Some(9));
        assert_eq!(max_committed_checkpoint(&history, "c"), None);
    }

    #[test]
    fn the_nth_empty_checkpoint_in_a_row_is_committed() {
        let mut count = EmptyCommits::new(NonZeroUsize::new(3).unwrap());
        let decisions: Vec<bool> = [true, false, false, false, false, true, false, false, false]
            .into_iter()
            .map(|has_files| count.commit(has_files))
            .collect();
        assert_eq!(
            decisions,
            [true, false, false, true, false, true, false, false, true]
        );
        let mut every = EmptyCommits::new(NonZeroUsize::MIN);
        assert!(every.commit(false) && every.commit(false));
    }

    proptest! {
        /// Whatever the checkpoints hold: those with files are committed, no `max` empty ones in
        /// a row are skipped, and an empty one is committed only after `max - 1` skipped ones.
        #[test]
        fn never_max_empty_checkpoints_in_a_row_are_skipped(
            max in 1usize..6,
            checkpoints in proptest::collection::vec(any::<bool>(), 0..60),
        ) {
            let mut count = EmptyCommits::new(NonZeroUsize::new(max).unwrap());
            let mut skipped = 0;
            for has_files in checkpoints {
                let commit = count.commit(has_files);
                if has_files {
                    prop_assert!(commit);
                } else {
                    prop_assert_eq!(commit, skipped == max - 1);
                }
                skipped = if commit { 0 } else { skipped + 1 };
                prop_assert!(skipped < max);
            }
        }


        /// Whatever was committed, the checkpoints left are exactly the later ones, in order.
        #[test]
        fn only_later_checkpoints_are_committed(ids in proptest::collection::btree_set(1u64..50, 0..10), committed in proptest::option::of(0u64..50)) {
            let pending: BTreeMap<u64, u64> = ids.iter().map(|c| (*c, *c * 10)).collect();
            let left = still_to_commit(pending, committed);
            let expected: Vec<(u64, u64)> = ids.iter().filter(|c| committed.is_none_or(|m| **c > m)).map(|c| (*c, *c * 10)).collect();
            prop_assert_eq!(left, expected);
        }
    }
}
