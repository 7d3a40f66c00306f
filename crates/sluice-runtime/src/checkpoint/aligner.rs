//! Barrier alignment for exactly-once checkpoints, as a pure state machine.
//!
//! A task with several input channels must snapshot at a point that is, on every channel, after
//! all records before barrier N and before all records after it. When barrier N arrives on a
//! channel, that channel is blocked (its later records wait in the channel) until every live
//! channel has delivered barrier N; channels that ended count as aligned. Then the task snapshots
//! and every channel is released.
//!
//! ```text
//! let mut a = BarrierAligner::new(2);
//! a.on_barrier(0, c(1)) -> []             channel 0 is blocked, channel 1 is not
//! a.on_barrier(1, c(1)) -> [Aligned(1)]   both released
//! ```

use sluice_core::CheckpointId;

/// What alignment decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AlignEvent {
    /// Every live channel delivered this barrier: snapshot now, then forward the barrier.
    Aligned(CheckpointId),
    /// A newer barrier arrived before this checkpoint aligned: it is abandoned (the task declines
    /// it) and alignment of the newer one starts.
    Abandoned(CheckpointId),
}

/// Tracks which channels delivered the barrier being aligned.
#[derive(Clone, Debug)]
pub(crate) struct BarrierAligner {
    current: Option<CheckpointId>,
    arrived: Vec<bool>,
    ended: Vec<bool>,
    last_aligned: CheckpointId,
}

impl BarrierAligner {
    /// An aligner over `channels` input channels.
    pub(crate) fn new(channels: usize) -> Self {
        BarrierAligner {
            current: None,
            arrived: vec![false; channels],
            ended: vec![false; channels],
            last_aligned: CheckpointId(0),
        }
    }

    /// Whether channel `ch` must not be read now (it delivered the barrier being aligned).
    pub(crate) fn is_blocked(&self, ch: usize) -> bool {
        self.current.is_some() && self.arrived[ch]
    }

    /// Channel `ch` delivered barrier `id`.
    pub(crate) fn on_barrier(&mut self, ch: usize, id: CheckpointId) -> Vec<AlignEvent> {
        let mut out = Vec::new();
        if id <= self.last_aligned {
            return out; // stale: a checkpoint this task already took or abandoned
        }
        match self.current {
            Some(c) if id < c => return out,
            Some(c) if id > c => {
                out.push(AlignEvent::Abandoned(c));
                self.arrived.iter_mut().for_each(|a| *a = false);
                self.current = Some(id);
            }
            Some(_) => {}
            None => self.current = Some(id),
        }
        self.arrived[ch] = true;
        out.extend(self.check());
        out
    }

    /// Channel `ch` ended; it no longer holds back alignment.
    pub(crate) fn on_end(&mut self, ch: usize) -> Vec<AlignEvent> {
        self.ended[ch] = true;
        self.check().into_iter().collect()
    }

    /// Gives up the checkpoint being aligned (it was aborted), releasing every channel.
    pub(crate) fn abandon(&mut self, id: CheckpointId) -> bool {
        if self.current == Some(id) {
            self.current = None;
            self.last_aligned = self.last_aligned.max(id);
            self.arrived.iter_mut().for_each(|a| *a = false);
            true
        } else {
            false
        }
    }

    fn check(&mut self) -> Option<AlignEvent> {
        let id = self.current?;
        let done = self.arrived.iter().zip(&self.ended).all(|(a, e)| *a || *e);
        if done {
            self.current = None;
            self.last_aligned = id;
            self.arrived.iter_mut().for_each(|a| *a = false);
            Some(AlignEvent::Aligned(id))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u64) -> CheckpointId {
        CheckpointId(id)
    }

    #[test]
    fn worked_example() {
        let mut a = BarrierAligner::new(2);
        assert!(a.on_barrier(0, c(1)).is_empty());
        assert!(a.is_blocked(0));
        assert!(!a.is_blocked(1));
        assert_eq!(a.on_barrier(1, c(1)), vec![AlignEvent::Aligned(c(1))]);
        assert!(!a.is_blocked(0));
    }

    #[test]
    fn single_channel_aligns_at_once() {
        let mut a = BarrierAligner::new(1);
        assert_eq!(a.on_barrier(0, c(1)), vec![AlignEvent::Aligned(c(1))]);
        assert!(!a.is_blocked(0));
    }

    #[test]
    fn ended_channels_count_as_aligned() {
        let mut a = BarrierAligner::new(3);
        a.on_end(2);
        assert!(a.on_barrier(0, c(4)).is_empty());
        assert_eq!(a.on_end(1), vec![AlignEvent::Aligned(c(4))]);
    }

    #[test]
    fn a_newer_barrier_abandons_the_older_checkpoint() {
        let mut a = BarrierAligner::new(2);
        a.on_barrier(0, c(1));
        assert_eq!(a.on_barrier(1, c(2)), vec![AlignEvent::Abandoned(c(1))]);
        assert!(a.is_blocked(1) && !a.is_blocked(0));
        // the late barrier 1 on channel 0 is stale now
        assert!(a.on_barrier(0, c(1)).is_empty());
        assert_eq!(a.on_barrier(0, c(2)), vec![AlignEvent::Aligned(c(2))]);
    }

    #[test]
    fn duplicate_and_stale_barriers_are_ignored() {
        let mut a = BarrierAligner::new(2);
        a.on_barrier(0, c(3));
        assert_eq!(a.on_barrier(1, c(3)), vec![AlignEvent::Aligned(c(3))]);
        assert!(a.on_barrier(1, c(3)).is_empty());
        assert!(a.on_barrier(0, c(2)).is_empty());
        assert!(!a.is_blocked(0) && !a.is_blocked(1));
    }

    #[test]
    fn abandon_releases_blocked_channels() {
        let mut a = BarrierAligner::new(2);
        a.on_barrier(0, c(5));
        assert!(a.abandon(c(5)));
        assert!(!a.is_blocked(0));
        assert!(
            a.on_barrier(1, c(5)).is_empty(),
            "an abandoned checkpoint does not restart"
        );
    }
}
