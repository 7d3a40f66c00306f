//! Fencing of control messages: every message between the job master and a task manager
//! carries a [`Fence`], the job master's epoch (raised by each newly elected job master) and
//! the job's attempt (raised by each restart). A receiver keeps the newest fence it has seen
//! and drops anything older, so a deposed job master, or a task of a failed attempt, can no
//! longer change anything.
//!
//! ```
//! use sluice_cluster::fencing::{Fence, FenceKeeper, Verdict};
//!
//! let mut keeper = FenceKeeper::default();
//! assert_eq!(keeper.check(Fence::new(1, 0)), Verdict::Adopt);
//! assert_eq!(keeper.check(Fence::new(1, 0)), Verdict::Accept);
//! // The job restarted: attempt 1 supersedes attempt 0.
//! assert_eq!(keeper.check(Fence::new(1, 1)), Verdict::Adopt);
//! assert!(matches!(keeper.check(Fence::new(1, 0)), Verdict::Stale { .. }));
//! // A new job master (epoch 2) starts its own attempts; the old one is fenced off.
//! assert_eq!(keeper.check(Fence::new(2, 0)), Verdict::Adopt);
//! assert!(matches!(keeper.check(Fence::new(1, 7)), Verdict::Stale { .. }));
//! ```

use serde::{Deserialize, Serialize};
use std::fmt;

/// The job master's epoch and the job's attempt, ordered by epoch first.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Fence {
    /// Raised by every job master that takes over (its leader term).
    pub epoch: u64,
    /// Raised by every restart of the job under one job master.
    pub attempt: u32,
}

impl Fence {
    /// The fence of `attempt` under the job master of `epoch`.
    pub fn new(epoch: u64, attempt: u32) -> Self {
        Fence { epoch, attempt }
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "epoch {} attempt {}", self.epoch, self.attempt)
    }
}

/// What to do with a message carrying a fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The current fence: handle the message.
    Accept,
    /// Newer than anything seen: it is now the current fence; handle the message (and drop
    /// whatever belonged to older fences).
    Adopt,
    /// Older than the current fence: drop the message.
    Stale {
        /// The current fence.
        current: Fence,
    },
}

/// The newest fence a process has seen.
#[derive(Clone, Copy, Debug, Default)]
pub struct FenceKeeper {
    current: Option<Fence>,
}

impl FenceKeeper {
    /// Judges a message carrying `fence`.
    pub fn check(&mut self, fence: Fence) -> Verdict {
        match self.current {
            Some(current) if fence < current => Verdict::Stale { current },
            Some(current) if fence == current => Verdict::Accept,
            _ => {
                self.current = Some(fence);
                Verdict::Adopt
            }
        }
    }

    /// The newest fence seen.
    pub fn current(&self) -> Option<Fence> {
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever order messages arrive in, a message is handled only if its fence is at
        /// least every fence handled before it.
        #[test]
        fn nothing_older_than_a_handled_fence_is_handled(
            fences in proptest::collection::vec((0u64..4, 0u32..4), 1..200),
        ) {
            let mut keeper = FenceKeeper::default();
            let mut newest: Option<Fence> = None;
            for (epoch, attempt) in fences {
                let fence = Fence::new(epoch, attempt);
                match keeper.check(fence) {
                    Verdict::Accept | Verdict::Adopt => {
                        prop_assert!(newest.is_none_or(|n| fence >= n));
                        newest = Some(fence);
                    }
                    Verdict::Stale { current } => prop_assert!(fence < current),
                }
            }
        }
    }
}
