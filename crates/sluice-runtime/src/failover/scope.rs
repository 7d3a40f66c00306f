//! Which tasks a task failure restarts: Flink's failover strategies
//! (`jobmanager.execution.failover-strategy`, `region` by default, or `full`).
//!
//! With [`FailoverStrategy::Region`] a failed task restarts with its pipelined region (see
//! `regions.rs`) and every other region keeps running; with [`FailoverStrategy::Full`] every
//! task restarts. Either way the restarted tasks restore the latest completed checkpoint, and the
//! restart strategy decides whether and when (each region restart counts as one restart).
//!
//! Failures that are not a task's own go through a full restart whatever the strategy, as in
//! Flink: a coordinator failure, an event a coordinator could not deliver, too many failed
//! checkpoints, and a failure while the tasks are finishing.
//!
//! A worked example (unit test `worked_example`): regions `{0, 2}`, `{1, 3}` and `{4}`.
//!
//! ```text
//! task 3 fails, Region -> restart tasks [1, 3]
//! task 3 fails, Full   -> restart every task
//! ```

use super::Regions;
use std::fmt;

/// Which tasks restart when one task fails.
///
/// ```
/// use sluice_runtime::failover::FailoverStrategy;
///
/// assert_eq!(FailoverStrategy::default(), FailoverStrategy::Region);
/// assert_eq!(FailoverStrategy::Full.to_string(), "full");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailoverStrategy {
    /// Restart the failed task's pipelined region only (Flink's default): tasks that exchange
    /// no records with it, directly or through others, keep running.
    #[default]
    Region,
    /// Restart every task of the job.
    Full,
}

impl fmt::Display for FailoverStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailoverStrategy::Region => "region",
            FailoverStrategy::Full => "full",
        })
    }
}

/// What a failure of one task restarts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RestartScope {
    /// These tasks (one region), in order.
    Region(Vec<usize>),
    /// Every task.
    All,
}

impl FailoverStrategy {
    /// What a failure of `task` restarts, given the job's `regions`. A region holding every
    /// task is restarted as a whole job.
    pub(crate) fn scope(self, regions: &Regions, task: usize) -> RestartScope {
        match (self, regions.region_of(task)) {
            (FailoverStrategy::Region, Some(r)) if regions.len() > 1 => {
                RestartScope::Region(regions.tasks(r).to_vec())
            }
            _ => RestartScope::All,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::{Connection, Exchange};

    #[test]
    fn worked_example() {
        // chains a (2), b (2), c (1); a -> b forward
        let regions = Regions::compute(
            &[2, 2, 1],
            &[Exchange {
                from: 0,
                to: 1,
                connection: Connection::Pointwise,
            }],
        );
        assert_eq!(
            FailoverStrategy::Region.scope(&regions, 3),
            RestartScope::Region(vec![1, 3])
        );
        assert_eq!(
            FailoverStrategy::Region.scope(&regions, 4),
            RestartScope::Region(vec![4])
        );
        assert_eq!(FailoverStrategy::Full.scope(&regions, 3), RestartScope::All);
    }

    #[test]
    fn one_region_or_an_unknown_task_restarts_everything() {
        let one = Regions::compute(
            &[2, 2],
            &[Exchange {
                from: 0,
                to: 1,
                connection: Connection::AllToAll,
            }],
        );
        assert_eq!(FailoverStrategy::Region.scope(&one, 0), RestartScope::All);
        let two = Regions::compute(&[1, 1], &[]);
        assert_eq!(FailoverStrategy::Region.scope(&two, 9), RestartScope::All);
    }
}
