//! [`LiveAttempts`]: the job master's filter for events travelling from subtasks to a
//! coordinator. An event from an attempt that failed or was replaced is dropped, so a
//! coordinator never hears from an attempt it was told is gone.

use sluice_core::{AttemptNumber, SubtaskIndex};
use std::collections::BTreeSet;

/// The attempts of each subtask that a coordinator currently hears from.
///
/// The job master keeps one per coordinator and updates it in the same order as it calls the
/// coordinator: [`attempt_ready`](Self::attempt_ready) before `execution_attempt_ready`,
/// [`attempt_failed`](Self::attempt_failed) before `execution_attempt_failed`,
/// [`subtask_reset`](Self::subtask_reset) / [`reset`](Self::reset) with `subtask_reset` /
/// `reset_to_checkpoint`. For every event arriving from a subtask it calls
/// [`admit`](Self::admit) and forwards the event to `handle_event_from_operator` only when that
/// returns `true`.
///
/// ```
/// use sluice_coordinator::LiveAttempts;
///
/// let mut live = LiveAttempts::new(2);
/// live.attempt_ready(0, 0);
/// assert!(live.admit(0, 0));
/// live.attempt_failed(0, 0);
/// live.attempt_ready(0, 1);
/// assert!(!live.admit(0, 0)); // the old attempt's late event is dropped
/// assert!(live.admit(0, 1));
/// assert!(!live.admit(1, 0)); // never ready
/// assert!(!live.admit(9, 0)); // no such subtask
/// ```
#[derive(Debug, Clone)]
pub struct LiveAttempts {
    slots: Vec<BTreeSet<AttemptNumber>>,
}

impl LiveAttempts {
    /// No live attempts, for an operator with `parallelism` subtasks.
    pub fn new(parallelism: usize) -> Self {
        LiveAttempts {
            slots: vec![BTreeSet::new(); parallelism],
        }
    }

    /// `attempt` of `subtask` is running and reported ready to the coordinator.
    pub fn attempt_ready(&mut self, subtask: SubtaskIndex, attempt: AttemptNumber) {
        if let Some(s) = self.slots.get_mut(subtask) {
            s.insert(attempt);
        }
    }

    /// `attempt` of `subtask` failed or was cancelled.
    pub fn attempt_failed(&mut self, subtask: SubtaskIndex, attempt: AttemptNumber) {
        if let Some(s) = self.slots.get_mut(subtask) {
            s.remove(&attempt);
        }
    }

    /// `subtask` is being restored (regional failover): none of its attempts is live.
    pub fn subtask_reset(&mut self, subtask: SubtaskIndex) {
        if let Some(s) = self.slots.get_mut(subtask) {
            s.clear();
        }
    }

    /// The whole operator is being restored (global failover).
    pub fn reset(&mut self) {
        self.slots.iter_mut().for_each(BTreeSet::clear);
    }

    /// Whether an event from `attempt` of `subtask` should reach the coordinator.
    pub fn admit(&self, subtask: SubtaskIndex, attempt: AttemptNumber) -> bool {
        self.slots
            .get(subtask)
            .is_some_and(|s| s.contains(&attempt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_drops_every_attempt() {
        let mut live = LiveAttempts::new(3);
        for s in 0..3 {
            live.attempt_ready(s, 4);
        }
        live.subtask_reset(1);
        assert!(live.admit(0, 4) && !live.admit(1, 4) && live.admit(2, 4));
        live.reset();
        assert!((0..3).all(|s| !live.admit(s, 4)));
    }
}
