//! The committer's decisions, as pure functions over what it observed: which checkpoint a table
//! already holds for a job ([`max_committed_checkpoint`], from the snapshot summaries along the
//! current snapshot's ancestry), and which pending checkpoints still need a commit
//! ([`still_to_commit`]).

use std::collections::{BTreeMap, HashMap};

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

    proptest! {
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
