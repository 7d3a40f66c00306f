//! Credit-based flow control of one channel, as pure state: the receiving end owns a window of
//! `capacity` buffers and grants the sender one credit per free buffer; the sender spends one
//! credit per data frame and never sends without one. So at most `capacity` frames of a
//! channel are ever queued at the receiver, however slow its consumer, and a slow consumer
//! holds back only its own channel's sender, not the connection.
//!
//! Credits go back in batches: a consumed buffer becomes credit to announce, and credit is
//! announced once at least [`ReceiverWindow::announce_at`] of it gathered (half the window,
//! at least one), so a busy channel sends one credit frame per half window, not per record.
//! This cannot stall a channel: when the sender has no credit and the consumer has emptied the
//! queue, all `capacity` buffers are unannounced credit, which is at least the threshold.
//!
//! ```
//! use sluice_net::credit::{ReceiverWindow, SenderCredit};
//!
//! // A window of 4 buffers: the receiver grants 4 credits when the channel opens.
//! let (mut window, initial) = ReceiverWindow::new(4);
//! let mut sender = SenderCredit::default();
//! sender.grant(initial);
//! // The sender sends 4 frames, then has to wait.
//! for _ in 0..4 {
//!     assert!(sender.try_take());
//!     window.on_data().unwrap();
//! }
//! assert!(!sender.try_take());
//! // The consumer takes one: not yet worth a credit frame; a second one is (half the window).
//! assert_eq!(window.on_consumed(), None);
//! assert_eq!(window.on_consumed(), Some(2));
//! sender.grant(2);
//! assert!(sender.try_take());
//! // A sender that ignores its credit is caught.
//! window.on_data().unwrap();
//! window.on_data().unwrap();
//! assert!(window.on_data().is_err());
//! ```

/// Data arrived beyond the credit granted: the peer does not follow the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a data frame arrived without credit: {queued} of {capacity} buffers already queued")]
pub struct CreditViolation {
    /// Buffers queued when it arrived.
    pub queued: u32,
    /// The window.
    pub capacity: u32,
}

/// The receiving end of a channel: its queued buffers and the credit it owes the sender.
#[derive(Clone, Debug)]
pub struct ReceiverWindow {
    capacity: u32,
    queued: u32,
    unannounced: u32,
    max_queued: u32,
}

impl ReceiverWindow {
    /// A window of `capacity` buffers (at least one), and the credit to grant when the channel
    /// opens (all of it).
    pub fn new(capacity: u32) -> (Self, u32) {
        let capacity = capacity.max(1);
        let window = ReceiverWindow {
            capacity,
            queued: 0,
            unannounced: 0,
            max_queued: 0,
        };
        (window, capacity)
    }

    /// How much gathered credit is worth a credit frame: half the window, at least one.
    pub fn announce_at(&self) -> u32 {
        (self.capacity / 2).max(1)
    }

    /// A data frame arrived and takes a buffer; an error if the sender had no credit for it.
    pub fn on_data(&mut self) -> Result<(), CreditViolation> {
        if self.queued + self.unannounced >= self.capacity {
            return Err(CreditViolation {
                queued: self.queued,
                capacity: self.capacity,
            });
        }
        self.queued += 1;
        self.max_queued = self.max_queued.max(self.queued);
        Ok(())
    }

    /// The consumer took a buffer: the credit to announce now, if enough gathered.
    pub fn on_consumed(&mut self) -> Option<u32> {
        if self.queued == 0 {
            return None;
        }
        self.queued -= 1;
        self.unannounced += 1;
        (self.unannounced >= self.announce_at()).then(|| std::mem::take(&mut self.unannounced))
    }

    /// Buffers queued now.
    pub fn queued(&self) -> u32 {
        self.queued
    }

    /// The most buffers ever queued at once (never above the capacity).
    pub fn max_queued(&self) -> u32 {
        self.max_queued
    }

    /// The window.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

/// The sending end of a channel: the credit it holds.
#[derive(Clone, Debug, Default)]
pub struct SenderCredit {
    available: u64,
}

impl SenderCredit {
    /// Credit for `buffers` more frames arrived.
    pub fn grant(&mut self, buffers: u32) {
        self.available += u64::from(buffers);
    }

    /// Spends one credit, if there is one.
    pub fn try_take(&mut self) -> bool {
        let has = self.available > 0;
        self.available -= u64::from(has);
        has
    }

    /// Credit held now.
    pub fn available(&self) -> u64 {
        self.available
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Under any interleaving of sends and consumption, a sender that follows its credit is
        /// never refused, the queue never exceeds the window, and once the consumer drains the
        /// queue the sender gets credit again (no stall).
        #[test]
        fn credit_bounds_the_queue_and_never_stalls(
            capacity in 1u32..64,
            steps in proptest::collection::vec(any::<bool>(), 1..2_000),
        ) {
            let (mut window, initial) = ReceiverWindow::new(capacity);
            let mut sender = SenderCredit::default();
            sender.grant(initial);
            for send in steps {
                if send {
                    if sender.try_take() {
                        prop_assert!(window.on_data().is_ok());
                    }
                } else if let Some(n) = window.on_consumed() {
                    sender.grant(n);
                }
                prop_assert!(window.queued() <= capacity);
                // Credit held + queued + owed is the whole window.
                prop_assert_eq!(
                    sender.available() + u64::from(window.queued()) + u64::from(window.unannounced),
                    u64::from(capacity)
                );
            }
            while window.queued() > 0 {
                if let Some(n) = window.on_consumed() {
                    sender.grant(n);
                }
            }
            prop_assert!(sender.available() >= u64::from(window.announce_at().min(capacity)));
            prop_assert!(sender.try_take());
            prop_assert!(window.max_queued() <= capacity);
        }
    }
}
